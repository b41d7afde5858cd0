#!/usr/bin/env python
"""Unsupervised SimCSE (Gao, Yao and Chen, EMNLP 2021): dropout positives, in-batch negatives.

python run_simcse.py --model_name_or_path bert-base-uncased --output_dir result/simcse
accelerate launch run_simcse.py configs/simcse_bert_base.yaml
"""

from transformers import set_seed

from cse.arguments import CSETrainingArguments, DataArguments, ModelArguments, parse_args
from cse.losses import InfoNCELoss
from cse.modeling import CSEModel
from cse.pipeline import setup_logging, train_and_evaluate


def main(argv=None):
    model_args, data_args, training_args = parse_args((ModelArguments, DataArguments, CSETrainingArguments), argv)
    setup_logging(training_args)
    set_seed(training_args.seed)
    model = CSEModel.from_pretrained(
        model_args.model_name_or_path,
        pooler_type=model_args.pooler_type,
        mlp_only_train=model_args.mlp_only_train,
        tokenizer_name_or_path=model_args.tokenizer_name,
        cache_dir=model_args.cache_dir,
    )
    if model.pooler_type == "cls":
        model.reset_head()
    return train_and_evaluate(model_args, data_args, training_args, model, InfoNCELoss(temperature=model_args.temp))


if __name__ == "__main__":
    main()
