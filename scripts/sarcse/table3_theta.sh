#!/usr/bin/env bash
# SARCSE, Table 3 (Appendix B): theta of Eq. 8 from 0 to 0.6 in steps of 0.1, RoBERTa-base, batch
# 64. Table 3 is an image in our copy of the paper, so only our table is printed.
#   bash scripts/sarcse/table3_theta.sh                # NUM_GPUS=N to spread each run over N GPUs
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/lib.sh
root=${OUTPUT_DIR:-$results_root/sarcse-table3}
results=() names=()
for theta in 0.0 0.1 0.2 0.3 0.4 0.5 0.6; do
    train run_sarcse.py "$root/theta$theta" 64 configs/sarcse_roberta_base.yaml --final_eval none --theta "$theta" "$@"
    sts_test "$root/theta$theta"
    results+=("$root/theta$theta/sts_test_results.json") names+=("theta $theta")
done
tabulate "${results[@]}" --name "${names[@]}"
