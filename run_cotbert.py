#!/usr/bin/env python
"""CoT-BERT (Zhang et al., ICANN 2024): the sentence inside an anchor, a positive and a hard-negative template
of two [MASK]s, embedded by the last [MASK] with [PAD] template denoising, trained with the extended InfoNCE.
Run as ``accelerate launch run_cotbert.py configs/cotbert_bert_base.yaml`` (or python, one process)."""

from cse.composition import run_method
from cse.errors import run_cli
from cse.methods.cotbert import RECORD


def main(argv=None, callbacks=()):
    """Train and evaluate as ``argv`` says, ``callbacks`` joining the Trainer's; returns the trainer."""
    return run_method(RECORD, argv, callbacks)


if __name__ == "__main__":
    run_cli(main)
