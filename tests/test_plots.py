"""The two pictures are written as non-empty PNG files (matplotlib, Agg), atomically: a write that
fails half-way leaves the previous figure whole."""

import errno
import json
import os
import subprocess
import sys

import pytest

from cse import plots
from cse.errors import OS_ERROR_HINTS

from .conftest import REPO, file_size_limit, plot_report


def reports(tmp_path):
    return [plot_report(tmp_path / f"m{i}" / "r.json", 0.2 + i / 10, -2.0 - i / 5, 70 + i, i) for i in range(3)]


@pytest.mark.parametrize("plot", sorted(plots.PLOTS))
def test_plots_are_non_empty_png_files(tmp_path, plot):
    out = tmp_path / "fig" / f"{plot}.png"
    plots.main([plot, str(out), *reports(tmp_path)])
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000


def test_a_figure_whose_write_fails_half_way_leaves_the_previous_one_whole(tmp_path):
    """The new figure's write is really cut at 4 KiB (a file size limit, EFBIG), in a real
    ``python -m cse.plots``: one line naming the file, exit 2, and the previous figure as it was."""
    runs = reports(tmp_path)
    out = tmp_path / "fig" / "figure.png"
    plots.main(["align_uniform", str(out), *runs])
    before = out.read_bytes()
    assert len(before) > 4096
    proc = subprocess.run(
        [sys.executable, "-m", "cse.plots", "cosine_density", str(out), *runs],
        capture_output=True,
        text=True,
        cwd=REPO,
        preexec_fn=file_size_limit(4096),
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.strip().splitlines()[-2:] == [
        f"error: File too large: {out}.tmp",
        f"  hint: {OS_ERROR_HINTS[errno.EFBIG]}",
    ]
    assert out.read_bytes() == before and os.listdir(out.parent) == [out.name]


def test_a_result_without_analysis_is_refused(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "r.json").write_text(json.dumps({"scores": {"Avg.": 1.0}}))
    with pytest.raises(SystemExit):
        plots.main(["align_uniform", str(tmp_path / "x.png"), str(tmp_path / "a" / "r.json")])
