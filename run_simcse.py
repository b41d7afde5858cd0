#!/usr/bin/env python
"""Unsupervised SimCSE (Gao, Yao and Chen, EMNLP 2021): dropout positives, in-batch negatives.

python run_simcse.py --model_name_or_path bert-base-uncased --output_dir result/simcse
accelerate launch run_simcse.py configs/simcse_bert_base.yaml
"""

from transformers import set_seed

from cse.arguments import parse_args
from cse.environment import check_min_versions
from cse.errors import run_cli
from cse.methods.simcse import RECORD
from cse.pipeline import setup_logging, train_built


def main(argv=None, callbacks=()):
    """Train and evaluate as the command line ``argv`` says; ``callbacks`` (``TrainerCallback``s) join the
    Trainer's, e.g. the benchmark's step timer. Returns the trainer."""
    check_min_versions()
    model_args, data_args, training_args = parse_args(RECORD.argument_types, argv)
    setup_logging(training_args)
    set_seed(training_args.seed)
    return train_built(model_args, data_args, training_args, RECORD.pieces(model_args), callbacks=callbacks)


if __name__ == "__main__":
    run_cli(main)
