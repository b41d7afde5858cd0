#!/usr/bin/env bash
# CoT-BERT (Zhang et al., ICANN 2024), Table 2 (unsupervised STS): CoT-BERT on BERT-base and RoBERTa-base
# trained with the released settings (docs/methods/cotbert.md), one run each at the released seed 0, tested
# on the 7 STS sets with senteval_eval.py (the anchor template's raw last [MASK], no denoising, the released
# test), each beside its published row.
#   bash scripts/cotbert/table2_sts.sh                      # one GPU
#   NUM_GPUS=2 bash scripts/cotbert/table2_sts.sh           # global batch stays 256 (losses over 128 each)
#   bash scripts/cotbert/table2_sts.sh --denoise none       # extra flags go to run_cotbert.py
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/lib.sh
root=${OUTPUT_DIR:-$results_root/cotbert}
train run_cotbert.py "$root/bert-base" 256 configs/cotbert_bert_base.yaml --final_eval none "$@"
train run_cotbert.py "$root/roberta-base" 256 configs/cotbert_roberta_base.yaml --final_eval none "$@"
for model in bert-base roberta-base; do
    sts_test "$root/$model"
done
tabulate "$root/bert-base/sts_test_results.json" --paper_row cotbert_bert_base --name "ours, BERT-base"
show echo
tabulate "$root/roberta-base/sts_test_results.json" --paper_row cotbert_roberta_base --name "ours, RoBERTa-base"
