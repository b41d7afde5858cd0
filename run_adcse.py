#!/usr/bin/env python
"""AdCSE (Li et al., DASFAA 2022): untied momentum dual encoder and negative adversaries trained by
gradient ascent. Table 2 ablations: --no_adversaries, --no_untied_dual_encoder, or both.

python run_adcse.py --model_name_or_path bert-base-uncased --output_dir result/adcse
accelerate launch run_adcse.py configs/adcse_bert_base.yaml
"""

from transformers import set_seed

from cse.arguments import CSETrainingArguments, DataArguments, ModelArguments, parse_args
from cse.environment import check_min_versions
from cse.losses import InfoNCELoss
from cse.losses.adcse import AdversarialInfoNCELoss
from cse.methods.adcse import AdCSEArguments, AdCSETrainer, MomentumDualEncoder
from cse.pipeline import load_encoder, setup_logging, train_and_evaluate


def main(argv=None, callbacks=()):
    """Train and evaluate as the command line ``argv`` says; ``callbacks`` (``TrainerCallback``s) join the
    Trainer's, e.g. the benchmark's step timer. Returns the trainer."""
    check_min_versions()
    model_args, data_args, training_args, adcse_args = parse_args(
        (ModelArguments, DataArguments, CSETrainingArguments, AdCSEArguments), argv
    )
    setup_logging(training_args)
    set_seed(training_args.seed)
    model = load_encoder(model_args)
    if adcse_args.untied_dual_encoder:
        model = MomentumDualEncoder.from_encoder(
            model, momentum=adcse_args.momentum, shared_head=adcse_args.variant == "released"
        )
    if model.pooler_type == "cls":
        model.reset_head()
    if adcse_args.adversaries:
        loss = AdversarialInfoNCELoss(
            model.config.hidden_size,
            adcse_args.num_adversaries,
            model_args.temp,
            form=adcse_args.variant,
            adversary_temperature=adcse_args.adversary_temperature,
        )
    else:  # in-batch negatives only, whichever the variant: Eq. 5 without adversaries has no negatives
        loss = InfoNCELoss(temperature=model_args.temp)
    return train_and_evaluate(
        model_args,
        data_args,
        training_args,
        model,
        loss,
        trainer_class=AdCSETrainer,
        method_args=adcse_args,
        callbacks=list(callbacks),
        adversary_learning_rate=adcse_args.adversary_learning_rate,
        adversary_momentum=adcse_args.adversary_momentum,
        adversary_weight_decay=adcse_args.adversary_weight_decay,
    )


if __name__ == "__main__":
    main()
