"""Alignment and uniformity (Wang and Isola) against float64 hand computations, and their STS-B
inputs (pairs with gold >= 4; distinct sentences)."""

import math
import os

import numpy as np
import pytest

from cse.evaluation.analysis import alignment, largest_angle, stsb_analysis, uniformity

X = [[1.0, 0.0, 0.0], [0.0, 2.0, 0.0], [3.0, 4.0, 0.0], [1.0, 1.0, 1.0]]
Y = [[0.0, 1.0, 0.0], [1.0, 1.0, 0.0], [3.0, 4.0, 0.0], [-1.0, 0.5, 2.0]]


def unit(v):
    n = math.sqrt(sum(a * a for a in v))
    return [a / n for a in v]


def sq_dist(a, b):
    return sum((p - q) ** 2 for p, q in zip(unit(a), unit(b)))


def test_alignment_is_the_mean_squared_distance_of_normalised_positives():
    expected = sum(sq_dist(a, b) for a, b in zip(X, Y)) / len(X)
    assert alignment(np.array(X, dtype=np.float32), Y) == pytest.approx(expected, rel=1e-6)
    # alpha = 1: mean distance
    assert alignment(X, Y, alpha=1) == pytest.approx(sum(math.sqrt(sq_dist(a, b)) for a, b in zip(X, Y)) / 4)
    assert alignment([[2.0, 0.0]], [[5.0, 0.0]]) == 0.0  # same direction
    with pytest.raises(ValueError):
        alignment(X, Y[:2])


def test_uniformity_is_the_log_mean_gaussian_potential_over_distinct_pairs():
    points = X + Y
    potentials = [
        math.exp(-2.0 * sq_dist(points[i], points[j])) for i in range(len(points)) for j in range(i + 1, len(points))
    ]
    assert uniformity(points) == pytest.approx(math.log(sum(potentials) / len(potentials)), rel=1e-9)
    assert uniformity([[1.0, 0.0], [-1.0, 0.0]]) == pytest.approx(-8.0)  # antipodal: ||x - y||^2 = 4, t = 2
    assert uniformity([[1.0, 0.0], [3.0, 0.0]], t=5.0) == pytest.approx(0.0)  # one direction: log 1
    with pytest.raises(ValueError):
        uniformity([[1.0, 0.0]])
    with pytest.raises(ValueError, match="zero"):
        uniformity([[1.0, 0.0], [0.0, 0.0]])


def test_stsb_analysis_uses_pairs_scored_4_or_more_and_distinct_sentences(tmp_path):
    folder = tmp_path / "STS" / "STSBenchmark"
    folder.mkdir(parents=True)
    rows = [("a", "b", 4.0), ("a", "c", 1.0), ("d", "e", 4.6), ("b", "e", 3.99)]
    (folder / "sts-test.csv").write_text(
        "".join(f"g\ts\t2012\t{i}\t{g}\t{s1}\t{s2}\n" for i, (s1, s2, g) in enumerate(rows))
    )
    vectors = {"a": [1.0, 0.0], "b": [0.0, 1.0], "c": [1.0, 1.0], "d": [-1.0, 0.2], "e": [0.3, -1.0]}
    seen = []

    def encode(sentences):
        seen.append(list(sentences))
        return np.array([vectors[s] for s in sentences])

    result = stsb_analysis(encode, "test", str(tmp_path))
    assert seen == [["a", "d", "b", "c", "e"]]  # each distinct sentence once (first sentences, then seconds)
    assert result["alignment"] == pytest.approx((sq_dist([1, 0], [0, 1]) + sq_dist([-1, 0.2], [0.3, -1])) / 2)
    assert result["uniformity"] == pytest.approx(uniformity(list(vectors.values())))
    assert result["largest_angle"] == pytest.approx(largest_angle(list(vectors.values())))
    assert result["n_positive_pairs"] == 2 and result["n_sentences"] == 5
    assert result["gold"] == [4.0, 1.0, 4.6, 3.99]
    assert result["cosines"][1] == pytest.approx(1 / math.sqrt(2))
    assert os.path.basename(result["split"]) == "STSBenchmark test"
