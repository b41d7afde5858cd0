#!/usr/bin/env python
"""SARCSE (Liu et al., arXiv 2402.15153): a TextCNN autoencoder over RoBERTa's token states, whose
code Z is the sentence embedding, trained with InfoNCE on Z and the self-adaptive reconstruction
loss. Table 1 ablations: --plain_mse (every token weighs 1), --no_decoder (no reconstruction).

python run_sarcse.py --output_dir result/sarcse            # roberta-base, the paper's settings
accelerate launch run_sarcse.py configs/sarcse_roberta_base.yaml
"""

from transformers import set_seed

from cse.arguments import DataArguments, parse_args
from cse.environment import check_min_versions
from cse.losses import InfoNCELoss
from cse.methods.sarcse import (
    SARCSEArguments,
    SARCSEModelArguments,
    SARCSETrainer,
    SARCSETrainingArguments,
    build_model,
    reconstruction_loss,
)
from cse.pipeline import setup_logging, train_and_evaluate
from cse.resume import check_checkpoint_matches


def main(argv=None, callbacks=()):
    """Train and evaluate as the command line ``argv`` says; ``callbacks`` (``TrainerCallback``s) join the
    Trainer's, e.g. the benchmark's step timer. Returns the trainer."""
    check_min_versions()
    model_args, data_args, training_args, sarcse_args = parse_args(
        (SARCSEModelArguments, DataArguments, SARCSETrainingArguments, SARCSEArguments), argv
    )
    if (model_args.pooler_type, model_args.mlp_only_train) != ("cls", True):
        raise ValueError("SARCSE's sentence embedding is Z (Eq. 4): --pooler_type and --mlp_only_train do not apply")
    setup_logging(training_args)
    set_seed(training_args.seed)
    model = build_model(model_args, sarcse_args)
    if training_args.resume_from_checkpoint:  # before the corpus, and for --no_decoder's plain trainer too
        check_checkpoint_matches(model, training_args.resume_from_checkpoint)
    loss = InfoNCELoss(temperature=model_args.temp)  # Eq. 11 on Z
    common = (model_args, data_args, training_args, model, loss)
    if not sarcse_args.decoder:  # Table 1, w/o decoder: InfoNCE on Z alone
        return train_and_evaluate(*common, method_args=sarcse_args, callbacks=list(callbacks))
    return train_and_evaluate(
        *common,
        trainer_class=SARCSETrainer,
        method_args=sarcse_args,
        callbacks=list(callbacks),
        reconstruction_loss=reconstruction_loss(model, sarcse_args),
        alpha=sarcse_args.alpha,
        beta=sarcse_args.beta,
        gamma=sarcse_args.gamma,
    )


if __name__ == "__main__":
    main()
