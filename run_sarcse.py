#!/usr/bin/env python
"""SARCSE (Liu et al., arXiv 2402.15153): a TextCNN autoencoder over RoBERTa's token states, whose
code Z is the sentence embedding, trained with InfoNCE on Z and the self-adaptive reconstruction
loss. Table 1 ablations: --plain_mse (every token weighs 1), --no_decoder (no reconstruction).

python run_sarcse.py --output_dir result/sarcse            # roberta-base, the paper's settings
accelerate launch run_sarcse.py configs/sarcse_roberta_base.yaml
"""

from cse.composition import run_method
from cse.errors import run_cli
from cse.methods.sarcse import RECORD


def main(argv=None, callbacks=()):
    """Train and evaluate as the command line ``argv`` says; ``callbacks`` (``TrainerCallback`` objects) join
    the Trainer's, e.g. the benchmark's step timer. Returns the trainer."""
    return run_method(RECORD, argv, callbacks)


if __name__ == "__main__":
    run_cli(main)
