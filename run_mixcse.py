#!/usr/bin/env python
"""MixCSE (Zhang et al., AAAI 2022): SimCSE with mixed hard negatives behind a stop-gradient.
Table 3 ablations: --single, --no_stop_gradient.

python run_mixcse.py --model_name_or_path bert-base-uncased --output_dir result/mixcse
accelerate launch run_mixcse.py configs/mixcse_bert_base.yaml
"""

from cse.composition import run_method
from cse.errors import run_cli
from cse.methods.mixcse import RECORD


def main(argv=None, callbacks=()):
    """Train and evaluate as the command line ``argv`` says; ``callbacks`` (``TrainerCallback`` objects) join
    the Trainer's, e.g. the benchmark's step timer. Returns the trainer."""
    return run_method(RECORD, argv, callbacks)


if __name__ == "__main__":
    run_cli(main)
