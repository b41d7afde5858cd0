#!/usr/bin/env bash
# SimCSE (Gao et al., 2021), Table 5, Unsup-SimCSE-BERT-base: train on wiki1m, select on STS-B dev,
# evaluate the 7 STS test sets, print our row beside the paper's.
#   bash scripts/simcse/table5_unsup_bert_base.sh                 # one GPU
#   NUM_GPUS=4 bash scripts/simcse/table5_unsup_bert_base.sh      # global batch stays 64
set -euo pipefail
cd "$(dirname "$0")/../.."
gpus=${NUM_GPUS:-1}
if (( 64 % gpus )); then
    echo "NUM_GPUS=$gpus does not divide the paper's batch of 64" >&2
    exit 2
fi
out=${OUTPUT_DIR:-result/simcse-bert-base}
launch=(accelerate launch --num_processes "$gpus")
[ "$gpus" -gt 1 ] && launch+=(--multi_gpu)
"${launch[@]}" run_simcse.py configs/simcse_bert_base.yaml --output_dir "$out" \
    --per_device_train_batch_size $((64 / gpus)) "$@"
python -m cse.results "$out/sts_test_results.json" --paper_row simcse_unsup_bert_base --name "ours ($out)"
