"""Semantic textual similarity under the SentEval protocol, re-implemented.

What is evaluated, exactly as SentEval (with SimCSE's additions) does it:

* STS12-STS16 ("test" mode): each year's subsets are read from ``STS.input.<subset>.txt`` (two
  tab-separated sentences a line) and ``STS.gs.<subset>.txt`` (one gold score a line; a blank line
  means "no gold score" and the pair is dropped). The reported figure is the **"all" setting**: one
  Spearman correlation over all subsets of the year concatenated. SentEval also returns the plain
  and the size-weighted mean of per-subset correlations; these are kept in the JSON, but papers in
  this family (SimCSE, Appendix B) report "all", and the three can differ by several points.
* STS-B: ``sts-{dev,test}.csv``, tab-separated, gold score in column 5 (index 4), sentences in
  columns 6 and 7. Later columns in the official release are source metadata and are ignored.
* SICK-R: ``SICK_{trial,test_annotated}.txt``, a header row then pair id, sentence A, sentence B,
  relatedness score.
* Sentences are whitespace-split and re-joined with single spaces (SentEval stores them as token
  lists), the similarity is the cosine of the two embeddings, the metric Spearman's rho.

"dev" mode evaluates STS-B dev and SICK-R trial, the model-selection sets.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from ..paths import require_path


@dataclass
class STSPairs:
    sentences1: list[str]
    sentences2: list[str]
    scores: np.ndarray  # gold similarity, float64


def _lines(path: str, unicode_breaks: bool = True) -> list[str]:
    """The file's lines, as SentEval splits them: STS12-16 with ``str.splitlines()`` (which also
    breaks at U+2028, U+0085, ...), STS-B and SICK by iterating the file (only at \\n, \\r, \\r\\n).
    utf-8-sig drops a byte-order mark; a missing final newline is fine either way."""
    require_path(path, "SentEval file")
    with open(path, encoding="utf-8-sig") as f:
        return f.read().splitlines() if unicode_breaks else [line.rstrip("\n") for line in f]


def _normalise(sentence: str) -> str:
    return " ".join(sentence.split())


def _score(text: str, path: str, lineno: int) -> float:
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"{path}:{lineno}: gold score {text!r} is not a number") from None


def read_sts_subset(input_path: str, gold_path: str) -> STSPairs:
    """One STS12-16 subset; pairs whose gold line is blank are dropped."""
    inputs, golds = _lines(input_path), _lines(gold_path)
    if len(inputs) != len(golds):
        raise ValueError(f"{input_path} has {len(inputs)} lines but {gold_path} has {len(golds)}")
    s1, s2, scores = [], [], []
    for lineno, (line, gold) in enumerate(zip(inputs, golds), start=1):
        if not gold.strip():
            continue
        fields = line.split("\t")
        if len(fields) != 2:
            raise ValueError(f"{input_path}:{lineno}: expected 2 tab-separated sentences, found {len(fields)} fields")
        s1.append(_normalise(fields[0]))
        s2.append(_normalise(fields[1]))
        scores.append(_score(gold.strip(), gold_path, lineno))
    return STSPairs(s1, s2, np.asarray(scores, dtype=np.float64))


def _read_columns(path: str, first: int, second: int, score: int, header: bool) -> STSPairs:
    """Tab-separated pairs: sentences in columns ``first`` and ``second``, gold in ``score``
    (0-based). Columns after the last one read are ignored."""
    needed = max(first, second, score) + 1
    s1, s2, scores = [], [], []
    lines = _lines(path, unicode_breaks=False)
    for lineno, line in enumerate(lines[1:] if header else lines, start=2 if header else 1):
        if not line.strip():
            continue
        fields = line.strip().split("\t")
        if len(fields) < needed:
            raise ValueError(f"{path}:{lineno}: expected at least {needed} tab-separated columns, found {len(fields)}")
        s1.append(_normalise(fields[first]))
        s2.append(_normalise(fields[second]))
        scores.append(_score(fields[score], path, lineno))
    return STSPairs(s1, s2, np.asarray(scores, dtype=np.float64))


def read_stsb(path: str) -> STSPairs:
    """``sts-*.csv``: genre, source, year, id, score, sentence 1, sentence 2[, metadata...]."""
    return _read_columns(path, 5, 6, 4, header=False)


def read_sick(path: str) -> STSPairs:
    """``SICK_*.txt``: a header row, then pair id, sentence A, sentence B, relatedness, ..."""
    return _read_columns(path, 1, 2, 3, header=True)


# Subsets as SentEval lists them (STS13 lacks the licence-restricted SMT subset).
STS_YEAR_SUBSETS = {
    "STS12": ("STS12-en-test", ("MSRpar", "MSRvid", "SMTeuroparl", "surprise.OnWN", "surprise.SMTnews")),
    "STS13": ("STS13-en-test", ("FNWN", "headlines", "OnWN")),
    "STS14": ("STS14-en-test", ("deft-forum", "deft-news", "headlines", "images", "OnWN", "tweet-news")),
    "STS15": ("STS15-en-test", ("answers-forums", "answers-students", "belief", "headlines", "images")),
    "STS16": ("STS16-en-test", ("answer-answer", "headlines", "plagiarism", "postediting", "question-question")),
}
STSB_FILES = {"dev": "sts-dev.csv", "test": "sts-test.csv"}
SICK_FILES = {"dev": "SICK_trial.txt", "test": "SICK_test_annotated.txt"}


def load_sts_task(task: str, split: str, senteval_dir: str) -> dict[str, STSPairs]:
    """The datasets of one STS task for a split ("dev" or "test"), keyed by subset name."""
    if task in STS_YEAR_SUBSETS:
        if split != "test":
            raise ValueError(f"{task} has only a test split")
        folder, subsets = STS_YEAR_SUBSETS[task]
        base = os.path.join(senteval_dir, "STS", folder)
        return {
            name: read_sts_subset(os.path.join(base, f"STS.input.{name}.txt"), os.path.join(base, f"STS.gs.{name}.txt"))
            for name in subsets
        }
    if task == "STSBenchmark":
        return {split: read_stsb(os.path.join(senteval_dir, "STS", "STSBenchmark", STSB_FILES[split]))}
    if task == "SICKRelatedness":
        return {split: read_sick(os.path.join(senteval_dir, "SICK", SICK_FILES[split]))}
    raise ValueError(f"unknown STS task {task!r}")


def cosine_scores(emb1: np.ndarray, emb2: np.ndarray) -> np.ndarray:
    """Row-wise cosine in float64; a zero vector scores 0 (SentEval's ``nan_to_num``)."""
    a, b = emb1.astype(np.float64), emb2.astype(np.float64)
    denom = np.sqrt((a * a).sum(1) * (b * b).sum(1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.nan_to_num((a * b).sum(1) / denom)


def correlations(predicted: np.ndarray, gold: np.ndarray) -> dict:
    # scipy.stats takes seconds to load: imported at the first evaluation, not with every command
    from scipy.stats import pearsonr, spearmanr

    return {
        "spearman": float(spearmanr(predicted, gold)[0]),
        "pearson": float(pearsonr(predicted, gold)[0]),
        "n": int(len(gold)),
    }


def score_sts_task(datasets: dict[str, STSPairs], embeddings: dict[str, np.ndarray]) -> dict:
    """Correlations of one task. With several subsets (STS12-16), the headline ``spearman`` and
    ``pearson`` are the "all" setting; ``spearman_mean``/``spearman_wmean`` are SentEval's plain and
    size-weighted means of per-subset figures."""
    predicted, gold, subsets = [], [], {}
    for name, pairs in datasets.items():
        e1 = np.stack([embeddings[s] for s in pairs.sentences1])
        e2 = np.stack([embeddings[s] for s in pairs.sentences2])
        sims = cosine_scores(e1, e2)
        subsets[name] = correlations(sims, pairs.scores)
        predicted.append(sims)
        gold.append(pairs.scores)
    result = correlations(np.concatenate(predicted), np.concatenate(gold))
    if len(subsets) > 1:
        sizes = np.array([s["n"] for s in subsets.values()], dtype=np.float64)
        per_subset = np.array([s["spearman"] for s in subsets.values()])
        result["spearman_mean"] = float(per_subset.mean())
        result["spearman_wmean"] = float((per_subset * sizes).sum() / sizes.sum())
        result["subsets"] = subsets
    return result
