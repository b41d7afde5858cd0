#!/usr/bin/env bash
# SARCSE, Table 1 ablations (RoBERTa-base): the full model, "w/o self-adaptive" (--plain_mse: every
# token weighs 1 in the reconstruction loss) and "w/o decoder" (--no_decoder: backbone + TextCNN
# encoder, InfoNCE on Z, no reconstruction). Table 1 is an image in our copy of the paper, so only
# our table is printed.
#   bash scripts/sarcse/table1_ablations.sh            # NUM_GPUS=N to spread each run over N GPUs
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/lib.sh
root=${OUTPUT_DIR:-$results_root/sarcse-table1-ablations}
declare -A flags=([full]="" [plain_mse]="--plain_mse" [no_decoder]="--no_decoder")
results=() names=()
for run in full plain_mse no_decoder; do
    # shellcheck disable=SC2086  # the flags are words
    train run_sarcse.py "$root/$run" 64 configs/sarcse_roberta_base.yaml --final_eval none ${flags[$run]} "$@"
    sts_test "$root/$run"
    results+=("$root/$run/sts_test_results.json") names+=("SARCSE ${flags[$run]:-full}")
done
tabulate "${results[@]}" --name "${names[@]}"
