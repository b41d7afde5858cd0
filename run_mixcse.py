#!/usr/bin/env python
"""MixCSE (Zhang et al., AAAI 2022): SimCSE with mixed hard negatives behind a stop-gradient.
Table 3 ablations: --single, --no_stop_gradient.

python run_mixcse.py --model_name_or_path bert-base-uncased --output_dir result/mixcse
accelerate launch run_mixcse.py configs/mixcse_bert_base.yaml
"""

from transformers import set_seed

from cse.arguments import parse_args
from cse.environment import check_min_versions
from cse.errors import run_cli
from cse.methods.mixcse import RECORD
from cse.pipeline import setup_logging, train_built


def main(argv=None, callbacks=()):
    """Train and evaluate as the command line ``argv`` says; ``callbacks`` (``TrainerCallback``s) join the
    Trainer's, e.g. the benchmark's step timer. Returns the trainer."""
    check_min_versions()
    model_args, data_args, training_args, mixcse_args = parse_args(RECORD.argument_types, argv)
    setup_logging(training_args)
    set_seed(training_args.seed)
    built = RECORD.pieces(model_args, mixcse_args)
    return train_built(model_args, data_args, training_args, built, mixcse_args, callbacks)


if __name__ == "__main__":
    run_cli(main)
