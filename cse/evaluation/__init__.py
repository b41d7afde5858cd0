"""Evaluation under the SentEval protocol: which tasks a mode runs, one encoding pass over their
sentences, and the scores every paper in this family reports.

Two task kinds share one encoding pass: STS (:mod:`.sts`, Spearman x 100) and the transfer tasks
(:mod:`.transfer`, accuracy x 100 of a classifier on frozen embeddings). A report's ``scores`` holds
the columns of its task set and ``Avg.``; with both kinds (``full``) ``scores`` is the STS table and
``score_groups`` holds each kind's table.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Sequence

import numpy as np

from ..paths import senteval_dir as resolve_senteval_dir
from .classifier import CLASSIFIER_CONFIGS
from .sts import STS_YEAR_SUBSETS, load_sts_task, score_sts_task
from .transfer import TRANSFER_TASKS, load_transfer_task, score_transfer_task

MODES = ("dev", "test")
STS_TASKS = ("STS12", "STS13", "STS14", "STS15", "STS16", "STSBenchmark", "SICKRelatedness")
# SentEval's model-selection sets: STS-B dev and SICK-R trial.
STS_DEV_TASKS = ("STSBenchmark", "SICKRelatedness")
TASK_SETS = {
    "sts": {"dev": STS_DEV_TASKS, "test": STS_TASKS},
    "transfer": {"dev": TRANSFER_TASKS, "test": TRANSFER_TASKS},
    "full": {"dev": STS_DEV_TASKS + TRANSFER_TASKS, "test": STS_TASKS + TRANSFER_TASKS},
}
# Column names of the papers' tables.
DISPLAY_NAMES = {
    "STS12": "STS12",
    "STS13": "STS13",
    "STS14": "STS14",
    "STS15": "STS15",
    "STS16": "STS16",
    "STSBenchmark": "STS-B",
    "SICKRelatedness": "SICK-R",
    **{task: task for task in TRANSFER_TASKS},
}

Encoder = Callable[[Sequence[str]], "np.ndarray"]

logger = logging.getLogger(__name__)


def tasks_for(task_set: str, mode: str) -> tuple[str, ...]:
    if task_set not in TASK_SETS:
        raise ValueError(f"unknown task set {task_set!r}; choose one of {', '.join(TASK_SETS)}")
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; choose one of {', '.join(MODES)}")
    return TASK_SETS[task_set][mode]


class SentEvalSuite:
    """A task set in one mode, its data read (and checked) up front.

    ``len()`` is the number of distinct sentences; :meth:`run` encodes each once and scores every
    task. The trainer passes a ``"dev"`` suite as its ``eval_dataset``.
    Transfer tasks train SentEval's classifiers (settings of ``mode``, seeded by ``seed``) on
    ``classifier_device`` (default: the CPU). ``tasks`` restricts the set to some of its tasks.
    ``progress`` logs each task's score and time as it is done (the trainer's frequent dev evaluations
    leave it off).
    """

    def __init__(
        self,
        task_set: str = "sts",
        mode: str = "test",
        senteval_data_dir: str | None = None,
        seed: int = 1111,
        classifier_device: str = "cpu",
        tasks: Sequence[str] | None = None,
        progress: bool = False,
    ):
        self.task_set, self.mode, self.progress = task_set, mode, progress
        self.tasks = tasks_for(task_set, mode)
        if tasks is not None:
            unknown = [t for t in tasks if t not in self.tasks]
            if unknown or not tasks:
                raise ValueError(
                    f"tasks {unknown or '[]'} not in task set {task_set!r} ({mode}): {', '.join(self.tasks)}"
                )
            self.tasks = tuple(t for t in self.tasks if t in tasks)
        self.classifier_config = dataclasses.replace(CLASSIFIER_CONFIGS[mode], seed=seed)
        self.classifier_device = classifier_device
        data_dir = resolve_senteval_dir(senteval_data_dir)
        self.datasets = {
            task: load_transfer_task(task, data_dir)
            if task in TRANSFER_TASKS
            else load_sts_task(task, "test" if task in STS_YEAR_SUBSETS else mode, data_dir)
            for task in self.tasks
        }
        self.sentences = list(
            dict.fromkeys(
                s
                for task, parts in self.datasets.items()
                for part in parts.values()
                for s in (part.all_sentences if task in TRANSFER_TASKS else part.sentences1 + part.sentences2)
            )
        )

    def __len__(self) -> int:
        return len(self.sentences)

    def run(self, encode: Encoder) -> dict:
        """``{"task_set", "mode", "tasks": {task: details}, "scores": {column: score}, "score_groups"}``;
        ``encode`` maps a list of sentences to an ``(n, d)`` array."""
        log = logger.info if self.progress else logger.debug
        log("%s (%s): encoding %d sentences", self.task_set, self.mode, len(self.sentences))
        start = time.perf_counter()
        vectors = np.asarray(encode(self.sentences))
        log("encoded %d sentences in %.1f s", len(self.sentences), time.perf_counter() - start)
        if vectors.shape[0] != len(self.sentences):
            raise ValueError(f"encoder returned {vectors.shape[0]} embeddings for {len(self.sentences)} sentences")
        embeddings = dict(zip(self.sentences, vectors))
        details, groups = {}, {}
        for task, data in self.datasets.items():
            start = time.perf_counter()
            if task in TRANSFER_TASKS:
                log("%s: training the classifiers", task)
                details[task] = score_transfer_task(
                    task, data, embeddings, self.classifier_config, self.classifier_device
                )
                # SimCSE's --mode dev reports SentEval's devacc, test mode the test accuracy
                score, kind = details[task]["devacc" if self.mode == "dev" else "acc"], "transfer"
            else:
                details[task] = score_sts_task(data, embeddings)
                score, kind = 100.0 * details[task]["spearman"], "sts"
            groups.setdefault(kind, {})[DISPLAY_NAMES[task]] = score
            log("%s: %.2f (%.1f s)", DISPLAY_NAMES[task], score, time.perf_counter() - start)
        for scores in groups.values():
            # The papers' average is that of the two-decimal scores they print (SimCSE's evaluation.py).
            scores["Avg."] = float(np.mean([round(v, 2) for v in scores.values()]))
        scores = groups.get("sts", groups.get("transfer"))
        return {
            "task_set": self.task_set,
            "mode": self.mode,
            "tasks": details,
            "scores": scores,
            "score_groups": groups,
        }


def evaluate(
    encode: Encoder, task_set: str = "sts", mode: str = "test", senteval_data_dir: str | None = None, **kwargs
) -> dict:
    """Run a task set once (see :class:`SentEvalSuite`; ``kwargs``: its ``seed``, ``classifier_device``,
    ``tasks``, ``progress``)."""
    return SentEvalSuite(task_set, mode, senteval_data_dir, **kwargs).run(encode)
