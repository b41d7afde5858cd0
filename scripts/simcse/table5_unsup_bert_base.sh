#!/usr/bin/env bash
# SimCSE (Gao et al., 2021), Table 5, Unsup-SimCSE-BERT-base: train on wiki1m, select on STS-B dev,
# evaluate the 7 STS test sets, print our row beside the paper's.
#   bash scripts/simcse/table5_unsup_bert_base.sh                 # one GPU
#   NUM_GPUS=4 bash scripts/simcse/table5_unsup_bert_base.sh      # global batch stays 64
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/lib.sh
out=${OUTPUT_DIR:-$results_root/simcse-bert-base}
train run_simcse.py "$out" 64 configs/simcse_bert_base.yaml "$@"
tabulate --runs "$out" --paper_row simcse_unsup_bert_base --name "ours ($out)"
