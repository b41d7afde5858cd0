#!/usr/bin/env python
"""Unsupervised SimCSE (Gao, Yao and Chen, EMNLP 2021): dropout positives, in-batch negatives.

python run_simcse.py --model_name_or_path bert-base-uncased --output_dir result/simcse
accelerate launch run_simcse.py configs/simcse_bert_base.yaml
"""

from transformers import set_seed

from cse.arguments import CSETrainingArguments, DataArguments, ModelArguments, parse_args
from cse.environment import check_min_versions
from cse.losses import InfoNCELoss
from cse.pipeline import load_encoder, setup_logging, train_and_evaluate


def main(argv=None, callbacks=()):
    """Train and evaluate as the command line ``argv`` says; ``callbacks`` (``TrainerCallback``s) join the
    Trainer's, e.g. the benchmark's step timer. Returns the trainer."""
    check_min_versions()
    model_args, data_args, training_args = parse_args((ModelArguments, DataArguments, CSETrainingArguments), argv)
    setup_logging(training_args)
    set_seed(training_args.seed)
    model = load_encoder(model_args)
    if model.pooler_type == "cls":
        model.reset_head()
    return train_and_evaluate(
        model_args,
        data_args,
        training_args,
        model,
        InfoNCELoss(temperature=model_args.temp),
        callbacks=list(callbacks),
    )


if __name__ == "__main__":
    main()
