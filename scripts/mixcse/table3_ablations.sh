#!/usr/bin/env bash
# MixCSE, Table 3 (ablations): MixCSE, MixCSE_single (--single) and MixCSE_wo sg (--no_stop_gradient),
# BERT-base and -large, 5 seeds each; the paper reports each model's STS average and transfer
# average, so every run is tested on both, its two averages are written to sts_transfer_avg.json,
# and each row prints as mean ± std beside the paper's pair. The full model's runs are Table 1's.
#   bash scripts/mixcse/table3_ablations.sh                # NUM_GPUS, SEEDS, OUTPUT_DIR as in table1_sts.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/mixcse/common.sh
declare -A rows=([full]=mixcse [single]=mixcse_single [no_stop_gradient]=mixcse_wo_sg)
ablations=(full single no_stop_gradient)
for size in base large; do
    for ablation in "${ablations[@]}"; do
        train_seeds "$size" "$ablation" "$@"
        test_runs "$size" "$ablation" sts_test transfer_test
        for run in $(runs "$size" "$ablation"); do
            # the two averages Table 3 reports, as one result JSON
            evaluate "$run" "$run/sts_transfer_avg.json" python -c 'import json, sys
from cse.atomic import write_json
run = sys.argv[1]
averages = {}
for column, name in (("STS Avg.", "sts_test_results.json"), ("Transfer Avg.", "transfer_test_results.json")):
    with open(f"{run}/{name}", encoding="utf-8") as f:
        averages[column] = json.load(f)["scores"]["Avg."]
write_json(f"{run}/sts_transfer_avg.json", {"scores": averages})' "$run"
        done
    done
done
for size in base large; do
    for ablation in "${ablations[@]}"; do
        compare "$size" "$ablation" sts_transfer_avg.json "${rows[$ablation]}_bert_${size}_avgs"
        show echo
    done
done
