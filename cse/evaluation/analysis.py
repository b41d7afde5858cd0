"""Geometry of an embedding set, as the papers analyse it.

``largest_angle`` is MixCSE's Fig. 4(b) statistic: the largest angle between any two sentence
embeddings, which shrinks when a representation collapses into a narrow cone.
"""

from __future__ import annotations

import numpy as np


def largest_angle(embeddings) -> float:
    """The largest angle, in degrees, between any two of the ``(n, d)`` embeddings (n >= 2), in
    float64: the arccos of the smallest pairwise cosine."""
    x = np.asarray(embeddings, dtype=np.float64)
    if x.ndim != 2 or x.shape[0] < 2:
        raise ValueError(f"need an (n, d) array with n >= 2, got shape {x.shape}")
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    if not np.all(norms > 0):
        raise ValueError("a zero embedding has no direction")
    x = x / norms
    return float(np.degrees(np.arccos(np.clip((x @ x.T).min(), -1.0, 1.0))))
