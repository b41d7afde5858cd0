#!/usr/bin/env python
"""V-advCSE (Ko): unsupervised SimCSE plus virtual adversarial training on the word embeddings,
L = L_cont + lambda * L_vadv, with an MLP + BatchNorm head on [CLS] in training.

python run_vadvcse.py --model_name_or_path bert-base-uncased --output_dir result/vadvcse
accelerate launch run_vadvcse.py configs/vadvcse_bert_base.yaml
"""

from transformers import set_seed

from cse.arguments import parse_args
from cse.environment import check_min_versions
from cse.errors import run_cli
from cse.methods.vadvcse import RECORD
from cse.pipeline import setup_logging, train_built


def main(argv=None, callbacks=()):
    """Train and evaluate as the command line ``argv`` says; ``callbacks`` (``TrainerCallback``s) join the
    Trainer's, e.g. the benchmark's step timer. Returns the trainer."""
    check_min_versions()
    model_args, data_args, training_args, vadv_args = parse_args(RECORD.argument_types, argv)
    setup_logging(training_args)
    set_seed(training_args.seed)
    built = RECORD.pieces(model_args, vadv_args)
    return train_built(model_args, data_args, training_args, built, vadv_args, callbacks)


if __name__ == "__main__":
    run_cli(main)
