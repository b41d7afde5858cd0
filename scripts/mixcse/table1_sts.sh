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
    for run in $(runs "$size" full); do
        [ -f "$run/sts_test_results.json" ] || sts_test "$run"
    done
done
# shellcheck disable=SC2046  # one path per seed
python -m cse.results $(results base full sts_test_results.json) --paper_row mixcse_bert_base \
    --name "ours, BERT-base (${#seeds[@]} seeds)"
echo
# shellcheck disable=SC2046
python -m cse.results $(results large full sts_test_results.json) --paper_row mixcse_bert_large \
    --name "ours, BERT-large (${#seeds[@]} seeds)"
