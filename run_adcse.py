#!/usr/bin/env python
"""AdCSE (Li et al., DASFAA 2022): untied momentum dual encoder and negative adversaries trained by
gradient ascent. Table 2 ablations: --no_adversaries, --no_untied_dual_encoder, or both.

python run_adcse.py --model_name_or_path bert-base-uncased --output_dir result/adcse
accelerate launch run_adcse.py configs/adcse_bert_base.yaml
"""

from transformers import set_seed

from cse.arguments import parse_args
from cse.environment import check_min_versions
from cse.errors import run_cli
from cse.methods.adcse import RECORD
from cse.pipeline import setup_logging, train_built


def main(argv=None, callbacks=()):
    """Train and evaluate as the command line ``argv`` says; ``callbacks`` (``TrainerCallback``s) join the
    Trainer's, e.g. the benchmark's step timer. Returns the trainer."""
    check_min_versions()
    model_args, data_args, training_args, adcse_args = parse_args(RECORD.argument_types, argv)
    setup_logging(training_args)
    set_seed(training_args.seed)
    built = RECORD.pieces(model_args, adcse_args)
    return train_built(model_args, data_args, training_args, built, adcse_args, callbacks)


if __name__ == "__main__":
    run_cli(main)
