"""Geometry of an embedding set, as the papers analyse it.

``largest_angle`` is MixCSE's Fig. 4(b) statistic: the largest angle between any two sentence
embeddings, which shrinks when a representation collapses into a narrow cone.

``alignment`` and ``uniformity`` are Wang and Isola's (ICML 2020) measures on the unit sphere, which
SimCSE (Sec. 5) and the papers after it report on STS-B: alignment over positive pairs (STS-B pairs
with a gold score of 4 or more), uniformity over all STS-B sentences. Lower is better for both.
:func:`stsb_analysis` computes the three on STS-B, plus each pair's cosine and gold score (for
per-gold-bin density plots, :mod:`cse.plots`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

import numpy as np

from .sts import STSB_FILES, cosine_scores, read_stsb

# SimCSE's choice of positives for alignment: STS-B pairs scored 4 or more (out of 5).
POSITIVE_GOLD = 4.0


def _unit(embeddings, what: str = "embeddings") -> np.ndarray:
    x = np.asarray(embeddings, dtype=np.float64)
    if x.ndim != 2 or x.shape[0] < 1:
        raise ValueError(f"{what}: need an (n, d) array, got shape {x.shape}")
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    if not np.all(norms > 0):
        raise ValueError(f"{what}: a zero embedding has no direction")
    return x / norms


def largest_angle(embeddings) -> float:
    """The largest angle, in degrees, between any two of the ``(n, d)`` embeddings (n >= 2), in
    float64: the arccos of the smallest pairwise cosine."""
    x = _unit(embeddings)
    if x.shape[0] < 2:
        raise ValueError(f"need an (n, d) array with n >= 2, got shape {x.shape}")
    return float(np.degrees(np.arccos(np.clip((x @ x.T).min(), -1.0, 1.0))))


def alignment(x, y, alpha: float = 2.0) -> float:
    """l_align = E_(x,y)~p_pos ||f(x) - f(y)||^alpha (Wang and Isola, Eq. 4; alpha = 2 as in SimCSE),
    the embeddings L2-normalised; row i of ``x`` and of ``y`` are a positive pair."""
    x, y = _unit(x, "x"), _unit(y, "y")
    if x.shape != y.shape:
        raise ValueError(f"positive pairs need equal shapes, got {x.shape} and {y.shape}")
    return float((np.linalg.norm(x - y, axis=1) ** alpha).mean())


def uniformity(embeddings, t: float = 2.0) -> float:
    """l_uniform = log E_(x,y)~p_data e^(-t ||f(x) - f(y)||^2) (Wang and Isola, Eq. 5; t = 2), over
    all pairs i < j of the L2-normalised embeddings (their code's ``pdist``)."""
    x = _unit(embeddings)
    if x.shape[0] < 2:
        raise ValueError(f"uniformity needs at least 2 embeddings, got {x.shape[0]}")
    i, j = np.triu_indices(x.shape[0], k=1)
    # ||a - b||^2 = 2 - 2 a.b on the unit sphere; a log-mean-exp for accuracy
    exponents = -t * np.maximum(2.0 - 2.0 * (x @ x.T)[i, j], 0.0)
    peak = exponents.max()
    return float(peak + np.log(np.exp(exponents - peak).mean()))


def stsb_analysis(encode: Callable[[Sequence[str]], np.ndarray], mode: str, senteval_dir: str) -> dict:
    """Alignment (pairs with gold >= 4), uniformity and largest angle (distinct sentences) on STS-B
    dev or test, and every pair's cosine and gold score."""
    pairs = read_stsb(os.path.join(senteval_dir, "STS", "STSBenchmark", STSB_FILES[mode]))
    sentences = list(dict.fromkeys(pairs.sentences1 + pairs.sentences2))
    vectors = dict(zip(sentences, np.asarray(encode(sentences))))
    e1 = np.stack([vectors[s] for s in pairs.sentences1])
    e2 = np.stack([vectors[s] for s in pairs.sentences2])
    positive = pairs.scores >= POSITIVE_GOLD
    everything = np.stack([vectors[s] for s in sentences])
    return {
        "split": f"STSBenchmark {mode}",
        "alignment": alignment(e1[positive], e2[positive]),
        "uniformity": uniformity(everything),
        "largest_angle": largest_angle(everything),
        "n_positive_pairs": int(positive.sum()),
        "n_sentences": len(sentences),
        "cosines": cosine_scores(e1, e2).tolist(),
        "gold": pairs.scores.tolist(),
    }
