#!/usr/bin/env bash
# The checks and measurements BENCHMARKS.md reports for the GPU, in order of value, each figure
# written to RESULTS_DIR as it comes (a run cut short keeps what it measured):
#
#   bash scripts/gpu_checks.sh RESULTS_DIR [smoke] [tests] [yardstick] [epoch] [bench] [bench-eager] [bench-all]
#
# With no stage named it runs smoke, tests, yardstick, epoch, bench and bench-all, in that order.
#
#   smoke      one small captured run (a random BERT-base, 40 steps): the captured path works here
#   tests      python -m pytest -k cuda: each method's captured step against its eager one, loss
#              curves, kill -9 and resume under --cuda_graphs, the eager step's host syncs
#   yardstick  SimCSE's captured step through run_simcse.py beside the same step written by hand
#              (bench/hand_loop.py, captured too), interleaved step by step in one process; target:
#              the run script's step within 1.2x of the hand-written one's
#   epoch      a real one-epoch SimCSE run as a user runs it (configs/simcse_bert_base.yaml,
#              15,625 steps of 64 sentences over the corpus head, 125 dev evaluations, the final
#              STS test table), random BERT-base weights, --cuda_graphs over the compiled model (the
#              dev suite captured too, cse/encoding.py); target: under 4 minutes of training
#   bench      python -m bench --profile gpu-base --cuda_graphs for SimCSE (captured) and
#              sentence-transformers' recipe (eager and compiled)
#   bench-eager  SimCSE's eager step, the same bench without --cuda_graphs
#   bench-all  every other method of the bench, its variants and a composition (adcse+mixcse) captured
#
# Needs a CUDA GPU, CSE_DATA_DIR (senteval/ and wiki1m_head.txt) and the tokenizers of bert-base-uncased
# and roberta-base (the bench's --bert_tokenizer/--roberta_tokenizer defaults). Each stage has a time
# limit (STAGE_SECONDS_<stage>, in seconds) so that the next one still runs. The random models and the
# runs' outputs (gigabytes: checkpoints with optimizer state) go to GPU_CHECKS_WORK (default
# RESULTS_DIR/scratch); RESULTS_DIR keeps the logs, JSONs and summary.txt.
set -uo pipefail
cd "$(dirname "$0")/.."
RESULTS=${1:?usage: bash scripts/gpu_checks.sh RESULTS_DIR [stage ...]}
shift
mkdir -p "$RESULTS"
STAGES=${*:-smoke tests yardstick epoch bench bench-all}
SUMMARY="$RESULTS/summary.txt"

record() { echo "$*" | tee -a "$SUMMARY"; }

limit() {  # limit STAGE COMMAND...: run under the stage's time limit, its output in RESULTS/STAGE.log
  local stage=$1 seconds
  shift
  seconds=$(eval echo "\${STAGE_SECONDS_${stage//-/_}:-600}")
  local start=$SECONDS
  timeout --signal=TERM --kill-after=20 "$seconds" "$@" >"$RESULTS/$stage.log" 2>&1
  local status=$?
  record "$stage: exit $status in $((SECONDS - start)) s (limit $seconds s)"
  return $status
}

random_bert() {  # a random BERT-base with the real tokenizer, where the bench makes its own
  python - "$1" <<'EOF'
import sys
from bench.profiles import PROFILES
from bench.run import default_tokenizer, save_random_backbone
save_random_backbone("bert", PROFILES["gpu-base"], default_tokenizer("bert-base-uncased"), sys.argv[1])
EOF
}

others() {  # every method of the bench but the baseline (the bench stage's) and sentence-transformers'
  python -c "from bench.profiles import BASELINE, METHODS_TRAINED
print(','.join(name for name in METHODS_TRAINED if name != BASELINE))"
}

CAPTURED=(--cuda_graphs true --torch_compile true --bf16 true --fp16 false)
WORK=${GPU_CHECKS_WORK:-$RESULTS/scratch}
MODELS="$WORK/models"
[ -d "$MODELS/bert" ] || random_bert "$MODELS/bert" >"$RESULTS/models.log" 2>&1

for stage in $STAGES; do
  case $stage in
    smoke)
      limit smoke python run_simcse.py configs/simcse_bert_base.yaml --model_name_or_path "$MODELS/bert" \
        --train_file "$CSE_DATA_DIR/wiki1m_head.txt" --output_dir "$WORK/smoke" --max_steps 40 \
        --eval_strategy no --save_strategy no --load_best_model_at_end false --final_eval none \
        --logging_steps 10 "${CAPTURED[@]}" || exit 1
      grep -h "captured the \|runs eagerly" "$RESULTS/smoke.log" | tee -a "$SUMMARY"
      ;;
    tests)
      limit tests python -m pytest -v -p no:cacheprovider tests/test_step_graph.py tests -k cuda -rs --maxfail=3 --durations=15
      tail -n 20 "$RESULTS/tests.log" >>"$SUMMARY"
      ;;
    yardstick)
      limit yardstick python -m bench --profile gpu-base --methods simcse --cuda_graphs --hand_loop \
        --eval_repeats 0 --workdir "$WORK/yardstick" --output_json "$RESULTS/yardstick.json"
      grep -h "ms/step\|FAILED" "$RESULTS/yardstick.log" | tee -a "$SUMMARY"
      python - "$RESULTS/yardstick.json" <<'EOF' | tee -a "$SUMMARY"
import json, sys
result = json.load(open(sys.argv[1]))["methods"]["simcse"]
ratio = result["step_time_vs_hand"]
print(f"yardstick: run script {result['step_time_s']['median'] * 1e3:.2f} ms, hand-written "
      f"{result['hand_step_time_s'] * 1e3:.2f} ms, ratio {ratio:.2f} (target <= 1.2: {'met' if ratio <= 1.2 else 'MISSED'})")
EOF
      ;;
    epoch)
      limit epoch python run_simcse.py configs/simcse_bert_base.yaml --model_name_or_path "$MODELS/bert" \
        --train_file "$CSE_DATA_DIR/wiki1m_head.txt" --output_dir "$WORK/epoch" --max_steps 15625 \
        --disable_tqdm true "${CAPTURED[@]}"
      grep -h "captured the \|train_runtime\|Avg\." "$RESULTS/epoch.log" | tail -n 12 | tee -a "$SUMMARY"
      python - "$WORK/epoch/train_results.json" <<'EOF' | tee -a "$SUMMARY"
import json, sys
seconds = json.load(open(sys.argv[1]))["train_runtime"]
print(f"epoch: {seconds / 60:.1f} min of training and evaluations (target < 4 min: {'met' if seconds < 240 else 'MISSED'})")
EOF
      ;;
    bench)
      limit bench python -m bench --profile gpu-base --methods simcse,st-mnrl --cuda_graphs \
        --workdir "$WORK/bench" --output_json "$RESULTS/bench_captured.json"
      grep -h "ms/step\|FAILED\|peak" "$RESULTS/bench.log" | tee -a "$SUMMARY"
      ;;
    bench-eager)
      limit bench-eager python -m bench --profile gpu-base --methods simcse \
        --workdir "$WORK/bench-eager" --output_json "$RESULTS/bench_eager.json"
      grep -h "ms/step\|FAILED" "$RESULTS/bench-eager.log" | tee -a "$SUMMARY"
      ;;
    bench-all)
      limit bench-all python -m bench --profile gpu-base --methods "$(others)" \
        --cuda_graphs --eval_repeats 0 --workdir "$WORK/bench-all" --output_json "$RESULTS/bench_all_captured.json"
      grep -h "ms/step\|FAILED" "$RESULTS/bench-all.log" | tee -a "$SUMMARY"
      ;;
    *)
      echo "unknown stage: $stage (smoke, tests, yardstick, epoch, bench, bench-eager, bench-all)" >&2
      exit 2
      ;;
  esac
done
cat "$SUMMARY"
