# Sourced by the paper-table scripts (from the repository root, right after their `cd`). A table
# script declares its runs, their evaluations and the commands that print the table; the sweep
# driver (python3 -m sweep, docs/reproduce.md) plans them, runs what is not finished yet with the
# chosen executor and prints the table at the end. Every table script takes the driver's options
# (--plan, --executor sequential|gpus|slurm, --gpus, --max_parallel and the slurm executor's; see
# python3 -m sweep --help) and passes its other arguments on to its training runs (flags that the
# run scripts it passes them to accept, as their parsers declare them: sweep/flags.py).
#   NUM_GPUS     processes of one run (DDP; default 1); it must divide each run's global batch
#   RESULT_ROOT  where the tables' default output directories lie (default result)
#   OUTPUT_DIR   this table's output directory (each script's default lies under RESULT_ROOT)

if [ -z "${CSE_SWEEP_RECORD:-}" ]; then
    # Run from the command line: hand the script to the driver, which runs it again with
    # CSE_SWEEP_RECORD set to learn its runs. The script's `cd` left where it was started in OLDPWD.
    case $0 in
        /*) table=$0 ;;
        *) table=$OLDPWD/$0 ;;
    esac
    exec python3 -m sweep "$table" "$@"
fi

results_root=${RESULT_ROOT:-result}

# _record KIND ARGS...: one declaration for the driver: its kind, its number of arguments, the arguments
_record() {
    printf '%s\0' "$1" "$(($# - 1))" "${@:2}" >> "$CSE_SWEEP_RECORD"
}

# train RUN_SCRIPT OUTPUT_DIR GLOBAL_BATCH [ARGS...]: one training run, launched through accelerate
# with the global batch split over its processes. A run finished with the same arguments is kept; an
# interrupted one resumes from its last checkpoint; a finished run with other arguments is refused.
train() {
    _record train "$@"
    # the driver's --mteb: each run is evaluated with MTEB too (senteval_eval.py --protocol mteb; its seven
    # STS tasks from the SentEval files), and the table has an MTEB column and table
    if [ -n "${CSE_SWEEP_MTEB:-}" ]; then
        evaluate "$2" "$2/mteb_test_results.json" python senteval_eval.py --model_name_or_path "$2" --protocol mteb \
            --output_json "$2/mteb_test_results.json"
    fi
}

# evaluate MODEL_DIR OUTPUT CMD...: CMD evaluates the run trained into MODEL_DIR (after it, in the
# order declared) and writes OUTPUT; skipped when OUTPUT is already there.
evaluate() {
    _record evaluate "$@"
}

# evaluate_launched MODEL_DIR OUTPUT GLOBAL_BATCH SCRIPT [ARGS...]: an evaluation that trains (anli_eval.py),
# launched through accelerate on the run's processes like `train`.
evaluate_launched() {
    _record evaluate_launched "$@"
}

# show CMD...: a command of the printed table, run when every run and evaluation has ended.
show() {
    _record show "$@"
}

# tabulate ARGS...: `python -m cse.results ARGS...` in the printed table; a result a failed run did not
# write is a missing cell, not an error. With the driver's --mteb, the runs' MTEB scores as a table too.
tabulate() {
    show python -m cse.results "$@" --missing mark ${CSE_SWEEP_MTEB:+--mteb}
}

# require_file VAR WHAT: the file named by the variable VAR must exist (WHAT says what it holds). A plan
# (--plan) only notes it and names the file <VAR>.
require_file() {
    local var=$1
    [ -f "${!var:-}" ] && return
    if [ -n "${CSE_SWEEP_PLAN_ONLY:-}" ]; then
        _record note "set $var to $2"
        printf -v "$var" '<%s>' "$var"
        return
    fi
    echo "error: set $var to $2 (got '${!var:-}')" >&2
    exit 2
}

# sts_test MODEL_DIR: the 7 STS test sets with senteval_eval.py, into MODEL_DIR/sts_test_results.json.
sts_test() {
    evaluate "$1" "$1/sts_test_results.json" python senteval_eval.py --model_name_or_path "$1" --mode test \
        --task_set sts --output_json "$1/sts_test_results.json"
}

# transfer_test MODEL_DIR: the 7 SentEval transfer tasks, into MODEL_DIR/transfer_test_results.json.
transfer_test() {
    evaluate "$1" "$1/transfer_test_results.json" python senteval_eval.py --model_name_or_path "$1" --mode test \
        --task_set transfer --output_json "$1/transfer_test_results.json"
}
