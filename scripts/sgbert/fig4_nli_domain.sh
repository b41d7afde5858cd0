#!/usr/bin/env bash
# SG-BERT, Sect. 5.2 / Fig. 4 (domain robustness): SG-OPT on BERT-base trained on NLI sentences (SNLI +
# MNLI) instead of STS-B, 8 seeds, beside the paper's in-domain SG-OPT row. The figure gives only the
# losses against in-domain training: 1.83 on STS-B and 1.63 on the average (75.40 and 72.99).
# The NLI sentences are not part of $CSE_DATA_DIR: NLI_FILE is a .txt with one sentence a line (the
# paper does not say which NLI sentences it used; see docs/methods/sgbert.md).
#   NLI_FILE=data/nli_sentences.txt bash scripts/sgbert/fig4_nli_domain.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/lib.sh
source scripts/sgbert/seeds.sh
require_file NLI_FILE "a .txt of NLI sentences, one a line"
root=${OUTPUT_DIR:-$results_root/sgbert-nli}
show echo "paper (Sect. 5.2): trained on NLI, SG-OPT loses 1.83 on STS-B and 1.63 on the STS average"
sgbert_seeds "$root/bert-base-sg-opt-nli" sgbert_bert_base_sg_opt "SG-OPT, BERT-base, NLI-trained" \
    --train_file "$NLI_FILE" "$@"
