#!/usr/bin/env python
"""V-advCSE (Ko): unsupervised SimCSE plus virtual adversarial training on the word embeddings,
L = L_cont + lambda * L_vadv, with an MLP + BatchNorm head on [CLS] in training.

python run_vadvcse.py --model_name_or_path bert-base-uncased --output_dir result/vadvcse
accelerate launch run_vadvcse.py configs/vadvcse_bert_base.yaml
"""

from transformers import set_seed

from cse.arguments import CSETrainingArguments, DataArguments, ModelArguments, parse_args
from cse.environment import check_min_versions
from cse.losses import InfoNCELoss
from cse.losses.vadvcse import VirtualAdversarialLoss
from cse.methods.vadvcse import MLPHeadEncoder, VAdvCSEArguments, VAdvCSETrainer
from cse.pipeline import load_encoder, setup_logging, train_and_evaluate


def main(argv=None, callbacks=()):
    """Train and evaluate as the command line ``argv`` says; ``callbacks`` (``TrainerCallback``s) join the
    Trainer's, e.g. the benchmark's step timer. Returns the trainer."""
    check_min_versions()
    model_args, data_args, training_args, vadv_args = parse_args(
        (ModelArguments, DataArguments, CSETrainingArguments, VAdvCSEArguments), argv
    )
    setup_logging(training_args)
    set_seed(training_args.seed)
    model = load_encoder(model_args)
    if vadv_args.head == "linear_tanh":
        if model.pooler_type == "cls":
            model.reset_head()
    else:
        model = MLPHeadEncoder.from_encoder(model, batch_norm=vadv_args.head == "mlp_bn")
    vadv_loss = VirtualAdversarialLoss(**vadv_args.search_options()) if vadv_args.vadv_lambda else None
    return train_and_evaluate(
        model_args,
        data_args,
        training_args,
        model,
        InfoNCELoss(temperature=model_args.temp),
        trainer_class=VAdvCSETrainer,
        method_args=vadv_args,
        callbacks=list(callbacks),
        vadv_loss=vadv_loss,
        vadv_lambda=vadv_args.vadv_lambda,
        shared_dropout=vadv_args.shared_dropout,
    )


if __name__ == "__main__":
    main()
