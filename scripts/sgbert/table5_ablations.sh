#!/usr/bin/env bash
# SG-BERT, Table 5 (ablations, BERT-base, STS averages): the loss variants, tau 0.1 and 0.001, lambda 0
# and 1, and SG-OPT without the projection head, 8 seeds each, mean ± std beside the paper's averages.
#   bash scripts/sgbert/table5_ablations.sh            # NUM_GPUS=N must divide 16
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/lib.sh
source scripts/sgbert/seeds.sh
root=${OUTPUT_DIR:-$results_root/sgbert-table5}
sgbert_seeds "$root/opt3" sgbert_table5_opt3 "SG-OPT (L^opt3)" --loss_variant opt3 "$@"
sgbert_seeds "$root/opt2" sgbert_table5_opt2 "L^opt2" --loss_variant opt2 "$@"
sgbert_seeds "$root/opt1" sgbert_table5_opt1 "L^opt1" --loss_variant opt1 "$@"
sgbert_seeds "$root/base" sgbert_table5_base "SG (L^base)" --loss_variant base "$@"
sgbert_seeds "$root/tau0.1" sgbert_table5_tau_0_1 "SG-OPT, tau 0.1" --temp 0.1 "$@"
sgbert_seeds "$root/tau0.001" sgbert_table5_tau_0_001 "SG-OPT, tau 0.001" --temp 0.001 "$@"
sgbert_seeds "$root/lambda0.0" sgbert_table5_lambda_0_0 "SG-OPT, lambda 0.0" --reg_lambda 0.0 "$@"
sgbert_seeds "$root/lambda1.0" sgbert_table5_lambda_1_0 "SG-OPT, lambda 1.0" --reg_lambda 1.0 "$@"
sgbert_seeds "$root/no-head" sgbert_table5_no_projection_head "SG-OPT - projection head" --no_projection_head "$@"
