#!/usr/bin/env bash
# SARCSE, Appendix D (Fig. 3): densities of the predicted cosines on the STS-B test set per gold
# group (0-1, ..., 4-5), SimCSE and SARCSE with RoBERTa-base. It trains the two Table 1 runs (kept if
# scripts/sarcse/table1_main.sh already trained them into the same OUTPUT_DIR), evaluates them with
# senteval_eval.py --analysis (every STS-B test pair's cosine and gold score in the JSON) and draws
# appD/density.png with cse.plots (each group's count, mean and standard deviation in the legend).
#   bash scripts/sarcse/appD_density.sh                # NUM_GPUS=N must divide 64 and 512
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/lib.sh
root=${OUTPUT_DIR:-$results_root/sarcse-table1}
train run_sarcse.py "$root/sarcse_roberta_base" 64 configs/sarcse_roberta_base.yaml --final_eval none "$@"
train run_simcse.py "$root/simcse_roberta_base" 512 configs/simcse_bert_base.yaml --final_eval none \
    --model_name_or_path roberta-base --learning_rate 1e-5
for run in simcse_roberta_base sarcse_roberta_base; do
    evaluate "$root/$run" "$root/$run/sts_test_analysis.json" python senteval_eval.py \
        --model_name_or_path "$root/$run" --mode test --task_set sts --analysis --output_json "$root/$run/sts_test_analysis.json"
done
show python -m cse.plots cosine_density "$root/appD/density.png" "$root/simcse_roberta_base/sts_test_analysis.json" \
    "$root/sarcse_roberta_base/sts_test_analysis.json" --names SimCSE SARCSE
