#!/usr/bin/env bash
# DiffCSE (Chuang et al., NAACL 2022), the STS table: DiffCSE-BERT-base and -RoBERTa-base trained with the
# released settings (run_diffcse.sh; Table A.1 for RoBERTa: docs/methods/diffcse.md), one run each at seed 42,
# tested on the 7 STS sets with senteval_eval.py ([CLS] without the projector, the released test), each beside
# its published row (single runs; the author reports that these settings are sensitive to the machine).
#   bash scripts/diffcse/table1_sts.sh                      # one GPU
#   NUM_GPUS=2 bash scripts/diffcse/table1_sts.sh           # global batch stays 64
#   bash scripts/diffcse/table1_sts.sh --variant paper      # extra flags go to run_diffcse.py
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/lib.sh
root=${OUTPUT_DIR:-$results_root/diffcse}
train run_diffcse.py "$root/bert-base" 64 configs/diffcse_bert_base.yaml --final_eval none "$@"
train run_diffcse.py "$root/roberta-base" 64 configs/diffcse_roberta_base.yaml --final_eval none "$@"
for model in bert-base roberta-base; do
    sts_test "$root/$model"
done
tabulate "$root/bert-base/sts_test_results.json" --paper_row diffcse_bert_base --name "ours, BERT-base"
show echo
tabulate "$root/roberta-base/sts_test_results.json" --paper_row diffcse_roberta_base --name "ours, RoBERTa-base"
