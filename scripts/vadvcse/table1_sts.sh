#!/usr/bin/env bash
# V-advCSE (Ko), Table 1: V-advCSE-BERT-base and SimCSE-BERT-base trained on wiki1m, selected on
# STS-B dev, evaluated on the 7 STS test sets with senteval_eval.py, each beside the paper's row.
#   bash scripts/vadvcse/table1_sts.sh                   # one GPU
#   NUM_GPUS=4 bash scripts/vadvcse/table1_sts.sh        # global batch stays 64
#   bash scripts/vadvcse/table1_sts.sh --norm l2         # extra flags go to run_vadvcse.py
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/lib.sh
root=${OUTPUT_DIR:-$results_root/vadvcse}
train run_vadvcse.py "$root/vadvcse-bert-base" 64 configs/vadvcse_bert_base.yaml --final_eval none "$@"
train run_simcse.py "$root/simcse-bert-base" 64 configs/simcse_bert_base.yaml --final_eval none
for model in vadvcse simcse; do
    sts_test "$root/$model-bert-base"
done
tabulate "$root/vadvcse-bert-base/sts_test_results.json" --paper_row vadvcse_bert_base --name ours
show echo
tabulate "$root/simcse-bert-base/sts_test_results.json" --paper_row vadvcse_simcse_bert_base --name ours
