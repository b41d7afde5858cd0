#!/usr/bin/env bash
# MixCSE, Table 2: the 7 SentEval transfer tasks for MixCSE-BERT-base and -large, 5 seeds each (the
# runs of Table 1, trained here if missing), mean ± std beside the paper's rows.
#   bash scripts/mixcse/table2_transfer.sh                 # NUM_GPUS, SEEDS, OUTPUT_DIR as in table1_sts.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/mixcse/common.sh
for size in base large; do
    train_seeds "$size" full "$@"
    test_runs "$size" full transfer_test
done
compare base full transfer_test_results.json mixcse_bert_base_transfer
show echo
compare large full transfer_test_results.json mixcse_bert_large_transfer
