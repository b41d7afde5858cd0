#!/usr/bin/env bash
# MixCSE, Table 2: the 7 SentEval transfer tasks for MixCSE-BERT-base and -large, 5 seeds each (the
# runs of Table 1, trained here if missing), mean ± std beside the paper's rows.
#   bash scripts/mixcse/table2_transfer.sh                 # NUM_GPUS, SEEDS, OUTPUT_DIR as in table1_sts.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/mixcse/common.sh
for size in base large; do
    train_seeds "$size" full "$@"
    for run in $(runs "$size" full); do
        [ -f "$run/transfer_test_results.json" ] || transfer_test "$run"
    done
done
# shellcheck disable=SC2046  # one path per seed
python -m cse.results $(results base full transfer_test_results.json) --paper_row mixcse_bert_base_transfer \
    --name "ours, BERT-base (${#seeds[@]} seeds)"
echo
# shellcheck disable=SC2046
python -m cse.results $(results large full transfer_test_results.json) --paper_row mixcse_bert_large_transfer \
    --name "ours, BERT-large (${#seeds[@]} seeds)"
