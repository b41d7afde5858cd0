"""What makes a directory a run of this package, and a checkpoint folder one of its runs', and the
refusal of an ``--output_dir`` that holds anything else: a run never writes into, moves or rotates
away what it did not write itself (its model card, ``README.md`` and ``config.json`` would replace a
user's; the Trainer writes into and deletes ``checkpoint-*`` folders).

* A directory is a run's when its ``run_args.json`` says so: the package's name and the run
  format under :data:`WRITTEN_BY_KEY` (:func:`run_format`), which a run writes as its first file,
  once every check has passed; or, for runs of the versions before that key, the exact layout those
  versions gave the file (:func:`legacy_run_args`). A file of that name is never enough.
* A checkpoint folder is the run's when it is a real folder ``checkpoint-<step>`` that holds
  :data:`CHECKPOINT_MARKER_NAME`, which the run puts there before the checkpoint's first file (the
  folder appears with it: :func:`begin_checkpoint`), so that a torn one is still recognised; in a
  run of an earlier version, one that holds nothing but a checkpoint's files
  (:func:`legacy_checkpoint`).
* Before its ``run_args.json`` a run writes only its lock, SG-BERT's sentence corpus and the
  temporary copy of ``run_args.json``; a launcher writes its logs (``_logs/``: the table scripts'
  driver). A directory holding only those (and checkpoints of this package) is a new run's.
* An interrupted run's directory holds only what the run writes (:func:`_written_by_run`): among
  them the files its export moved into place, which the list :data:`EXPORT_NAMES` and the names left
  in the staging folder tell (:func:`_exported`); a user's file put there is refused."""

from __future__ import annotations

import json
import os
import re
import tempfile

from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from .atomic import write_json
from .errors import CSEUsageError
from .run_names import (
    ALL_RESULTS_NAME,
    CHECKPOINT_MARKER_NAME,
    CSE_CONFIG_NAME,
    EXPORT_NAMES,
    INCOMPLETE_NAME,
    LAUNCHER_LOGS_NAME,
    LEGACY_FORMAT,
    LOCK_NAME,
    PACKAGE,
    RUN_ARGS_NAME,
    RUN_FORMAT,
    STAGING_NAME,
    STSB_CORPUS_NAME,
    TMP_SUFFIX,
    TRAIN_RESULTS_NAME,
    TRAINER_STATE_NAME,
    WRITTEN_BY,
    WRITTEN_BY_KEY,
)

_BEFORE_SETTINGS = (LOCK_NAME, STSB_CORPUS_NAME, LAUNCHER_LOGS_NAME, RUN_ARGS_NAME + TMP_SUFFIX)
_CHECKPOINT = re.compile(rf"^{PREFIX_CHECKPOINT_DIR}-\d+$")
# What the Trainer takes for a checkpoint when it rotates them (its glob): none may be a user's.
_TRAINER_GLOB = f"{PREFIX_CHECKPOINT_DIR}-"
# The groups of the settings the versions before run format 1 recorded, and the keys each always held.
_LEGACY_GROUPS = {"run", "model", "data", "training", "method", "corpus", "environment"}
_LEGACY_KEYS = {
    "model": {"model_name_or_path"},
    "data": {"train_file", "max_seq_length"},
    "training": {"learning_rate", "per_device_train_batch_size", "max_steps", "seed"},
    "environment": set(),
}
# The files a checkpoint of those versions held (the Trainer's, the tokenizer's, the methods' state
# files, DeepSpeed's and FSDP's), and the temporary copies of a write cut short.
_LEGACY_CHECKPOINT_FILES = re.compile(
    r"^([a-z0-9_.-]+\.safetensors(\.index\.json)?|pytorch_model.*\.bin|training_args\.bin|optimizer\.pt|"
    r"scheduler\.pt|scaler\.pt|rng_state(_\d+)?\.pth|trainer_state\.json|config\.json|tokenizer(_config)?\.json|"
    r"special_tokens_map\.json|vocab\.(txt|json)|merges\.txt|added_tokens\.json|chat_template\.jinja|latest|"
    r"zero_to_fp32\.py|global_step\d+|pytorch_model_fsdp.*|optimizer_\d+)(\.tmp)?$"
)
# SoftFileLock's record: the holder's PID, host and start token, one a line; also any beginning of it.
_LOCK_RECORD = re.compile(r"\A(\d+(\n[^\n]*(\n(\d+\n?)?)?)?)?\Z")
# What an interrupted run of this package writes into its directory besides checkpoints and its
# export (cse.pipeline.finish_run; a killed write's temporary copy beside each; begin_checkpoint's
# staging folders; TensorBoard's default logs).
_TMP = re.escape(TMP_SUFFIX)
_END_FILES = "|".join(map(re.escape, (TRAINER_STATE_NAME, ALL_RESULTS_NAME, TRAIN_RESULTS_NAME)))
_RUN_WRITES = re.compile(
    rf"^(({_END_FILES}|sts_\w+_results\.json)({_TMP})?|{re.escape(CSE_CONFIG_NAME)}{_TMP}|"
    rf"{re.escape(STSB_CORPUS_NAME)}{_TMP}\d+|\.{PREFIX_CHECKPOINT_DIR}-\d+\..+{_TMP}|runs)$"
)
# How many of a directory's foreign entries a refusal names.
FOREIGN_SHOWN = 5


def _read_json(path: str):
    """The JSON value of the regular file ``path`` (a link is not one), or None when it is none."""
    if os.path.islink(path) or not os.path.isfile(path):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def legacy_run_args(settings) -> bool:
    """Whether ``settings`` (a parsed ``run_args.json``) has exactly the layout the versions before
    run format 1 wrote: the groups model, data, training and environment (and optionally run,
    method, corpus), each a mapping, with the keys every such file held."""
    if not isinstance(settings, dict) or not set(settings) <= _LEGACY_GROUPS:
        return False
    return all(
        isinstance(settings.get(group), dict) and keys <= set(settings[group]) for group, keys in _LEGACY_KEYS.items()
    )


def _settings(directory: str):
    """The parsed ``run_args.json`` of ``directory`` when it is a regular file holding a JSON object."""
    settings = _read_json(os.path.join(directory, RUN_ARGS_NAME))
    return settings if isinstance(settings, dict) else None


def _our_mark(settings: dict):
    """The mark this package puts in ``run_args.json`` (:data:`WRITTEN_BY_KEY`), or None for another's or none."""
    mark = settings.get(WRITTEN_BY_KEY)
    return mark if isinstance(mark, dict) and mark.get("package") == PACKAGE else None


def run_format(directory: str) -> int | None:
    """The run format of the run of this package in ``directory``, as its ``run_args.json`` records it:
    :data:`RUN_FORMAT` when the file is marked so, :data:`LEGACY_FORMAT` for an unmarked one in the
    layout of the versions before (:func:`legacy_run_args`); None otherwise (no such file, a link, a
    file that is not JSON, another tool's or package's, or of a format this version does not read:
    :func:`unread_format`)."""
    settings = _settings(directory)
    if settings is None:
        return None
    if WRITTEN_BY_KEY in settings:
        mark = _our_mark(settings)
        fmt = None if mark is None else mark.get("format")
        # The mark alone is no run: a run writes it with its settings, which format 1 records in the
        # groups and keys of the versions before (a mark without them is an incomplete record).
        record = {key: value for key, value in settings.items() if key != WRITTEN_BY_KEY}
        return RUN_FORMAT if type(fmt) is int and fmt == RUN_FORMAT and legacy_run_args(record) else None
    return LEGACY_FORMAT if legacy_run_args(settings) else None


def unread_format(directory: str) -> tuple[bool, object]:
    """``(True, format)`` when ``directory`` holds a run marked by this package in a run format other
    than :data:`RUN_FORMAT` (a newer version's, or none this package writes: 0, "1", 1.5, true, ...);
    ``(False, None)`` otherwise."""
    settings = _settings(directory)
    mark = None if settings is None else _our_mark(settings)
    # format 1 without its settings is no run at all (run_format), not one of another format
    if mark is None or (type(mark.get("format")) is int and mark.get("format") == RUN_FORMAT):
        return False, None
    return True, mark.get("format")


def lock_is_ours(path: str) -> bool:
    """Whether ``path`` (a directory's :data:`LOCK_NAME`) is a lock marker a run writes: a regular file
    holding ``filelock.SoftFileLock``'s record ("<pid>\\n<host>\\n[<start>\\n]"), or a beginning of
    one (empty, cut short: its writer is at work). Any other content is a user's file of that name,
    which a run would take over and delete on release."""
    if os.path.islink(path) or not os.path.isfile(path):
        return False
    try:
        with open(path, encoding="utf-8") as f:
            content = f.read(4096)
    except (OSError, ValueError):
        return False
    return _LOCK_RECORD.match(content) is not None


def checkpoint_marked(path: str) -> bool:
    """Whether the folder ``path`` holds this package's :data:`CHECKPOINT_MARKER_NAME`."""
    marker = _read_json(os.path.join(path, CHECKPOINT_MARKER_NAME))
    return isinstance(marker, dict) and marker.get("package") == PACKAGE


def legacy_checkpoint(path: str) -> bool:
    """Whether the folder ``path`` holds nothing but the files a checkpoint of a version before run
    format 1 held (possibly none: a writer killed before its first file)."""
    return all(_LEGACY_CHECKPOINT_FILES.match(name) for name in os.listdir(path))


def is_run_checkpoint(path: str, legacy: bool = False) -> bool:
    """Whether ``path`` is a checkpoint folder of this package's (complete or torn): a real folder
    named ``checkpoint-<step>`` marked by the run that began it; with ``legacy`` (in a run of an
    earlier version), also one holding only a checkpoint's files (:func:`legacy_checkpoint`)."""
    if not _CHECKPOINT.match(os.path.basename(path)) or os.path.islink(path) or not os.path.isdir(path):
        return False
    return checkpoint_marked(path) or (legacy and legacy_checkpoint(path))


def begin_checkpoint(folder: str) -> None:
    """Create the checkpoint folder ``folder`` with its :data:`CHECKPOINT_MARKER_NAME` inside: the
    folder is made and marked under a temporary name beside it and renamed into place, so that a
    process killed at any moment leaves either no folder or a marked one. A folder already there
    (another process of the run made it) is marked where it is."""
    if not os.path.isdir(folder):
        staging = tempfile.mkdtemp(
            prefix=f".{os.path.basename(folder)}.", suffix=TMP_SUFFIX, dir=os.path.dirname(folder)
        )
        write_json(os.path.join(staging, CHECKPOINT_MARKER_NAME), WRITTEN_BY)
        try:
            os.rename(staging, folder)
            return
        except OSError:  # made meanwhile
            os.remove(os.path.join(staging, CHECKPOINT_MARKER_NAME))
            os.rmdir(staging)
    if not checkpoint_marked(folder):
        write_json(os.path.join(folder, CHECKPOINT_MARKER_NAME), WRITTEN_BY)


def foreign_entries(path: str, own: tuple[str, ...] = ()) -> list[str]:
    """The entries of the directory ``path`` that a run must not write into, move or have the Trainer
    rotate away (sorted; [] for a run's, an empty or a missing directory); ``own``: files the command
    itself reads (its config file), which may lie there. In a run of this package (:func:`run_format`):
    a ``checkpoint-*`` entry that is not one of its checkpoints (:func:`is_run_checkpoint`), an
    ``_incomplete_checkpoints`` that is not a folder, and, in an interrupted run of format 1, any entry
    the run does not write (:func:`_written_by_run`). Anywhere: a lock that is not a run's
    (:func:`lock_is_ours`). Elsewhere: everything but what a run writes before
    its ``run_args.json``, and checkpoints of this package."""
    if not os.path.isdir(path):
        return []
    mine = {os.path.realpath(name) for name in own}
    names = sorted(name for name in os.listdir(path) if os.path.realpath(os.path.join(path, name)) not in mine)
    foreign = [name for name in names if name == LOCK_NAME and not lock_is_ours(os.path.join(path, name))]
    fmt = run_format(path)
    if fmt is not None:
        legacy = fmt == LEGACY_FORMAT
        if not legacy and not _published(path):
            foreign += [name for name in names if not _written_by_run(path, name)]
        return sorted(
            foreign
            + [
                name
                for name in names
                if (name.startswith(_TRAINER_GLOB) and not is_run_checkpoint(os.path.join(path, name), legacy))
                or (
                    name == INCOMPLETE_NAME
                    and (os.path.islink(os.path.join(path, name)) or not os.path.isdir(os.path.join(path, name)))
                )
            ]
        )
    return sorted(
        foreign
        + [name for name in names if name not in _BEFORE_SETTINGS and not is_run_checkpoint(os.path.join(path, name))]
    )


def _published(path: str) -> bool:
    """Whether the run in ``path`` has published its export whole: its ``cse_config.json`` is in
    place (a finished run, refused as such), or only waits under its temporary name, the list of a
    publish under way (:data:`EXPORT_NAMES`) being gone (:func:`cse.atomic.publish`)."""
    config = os.path.join(path, CSE_CONFIG_NAME)
    return os.path.lexists(config) or (
        os.path.lexists(config + TMP_SUFFIX) and not os.path.lexists(os.path.join(path, EXPORT_NAMES))
    )


def _exported(path: str) -> set[str]:
    """The entries of the run directory ``path`` its export moved there: in the list of a publish cut
    short (:data:`EXPORT_NAMES`), the first part of each path no longer in the staging folder."""
    names = _read_json(os.path.join(path, EXPORT_NAMES))
    if not isinstance(names, list):
        return set()
    staging = os.path.join(path, STAGING_NAME)
    return {
        str(name).split("/")[0]
        for name in names
        if isinstance(name, str) and not os.path.lexists(os.path.join(staging, name))
    }


def _written_by_run(path: str, name: str) -> bool:
    """Whether ``name`` in the interrupted run's directory ``path`` (format 1) is what the run writes:
    what it writes before its settings, its settings, checkpoints (checked apart), the files of its
    end and the export staged, the list of a publish and the files it moved (:func:`_exported`)."""
    return (
        name in _BEFORE_SETTINGS
        or name in (RUN_ARGS_NAME, INCOMPLETE_NAME, STAGING_NAME, EXPORT_NAMES)
        or name.startswith(_TRAINER_GLOB)
        or _RUN_WRITES.match(name) is not None
        or name in _exported(path)
    )


def check_run_directory(path: str, own: tuple[str, ...] = ()) -> None:
    """Refuse an ``--output_dir`` that holds a run of a format this version does not read, or entries
    a run must not touch (:func:`foreign_entries`), naming the first :data:`FOREIGN_SHOWN` of them."""
    target = os.path.realpath(path)
    where = f"{path} (a link to {target})" if os.path.islink(os.path.normpath(path)) else path
    unread, fmt = unread_format(path) if os.path.isdir(path) else (False, None)
    if unread:
        newer = type(fmt) is int and fmt > RUN_FORMAT
        raise CSEUsageError(
            f"--output_dir {where} holds a run of {'a newer version of ' if newer else ''}this package in run format "
            f"{fmt!r} ({os.path.join(path, RUN_ARGS_NAME)}), which this version does not read (it reads format "
            f"{RUN_FORMAT} and the runs of versions before formats were recorded)",
            hint="continue it with the version that wrote it, or choose another --output_dir",
        )
    foreign = foreign_entries(path, own)
    if not foreign:
        return
    most = FOREIGN_SHOWN
    shown = ", ".join(foreign[:most]) + (f" and {len(foreign) - most} more" if len(foreign) > most else "")
    if run_format(path) is not None:
        raise CSEUsageError(
            f"--output_dir {where} holds a run of this package and entries it did not write, which the run "
            f"would write into, replace or delete: {shown}",
            hint="move those entries out of the run's directory, then rerun the same command",
        )
    raise CSEUsageError(
        f"--output_dir {where} is not empty and holds no run of this package: {shown}",
        hint=f"a run writes its model, README.md and config.json there: choose a new or empty --output_dir "
        f"(e.g. {os.path.join(os.path.normpath(path), 'run')}), or move those files away",
    )
