"""What keeps a run from silently producing nothing or nonsense: one run per output directory
(:func:`output_dir_lock`), which also ends a run stopped by SIGINT or SIGTERM, or by a full disk,
with one line naming where it can resume (:class:`RunProgress`), a training stopped at the first
non-finite loss, gradient norm or dev score (:class:`NonFiniteGuard`), and no export of non-finite
weights (:func:`check_finite_weights`). Torn checkpoints are :mod:`cse.resume`'s. ``docs/reliability.md`` is
the user's account of all of it."""

from __future__ import annotations

import contextlib
import errno
import logging
import math
import os
import re
import select
import shutil
import signal
import socket
import sys
import threading

import filelock
import torch
from accelerate.utils import broadcast_object_list
from safetensors import safe_open
from transformers import TrainerCallback
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR
from transformers.utils import SAFE_WEIGHTS_NAME

from .errors import (
    OS_ERROR_HINTS,
    CSEUsageError,
    exception_chain,
    free_space,
    human_size,
    is_disk_full,
    nearest_existing,
)
from .resume import (
    checkpoints_newest_first,
    newest_complete_checkpoint,
    trainer_state,
    training_ended,
)
from .run_names import LOCK_NAME, RUN_ARGS_NAME, STSB_CORPUS_NAME, TMP_SUFFIX, TRAINER_STATE_NAME

logger = logging.getLogger(__name__)


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


class RunInterrupted(CSEUsageError):
    """The one line a run stopped by a signal ends with; the exit status is the shell's for a process
    ended by that signal (128 + its number: 130 for SIGINT, 143 for SIGTERM), which schedulers read as
    "interrupted, may be requeued", unlike a refusal's 2."""

    def __init__(self, message: str, hint: str, signum: int):
        super().__init__(message, hint=hint)
        self.exit_code = 128 + signum


class RunProgress(TrainerCallback):
    """The step a run has reached and its newest checkpoint, as the Trainer reports them: ``on_save``
    comes after a checkpoint's last file is written (and after the Trainer's rotation of older ones).
    One instance (:data:`PROGRESS`) serves the run of the process."""

    def __init__(self):
        self.reset()

    def reset(self) -> None:
        self.step, self.checkpoint, self.args, self.trained = None, None, None, False
        # set by the signal watcher while it waits for the checkpoint being written (output_dir_lock)
        self.stopping, self.saved = False, threading.Event()

    def on_train_begin(self, args, state, control, **kwargs):
        # A resumed run starts at its checkpoint's step; the Trainer has loaded its state by now.
        resumed = os.path.join(args.output_dir, f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}")
        self.step, self.checkpoint = state.global_step, resumed if os.path.isdir(resumed) else None
        self.args = args

    def on_step_end(self, args, state, control, **kwargs):
        self.step = state.global_step

    def on_save(self, args, state, control, **kwargs):
        self.checkpoint = os.path.join(args.output_dir, f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}")
        if self.stopping:
            # a signal came while this checkpoint was written: it is whole now; the watcher ends the
            # process, and training takes no further step meanwhile
            self.saved.set()
            threading.Event().wait()

    def on_train_end(self, args, state, control, **kwargs):
        self.trained = True

    def writing(self) -> str | None:
        """The checkpoint the Trainer is writing now, if any: the folder of the current step, created,
        and not yet reported saved. (A torn folder left by an earlier attempt is never there: the run
        set it aside when it started, :func:`cse.resume.set_aside`.)"""
        if self.args is None or self.step is None:
            return None
        folder = os.path.join(self.args.output_dir, f"{PREFIX_CHECKPOINT_DIR}-{self.step}")
        return folder if folder != self.checkpoint and os.path.isdir(folder) else None


PROGRESS = RunProgress()


_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
# How often the signal watcher, while it waits for a checkpoint, looks for a second signal.
_POLL_SECONDS = 0.05


# While a run's watcher is installed: each signal it took over -> the handler before it.
_TAKEN_OVER: dict[int, object] = {}


def _give_back_in_child() -> None:
    """A process forked from a run (a DataLoader worker, a tokenisation process) takes back the signal
    handling the run took over: its signals are its own, and a worker the DataLoader terminates must
    die of it, not wake the run's watcher through the inherited wakeup fd."""
    if not _TAKEN_OVER:
        return
    with contextlib.suppress(ValueError):  # forked from a thread other than the main one: nothing was set
        signal.set_wakeup_fd(-1)
        for signum, handler in _TAKEN_OVER.items():
            signal.signal(signum, handler)
    _TAKEN_OVER.clear()


os.register_at_fork(after_in_child=_give_back_in_child)


def _ignore(signum, frame):
    """The Python-level handler: the watcher thread acts (:func:`_stop_on_signals`); installing a
    Python handler is what makes the interpreter's C handler write the signal to the wakeup fd."""


@contextlib.contextmanager
def _stop_on_signals(stop):
    """Within the block, SIGINT and SIGTERM call ``stop(signum, wake_fd)`` at once in a watcher thread,
    whatever the main thread is doing: a Python handler runs only when the main thread returns to
    Python, which a long tokenisation or kernel call delays by seconds. ``stop`` ends the process; it
    reads ``wake_fd`` to notice a second signal. The interpreter's C handler writes each signal's number
    to the wakeup fd (``signal.set_wakeup_fd``), which the watcher reads. A signal the process was
    started ignoring (SIGINT in a shell script's background job) stays ignored; only the main thread
    may set handlers: elsewhere nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught = [signum for signum in _STOP_SIGNALS if signal.getsignal(signum) is not signal.SIG_IGN]
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    previous_fd = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    previous = {signum: signal.signal(signum, _ignore) for signum in caught}
    _TAKEN_OVER.update(previous)

    def watch():
        while True:
            select.select([read_fd], [], [])
            for signum in os.read(read_fd, 64):
                if signum == 0:  # the block has ended
                    return
                if signum in caught:
                    stop(signum, read_fd)

    watcher = threading.Thread(target=watch, name="cse-stop-signals", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        _TAKEN_OVER.clear()
        signal.set_wakeup_fd(previous_fd)
        os.write(write_fd, b"\0")
        watcher.join()
        os.close(read_fd)
        os.close(write_fd)


def _wait_until(done: threading.Event, wake_fd: int) -> bool:
    """Wait until ``done`` is set; False as soon as a second signal arrives on ``wake_fd``, or the block
    that installed the watcher ends (its 0 byte: the main thread has left, a checkpoint write failed)."""
    while not done.wait(_POLL_SECONDS):
        if select.select([wake_fd], [], [], 0)[0] and os.read(wake_fd, 64):
            return False
    return True


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _tree_size(path: str) -> int:
    if not os.path.isdir(path):
        return os.path.getsize(path) if os.path.exists(path) else 0
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)


def _newest_entry(directory: str) -> str:
    """What was written last in ``directory``: its newest file or subdirectory (a checkpoint being
    saved), else ``directory`` itself."""
    try:
        entries = [entry.path for entry in os.scandir(directory) if entry.name != LOCK_NAME]
    except OSError:
        return directory
    return max(entries, key=os.path.getmtime, default=directory)


# torch.save reports a full disk as a mere short write ("unexpected pos ..."), so a failure that left
# the output directory's file system with less than this free is taken as a full disk too.
EXHAUSTED_BYTES = 1 << 20


def _space_exhausted(directory: str) -> bool:
    try:
        return shutil.disk_usage(directory).free < EXHAUSTED_BYTES
    except OSError:
        return False


# What an export writes besides the weights and the files it copies from a checkpoint: cse_config.json,
# the sentence-transformers module files, the model card and the final results (a few KiB each).
_EXPORT_SMALL_FILES = 256 << 10
# A checkpoint's files that are the Trainer's state, not the model's: the export writes none of them.
_TRAINER_STATE_FILES = re.compile(
    r"^(optimizer\.pt|scheduler\.pt|scaler\.pt|rng_state(_\d+)?\.pth|training_args\.bin)$"
)


def export_size(checkpoint: str) -> int:
    """About how many bytes the export of the model that ``checkpoint`` holds takes: the tensors of its
    ``model.safetensors`` but those of a copy of the backbone (a momentum or a fixed encoder, which
    only training uses), the backbone's pooling layer once more (sentence-transformers' ``2_Dense``),
    the tokenizer and configuration files beside them, and a few small files. Read from the
    safetensors header and the file sizes, without loading anything."""
    shapes = {}
    with safe_open(os.path.join(checkpoint, SAFE_WEIGHTS_NAME), framework="pt") as f:
        for key in f.keys():
            tensor = f.get_slice(key)
            shapes[key] = (tuple(tensor.get_shape()), tensor.get_dtype())
    groups = {}
    for key, shape in shapes.items():
        prefix, _, rest = key.partition(".")
        groups.setdefault(prefix, {})[rest] = shape
    backbone = groups.get("backbone", {})
    copies = {g for g, keys in groups.items() if g != "backbone" and keys and keys.items() <= backbone.items()}
    exported = [shape for group, keys in groups.items() if group not in copies for shape in keys.values()]
    exported += [shape for rest, shape in backbone.items() if rest.startswith("pooler.dense.")]
    size = sum(math.prod(dims) * _DTYPE_BYTES.get(dtype, 4) for dims, dtype in exported)
    for entry in os.scandir(checkpoint):
        state = entry.name.endswith(".safetensors") or _TRAINER_STATE_FILES.match(entry.name)
        if entry.is_file() and not state and entry.name != TRAINER_STATE_NAME:
            size += entry.stat().st_size
    return size + _EXPORT_SMALL_FILES


_DTYPE_BYTES = {"F64": 8, "I64": 8, "F32": 4, "I32": 4, "F16": 2, "BF16": 2, "I16": 2, "U8": 1, "I8": 1, "BOOL": 1}


def _tensor_bytes(tensors) -> int:
    """The bytes of ``tensors``, each storage once (tied weights are saved once)."""
    seen, size = set(), 0
    for tensor in tensors:
        key = (tensor.device, tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tensor.shape)
        if key not in seen:
            seen.add(key)
            size += tensor.numel() * tensor.element_size()
    return size


def _tokenizer_bytes(tokenizer) -> int:
    """The size of the files of ``tokenizer`` where it was read from a local directory (each checkpoint
    and the export save them again), else 0."""
    directory = getattr(tokenizer, "name_or_path", "")
    if not os.path.isdir(directory):
        return 0
    names = {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"}
    names.update(tokenizer.vocab_files_names.values())
    paths = [os.path.join(directory, name) for name in names]
    return sum(os.path.getsize(path) for path in paths if os.path.isfile(path))


def _saves(args, steps: int) -> int:
    """How many checkpoints a run of ``steps`` steps saves at least: every ``--save_steps`` (a fraction:
    of the run's steps); one for ``best`` (the first evaluation is an improvement) and ``epoch``."""
    strategy = str(getattr(args.save_strategy, "value", args.save_strategy))
    if strategy == "steps":
        every = math.ceil(steps * args.save_steps) if args.save_steps < 1 else int(args.save_steps)
        return steps // max(every, 1)
    if strategy == "best":
        return int(str(getattr(args.eval_strategy, "value", args.eval_strategy)) != "no")
    return int(strategy == "epoch")


def disk_need(model, args, steps: int) -> tuple[int, str]:
    """A lower bound of the bytes a run of ``model`` for ``steps`` steps writes into its output
    directory at its fullest, and how it is made up, in words. A checkpoint holds the model's weights,
    AdamW's two moments of each trainable weight (unless ``--save_only_model``) and the tokenizer's
    files; the Trainer writes a new checkpoint before it deletes those beyond ``--save_total_limit``,
    so ``limit + 1`` of them are there at once (all, without a limit); the export (the backbone's
    weights and the tokenizer's files) is written while ``limit`` of them are kept. Left out, so that
    the bound stays below what is written: the parts' own state files, the scheduler's, RNG and
    Trainer state files, the results and the model card (a few KiB each)."""
    weights = _tensor_bytes(model.state_dict().values())
    trainable = [p for p in model.parameters() if p.requires_grad]
    adam = "adam" in str(getattr(args.optim, "value", args.optim)) and not args.save_only_model
    moments = 2 * _tensor_bytes(trainable) if adam else 0
    tokenizer = _tokenizer_bytes(model.tokenizer)
    checkpoint = weights + moments + tokenizer
    export = _tensor_bytes(model.backbone.state_dict().values()) + tokenizer
    saves = _saves(args, steps)
    limit = args.save_total_limit
    at_once = saves if limit is None else min(saves, limit + 1)
    kept = saves if limit is None else min(saves, limit)
    need = max(at_once * checkpoint, kept * checkpoint + export)
    if not saves:  # --save_strategy no: the export alone
        return need, f"the export, {human_size(export)}; no checkpoint"
    words = (
        f"{at_once} checkpoint(s) of {human_size(checkpoint)} at once"
        + (f" (--save_total_limit {limit})" if limit is not None and saves > limit else "")
        + f" and the export, {human_size(export)}"
    )
    return need, words


def check_free_space(model, args, steps: int) -> None:
    """Refuse, before training, a run whose output directory's file system has less free space than
    the run writes at least (:func:`disk_need`), less what its checkpoints there already take (a
    resumed run's, which the new ones replace): it would stop with a full disk, at the latest after
    training, in its export."""
    need, words = disk_need(model, args, steps)
    output_dir = args.output_dir
    # another node's output directory need not exist: only the main process creates it
    existing = sum(map(_tree_size, checkpoints_newest_first(output_dir))) if os.path.isdir(output_dir) else 0
    missing = need - existing
    free = shutil.disk_usage(nearest_existing(args.output_dir)).free
    if free < missing:
        # fewer checkpoints help only where more than one would be kept at once
        limit = args.save_total_limit
        fewer = _saves(args, steps) > 1 and (limit is None or limit > 1)
        raise CSEUsageError(
            f"{args.output_dir} needs at least {human_size(missing)} for this run ({words}), and its file system "
            f"has {human_size(free)} free",
            hint=f"free at least {human_size(missing - free)} on that file system"
            + (
                ", choose an --output_dir with more space, or keep fewer checkpoints (--save_total_limit 1)"
                if fewer
                else ", or choose an --output_dir with more space"
            ),
        )


def _in_tail(checkpoint: str | None) -> bool:
    """Whether training has ended: the Trainer said so, or (a run completing its end without training)
    the newest checkpoint was saved at the last step."""
    if PROGRESS.trained:
        return True
    if PROGRESS.step is not None or checkpoint is None:
        return False
    with contextlib.suppress(OSError, ValueError, KeyError):
        return training_ended(checkpoint)
    return False


def disk_full_error(output_dir: str, err: BaseException, args) -> CSEUsageError:
    """The refusal of a run stopped by a full disk: what it was writing and how much of it was written,
    the free space, and what the same command needs to go on: during training, the size of a complete
    checkpoint of this run (what resuming writes next); once training has ended, the size of the
    export (:func:`export_size`), which is what completing the run writes. ``args``: the run's
    training arguments."""
    named = next((cause.filename for cause in exception_chain(err) if getattr(cause, "filename", None)), None)
    target = named if named is not None else _newest_entry(output_dir)
    if target.endswith(TMP_SUFFIX) and not os.path.exists(target):
        # an atomic write (cse.atomic): its temporary copy is gone, the file it replaces untouched
        target, written = target[: -len(TMP_SUFFIX)], "its partial copy removed"
    else:
        written = f"{human_size(_tree_size(target))} of it written"
    message = f"no space left on device writing {target} ({written}; {free_space(target)})"
    checkpoint = newest_complete_checkpoint(output_dir, args)
    inside = checkpoint is not None and os.path.abspath(target).startswith(os.path.abspath(checkpoint) + os.sep)
    if checkpoint is not None and not inside and _in_tail(checkpoint):
        size = human_size(export_size(checkpoint))
        message += f"; training has ended, and the export of its model takes about {size}"
        hint = (
            f"free at least {size} on the file system of {output_dir} and rerun the same command: it completes "
            f"the run from {checkpoint}"
        )
    elif checkpoint is not None and not inside and os.path.abspath(checkpoint) != os.path.abspath(target):
        size = human_size(_tree_size(checkpoint))
        message += f"; a complete checkpoint of this run, {checkpoint}, takes {size}"
        hint = (
            f"free at least {size} on the file system of {output_dir} and rerun the same command: it resumes "
            f"from {checkpoint}"
        )
    elif checkpoint is None:
        hint = (
            f"free space on the file system of {output_dir} and rerun the same command: no checkpoint of this run is "
            "complete, so it trains from the start"
        )
    else:
        hint = OS_ERROR_HINTS[errno.ENOSPC]
    return CSEUsageError(message + "; nothing complete was deleted", hint=hint)


def interruption_error(signum: int, output_dir: str, writing: str | None = None) -> RunInterrupted:
    """The refusal of a run in ``output_dir`` stopped by ``signum``: the step :data:`PROGRESS` has seen
    (else the step of the checkpoint a finished training left) and the newest complete checkpoint,
    the torn one being ``writing`` left out."""
    name = signal.Signals(signum).name
    checkpoint = newest_complete_checkpoint(output_dir, PROGRESS.args, skip=writing)
    step = PROGRESS.step
    if step is None and checkpoint is not None:
        with contextlib.suppress(OSError, ValueError, KeyError):
            step = trainer_state(checkpoint)["global_step"]
    where = "before training started" if step is None else f"at step {step}"
    torn = f" ({writing} was being written and is incomplete)" if writing else ""
    if checkpoint is None:
        return RunInterrupted(
            f"{name} stopped the run {where}; no checkpoint saved yet{torn}",
            hint="rerun the same command to start it again",
            signum=signum,
        )
    return RunInterrupted(
        f"{name} stopped the run {where}; the newest complete checkpoint is {checkpoint}{torn}",
        hint="rerun the same command to resume",
        signum=signum,
    )


def _remove_empty(directory: str, existing: str) -> None:
    """Remove the absolute path ``directory`` and its parents below ``existing`` (the nearest that
    existed before the run created the rest) while they are empty; a directory removed or filled
    meanwhile ends the walk."""
    path = directory
    with contextlib.suppress(OSError):
        while path != existing and not os.listdir(path):
            os.rmdir(path)
            path = os.path.dirname(path)


def _file_identity(path: str):
    """(inode, modification time) of the file ``path``, or None where there is none."""
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return stat.st_ino, stat.st_mtime_ns


@contextlib.contextmanager
def refusal_leaves_nothing(training_args):
    """Undo what the run writes into ``output_dir`` before its checks have all passed (SG-BERT's
    corpus, ``stsb_sentences.txt``, which the checks read), when the block ends in a refusal (or
    any other error) before the run recorded itself (its ``run_args.json`` not written meanwhile):
    the file is removed if this run created it, and so are the directories the run created, left
    empty. A corpus that was there before (a stopped run's) is kept."""
    output_dir = os.path.abspath(training_args.output_dir)
    existing = nearest_existing(output_dir)
    corpus = os.path.join(output_dir, STSB_CORPUS_NAME)
    had_corpus = os.path.lexists(corpus)
    record = _file_identity(os.path.join(output_dir, RUN_ARGS_NAME))
    try:
        yield
    except BaseException:  # a refusal, or any other end before the run recorded itself: the corpus is derived
        if training_args.local_process_index == 0 and _file_identity(os.path.join(output_dir, RUN_ARGS_NAME)) == record:
            if not had_corpus:
                with contextlib.suppress(FileNotFoundError):
                    os.remove(corpus)
            _remove_empty(output_dir, existing)
        raise


@contextlib.contextmanager
def output_dir_lock(training_args):
    """Hold ``output_dir`` for this run until the block exits; refuse at once (``CSEUsageError``)
    when another run holds it.

    The lock is a ``filelock.SoftFileLock`` marker, ``output_dir/.cse_run.lock``, naming its
    holder's PID and host: it works on shared filesystems without OS lock support, and a marker
    left on this host by a process that is gone is taken over (with a warning). Only the global
    main process takes it, without waiting, and tells the others whether to go on, so no process
    ever blocks on the file, whatever the number of nodes.

    Within the block, SIGINT and SIGTERM stop the process at once (:func:`_stop_on_signals`), the
    lock released, with :func:`interruption_error`'s line (printed by the main process only; the others
    exit with the same status). A single process that is writing a checkpoint says so and finishes it
    first (a second signal stops it at once); with several, whose peers stop at once, it does not wait.
    A full disk ends the run with :func:`disk_full_error`; the lock is released either way."""
    output_dir = training_args.output_dir
    lock, refusal, hint, existing = None, None, None, None
    PROGRESS.reset()
    if training_args.process_index == 0:
        path = os.path.join(output_dir, LOCK_NAME)
        existing = nearest_existing(output_dir)
        os.makedirs(output_dir, exist_ok=True)
        previous = _lock_holder(path)
        # not thread-local: the signal watcher releases it
        lock = filelock.SoftFileLock(path, timeout=0, thread_local=False)
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

    def stop(signum: int, wake_fd: int) -> None:
        try:
            writing = PROGRESS.writing() if training_args.world_size == 1 else None
            if writing is not None:
                PROGRESS.stopping = True
                _say(
                    f"{signal.Signals(signum).name}: finishing the checkpoint being written, {writing}, before "
                    "stopping (a second signal stops at once)"
                )
                if PROGRESS.checkpoint == writing or _wait_until(PROGRESS.saved, wake_fd):
                    writing = None
            if training_args.process_index == 0:
                _say(f"error: {interruption_error(signum, output_dir, writing)}")
            if lock is not None:
                lock.release()
                _remove_empty(os.path.abspath(output_dir), existing)
            logging.shutdown()
            sys.stdout.flush()
        finally:
            # at once: the interpreter's own shutdown (its threads, caches and modules) takes seconds
            os._exit(128 + signum)

    try:
        with _stop_on_signals(stop):
            yield
    except CSEUsageError:
        raise
    except Exception as err:
        if is_disk_full(err) or _space_exhausted(output_dir):
            raise disk_full_error(output_dir, err, training_args) from err
        raise
    finally:
        if lock is not None:
            lock.release()
            # a run refused before writing anything leaves no trace
            _remove_empty(os.path.abspath(output_dir), existing)


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
