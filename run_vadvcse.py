#!/usr/bin/env python
"""V-advCSE (Ko): unsupervised SimCSE plus virtual adversarial training on the word embeddings,
L = L_cont + lambda * L_vadv, with an MLP + BatchNorm head on [CLS] in training.

python run_vadvcse.py --model_name_or_path bert-base-uncased --output_dir result/vadvcse
accelerate launch run_vadvcse.py configs/vadvcse_bert_base.yaml
"""

from cse.composition import run_method
from cse.errors import run_cli
from cse.methods.vadvcse import RECORD


def main(argv=None, callbacks=()):
    """Train and evaluate as the command line ``argv`` says; ``callbacks`` (``TrainerCallback`` objects) join
    the Trainer's, e.g. the benchmark's step timer. Returns the trainer."""
    return run_method(RECORD, argv, callbacks)


if __name__ == "__main__":
    run_cli(main)
