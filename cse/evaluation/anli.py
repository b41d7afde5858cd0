"""Adversarial NLI robustness (V-advCSE, Table 3): fine-tune an encoder as a 3-way NLI classifier on
SNLI + MNLI + FEVER-NLI + ANLI, the ANLI authors' training mix (Nie et al., ACL 2020), and report
accuracy on ANLI's dev and test sets, per round (R1, R2, R3) and over the three rounds together.

Every source is a Hugging Face dataset with ``premise``, ``hypothesis`` and ``label`` columns, label
0 = entailment, 1 = neutral, 2 = contradiction (SNLI's -1, no gold label, is dropped): a hub name
(the defaults) or a local directory written by ``DatasetDict.save_to_disk`` with the same splits.
A ``ClassLabel`` feature with other names or another order is refused rather than mapped silently.
"""

from __future__ import annotations

import os

import datasets
import numpy as np

NLI_LABELS = ("entailment", "neutral", "contradiction")
ROUNDS = ("r1", "r2", "r3")
COLUMNS = ("premise", "hypothesis", "label")


def load_source(name_or_path: str, cache_dir: str | None = None) -> datasets.DatasetDict:
    """A hub dataset (all its splits) or a ``save_to_disk`` directory."""
    if os.path.isdir(name_or_path):
        loaded = datasets.load_from_disk(name_or_path)
    else:
        loaded = datasets.load_dataset(name_or_path, cache_dir=cache_dir)
    if not isinstance(loaded, datasets.DatasetDict):
        raise ValueError(f"{name_or_path}: expected a dataset with named splits")
    return loaded


def nli_split(source: datasets.DatasetDict, split: str, name: str) -> datasets.Dataset:
    """``source[split]`` reduced to premise, hypothesis and a gold label in 0..2, checked."""
    if split not in source:
        raise ValueError(f"{name} has no split {split!r}; its splits are {sorted(source)}")
    data = source[split]
    missing = [c for c in COLUMNS if c not in data.column_names]
    if missing:
        raise ValueError(f"{name}[{split}] lacks column(s) {missing}; its columns are {data.column_names}")
    feature = data.features["label"]
    if isinstance(feature, datasets.ClassLabel) and tuple(feature.names) != NLI_LABELS:
        raise ValueError(f"{name}[{split}] labels are {feature.names}, expected {list(NLI_LABELS)} in that order")
    data = data.select_columns(list(COLUMNS)).filter(lambda row: row["label"] != -1)  # SNLI: no gold label
    labels = set(data.unique("label"))
    if not labels <= {0, 1, 2}:
        raise ValueError(f"{name}[{split}] has labels {sorted(labels)}; expected 0, 1, 2 ({', '.join(NLI_LABELS)})")
    return data.cast_column("label", datasets.Value("int64"))


def training_mix(sources: dict[str, datasets.DatasetDict], anli_upsampling: tuple[int, int, int]) -> datasets.Dataset:
    """SNLI, MNLI and FEVER-NLI train once each, ANLI's three training rounds repeated
    ``anli_upsampling`` times (the ANLI repository's 10, 20, 10)."""
    parts = [nli_split(sources[name], "train", name) for name in ("snli", "mnli", "fever_nli")]
    for round_name, times in zip(ROUNDS, anli_upsampling):
        if times < 0:
            raise ValueError(f"ANLI upsampling must not be negative, got {times} for {round_name}")
        parts += [nli_split(sources["anli"], f"train_{round_name}", "anli")] * times
    return datasets.concatenate_datasets(parts)


def accuracy_table(predictions: dict[str, np.ndarray], labels: dict[str, np.ndarray]) -> dict[str, float]:
    """Accuracies x 100 from predicted and gold labels keyed ``dev_r1`` ... ``test_r3``: per round,
    ``All`` (the mean of the three rounds) and ``All pooled`` (over the rounds' examples together).

    The V-advCSE paper's "All" is the mean of the rounds in three of its four cells (e.g. V-advCSE
    dev: (55.1 + 44.4 + 45.6) / 3 = 48.4, where pooling R1/R2/R3's 1000/1000/1200 examples would
    give 48.2), so ``All`` is that; ``All pooled`` is the convention of the ANLI paper's combined
    figure.
    """
    scores = {}
    for part in ("dev", "test"):
        hits = []
        for round_name in ROUNDS:
            key = f"{part}_{round_name}"
            correct = np.asarray(predictions[key]) == np.asarray(labels[key])
            scores[f"{round_name.upper()} {part}"] = 100.0 * float(correct.mean())
            hits.append(correct)
        scores[f"All {part}"] = float(np.mean([scores[f"{r.upper()} {part}"] for r in ROUNDS]))
        scores[f"All pooled {part}"] = 100.0 * float(np.concatenate(hits).mean())
    return scores
