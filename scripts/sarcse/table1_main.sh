#!/usr/bin/env bash
# SARCSE (Liu et al., arXiv 2402.15153), Table 1, main rows: SARCSE with RoBERTa-base and -large (batch
# 64, lr 1e-5), and unsupervised SimCSE with the same backbones at SimCSE's own published settings
# (batch 512; lr 1e-5 base, 3e-5 large; [CLS] with the MLP in training only), all selected on STS-B
# dev and tested on the 7 STS sets with senteval_eval.py. Table 1 is an image in our copy of the
# paper, so its numbers are not in cse/paper_results.yaml: only our table is printed.
#   bash scripts/sarcse/table1_main.sh                 # NUM_GPUS=N must divide every batch (64, 512)
#   bash scripts/sarcse/table1_main.sh --seed 1        # extra flags go to run_sarcse.py
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/lib.sh
root=${OUTPUT_DIR:-$results_root/sarcse-table1}
results=() names=()
for size in base large; do
    train run_sarcse.py "$root/sarcse_roberta_$size" 64 "configs/sarcse_roberta_$size.yaml" --final_eval none "$@"
    lr=$([ "$size" == base ] && echo 1e-5 || echo 3e-5)
    train run_simcse.py "$root/simcse_roberta_$size" 512 configs/simcse_bert_base.yaml --final_eval none \
        --model_name_or_path "roberta-$size" --learning_rate "$lr"
    for method in simcse sarcse; do
        sts_test "$root/${method}_roberta_$size"
        results+=("$root/${method}_roberta_$size/sts_test_results.json") names+=("$method-roberta-$size")
    done
done
tabulate "${results[@]}" --name "${names[@]}"
