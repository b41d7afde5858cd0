"""Evaluation under the SentEval protocol: which tasks a mode runs, one encoding pass over their
sentences, and the scores every paper in this family reports.

Transfer tasks (MR, CR, ...) will join :data:`TASK_SETS` as further task kinds; a task kind is a
loader of its data plus a scorer of embeddings.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from ..paths import senteval_dir as resolve_senteval_dir
from .sts import STS_YEAR_SUBSETS, load_sts_task, score_sts_task

MODES = ("dev", "test")
STS_TASKS = ("STS12", "STS13", "STS14", "STS15", "STS16", "STSBenchmark", "SICKRelatedness")
# SentEval's model-selection sets: STS-B dev and SICK-R trial.
STS_DEV_TASKS = ("STSBenchmark", "SICKRelatedness")
TASK_SETS = {"sts": {"dev": STS_DEV_TASKS, "test": STS_TASKS}}
# Column names of the papers' tables.
DISPLAY_NAMES = {
    "STS12": "STS12",
    "STS13": "STS13",
    "STS14": "STS14",
    "STS15": "STS15",
    "STS16": "STS16",
    "STSBenchmark": "STS-B",
    "SICKRelatedness": "SICK-R",
}

Encoder = Callable[[Sequence[str]], "np.ndarray"]


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
    """

    def __init__(self, task_set: str = "sts", mode: str = "test", senteval_data_dir: str | None = None):
        self.task_set, self.mode = task_set, mode
        self.tasks = tasks_for(task_set, mode)
        data_dir = resolve_senteval_dir(senteval_data_dir)
        self.datasets = {
            task: load_sts_task(task, "test" if task in STS_YEAR_SUBSETS else mode, data_dir) for task in self.tasks
        }
        self.sentences = list(
            dict.fromkeys(
                s
                for subsets in self.datasets.values()
                for pairs in subsets.values()
                for s in pairs.sentences1 + pairs.sentences2
            )
        )

    def __len__(self) -> int:
        return len(self.sentences)

    def run(self, encode: Encoder) -> dict:
        """``{"task_set", "mode", "tasks": {task: details}, "scores": {column: Spearman x 100}}``;
        ``encode`` maps a list of sentences to an ``(n, d)`` array."""
        vectors = np.asarray(encode(self.sentences))
        if vectors.shape[0] != len(self.sentences):
            raise ValueError(f"encoder returned {vectors.shape[0]} embeddings for {len(self.sentences)} sentences")
        embeddings = dict(zip(self.sentences, vectors))
        details = {task: score_sts_task(subsets, embeddings) for task, subsets in self.datasets.items()}
        scores = {DISPLAY_NAMES[task]: 100.0 * details[task]["spearman"] for task in self.tasks}
        # The papers' average is that of the two-decimal scores they print (SimCSE's evaluation.py).
        scores["Avg."] = float(np.mean([round(v, 2) for v in scores.values()]))
        return {"task_set": self.task_set, "mode": self.mode, "tasks": details, "scores": scores}


def evaluate(encode: Encoder, task_set: str = "sts", mode: str = "test", senteval_data_dir: str | None = None) -> dict:
    """Run a task set once (see :class:`SentEvalSuite`)."""
    return SentEvalSuite(task_set, mode, senteval_data_dir).run(encode)
