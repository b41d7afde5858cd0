"""SentEval's transfer tasks (MR, CR, SUBJ, MPQA, SST2, TREC, MRPC), re-implemented.

Data, exactly as SentEval reads it (``senteval/binary.py``, ``sst.py``, ``trec.py``, ``mrpc.py``):

* MR ``rt-polarity.{pos,neg}``, CR ``custrev.{pos,neg}``, MPQA ``mpqa.{pos,neg}``, SUBJ
  ``subj.{objective,subjective}``: latin-1, one sentence a line (every line, empty ones included);
  label 1 for the first file (pos; objective for SUBJ), 0 for the second.
* SST2 ``SST/binary/sentiment-{train,dev,test}``: utf-8, ``sentence<TAB>label``.
* TREC ``train_5500.label`` / ``TREC_10.label``: latin-1, ``COARSE:fine question``; the six coarse
  classes ABBR, DESC, ENTY, HUM, LOC, NUM are the labels.
* MRPC ``msr_paraphrase_{train,test}.txt``: utf-8, a header row, then quality, two ids, the two
  sentences; the features are ``[|u - v|, u * v]`` of the two embeddings.

No lower-casing: SentEval splits each sentence on whitespace and SimCSE's batcher re-joins the tokens
with single spaces. Each part is sorted by (number of tokens, label) as SentEval sorts it before
encoding (MRPC: by the lengths of both sentences, then the label); the order matters, since the
stratified folds are drawn over it.

Classifiers and validation are :mod:`cse.evaluation.classifier`'s: MR/CR/SUBJ/MPQA by nested
cross-validation, SST2 on its train/dev/test split, TREC and MRPC by cross-validation on train and
accuracy on test (MRPC also F1 of the paraphrase class). ``test`` mode reports test accuracy with
SimCSE's ``test`` classifier settings; ``dev`` mode reports SentEval's ``devacc`` (the best
cross-validation or dev accuracy) with the ``fasttest`` settings, as SimCSE's ``--mode dev`` does.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from ..paths import require_path
from .classifier import ClassifierConfig, inner_kfold, kfold, split_classifier

TRANSFER_TASKS = ("MR", "CR", "SUBJ", "MPQA", "SST2", "TREC", "MRPC")
BINARY_FILES = {
    "MR": ("MR", "rt-polarity.pos", "rt-polarity.neg"),
    "CR": ("CR", "custrev.pos", "custrev.neg"),
    "SUBJ": ("SUBJ", "subj.objective", "subj.subjective"),
    "MPQA": ("MPQA", "mpqa.pos", "mpqa.neg"),
}
TREC_CLASSES = {"ABBR": 0, "DESC": 1, "ENTY": 2, "HUM": 3, "LOC": 4, "NUM": 5}


@dataclass
class Labelled:
    """One part of a task, in SentEval's sorted order; ``second`` holds MRPC's other sentences."""

    sentences: list[str]
    labels: np.ndarray
    second: list[str] | None = None

    @property
    def all_sentences(self) -> list[str]:
        return self.sentences + (self.second or [])


def _join(text: str) -> str:
    return " ".join(text.split())


def _read_lines(path: str, encoding: str) -> list[str]:
    with open(require_path(path, "SentEval file"), encoding=encoding, newline=None) as f:
        return f.read().splitlines()


def _sorted(sentences: list[str], labels: list[int], second: list[str] | None = None) -> Labelled:
    """SentEval's "sort to reduce padding" (a stable sort on token counts, then the label)."""
    if second is None:
        order = sorted(range(len(sentences)), key=lambda i: (len(sentences[i].split()), labels[i]))
    else:
        order = sorted(
            range(len(sentences)), key=lambda i: (len(sentences[i].split()), len(second[i].split()), labels[i])
        )
    return Labelled(
        [sentences[i] for i in order],
        np.array([labels[i] for i in order], dtype=np.int64),
        None if second is None else [second[i] for i in order],
    )


def _binary(folder: str, first: str, second: str) -> dict[str, Labelled]:
    pos = [_join(line) for line in _read_lines(os.path.join(folder, first), "latin-1")]
    neg = [_join(line) for line in _read_lines(os.path.join(folder, second), "latin-1")]
    return {"all": _sorted(pos + neg, [1] * len(pos) + [0] * len(neg))}


def _sst2(folder: str, part: str) -> Labelled:
    path = os.path.join(folder, f"sentiment-{part}")
    sentences, labels = [], []
    with open(require_path(path, "SentEval file"), encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            fields = line.strip().split("\t")
            if len(fields) != 2 or fields[1] not in ("0", "1"):
                raise ValueError(f"{path}:{lineno}: expected 'sentence<TAB>0|1'")
            sentences.append(_join(fields[0]))
            labels.append(int(fields[1]))
    return _sorted(sentences, labels)


def _trec(path: str) -> Labelled:
    sentences, labels = [], []
    with open(require_path(path, "SentEval file"), encoding="latin-1") as f:
        for lineno, line in enumerate(f, start=1):
            target, sample = line.strip().split(":", 1)
            if target not in TREC_CLASSES:
                raise ValueError(f"{path}:{lineno}: unknown TREC class {target!r}")
            sentences.append(_join(sample.split(" ", 1)[1]))  # drop the fine-grained label
            labels.append(TREC_CLASSES[target])
    return _sorted(sentences, labels)


def _mrpc(path: str) -> Labelled:
    first, second, labels = [], [], []
    with open(require_path(path, "SentEval file"), encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if lineno == 1:  # header
                continue
            fields = line.strip().split("\t")
            if len(fields) < 5:
                raise ValueError(f"{path}:{lineno}: expected 5 tab-separated fields, found {len(fields)}")
            labels.append(int(fields[0]))
            first.append(_join(fields[3]))
            second.append(_join(fields[4]))
    return _sorted(first, labels, second)


def load_transfer_task(task: str, senteval_dir: str) -> dict[str, Labelled]:
    """The parts of one transfer task: ``{"all"}`` (MR, CR, SUBJ, MPQA), ``{"train", "dev", "test"}``
    (SST2) or ``{"train", "test"}`` (TREC, MRPC)."""
    if task in BINARY_FILES:
        folder, first, second = BINARY_FILES[task]
        return _binary(os.path.join(senteval_dir, folder), first, second)
    if task == "SST2":
        folder = os.path.join(senteval_dir, "SST", "binary")
        return {part: _sst2(folder, part) for part in ("train", "dev", "test")}
    if task == "TREC":
        folder = os.path.join(senteval_dir, "TREC")
        return {
            "train": _trec(os.path.join(folder, "train_5500.label")),
            "test": _trec(os.path.join(folder, "TREC_10.label")),
        }
    if task == "MRPC":
        folder = os.path.join(senteval_dir, "MRPC")
        return {part: _mrpc(os.path.join(folder, f"msr_paraphrase_{part}.txt")) for part in ("train", "test")}
    raise ValueError(f"unknown transfer task {task!r}; choose one of {', '.join(TRANSFER_TASKS)}")


def _features(part: Labelled, embeddings: dict[str, np.ndarray]) -> np.ndarray:
    u = np.stack([embeddings[s] for s in part.sentences]).astype(np.float32)
    if part.second is None:
        return u
    v = np.stack([embeddings[s] for s in part.second]).astype(np.float32)
    return np.concatenate([np.abs(u - v), u * v], axis=1)


def binary_f1(pred: np.ndarray, gold: np.ndarray) -> float:
    """F1 of class 1 (scikit-learn's ``f1_score`` default, which SentEval's MRPC reports)."""
    tp = float(((pred == 1) & (gold == 1)).sum())
    fp = float(((pred == 1) & (gold == 0)).sum())
    fn = float(((pred == 0) & (gold == 1)).sum())
    return 2 * tp / (2 * tp + fp + fn) if tp else 0.0


def score_transfer_task(
    task: str, data: dict[str, Labelled], embeddings: dict[str, np.ndarray], config: ClassifierConfig, device="cpu"
) -> dict:
    """SentEval's result for one task: ``acc`` (test accuracy x 100), ``devacc``, sizes, the chosen
    penalties, and for MRPC ``f1``."""
    parts = {name: (_features(part, embeddings), part.labels) for name, part in data.items()}
    if task in BINARY_FILES:
        result = inner_kfold(*parts["all"], 2, config, device)
        return {**result, "n": len(parts["all"][1])}
    if task == "SST2":
        result = split_classifier(parts["train"], parts["dev"], parts["test"], 2, config, device)
        return {**result, "ndev": len(parts["dev"][1]), "ntest": len(parts["test"][1])}
    nclasses = len(TREC_CLASSES) if task == "TREC" else 2
    result = kfold(parts["train"], parts["test"], nclasses, config, device)
    predictions = result.pop("predictions")
    if task == "MRPC":
        result["f1"] = round(100 * binary_f1(predictions, parts["test"][1]), 2)
    return {**result, "ntrain": len(parts["train"][1]), "ntest": len(parts["test"][1])}
