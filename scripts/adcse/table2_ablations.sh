#!/usr/bin/env bash
# AdCSE, Table 2 (ablations, BERT-base): the full model and the three ablations, each trained,
# tested on the 7 STS sets and printed beside the paper's row.
#   bash scripts/adcse/table2_ablations.sh               # NUM_GPUS=N to spread each run over N GPUs
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/lib.sh
root=${OUTPUT_DIR:-$results_root/adcse-table2}
declare -A flags=(
    [adcse_bert_base]=""
    [adcse_bert_base_no_adversaries]="--no_adversaries"
    [adcse_bert_base_no_untied_dual_encoder]="--no_untied_dual_encoder"
    [adcse_bert_base_no_both]="--no_adversaries --no_untied_dual_encoder"
)
rows=(adcse_bert_base adcse_bert_base_no_adversaries adcse_bert_base_no_untied_dual_encoder adcse_bert_base_no_both)
for row in "${rows[@]}"; do
    # shellcheck disable=SC2086  # the flags are words
    train run_adcse.py "$root/$row" 64 configs/adcse_bert_base.yaml --final_eval none ${flags[$row]} "$@"
    sts_test "$root/$row"
done
for row in "${rows[@]}"; do
    tabulate --runs "$root/$row" --paper_row "$row" --name "ours (${flags[$row]:-full})"
    show echo
done
