import numpy as np
import pytest

from cse.evaluation.analysis import largest_angle


def test_largest_angle_is_the_widest_pair_in_degrees():
    # 0, 30 and 100 degrees in a plane, lengths varied, and a vector orthogonal to the plane: the
    # widest pair is 0 and 100 (100 degrees), wider than the orthogonal one's 90
    rad = np.radians([0.0, 30.0, 100.0])
    x = np.stack([np.cos(rad), np.sin(rad), np.zeros(3)], axis=1) * np.array([[1.0], [3.0], [0.5]])
    x = np.vstack([x, [0.0, 0.0, 2.0]]).astype(np.float32)
    assert largest_angle(x) == pytest.approx(100.0, abs=1e-4)
    assert largest_angle(np.array([[1.0, 0.0], [-1.0, 0.0]])) == pytest.approx(180.0)
    assert largest_angle(np.ones((5, 3))) == pytest.approx(0.0, abs=1e-5)


def test_largest_angle_refuses_what_has_no_angle():
    with pytest.raises(ValueError):
        largest_angle(np.ones((1, 3)))
    with pytest.raises(ValueError):
        largest_angle(np.array([[1.0, 0.0], [0.0, 0.0]]))
