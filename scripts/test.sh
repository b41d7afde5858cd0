#!/usr/bin/env bash
# The README's second command: the set-up of scripts/quickstart.sh (scripts/setup.sh), then the test
# suite; arguments go to pytest (default: all of tests/, as CI runs it through .ci/run):
#   bash scripts/test.sh
#   bash scripts/test.sh -m "not e2e"          # the fast loop
#   bash scripts/test.sh tests/test_losses.py  # one file
# The tests read ../shared beside the checkout (data, tokenizers) and no hub: HF_HUB_OFFLINE=1.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/setup.sh
[[ -d ../shared/models/tokenizers ]] ||
    cse_fail 2 "the tests read ../shared beside the checkout (SentEval's data, the BERT and RoBERTa tokenizers); there is none" \
        "put the shared folder beside the checkout (../shared: data/, models/; its README.md lists them)"
cse_setup
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
exec "$PY" -m pytest -q "$@"
