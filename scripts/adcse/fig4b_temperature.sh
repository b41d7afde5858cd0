#!/usr/bin/env bash
# AdCSE, Fig. 4(b): STS test average against the temperature tau of Eq. 5, batch and M 64. The paper
# gives this figure as a plot only: neither its numbers nor its grid of temperatures are in the text,
# so the grid (0.01, 0.05, 0.1, 0.2, 0.5) is ours and only our table is printed. As in the released
# code, the adversaries' own temperature (--adversary_temperature) stays 0.05 while tau varies.
#   bash scripts/adcse/fig4b_temperature.sh           # NUM_GPUS=N to spread each run over N GPUs
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/lib.sh
root=${OUTPUT_DIR:-$results_root/adcse-fig4b}
results=() names=()
for temp in 0.01 0.05 0.1 0.2 0.5; do
    train run_adcse.py "$root/temp$temp" 64 configs/adcse_bert_base.yaml --final_eval none --temp "$temp" "$@"
    sts_test "$root/temp$temp"
    results+=("$root/temp$temp/sts_test_results.json") names+=("tau $temp")
done
tabulate --runs "${results[@]}" --name "${names[@]}"
