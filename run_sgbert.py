#!/usr/bin/env python
"""SG-BERT (Kim, Yoo and Lee, ACL 2021): self-guided contrastive learning. BERT_T's [CLS] is pulled
towards views of the same sentence from a frozen copy's hidden layers. --loss_variant opt3 (SG-OPT,
the default), base (SG), opt1, opt2; Table 5 ablations: --temp, --reg_lambda, --no_projection_head.

python run_sgbert.py --output_dir result/sgbert            # Table 8's settings are the defaults
python run_sgbert.py configs/sgbert_bert_base.yaml --output_dir result/sgbert   # the same, written out
accelerate launch run_sgbert.py configs/sgbert_bert_base.yaml --seed 1

Without --train_file (or --dataset_name) the corpus is the paper's: every STS-B train, dev and test
sentence, unlabelled, written to OUTPUT_DIR/stsb_sentences.txt (see cse.stsb_corpus).
"""

import os

from transformers import EarlyStoppingCallback, set_seed

from cse.arguments import parse_args
from cse.environment import check_min_versions
from cse.errors import CSEUsageError, run_cli
from cse.methods.sgbert import RECORD
from cse.pipeline import check_precision, setup_logging, train_built
from cse.run_dir import STSB_CORPUS_NAME
from cse.stsb_corpus import write_stsb_corpus


def main(argv=None, callbacks=()):
    """Train and evaluate as the command line ``argv`` says; ``callbacks`` (``TrainerCallback``s) join the
    Trainer's, e.g. the benchmark's step timer. Returns the trainer."""
    check_min_versions()
    model_args, data_args, training_args, sg_args = parse_args(RECORD.argument_types, argv)
    if sg_args.early_stopping_patience and training_args.eval_strategy == "no":
        raise CSEUsageError("--early_stopping_patience needs evaluations: set --eval_strategy steps, or pass 0")
    if sg_args.early_stopping_patience and training_args.metric_for_best_model is None:
        raise CSEUsageError("--early_stopping_patience needs --metric_for_best_model (stsb_spearman), or pass 0")
    setup_logging(training_args)
    check_precision(training_args)  # before the corpus is written into the output directory
    if data_args.train_file is None and data_args.dataset_name is None:
        data_args.train_file = os.path.join(training_args.output_dir, STSB_CORPUS_NAME)
        with training_args.main_process_first(desc="STS-B sentence corpus"):
            if training_args.local_process_index == 0:
                write_stsb_corpus(data_args.train_file, data_args.senteval_data_dir)
    set_seed(training_args.seed)
    built = RECORD.pieces(model_args, sg_args)
    callbacks = list(callbacks)
    if sg_args.early_stopping_patience:
        callbacks.append(EarlyStoppingCallback(early_stopping_patience=sg_args.early_stopping_patience))
    return train_built(model_args, data_args, training_args, built, sg_args, callbacks)


if __name__ == "__main__":
    run_cli(main)
