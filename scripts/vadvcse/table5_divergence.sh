#!/usr/bin/env bash
# V-advCSE, Table 5: the divergence F of L_vadv (KL, symmetric KL, JS; Eqs. 11-14), BERT-base;
# STS-B dev and the transfer average.
#   bash scripts/vadvcse/table5_divergence.sh            # NUM_GPUS=N to spread each run over N GPUs
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/lib.sh
source scripts/vadvcse/common.sh
root=${OUTPUT_DIR:-$results_root/vadvcse-table5}
for divergence in kl symmetric_kl js; do
    train run_vadvcse.py "$root/$divergence" 64 configs/vadvcse_bert_base.yaml --final_eval none \
        --divergence "$divergence" "$@"
    dev_and_transfer "$root/$divergence"
done
for divergence in kl symmetric_kl js; do
    tabulate "$root/$divergence/stsb_dev_transfer.json" --paper_row "vadvcse_table5_$divergence" \
        --name "ours ($divergence)"
    show echo
done
