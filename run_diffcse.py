#!/usr/bin/env python
"""DiffCSE (Chuang et al., NAACL 2022): SimCSE with a BatchNorm projector and a conditional replaced-token
detection, lambda L_RTD, whose discriminator reads the sentence embedding in place of [CLS]; --variant paper
for the paper's readings. Run as ``accelerate launch run_diffcse.py configs/diffcse_bert_base.yaml`` (or python,
one process)."""

from cse.composition import run_method
from cse.errors import run_cli
from cse.methods.diffcse import RECORD


def main(argv=None, callbacks=()):
    """Train and evaluate as ``argv`` says, ``callbacks`` joining the Trainer's; returns the trainer."""
    return run_method(RECORD, argv, callbacks)


if __name__ == "__main__":
    run_cli(main)
