#!/usr/bin/env bash
# SARCSE, Table 2 (Appendix A): SARCSE and unsupervised SimCSE, RoBERTa-base, at batch 32, 64, 128,
# 256 and 512, both with lr 1e-5 (the paper varies only the batch). Table 2 is an image in our copy
# of the paper, so only our table is printed.
#   bash scripts/sarcse/table2_batch_size.sh           # NUM_GPUS=N must divide every batch size
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/lib.sh
root=${OUTPUT_DIR:-$results_root/sarcse-table2}
results=() names=()
for batch in 32 64 128 256 512; do
    train run_sarcse.py "$root/sarcse_batch$batch" "$batch" configs/sarcse_roberta_base.yaml --final_eval none "$@"
    train run_simcse.py "$root/simcse_batch$batch" "$batch" configs/simcse_bert_base.yaml --final_eval none \
        --model_name_or_path roberta-base --learning_rate 1e-5
    for method in simcse sarcse; do
        sts_test "$root/${method}_batch$batch"
        results+=("$root/${method}_batch$batch/sts_test_results.json") names+=("$method, batch $batch")
    done
done
tabulate "${results[@]}" --name "${names[@]}"
