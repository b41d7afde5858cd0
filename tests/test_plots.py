"""The two pictures are written as non-empty PNG files (matplotlib, Agg)."""

import json

import numpy as np
import pytest

from cse import plots


def fake_report(path, alignment, uniformity, average, seed):
    rng = np.random.RandomState(seed)
    gold = rng.uniform(0, 5, 200)
    cosines = np.clip(gold / 5 + rng.normal(0, 0.1, 200), -1, 1)
    analysis = {"split": "STSBenchmark test", "alignment": alignment, "uniformity": uniformity}
    analysis.update(largest_angle=80.0, cosines=cosines.tolist(), gold=gold.tolist())
    path.parent.mkdir()
    path.write_text(json.dumps({"scores": {"STS12": 1.0, "Avg.": average}, "analysis": analysis}))
    return str(path)


@pytest.mark.parametrize("plot", sorted(plots.PLOTS))
def test_plots_are_non_empty_png_files(tmp_path, plot):
    runs = [fake_report(tmp_path / f"m{i}" / "r.json", 0.2 + i / 10, -2.0 - i / 5, 70 + i, i) for i in range(3)]
    out = tmp_path / "fig" / f"{plot}.png"
    plots.main([plot, str(out), *runs])
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000


def test_a_result_without_analysis_is_refused(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "r.json").write_text(json.dumps({"scores": {"Avg.": 1.0}}))
    with pytest.raises(SystemExit):
        plots.main(["align_uniform", str(tmp_path / "x.png"), str(tmp_path / "a" / "r.json")])
