#!/usr/bin/env python
"""ESimCSE (Wu et al., COLING 2022): SimCSE with word repetition of the positive view and a momentum
queue of earlier batches' embeddings among the negatives; --variant paper for the paper's readings.
Run as ``accelerate launch run_esimcse.py configs/esimcse_bert_base.yaml`` (or python, one process)."""

from cse.composition import run_method
from cse.errors import run_cli
from cse.methods.esimcse import RECORD


def main(argv=None, callbacks=()):
    """Train and evaluate as ``argv`` says, ``callbacks`` joining the Trainer's; returns the trainer."""
    return run_method(RECORD, argv, callbacks)


if __name__ == "__main__":
    run_cli(main)
