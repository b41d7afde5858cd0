#!/usr/bin/env bash
# AdCSE (Li et al., DASFAA 2022), Table 1, AdCSE-BERT-base: train on wiki1m (released variant, the
# code that produced the table), select on STS-B dev, evaluate the 7 STS test sets with
# senteval_eval.py and print our row beside the paper's.
#   bash scripts/adcse/table1_main.sh                  # one GPU
#   NUM_GPUS=4 bash scripts/adcse/table1_main.sh       # global batch stays 64
#   bash scripts/adcse/table1_main.sh --variant paper  # extra flags go to run_adcse.py
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/lib.sh
out=${OUTPUT_DIR:-$results_root/adcse-bert-base}
train run_adcse.py "$out" 64 configs/adcse_bert_base.yaml --final_eval none "$@"
sts_test "$out"
tabulate --runs "$out" --paper_row adcse_bert_base --name "ours ($out)"
