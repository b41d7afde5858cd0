#!/usr/bin/env bash
# V-advCSE, Table 2: the 7 SentEval transfer tasks for the two models of Table 1 (trained here if
# table1_sts.sh has not trained them already, with the same arguments), beside the paper's rows.
#   bash scripts/vadvcse/table2_transfer.sh              # NUM_GPUS=N to spread each run over N GPUs
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/lib.sh
root=${OUTPUT_DIR:-$results_root/vadvcse}
train run_vadvcse.py "$root/vadvcse-bert-base" 64 configs/vadvcse_bert_base.yaml --final_eval none "$@"
train run_simcse.py "$root/simcse-bert-base" 64 configs/simcse_bert_base.yaml --final_eval none
for model in vadvcse simcse; do
    transfer_test "$root/$model-bert-base"
done
tabulate "$root/vadvcse-bert-base/transfer_test_results.json" --paper_row vadvcse_bert_base_transfer \
    --name ours
show echo
tabulate "$root/simcse-bert-base/transfer_test_results.json" \
    --paper_row vadvcse_simcse_bert_base_transfer --name ours
