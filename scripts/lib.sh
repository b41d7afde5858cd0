# Sourced by the reproduction scripts (from the repository root).
#   NUM_GPUS   processes to launch (default 1); it must divide each run's global batch.

gpus=${NUM_GPUS:-1}

# train RUN_SCRIPT OUTPUT_DIR GLOBAL_BATCH [ARGS...]: one training run through accelerate, the global
# batch split over the processes. A run finished with the same arguments is kept, not redone, so an
# interrupted sweep picks up where it stopped (an interrupted run resumes from its last checkpoint);
# a finished run with other arguments is refused rather than reported as this one.
train() {
    local script=$1 out=$2 batch=$3
    shift 3
    local request="$script $batch $*"
    if [ -f "$out/cse_config.json" ]; then
        if [ "$(cat "$out/launch_args.txt" 2>/dev/null)" == "$request" ]; then
            echo "$out: already trained with these arguments, kept (delete it to retrain)" >&2
            return 0
        fi
        echo "$out holds a run trained with other arguments: delete it or set OUTPUT_DIR" >&2
        return 2
    fi
    if (( batch % gpus )); then
        echo "NUM_GPUS=$gpus does not divide the global batch of $batch" >&2
        return 2
    fi
    local launch=(accelerate launch --num_processes "$gpus")
    [ "$gpus" -gt 1 ] && launch+=(--multi_gpu)
    refusal_last "${launch[@]}" "$script" "$@" --output_dir "$out" --per_device_train_batch_size $((batch / gpus)) ||
        return
    printf '%s\n' "$request" > "$out/launch_args.txt"
}

# refusal_last CMD...: run CMD; when the run refuses (an "error: ..." line and its "  hint: ..."), that
# refusal ends stderr and the status is the run's (2; 130 or 143 for a run stopped by SIGINT or
# SIGTERM), without the launcher's report of a failed child after it (accelerate's CalledProcessError
# traceback, torchrun's ChildFailedError) and its status 1. Anything else, a bug's traceback
# included, passes unchanged with CMD's status.
refusal_last() {
    local codes
    { "$@" 2>&1 1>&3 3>&- | awk '
        /^error: / { status = /^error: SIGINT stopped/ ? 130 : /^error: SIGTERM stopped/ ? 143 : 2 }
        status && !/^(error|  hint): / { next }
        { print; fflush() }
        END { exit status }' >&2 && codes=("${PIPESTATUS[@]}") || codes=("${PIPESTATUS[@]}"); } 3>&1
    (( codes[1] )) && return "${codes[1]}"
    return "${codes[0]}"
}

# sts_test MODEL_DIR: the 7 STS test sets with senteval_eval.py, into MODEL_DIR/sts_test_results.json.
sts_test() {
    python senteval_eval.py --model_name_or_path "$1" --mode test --task_set sts \
        --output_json "$1/sts_test_results.json"
}

# transfer_test MODEL_DIR: the 7 SentEval transfer tasks, into MODEL_DIR/transfer_test_results.json.
transfer_test() {
    python senteval_eval.py --model_name_or_path "$1" --mode test --task_set transfer \
        --output_json "$1/transfer_test_results.json"
}
