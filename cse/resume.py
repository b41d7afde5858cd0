"""Resuming a run: where from, and refusing to resume what would silently change the result.

An interrupted run leaves ``checkpoint-*`` folders and ``run_args.json`` (its settings) in
``output_dir``; starting the same command again resumes from the last checkpoint. A finished run,
or an interrupted one with other settings, is refused with a message rather than continued.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os

from transformers.trainer_utils import get_last_checkpoint

from .modeling import CSE_CONFIG_NAME

logger = logging.getLogger(__name__)

RUN_ARGS_NAME = "run_args.json"
# Training settings that change what a run computes: a run resumed automatically must keep them.
RESUME_SENSITIVE = (
    "learning_rate",
    "per_device_train_batch_size",
    "gradient_accumulation_steps",
    "num_train_epochs",
    "max_steps",
    "seed",
    "data_seed",
    "lr_scheduler_type",
    "warmup_steps",
    "weight_decay",
    "adam_beta1",
    "adam_beta2",
    "adam_epsilon",
    "max_grad_norm",
    "optim",
    "fp16",
    "bf16",
    "eval_steps",
    "metric_for_best_model",
    "world_size",
)
# Data arguments that only say where or how fast, not what.
_DATA_LOGISTICS = ("preprocessing_num_workers", "overwrite_cache", "senteval_data_dir")


def run_settings(model_args, data_args, training_args, method_args=None) -> dict:
    settings = {
        "model": dataclasses.asdict(model_args),
        "data": {k: v for k, v in dataclasses.asdict(data_args).items() if k not in _DATA_LOGISTICS},
        "training": {k: getattr(training_args, k, None) for k in RESUME_SENSITIVE},
    }
    if method_args is not None:
        settings["method"] = dataclasses.asdict(method_args)
    return json.loads(json.dumps(settings, default=str))


def find_checkpoint(model_args, data_args, training_args, method_args=None) -> str | None:
    """The checkpoint to resume from: ``--resume_from_checkpoint`` if given, else the last one an
    interrupted run left in ``output_dir``. Refuses, rather than guessing, when ``output_dir`` holds
    a finished run or a run with other settings (``method_args``: the method's own dataclass); then
    records this run's settings there."""
    output_dir = training_args.output_dir
    current = run_settings(model_args, data_args, training_args, method_args)
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


def resolve_checkpoint(resume_from_checkpoint, output_dir: str) -> str | None:
    """``Trainer.train``'s ``resume_from_checkpoint`` as a path: ``True`` means the last checkpoint in
    ``output_dir`` (an error if there is none), for trainers that must inspect it before resuming."""
    if resume_from_checkpoint is True:
        resume_from_checkpoint = get_last_checkpoint(output_dir)
        if resume_from_checkpoint is None:
            raise ValueError(f"no checkpoint to resume from in {output_dir}")
    return resume_from_checkpoint or None


def check_best_model_loaded(trainer) -> None:
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
