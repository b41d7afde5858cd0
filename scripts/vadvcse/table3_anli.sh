#!/usr/bin/env bash
# V-advCSE, Table 3: robustness on Adversarial NLI. The two models of Table 1 (trained here unless
# table1_sts.sh has trained them with the same arguments) are each fine-tuned as an NLI classifier on
# SNLI + MNLI + FEVER-NLI + ANLI from the Hugging Face hub (anli_eval.py), and their ANLI dev and test
# accuracies printed beside the paper's rows.
#   bash scripts/vadvcse/table3_anli.sh                  # NUM_GPUS=N for training and fine-tuning
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/lib.sh
root=${OUTPUT_DIR:-$results_root/vadvcse}
train run_vadvcse.py "$root/vadvcse-bert-base" 64 configs/vadvcse_bert_base.yaml --final_eval none "$@"
train run_simcse.py "$root/simcse-bert-base" 64 configs/simcse_bert_base.yaml --final_eval none
for model in vadvcse simcse; do
    evaluate_launched "$root/$model-bert-base" "$root/$model-bert-base/anli/anli_results.json" 32 anli_eval.py \
        --model_name_or_path "$root/$model-bert-base" --output_dir "$root/$model-bert-base/anli"
done
tabulate "$root/vadvcse-bert-base/anli/anli_results.json" --paper_row vadvcse_anli_bert_base --name ours
show echo
tabulate "$root/simcse-bert-base/anli/anli_results.json" --paper_row vadvcse_anli_simcse_bert_base \
    --name ours
