#!/usr/bin/env bash
# V-advCSE, Table 6: STS-B dev against lambda (Eq. 10), BERT-base. The printed grid lists 5e-5
# twice; its third entry, between 1e-6 and 1e-5 in an ascending grid, is read as 5e-6 (docs/methods/vadvcse.md).
#   bash scripts/vadvcse/table6_lambda.sh                # NUM_GPUS=N to spread each run over N GPUs
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/lib.sh
root=${OUTPUT_DIR:-$results_root/vadvcse-table6}
lambdas=(0 1e-6 5e-6 1e-5 5e-5 1e-4 5e-4 1e-3)
for lambda in "${lambdas[@]}"; do
    train run_vadvcse.py "$root/lambda$lambda" 64 configs/vadvcse_bert_base.yaml --final_eval dev \
        --vadv_lambda "$lambda" "$@"
done
for lambda in "${lambdas[@]}"; do
    tabulate "$root/lambda$lambda/sts_dev_results.json" --paper_row "vadvcse_table6_lambda_${lambda//-/m}" \
        --name "ours (lambda $lambda)"
    show echo
done
