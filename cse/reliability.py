"""What keeps a run from silently producing nothing or nonsense: one run per output directory
(:func:`output_dir_lock`), finite hyperparameters (:func:`check_finite_arguments`), a training
stopped at the first non-finite loss, gradient norm or dev score (:class:`NonFiniteGuard`), and no
export of non-finite weights (:func:`check_finite_weights`). Torn checkpoints are
:mod:`cse.resume`'s. ``docs/reliability.md`` is the user's account of all of it."""

from __future__ import annotations

import contextlib
import logging
import math
import os
import socket

import filelock
import torch
from accelerate.utils import broadcast_object_list
from transformers import TrainerCallback

from .errors import CSEUsageError

logger = logging.getLogger(__name__)

LOCK_NAME = ".cse_run.lock"


def _lock_holder(path: str) -> tuple[str, str] | None:
    """(PID, host) recorded in a ``filelock.SoftFileLock`` marker ("<pid>\\n<host>\\n[<start>\\n]"),
    or None when there is no marker."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return None
    except OSError:
        lines = []
    return (lines[0] if lines else "?", lines[1] if len(lines) > 1 else "?")


@contextlib.contextmanager
def output_dir_lock(training_args):
    """Hold ``output_dir`` for this run until the block exits; refuse at once (``CSEUsageError``)
    when another run holds it.

    The lock is a ``filelock.SoftFileLock`` marker, ``output_dir/.cse_run.lock``, naming its
    holder's PID and host: it works on shared filesystems without OS lock support, and a marker
    left on this host by a process that is gone is taken over (with a warning). Only the global
    main process takes it, without waiting, and tells the others whether to go on, so no process
    ever blocks on the file, whatever the number of nodes."""
    output_dir = training_args.output_dir
    lock, refusal, hint, created = None, None, None, False
    if training_args.process_index == 0:
        path = os.path.join(output_dir, LOCK_NAME)
        created = not os.path.isdir(output_dir)
        os.makedirs(output_dir, exist_ok=True)
        previous = _lock_holder(path)
        lock = filelock.SoftFileLock(path, timeout=0)
        try:
            lock.acquire()
        except filelock.Timeout:
            pid, host = _lock_holder(path) or previous or ("?", "?")
            refusal = f"{output_dir} is in use by another run (PID {pid} on host {host}, lock file {path})"
            hint = (
                "wait for it to finish or choose another --output_dir"
                if host == socket.gethostname()
                else f"wait for it to finish or choose another --output_dir; if no such run is alive on {host}, "
                f"delete {path}"
            )
            lock = None
        else:
            if previous is not None:
                logger.warning(
                    "took over the lock of %s left by PID %s on host %s, which is no longer running",
                    output_dir,
                    *previous,
                )
    if training_args.world_size > 1:
        refusal, hint = broadcast_object_list([refusal, hint])
    if refusal is not None:
        raise CSEUsageError(refusal, hint=hint)
    try:
        yield
    finally:
        if lock is not None:
            lock.release()
            if created and not os.listdir(output_dir):
                os.rmdir(output_dir)  # a run refused before writing anything leaves no trace


def check_finite_arguments(values: dict) -> None:
    """Refuse a NaN or infinite number (alone or in a list) among the parsed argument ``values`` (name:
    value): it would train to a non-finite loss, or silently switch something off."""
    for name, value in values.items():
        items = value if isinstance(value, (list, tuple)) else [value]
        if any(isinstance(v, float) and not math.isfinite(v) for v in items):
            raise CSEUsageError(f"--{name} must be a finite number, got {value}")


def check_finite_weights(state_dict: dict[str, torch.Tensor], where: str) -> None:
    """Refuse to export weights of which any is NaN or infinite (a diverged run)."""
    bad = [
        name
        for name, tensor in state_dict.items()
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all())
    ]
    if bad:
        raise CSEUsageError(
            f"not exporting to {where}: {len(bad)} weight tensor(s) hold NaN or infinite values, first {bad[0]}",
            hint="the run diverged: lower --learning_rate (or check the method's loss weights) and train again",
        )


class NonFiniteGuard(TrainerCallback):
    """Stops training at the first NaN or infinite training loss or gradient norm in a log line, or
    dev score in an evaluation, with an error naming the step (the run exits non-zero).

    It reads only what the Trainer has already brought to the host at its logging and evaluation
    steps, so it adds no per-step synchronisation; the loss in a log line is the mean since the
    previous one, so a step that diverges is caught at the next ``logging_steps``. The error comes
    before that step's checkpoint is written: the checkpoints already saved are the run's last
    finite states."""

    def _stop(self, args, state, what: str) -> None:
        raise CSEUsageError(
            f"training diverged: {what} at step {state.global_step}; the checkpoints saved before it are kept in "
            f"{args.output_dir}",
            hint="lower --learning_rate (or check the temperature and the method's loss weights) and train again",
        )

    def on_log(self, args, state, control, logs=None, **kwargs):
        for key in ("loss", "grad_norm"):
            value = (logs or {}).get(key)
            if isinstance(value, float) and not math.isfinite(value):
                self._stop(args, state, f"the training {key.replace('_', ' ')} is {value}")

    def on_evaluate(self, args, state, control, metrics=None, **kwargs):
        selection = f"eval_{args.metric_for_best_model}" if args.metric_for_best_model else None
        for key, value in (metrics or {}).items():
            scored = key == selection or key.endswith("_spearman")
            if scored and isinstance(value, float) and not math.isfinite(value):
                self._stop(args, state, f"the dev score {key} is {value}")
