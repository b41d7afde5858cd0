# Sourced by the SG-BERT scripts after scripts/lib.sh: the paper reports every trained model as the
# mean (± std) of 8 runs, seeds 1, 2, 3, 4, 1234, 2345, 3456, 7890 (Table 8).
SEEDS=(1 2 3 4 1234 2345 3456 7890)

# sgbert_seeds ROOT PAPER_ROW NAME [ARGS...]: train run_sgbert.py with the BERT-base config (global batch
# 16) and ARGS once per seed into ROOT/seedN, test each on the 7 STS sets, and print the mean ± std over
# the seeds beside PAPER_ROW of cse/paper_results.yaml.
sgbert_seeds() {
    local root=$1 row=$2 name=$3
    shift 3
    local results=()
    for seed in "${SEEDS[@]}"; do
        train run_sgbert.py "$root/seed$seed" 16 configs/sgbert_bert_base.yaml --final_eval none --seed "$seed" "$@"
        sts_test "$root/seed$seed"
        results+=("$root/seed$seed/sts_test_results.json")
    done
    tabulate "${results[@]}" --paper_row "$row" --name "$name"
    show echo
}
