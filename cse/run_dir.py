"""What a run leaves in its ``--output_dir`` before anything else, and the refusal of a directory
that holds something else: a run never writes into a directory of the user's own files (its model
card, ``README.md``, and ``config.json`` would replace theirs).

A directory is a run's when it holds the run's settings (``run_args.json``, written before the first
training step) or a finished run (``cse_config.json``), or only what a run writes before its
settings: the lock, SG-BERT's sentence corpus, temporary ``*.tmp`` files, checkpoint folders and the
logs a launcher writes into it before starting the run (``_logs/``: the table scripts' driver)."""

from __future__ import annotations

import os
import re

from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from .atomic import TMP_SUFFIX
from .errors import CSEUsageError

LOCK_NAME = ".cse_run.lock"
RUN_ARGS_NAME = "run_args.json"
CSE_CONFIG_NAME = "cse_config.json"
# SG-BERT's default corpus, written into the output directory before the run takes its lock.
STSB_CORPUS_NAME = "stsb_sentences.txt"
# Where a run sets aside a checkpoint a killed writer left torn (cse.resume).
INCOMPLETE_NAME = "_incomplete_checkpoints"

RUN_MARKERS = (RUN_ARGS_NAME, CSE_CONFIG_NAME)
# The run's logs, written by whatever launched it (python -m sweep) before the run starts.
LAUNCHER_LOGS_NAME = "_logs"
_BEFORE_SETTINGS = (LOCK_NAME, STSB_CORPUS_NAME, INCOMPLETE_NAME, LAUNCHER_LOGS_NAME)
_CHECKPOINT = re.compile(rf"^{PREFIX_CHECKPOINT_DIR}-\d+$")
# How many of a directory's foreign entries a refusal names.
FOREIGN_SHOWN = 5


def foreign_entries(path: str, own: tuple[str, ...] = ()) -> list[str]:
    """The entries of the directory ``path`` that show it is not a run's (sorted; [] for a run's,
    an empty or a missing directory); ``own``: files the command itself reads (its config file), which
    may lie there."""
    if not os.path.isdir(path):
        return []
    mine = {os.path.realpath(name) for name in own}
    names = sorted(name for name in os.listdir(path) if os.path.realpath(os.path.join(path, name)) not in mine)
    if any(name in RUN_MARKERS for name in names):
        return []
    return [
        name
        for name in names
        if name not in _BEFORE_SETTINGS and not name.endswith(TMP_SUFFIX) and not _CHECKPOINT.match(name)
    ]


def check_run_directory(path: str, own: tuple[str, ...] = ()) -> None:
    """Refuse an ``--output_dir`` that holds files of something other than a run (:func:`foreign_entries`),
    naming the first :data:`FOREIGN_SHOWN` of them."""
    foreign = foreign_entries(path, own)
    if not foreign:
        return
    most = FOREIGN_SHOWN
    shown = ", ".join(foreign[:most]) + (f" and {len(foreign) - most} more" if len(foreign) > most else "")
    target = os.path.realpath(path)
    where = f"{path} (a link to {target})" if os.path.islink(os.path.normpath(path)) else path
    raise CSEUsageError(
        f"--output_dir {where} is not empty and holds no run of this package: {shown}",
        hint=f"a run writes its model, README.md and config.json there: choose a new or empty --output_dir "
        f"(e.g. {os.path.join(os.path.normpath(path), 'run')}), or move those files away",
    )
