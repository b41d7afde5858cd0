#!/usr/bin/env bash
# V-advCSE, Table 3: robustness on Adversarial NLI. The two models of Table 1 (trained here unless
# table1_sts.sh has trained them with the same arguments) are each fine-tuned as an NLI classifier on
# SNLI + MNLI + FEVER-NLI + ANLI from the Hugging Face hub (anli_eval.py), and their ANLI dev and test
# accuracies printed beside the paper's rows.
#   bash scripts/vadvcse/table3_anli.sh                  # NUM_GPUS=N for training and fine-tuning
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/lib.sh
root=${OUTPUT_DIR:-result/vadvcse}
train run_vadvcse.py "$root/vadvcse-bert-base" 64 configs/vadvcse_bert_base.yaml --final_eval none "$@"
train run_simcse.py "$root/simcse-bert-base" 64 configs/simcse_bert_base.yaml --final_eval none
for model in vadvcse simcse; do
    if [ ! -f "$root/$model-bert-base/anli/anli_results.json" ]; then
        launch=(accelerate launch --num_processes "$gpus")
        [ "$gpus" -gt 1 ] && launch+=(--multi_gpu)
        "${launch[@]}" anli_eval.py --model_name_or_path "$root/$model-bert-base" \
            --output_dir "$root/$model-bert-base/anli" --per_device_train_batch_size $((32 / gpus))
    fi
done
python -m cse.results "$root/vadvcse-bert-base/anli/anli_results.json" --paper_row vadvcse_anli_bert_base --name ours
echo
python -m cse.results "$root/simcse-bert-base/anli/anli_results.json" --paper_row vadvcse_anli_simcse_bert_base \
    --name ours
