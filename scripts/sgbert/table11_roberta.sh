#!/usr/bin/env bash
# SG-BERT, Table 11 (appendix A.6): SG and SG-OPT on RoBERTa-base with Table 8's hyperparameters, 8
# seeds each, mean ± std beside the paper's rows. c_i is RoBERTa's <s> state, its [CLS].
#   bash scripts/sgbert/table11_roberta.sh             # NUM_GPUS=N must divide 16
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/lib.sh
source scripts/sgbert/seeds.sh
root=${OUTPUT_DIR:-$results_root/sgbert-table11}
sgbert_seeds "$root/roberta-base-sg" sgbert_roberta_base_sg "SG, RoBERTa-base" \
    --model_name_or_path roberta-base --loss_variant base "$@"
sgbert_seeds "$root/roberta-base-sg-opt" sgbert_roberta_base_sg_opt "SG-OPT, RoBERTa-base" \
    --model_name_or_path roberta-base --loss_variant opt3 "$@"
