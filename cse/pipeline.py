"""The body every ``run_*.py`` shares: logging, corpus, trainer, training (resuming where a run
stopped), export of the best encoder, and the final STS table."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import sys

import datasets
import transformers
from transformers.trainer_utils import get_last_checkpoint

from .data import TwoViewCollator, build_train_dataset
from .evaluation import SentEvalSuite
from .modeling import CSE_CONFIG_NAME
from .results import markdown_table
from .trainer import CSETrainer

logger = logging.getLogger(__name__)


def setup_logging(training_args) -> None:
    logging.basicConfig(
        format="%(asctime)s %(levelname)s %(name)s: %(message)s", handlers=[logging.StreamHandler(sys.stdout)]
    )
    level = training_args.get_process_log_level()
    # Our own progress lines (corpus size, batch and negatives) are info-level: show them once.
    logging.getLogger("cse").setLevel(logging.INFO if training_args.should_log else level)
    datasets.utils.logging.set_verbosity(level)
    transformers.utils.logging.set_verbosity(level)
    transformers.utils.logging.enable_default_handler()
    transformers.utils.logging.enable_explicit_format()


RUN_ARGS_NAME = "run_args.json"
# Training settings that change what a run computes: a run resumed automatically must keep them.
RESUME_SENSITIVE = (
    "learning_rate", "per_device_train_batch_size", "gradient_accumulation_steps", "num_train_epochs", "max_steps",
    "seed", "data_seed", "lr_scheduler_type", "warmup_steps", "weight_decay", "adam_beta1", "adam_beta2",
    "adam_epsilon", "max_grad_norm", "optim", "fp16", "bf16", "eval_steps", "metric_for_best_model", "world_size",
)
# Data arguments that only say where or how fast, not what.
_DATA_LOGISTICS = ("preprocessing_num_workers", "overwrite_cache", "senteval_data_dir")


def run_settings(model_args, data_args, training_args) -> dict:
    settings = {
        "model": dataclasses.asdict(model_args),
        "data": {k: v for k, v in dataclasses.asdict(data_args).items() if k not in _DATA_LOGISTICS},
        "training": {k: getattr(training_args, k, None) for k in RESUME_SENSITIVE},
    }
    return json.loads(json.dumps(settings, default=str))


def find_checkpoint(model_args, data_args, training_args) -> str | None:
    """The checkpoint to resume from: ``--resume_from_checkpoint`` if given, else the last one an
    interrupted run left in ``output_dir``. Refuses, rather than guessing, when ``output_dir`` holds
    a finished run or a run with other settings; then records this run's settings there."""
    output_dir = training_args.output_dir
    current = run_settings(model_args, data_args, training_args)
    checkpoint = training_args.resume_from_checkpoint
    if checkpoint is None and os.path.isdir(output_dir):
        if os.path.exists(os.path.join(output_dir, CSE_CONFIG_NAME)):
            raise FileExistsError(
                f"{output_dir} holds a finished run: choose another --output_dir, delete it, or pass "
                "--resume_from_checkpoint explicitly"
            )
        checkpoint = get_last_checkpoint(output_dir)
        saved_path = os.path.join(output_dir, RUN_ARGS_NAME)
        if checkpoint is not None and os.path.isfile(saved_path):
            with open(saved_path, encoding="utf-8") as f:
                saved = json.load(f)
            changed = [
                f"{group}.{key}: {saved[group].get(key)!r} -> {value!r}"
                for group, values in current.items()
                for key, value in values.items()
                if saved.get(group, {}).get(key) != value
            ]
            if changed:
                raise ValueError(
                    f"{output_dir} holds an interrupted run with other settings ({'; '.join(changed)}): use another "
                    f"--output_dir, or pass --resume_from_checkpoint {checkpoint} to continue it anyway"
                )
        if checkpoint is not None:
            logger.warning("resuming from %s, left in the output directory by an interrupted run", checkpoint)
    if training_args.should_save:
        os.makedirs(output_dir, exist_ok=True)
        # Written aside and renamed: other processes may be reading the previous copy.
        tmp = os.path.join(output_dir, RUN_ARGS_NAME + ".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(current, f, indent=2)
            f.write("\n")
        os.replace(tmp, os.path.join(output_dir, RUN_ARGS_NAME))
    return checkpoint


def _check_best_model_loaded(trainer) -> None:
    """``load_best_model_at_end`` only warns when the best checkpoint has gone missing; exporting the
    last model as if it were the best would be worse than stopping."""
    args, best = trainer.args, trainer.state.best_model_checkpoint
    if not args.load_best_model_at_end:
        return
    if best is None:
        logger.warning("no evaluation ran, so there is no best checkpoint: the last model is exported")
    elif not os.path.isdir(best):
        raise FileNotFoundError(
            f"the best checkpoint {best} is missing, so the model in memory is the last one: nothing exported"
        )


def train_and_evaluate(model_args, data_args, training_args, model, loss, trainer_class=CSETrainer, **trainer_kwargs):
    """Train ``model`` with ``loss``, save the best encoder to ``output_dir`` and, unless
    ``--final_eval none``, print and save its STS table. Returns the trainer."""
    with training_args.main_process_first(desc="corpus tokenisation"):
        train_dataset = build_train_dataset(data_args, model.tokenizer, cache_dir=model_args.cache_dir)
    trainer = trainer_class(
        model=model,
        args=training_args,
        train_dataset=train_dataset,
        data_collator=TwoViewCollator(model.tokenizer),
        processing_class=model.tokenizer,
        loss=loss,
        senteval_data_dir=data_args.senteval_data_dir,
        **trainer_kwargs,
    )
    result = trainer.train(resume_from_checkpoint=find_checkpoint(model_args, data_args, training_args))
    _check_best_model_loaded(trainer)
    trainer.save_encoder()
    metrics = {**result.metrics, "train_samples": len(train_dataset)}
    trainer.log_metrics("train", metrics)
    trainer.save_metrics("train", metrics)
    trainer.save_state()

    if training_args.final_eval != "none":
        report = trainer.senteval(SentEvalSuite("sts", training_args.final_eval, data_args.senteval_data_dir))
        if trainer.is_world_process_zero():
            report.update(model=training_args.output_dir, pooler=model.eval_pooler)
            path = os.path.join(training_args.output_dir, f"sts_{training_args.final_eval}_results.json")
            with open(path, "w", encoding="utf-8") as f:
                json.dump(report, f, indent=2)
                f.write("\n")
            print(f"\nSTS ({training_args.final_eval}), Spearman x 100, pooler {model.eval_pooler}:")
            print(markdown_table({os.path.basename(os.path.normpath(training_args.output_dir)): report["scores"]},
                                 list(report["scores"])))
    return trainer
