#!/usr/bin/env python
"""Unsupervised SimCSE (Gao, Yao and Chen, EMNLP 2021): dropout positives, in-batch negatives.

python run_simcse.py --model_name_or_path bert-base-uncased --output_dir result/simcse
accelerate launch run_simcse.py configs/simcse_bert_base.yaml
"""

from cse.composition import run_method
from cse.errors import run_cli
from cse.methods.simcse import RECORD


def main(argv=None, callbacks=()):
    """Train and evaluate as the command line ``argv`` says; ``callbacks`` (``TrainerCallback`` objects) join
    the Trainer's, e.g. the benchmark's step timer. Returns the trainer."""
    return run_method(RECORD, argv, callbacks)


if __name__ == "__main__":
    run_cli(main)
