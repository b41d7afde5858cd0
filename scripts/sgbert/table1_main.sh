#!/usr/bin/env bash
# SG-BERT (Kim, Yoo and Lee, ACL 2021), Table 1: SG (L^base) and SG-OPT (L^opt3) on BERT-base and
# BERT-large, trained on the STS-B sentences, 8 seeds each, mean ± std beside the paper's rows.
#   bash scripts/sgbert/table1_main.sh                 # one GPU
#   NUM_GPUS=2 bash scripts/sgbert/table1_main.sh      # global batch stays 16
#   bash scripts/sgbert/table1_main.sh --token_pooling mean   # extra flags go to run_sgbert.py
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/lib.sh
source scripts/sgbert/seeds.sh
root=${OUTPUT_DIR:-$results_root/sgbert-table1}
sgbert_seeds "$root/bert-base-sg" sgbert_bert_base_sg "SG, BERT-base" --loss_variant base "$@"
sgbert_seeds "$root/bert-base-sg-opt" sgbert_bert_base_sg_opt "SG-OPT, BERT-base" --loss_variant opt3 "$@"
sgbert_seeds "$root/bert-large-sg" sgbert_bert_large_sg "SG, BERT-large" \
    --model_name_or_path bert-large-uncased --loss_variant base "$@"
sgbert_seeds "$root/bert-large-sg-opt" sgbert_bert_large_sg_opt "SG-OPT, BERT-large" \
    --model_name_or_path bert-large-uncased --loss_variant opt3 "$@"
