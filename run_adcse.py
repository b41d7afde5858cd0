#!/usr/bin/env python
"""AdCSE (Li et al., DASFAA 2022): untied momentum dual encoder and negative adversaries trained by
gradient ascent. Table 2 ablations: --no_adversaries, --no_untied_dual_encoder, or both.

python run_adcse.py --model_name_or_path bert-base-uncased --output_dir result/adcse
accelerate launch run_adcse.py configs/adcse_bert_base.yaml
"""

from cse.composition import run_method
from cse.errors import run_cli
from cse.methods.adcse import RECORD


def main(argv=None, callbacks=()):
    """Train and evaluate as the command line ``argv`` says; ``callbacks`` (``TrainerCallback`` objects) join
    the Trainer's, e.g. the benchmark's step timer. Returns the trainer."""
    return run_method(RECORD, argv, callbacks)


if __name__ == "__main__":
    run_cli(main)
