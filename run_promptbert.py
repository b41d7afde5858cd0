#!/usr/bin/env python
"""PromptBERT (Jiang et al., EMNLP 2022), unsupervised: SimCSE whose views are the sentence inside two
templates, embedded by the [MASK] state with template denoising; --variant paper for the paper's readings.
Run as ``accelerate launch run_promptbert.py configs/promptbert_bert_base.yaml`` (or python, one process)."""

from cse.composition import run_method
from cse.errors import run_cli
from cse.methods.promptbert import RECORD


def main(argv=None, callbacks=()):
    """Train and evaluate as ``argv`` says, ``callbacks`` joining the Trainer's; returns the trainer."""
    return run_method(RECORD, argv, callbacks)


if __name__ == "__main__":
    run_cli(main)
