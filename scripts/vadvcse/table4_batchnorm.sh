#!/usr/bin/env bash
# V-advCSE, Table 4: the BatchNorm MLP head on and off, for V-advCSE and for SimCSE (lambda = 0),
# BERT-base; STS-B dev and the transfer average. "w/o BatchNorm" is SimCSE's linear + tanh head
# (--head linear_tanh); --head mlp is the other reading (the same MLP without its BN layer).
#   bash scripts/vadvcse/table4_batchnorm.sh             # NUM_GPUS=N to spread each run over N GPUs
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/lib.sh
source scripts/vadvcse/common.sh
root=${OUTPUT_DIR:-$results_root/vadvcse-table4}
declare -A flags=(
    [vadvcse_table4_vadvcse_bn]="--head mlp_bn"
    [vadvcse_table4_vadvcse_no_bn]="--head linear_tanh"
    [vadvcse_table4_simcse_bn]="--head mlp_bn --vadv_lambda 0"
    [vadvcse_table4_simcse_no_bn]="--head linear_tanh --vadv_lambda 0"
)
rows=(vadvcse_table4_vadvcse_bn vadvcse_table4_vadvcse_no_bn vadvcse_table4_simcse_bn vadvcse_table4_simcse_no_bn)
for row in "${rows[@]}"; do
    # shellcheck disable=SC2086  # the flags are words
    train run_vadvcse.py "$root/$row" 64 configs/vadvcse_bert_base.yaml --final_eval none ${flags[$row]} "$@"
    dev_and_transfer "$root/$row"
done
for row in "${rows[@]}"; do
    tabulate "$root/$row/stsb_dev_transfer.json" --paper_row "$row" --name "ours (${flags[$row]})"
    show echo
done
