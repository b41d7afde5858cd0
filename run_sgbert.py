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

from cse.composition import run_method
from cse.errors import run_cli
from cse.methods.sgbert import RECORD


def main(argv=None, callbacks=()):
    """Train and evaluate as the command line ``argv`` says; ``callbacks`` (``TrainerCallback`` objects) join
    the Trainer's, e.g. the benchmark's step timer. Returns the trainer."""
    return run_method(RECORD, argv, callbacks)


if __name__ == "__main__":
    run_cli(main)
