#!/usr/bin/env bash
# AdCSE, Fig. 4(a): STS test average against the batch size (32, 64, 96, 128), AdCSE with the number
# of adversaries M equal to the batch size (as in the paper) and unsupervised SimCSE beside it. The
# paper gives this figure as a plot only (no numbers in its text), so only our table is printed.
#   bash scripts/adcse/fig4a_batch_size.sh            # NUM_GPUS=N must divide every batch size
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/lib.sh
root=${OUTPUT_DIR:-$results_root/adcse-fig4a}
results=() names=()
for batch in 32 64 96 128; do
    train run_adcse.py "$root/adcse_batch$batch" "$batch" configs/adcse_bert_base.yaml --final_eval none \
        --num_adversaries "$batch" "$@"
    train run_simcse.py "$root/simcse_batch$batch" "$batch" configs/simcse_bert_base.yaml --final_eval none
    for method in adcse simcse; do
        sts_test "$root/${method}_batch$batch"
        results+=("$root/${method}_batch$batch/sts_test_results.json") names+=("$method, batch $batch")
    done
done
tabulate --runs "${results[@]}" --name "${names[@]}"
