#!/usr/bin/env bash
# PromptBERT (Jiang et al., EMNLP 2022), unsupervised, the STS table: PromptBERT-BERT-base and
# PromptRoBERTa-RoBERTa-base, each trained with the released settings (docs/methods/promptbert.md) and
# 5 seeds (the released README's rows are means over random runs: 10, seeds not published), tested on
# the 7 STS sets with senteval_eval.py (the raw [MASK] state of template 1, the released test), and
# printed as mean ± std beside the published rows (the released README's; the paper's table could not
# be read).
#   bash scripts/promptbert/table1_sts.sh                      # one GPU
#   NUM_GPUS=4 bash scripts/promptbert/table1_sts.sh           # global batch stays 256
#   SEEDS="1 2 3" bash scripts/promptbert/table1_sts.sh        # other seeds
#   bash scripts/promptbert/table1_sts.sh --variant paper      # extra flags go to run_promptbert.py
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/lib.sh
read -r -a seeds <<< "${SEEDS:-42 43 44 45 46}"
root=${OUTPUT_DIR:-$results_root/promptbert}
for backbone in bert roberta; do
    for seed in "${seeds[@]}"; do
        train run_promptbert.py "$root/$backbone-base/seed$seed" 256 "configs/promptbert_${backbone}_base.yaml" \
            --final_eval none --seed "$seed" "$@"
        sts_test "$root/$backbone-base/seed$seed"
    done
done
results() {
    local seed
    for seed in "${seeds[@]}"; do
        echo "$root/$1-base/seed$seed/sts_test_results.json"
    done
}
# shellcheck disable=SC2046  # one path per seed
tabulate $(results bert) --paper_row promptbert_bert_base --name "ours, BERT-base (${#seeds[@]} seeds)"
show echo
# shellcheck disable=SC2046
tabulate $(results roberta) --paper_row promptbert_roberta_base --name "ours, RoBERTa-base (${#seeds[@]} seeds)"
