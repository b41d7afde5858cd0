# Sourced by the MixCSE scripts (from the repository root): the seeded runs that Tables 1-3 share,
# so that a run trained for one table is reused, not retrained, by the others.
#   SEEDS       the seeds (default "42 43 44 45 46": the paper reports mean ± std over five runs)
#   OUTPUT_DIR  root of the runs (default result/mixcse): OUTPUT_DIR/bert-SIZE-ABLATION/seedN
#   NUM_GPUS    processes per run (scripts/lib.sh); the global batch stays 64
source scripts/lib.sh
read -r -a seeds <<< "${SEEDS:-42 43 44 45 46}"
root=${OUTPUT_DIR:-$results_root/mixcse}

# run_dir SIZE ABLATION SEED
run_dir() {
    echo "$root/bert-$1-$2/seed$3"
}

# train_seeds SIZE ABLATION [ARGS...]: ABLATION is full, single (MixCSE_single) or no_stop_gradient
# (MixCSE_wo sg); ARGS go to run_mixcse.py. The final STS table is left to senteval_eval.py.
train_seeds() {
    local size=$1 ablation=$2 seed
    shift 2
    local flags=()
    case $ablation in
        full) ;;
        single) flags=(--single) ;;
        no_stop_gradient) flags=(--no_stop_gradient) ;;
        *) echo "unknown ablation $ablation" >&2; return 2 ;;
    esac
    for seed in "${seeds[@]}"; do
        train run_mixcse.py "$(run_dir "$size" "$ablation" "$seed")" 64 "configs/mixcse_bert_$size.yaml" \
            --final_eval none --seed "$seed" "${flags[@]}" "$@"
    done
}

# runs SIZE ABLATION: every seed's run directory, one a line
runs() {
    local seed
    for seed in "${seeds[@]}"; do
        run_dir "$1" "$2" "$seed"
    done
}

# results SIZE ABLATION NAME: the result JSON NAME of every seed's run, one a line
results() {
    local run
    for run in $(runs "$1" "$2"); do
        echo "$run/$3"
    done
}

# test_runs SIZE ABLATION TEST...: each seed's run through each scripts/lib.sh TEST (sts_test,
# transfer_test)
test_runs() {
    local size=$1 ablation=$2 run test
    shift 2
    for run in $(runs "$size" "$ablation"); do
        for test in "$@"; do
            "$test" "$run"
        done
    done
}

# compare SIZE ABLATION RESULT_JSON PAPER_ROW: mean ± std over the seeds beside the paper's row
compare() {
    # shellcheck disable=SC2046  # one path per seed
    tabulate $(results "$1" "$2" "$3") --paper_row "$4" --name "ours, BERT-$1, $2 (${#seeds[@]} seeds)"
}
