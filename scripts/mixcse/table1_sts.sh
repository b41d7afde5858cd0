#!/usr/bin/env bash
# MixCSE (Zhang et al., AAAI 2022), Table 1: MixCSE-BERT-base and -large, each trained with 5 seeds
# (released variant, the code that produced the table), tested on the 7 STS sets with
# senteval_eval.py, and printed as mean ± std beside the paper's rows.
#   bash scripts/mixcse/table1_sts.sh                      # one GPU; NUM_GPUS=4 for four
#   SEEDS="1 2 3" bash scripts/mixcse/table1_sts.sh        # other seeds
#   bash scripts/mixcse/table1_sts.sh --variant paper      # extra flags go to run_mixcse.py
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/mixcse/common.sh
for size in base large; do
    train_seeds "$size" full "$@"
    test_runs "$size" full sts_test
done
compare base full sts_test_results.json mixcse_bert_base
show echo
compare large full sts_test_results.json mixcse_bert_large
