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

from safetensors import safe_open
from transformers.trainer_utils import get_last_checkpoint
from transformers.utils import SAFE_WEIGHTS_NAME

from .environment import collect_environment
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
    records this run's settings there, with its ``environment`` (:func:`cse.environment.collect_environment`),
    which the comparison leaves out: a resume may run on other versions or from a modified checkout."""
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
            json.dump({**current, "environment": collect_environment(training_args)}, f, indent=2)
            f.write("\n")
        os.replace(tmp, os.path.join(output_dir, RUN_ARGS_NAME))
    return checkpoint


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


def check_checkpoint_matches(model, checkpoint: str) -> None:
    """The Trainer loads checkpoint weights non-strictly: refuse one saved by another model layout
    (another variant or ablation flag) instead of silently dropping or missing some of its weights."""
    path = os.path.join(checkpoint, SAFE_WEIGHTS_NAME)
    if not os.path.isfile(path):
        return  # not ours to judge (sharded or DeepSpeed checkpoints): the Trainer reports those
    with safe_open(path, framework="pt") as f:
        saved = {key: tuple(f.get_slice(key).get_shape()) for key in f.keys()}
    current = {key: tuple(t.shape) for key, t in model.state_dict().items()}
    differ = sorted(set(saved) ^ set(current)) + sorted(k for k in set(saved) & set(current) if saved[k] != current[k])
    if differ:
        raise ValueError(
            f"{checkpoint} was saved by a different model (e.g. another --variant or ablation flag): "
            f"{len(differ)} weight(s) missing, extra or reshaped, first {', '.join(differ[:3])}"
        )


def resolve_checkpoint(trainer, resume_from_checkpoint) -> str | None:
    """What ``trainer.train(resume_from_checkpoint=...)`` will load, for trainers that restore their
    own state first: ``True`` is the last checkpoint in ``output_dir``; a checkpoint of another model
    layout is refused (:func:`check_checkpoint_matches`)."""
    if resume_from_checkpoint is True:
        resume_from_checkpoint = get_last_checkpoint(trainer.args.output_dir)
        if resume_from_checkpoint is None:
            raise ValueError(f"no checkpoint to resume from in {trainer.args.output_dir}")
    if not resume_from_checkpoint:
        return None
    if not os.path.isdir(resume_from_checkpoint):
        raise FileNotFoundError(f"no checkpoint to resume from at {resume_from_checkpoint}")
    check_checkpoint_matches(trainer.accelerator.unwrap_model(trainer.model), resume_from_checkpoint)
    return resume_from_checkpoint
