"""Resuming a run: where from, and refusing to resume what would silently change the result.

An interrupted run leaves ``checkpoint-*`` folders and ``run_args.json`` (its settings) in
``output_dir``; starting the same command again resumes from the last checkpoint (one at the last
step trains nothing more and completes the run's tail: :func:`cse.pipeline.finish_run`). A finished
run (``cse_config.json``, written last) or an interrupted one with other settings is refused with a
message rather than continued.
"""

from __future__ import annotations

import glob
import json
import logging
import os
import re

from safetensors import SafetensorError, safe_open
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, IntervalStrategy
from transformers.utils import SAFE_WEIGHTS_INDEX_NAME, SAFE_WEIGHTS_NAME, WEIGHTS_NAME

from .atomic import write_json
from .environment import collect_environment
from .errors import CSEUsageError
from .file_checks import CHECKED_SUFFIXES, load_mapping, unreadable
from .parts_state import state_files
from .run import Run
from .run_dir import checkpoint_marked, is_run_checkpoint, run_format
from .run_names import (
    CHECKPOINT_MARKER_NAME,
    CSE_CONFIG_NAME,
    INCOMPLETE_NAME,
    LEGACY_FORMAT,
    RUN_ARGS_NAME,
    TRAINER_STATE_NAME,
    WRITTEN_BY,
    WRITTEN_BY_KEY,
)

logger = logging.getLogger(__name__)

_CHECKPOINT_STEP = re.compile(rf"^{PREFIX_CHECKPOINT_DIR}-(\d+)$")


def checkpoint_problem(checkpoint: str, training_args, method_files=()) -> str | None:
    """What keeps ``checkpoint`` from restoring a run exactly, or None when it is complete: the
    Trainer's state, the model weights, the optimizer and scheduler, every process's RNG state (not
    with ``--save_only_model``), the parts' state files ``method_files`` (in a checkpoint written
    before :data:`~cse.parts_state.PARTS_STATE_NAME`, those it holds instead), and any other weight
    or state file present must be readable (:func:`cse.file_checks.unreadable`)."""
    required = [TRAINER_STATE_NAME, *(state_files(checkpoint) or method_files)]
    deepspeed_tag = os.path.join(checkpoint, "latest")
    if os.path.isfile(deepspeed_tag):  # DeepSpeed: weights, optimizer and its scheduler in the engine's folder
        with open(deepspeed_tag, encoding="utf-8") as f:
            engine_dir = os.path.join(checkpoint, f.read().strip())
        if not glob.glob(os.path.join(engine_dir, "*model_states.pt")):
            return f"the DeepSpeed state {engine_dir} is missing"
    elif glob.glob(os.path.join(checkpoint, "pytorch_model_fsdp*")):
        pass  # FSDP's own layout: its files are checked as present below
    else:
        if os.path.isfile(os.path.join(checkpoint, SAFE_WEIGHTS_INDEX_NAME)):
            with open(os.path.join(checkpoint, SAFE_WEIGHTS_INDEX_NAME), encoding="utf-8") as f:
                try:
                    required += sorted(set(json.load(f)["weight_map"].values()))
                except (ValueError, KeyError) as error:
                    return f"{SAFE_WEIGHTS_INDEX_NAME} is unreadable ({error})"
        elif not os.path.isfile(os.path.join(checkpoint, WEIGHTS_NAME)):
            required.append(SAFE_WEIGHTS_NAME)
        if not training_args.save_only_model:
            required += ["optimizer.pt", "scheduler.pt"]
    if not training_args.save_only_model:
        world_size = training_args.world_size
        required += ["rng_state.pth"] if world_size <= 1 else [f"rng_state_{i}.pth" for i in range(world_size)]
    present = [
        os.path.relpath(path, checkpoint)
        for path in glob.glob(os.path.join(checkpoint, "**", "*"), recursive=True)
        if path.endswith(CHECKED_SUFFIXES)
    ]
    for name in dict.fromkeys([*required, *sorted(present)]):
        problem = unreadable(os.path.join(checkpoint, name))
        if problem is not None:
            return f"{name} is {problem}"
    return None


def trainer_state(checkpoint: str) -> dict:
    """The Trainer's state saved in ``checkpoint`` (its ``trainer_state.json``, parsed): ``OSError``
    when it cannot be read, ``ValueError`` when it is not JSON."""
    with open(os.path.join(checkpoint, TRAINER_STATE_NAME), encoding="utf-8") as f:
        return json.load(f)


def training_ended(checkpoint: str) -> bool:
    """Whether ``checkpoint`` was saved at the run's last step (its ``trainer_state.json``)."""
    state = trainer_state(checkpoint)
    return state["global_step"] >= state["max_steps"]


def checkpoints_newest_first(output_dir: str) -> list[str]:
    """The checkpoint folders of this package's run in ``output_dir`` (:func:`cse.run_dir.is_run_checkpoint`;
    in a run of an earlier version, also those holding only a checkpoint's files), newest first."""
    legacy = run_format(output_dir) == LEGACY_FORMAT
    steps = {}
    for name in os.listdir(output_dir):
        match = _CHECKPOINT_STEP.match(name)
        if match and is_run_checkpoint(os.path.join(output_dir, name), legacy):
            steps[os.path.join(output_dir, name)] = int(match.group(1))
    return sorted(steps, key=steps.get, reverse=True)


def set_aside(checkpoint: str) -> str:
    """Move the torn ``checkpoint`` into ``OUTPUT_DIR/_incomplete_checkpoints/``, out of the Trainer's
    way: the run writes that step's checkpoint afresh, and the Trainer's rotation, which counts every
    ``checkpoint-*`` folder, never takes it for a saved one. Nothing there is replaced: a name already
    taken (an earlier torn copy of the same step) gives ``checkpoint-<step>.2``, ``.3``, ... Returns
    where it went."""
    root = os.path.join(os.path.dirname(os.path.abspath(checkpoint)), INCOMPLETE_NAME)
    os.makedirs(root, exist_ok=True)
    name, copy = os.path.basename(checkpoint), 1
    target = os.path.join(root, name)
    while os.path.lexists(target):
        copy += 1
        target = os.path.join(root, f"{name}.{copy}")
    # rename, not replace: nothing else writes there while the run holds its directory
    os.rename(checkpoint, target)
    return target


def newest_complete_checkpoint(
    output_dir: str, args=None, method_files=(), skip: str | None = None, torn: list | None = None
) -> str | None:
    """The newest checkpoint in ``output_dir`` that :func:`checkpoint_problem` finds complete
    (``args``: the run's training arguments, for the RNG files of each process; None: every
    checkpoint folder counts; ``method_files``: the method's state files), ``skip`` left out; None
    when there is none, or no ``output_dir``. ``torn``: a list that receives ``(checkpoint, problem)``
    for each newer one found incomplete. The directory is read, not remembered: the Trainer may have
    deleted the checkpoint it last saved (``--save_total_limit``)."""
    if not os.path.isdir(output_dir):
        return None
    for checkpoint in checkpoints_newest_first(output_dir):
        if checkpoint == skip:
            continue
        problem = None if args is None else checkpoint_problem(checkpoint, args, method_files)
        if problem is None:
            return checkpoint
        if torn is not None:
            torn.append((checkpoint, problem))
    return None


def last_complete_checkpoint(output_dir: str, training_args, method_files=(), move_torn: bool = False) -> str | None:
    """The newest checkpoint in ``output_dir`` that :func:`checkpoint_problem` finds complete
    (:func:`newest_complete_checkpoint`), each newer one skipped with a warning (a run killed while
    writing it: resuming from the one before recomputes the same steps); None when ``output_dir``
    holds no complete checkpoint: one warning when it holds torn ones only (a run killed while writing
    its first checkpoint), and the run starts over from step 0. ``move_torn`` (the main process of a
    run): each torn one is moved aside (:func:`set_aside`)."""
    incomplete = []
    found = newest_complete_checkpoint(output_dir, training_args, method_files, torn=incomplete)
    report_torn(output_dir, found, incomplete, move_torn)
    return found


def report_torn(output_dir: str, found: str | None, incomplete: list, move_torn: bool) -> None:
    """Warn of the torn checkpoints ``incomplete`` (``(checkpoint, problem)``, newer than ``found``,
    the complete one a run resumes from, or all of them when it is None) and, with ``move_torn``, set
    each aside (:func:`set_aside`)."""
    torn = [(checkpoint, problem, set_aside(checkpoint) if move_torn else None) for checkpoint, problem in incomplete]
    if found is not None:
        for checkpoint, problem, moved in torn:
            logger.warning(
                "skipping the incomplete checkpoint %s: %s%s",
                checkpoint,
                problem,
                f"; moved to {moved}" if moved else "",
            )
    elif torn:
        moved = f"; moved to {os.path.dirname(torn[0][2])}" if torn[0][2] else ""
        logger.warning(
            "%s holds no complete checkpoint (%s: a run stopped while writing its first checkpoint%s): training "
            "starts over from step 0",
            output_dir,
            "; ".join(f"{checkpoint} is incomplete, {problem}" for checkpoint, problem, _ in torn),
            moved,
        )


# Groups recorded since a later version: a run_args.json written before them is not compared on them.
_LATER_GROUPS = ("run", "corpus")


def changed_settings(saved: dict, current: dict) -> list[str]:
    """``group.key: old -> new`` for every setting that differs between a saved run's settings and
    this run's, either side's groups and keys (a setting only the saved run had differs too; a
    composition's part arguments key by key, ``method.mixcse.variant``), the ``environment`` left out."""
    groups = [*(g for g in saved if g not in ("environment", WRITTEN_BY_KEY)), *(g for g in current if g not in saved)]
    return [
        change
        for group in groups
        if not (group in _LATER_GROUPS and group not in saved)
        for change in _changes(group, saved.get(group, {}), current.get(group, {}))
    ]


def _changes(path: str, before: dict, now: dict) -> list[str]:
    changes = []
    for key in [*now, *(k for k in before if k not in now)]:
        old, new = before.get(key), now.get(key)
        if isinstance(old, dict) and isinstance(new, dict):
            changes += _changes(f"{path}.{key}", old, new)
        elif old != new:
            changes.append(f"{path}.{key}: {old!r} -> {new!r}")
    return changes


def describe_changes(changed: list[str], most: int = 4) -> str:
    """The first ``most`` differences, and how many more there are."""
    more = f"; and {len(changed) - most} more" if len(changed) > most else ""
    return "; ".join(changed[:most]) + more


def read_settings(path: str) -> dict:
    """The settings a run recorded in its ``run_args.json`` at ``path``; a file that is not such a
    record (damaged, edited by hand) is refused in one line."""
    return load_mapping(path, "the run's settings", hint=_UNREADABLE_SETTINGS.format(directory=os.path.dirname(path)))


_UNREADABLE_SETTINGS = (
    "the run that wrote it cannot be checked or resumed: restore the file, or start over in a new --output_dir "
    "(or delete {directory})"
)


def saved_method(run_dir: str) -> str | None:
    """The method (or composition) that the run in ``run_dir`` recorded, if it recorded one."""
    if run_format(run_dir) is None:  # no run of this package's (a run_args.json of another tool's)
        return None
    return read_settings(os.path.join(run_dir, RUN_ARGS_NAME)).get("run", {}).get("method")


def refuse_output_dir(run: Run, current: dict, method_files=()) -> None:
    """Refuse the output directory of a run that names no checkpoint when it holds a finished run, or
    an interrupted run whose settings differ from ``current`` (:func:`changed_settings`); a
    ``current`` without the corpus' counts (not yet read) is compared without them. ``method_files``:
    as :func:`find_checkpoint`'s, for the checkpoint the hint names."""
    training_args, output_dir, method = run.training_args, run.output_dir, run.record.name
    if os.path.exists(os.path.join(output_dir, CSE_CONFIG_NAME)):
        raise CSEUsageError(
            f"{output_dir} holds a finished run",
            hint="choose another --output_dir, delete it, or pass --resume_from_checkpoint explicitly",
        )
    # The settings first: a run of another method expects other state files, and would call the
    # other run's checkpoints incomplete rather than say what differs.
    saved_path = os.path.join(output_dir, RUN_ARGS_NAME)
    checkpoints = checkpoints_newest_first(output_dir)
    # An interrupted run is compared whether or not it left a checkpoint: one stopped before its
    # first is still a run of those settings, which another command would replace.
    if os.path.isfile(saved_path) and (checkpoints or run_format(output_dir) is not None):
        saved = read_settings(saved_path)
        if "corpus" not in current:
            saved = {group: values for group, values in saved.items() if group != "corpus"}
        changed = changed_settings(saved, current)
        if changed:
            other = saved.get("run", {}).get("method")
            if not checkpoints:
                hint = "use another --output_dir, or delete it to start over with these settings"
            elif other in (None, method):
                complete = newest_complete_checkpoint(output_dir, training_args, method_files) or checkpoints[0]
                hint = f"use another --output_dir, or pass --resume_from_checkpoint {complete} to continue it anyway"
            else:
                hint = f"use another --output_dir: it is a run of {other}, which this command cannot continue"
            raise CSEUsageError(
                f"{output_dir} holds an interrupted run with other settings ({describe_changes(changed)})",
                hint=hint,
            )


def find_checkpoint(run: Run, method_files=(), corpus=None, check=None) -> str | None:
    """The checkpoint to resume ``run`` from: ``--resume_from_checkpoint`` if given, else the last
    complete one an interrupted run left in its output directory (:func:`newest_complete_checkpoint`;
    ``method_files``: the state files the method adds to each checkpoint). Refuses, rather than
    guessing, when the directory holds a finished run or a run with other settings (the run's
    :attr:`~cse.run.Run.settings` and ``corpus``, the corpus' statistics; the method's name and the
    corpus are compared when the saved settings record them, as files written before they were
    recorded do not); ``check``: the caller's own refusals of the checkpoint found (or None), called
    after these.

    Nothing is written before every check has passed; then the run is recorded (:func:`record_run`):
    this run's settings, with its ``environment`` (:func:`cse.environment.collect_environment`), which
    the comparison leaves out (a resume may run on other versions or from a modified checkout), and
    the torn checkpoints set aside (:func:`report_torn`)."""
    training_args, output_dir, method = run.training_args, run.output_dir, run.record.name
    current = run.with_corpus(corpus)
    checkpoint, torn = training_args.resume_from_checkpoint, []
    if checkpoint is not None and os.path.isdir(checkpoint):
        # First: another method's checkpoint can hold the same weights (V-advCSE's and MixCSE +
        # V-advCSE's) but not the same state files or loss, and its run recorded which method it was.
        other = saved_method(os.path.dirname(os.path.abspath(checkpoint)))
        if other is not None and other != method:
            raise CSEUsageError(
                f"--resume_from_checkpoint {checkpoint} is a checkpoint of {other}, not of {method}",
                hint=f"resume it with {other}'s command, or name a checkpoint of a {method} run",
            )
        problem = checkpoint_problem(checkpoint, training_args, method_files)
        if problem is not None:
            raise CSEUsageError(
                f"--resume_from_checkpoint {checkpoint} is incomplete: {problem}",
                hint="name a complete checkpoint, or leave the flag out to resume from the last complete one",
            )
    if checkpoint is None and os.path.isdir(output_dir):
        refuse_output_dir(run, current, method_files)
        checkpoint = newest_complete_checkpoint(output_dir, training_args, method_files, torn=torn)
    if checkpoint is not None and training_args.load_best_model_at_end and os.path.isdir(checkpoint):
        # Found now rather than after training: the Trainer would end by exporting the last model instead.
        best = trainer_state(checkpoint).get("best_model_checkpoint")
        problem = best and (checkpoint_problem(best, training_args, method_files) if os.path.isdir(best) else "missing")
        if problem:
            raise CSEUsageError(
                f"{checkpoint} records {best} as the best checkpoint so far, but it is incomplete ({problem})",
                hint="the best model cannot be recovered: train again into another --output_dir",
            )
    if check is not None:
        check(checkpoint)
    record_run(run, current, checkpoint, torn)
    if checkpoint is not None and not training_args.resume_from_checkpoint:
        logger.warning("resuming from %s, left in the output directory by an interrupted run", checkpoint)
    return checkpoint


def record_run(run: Run, settings: dict, found: str | None, torn: list) -> None:
    """What a run writes once every check has passed, by the main process: in a run of an earlier
    version, the checkpoint marker into each of its checkpoints (they stay the run's once its
    ``run_args.json`` records the run format); then ``run_args.json``, marked by this package
    (:data:`cse.run_names.WRITTEN_BY`), with the run's ``settings`` and environment; then the torn
    checkpoints ``torn`` set aside (newer than ``found``; :func:`report_torn`)."""
    training_args, output_dir = run.training_args, run.output_dir
    if not training_args.should_save:
        report_torn(output_dir, found, torn, move_torn=False)
        return
    os.makedirs(output_dir, exist_ok=True)
    if run_format(output_dir) == LEGACY_FORMAT:
        for checkpoint in checkpoints_newest_first(output_dir):
            if not checkpoint_marked(checkpoint):
                write_json(os.path.join(checkpoint, CHECKPOINT_MARKER_NAME), WRITTEN_BY)
    # Atomic: other processes may be reading the previous copy.
    write_json(
        os.path.join(output_dir, RUN_ARGS_NAME),
        {WRITTEN_BY_KEY: WRITTEN_BY, **settings, "environment": collect_environment(training_args)},
    )
    report_torn(output_dir, found, torn, move_torn=True)


def check_best_model_loaded(trainer) -> None:
    """``load_best_model_at_end`` only warns when the best checkpoint or its weights have gone missing;
    exporting the last model as if it were the best would be worse than stopping. A run with fewer
    than two dev evaluations selected nothing: warned (:func:`model_selection`)."""
    args, best = trainer.args, trainer.state.best_model_checkpoint
    if not args.load_best_model_at_end:
        return
    if best is None or len(dev_evaluations(trainer)) < 2:
        logger.warning("%s (the model card says so)", model_selection(trainer))
    if best is None:
        return
    if not os.path.isdir(best):
        raise FileNotFoundError(
            f"the best checkpoint {best} is missing, so the model in memory is the last one: nothing exported"
        )
    else:
        problem = checkpoint_problem(best, args, trainer.checkpoint_files())
        if problem is not None:
            raise CSEUsageError(
                f"the best checkpoint {best} is incomplete ({problem}): nothing exported",
                hint="the best model cannot be recovered: train again into another --output_dir",
            )


def dev_evaluations(trainer) -> list[int]:
    """The steps at which the run scored the dev sets by ``--metric_for_best_model`` (a resumed run's included)."""
    metric = trainer.args.metric_for_best_model or "loss"
    key = metric if metric.startswith("eval_") else f"eval_{metric}"
    return [entry["step"] for entry in trainer.state.log_history if key in entry]


def model_selection(trainer) -> str:
    """Which weights a finished run exports, in a sentence for the log and the model card. The
    Trainer also evaluates the last step, so a run shorter than ``--eval_steps`` "selects" its last
    weights from a single evaluation: that is said as plainly as no evaluation at all."""
    args, state = trainer.args, trainer.state
    last = state.global_step
    if not args.load_best_model_at_end:
        return f"the exported weights are the last step's (step {last}): no best-checkpoint selection"
    evaluations = dev_evaluations(trainer)
    if state.best_model_checkpoint is None or len(evaluations) < 2:
        strategy = IntervalStrategy(args.eval_strategy)
        schedule = f"every {state.eval_steps} steps" if strategy == IntervalStrategy.STEPS else f"each {strategy.value}"
        ran = f"a single dev evaluation, at step {evaluations[0]}" if evaluations else "no dev evaluation"
        step = evaluations[0] if evaluations and state.best_model_checkpoint else last
        return (
            f"training ended at step {last} with {ran} (scheduled {schedule}), so no checkpoint was selected: "
            f"the exported weights are step {step}'s" + (", the last step" if step == last else "")
        )
    return (
        f"the exported weights are the best of {len(evaluations)} dev evaluations, "
        f"{os.path.basename(state.best_model_checkpoint)}, by {args.metric_for_best_model} ({state.best_metric:.4f})"
    )


def check_checkpoint_matches(model, checkpoint: str) -> None:
    """The Trainer loads checkpoint weights non-strictly: refuse one saved by another model layout
    (another variant or ablation flag) instead of silently dropping or missing some of its weights."""
    path = os.path.join(checkpoint, SAFE_WEIGHTS_NAME)
    if not os.path.isfile(path):
        return  # not ours to judge (sharded or DeepSpeed checkpoints): the Trainer reports those
    try:
        with safe_open(path, framework="pt") as f:
            saved = {key: tuple(f.get_slice(key).get_shape()) for key in f.keys()}
    except SafetensorError:
        return  # torn: find_checkpoint calls the checkpoint incomplete, naming the file
    current = {key: tuple(t.shape) for key, t in model.state_dict().items()}
    differ = sorted(set(saved) ^ set(current)) + sorted(k for k in set(saved) & set(current) if saved[k] != current[k])
    if differ:
        raise CSEUsageError(
            f"{checkpoint} was saved by a different model (another --variant, ablation flag or method): "
            f"{len(differ)} weight(s) missing, extra or reshaped, first {', '.join(differ[:3])}",
            hint="resume with the command that saved it, or name a checkpoint of this run",
        )


def resolve_checkpoint(trainer, resume_from_checkpoint) -> str | None:
    """What ``trainer.train(resume_from_checkpoint=...)`` will load, for trainers that restore their
    own state first: ``True`` is the last complete checkpoint in ``output_dir``; a checkpoint of another model
    layout is refused (:func:`check_checkpoint_matches`)."""
    if resume_from_checkpoint is True:
        output_dir = trainer.args.output_dir
        resume_from_checkpoint = (
            last_complete_checkpoint(output_dir, trainer.args, trainer.checkpoint_files())
            if os.path.isdir(output_dir)
            else None
        )
        if resume_from_checkpoint is None:
            raise ValueError(f"no checkpoint to resume from in {output_dir}")
    if not resume_from_checkpoint:
        return None
    if not os.path.isdir(resume_from_checkpoint):
        raise FileNotFoundError(f"no checkpoint to resume from at {resume_from_checkpoint}")
    check_checkpoint_matches(trainer.accelerator.unwrap_model(trainer.model), resume_from_checkpoint)
    return resume_from_checkpoint
