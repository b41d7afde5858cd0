"""The two pictures are written as non-empty PNG files (matplotlib, Agg), atomically: a write that
fails half-way leaves the previous figure whole."""

import errno
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from cse import plots
from cse.errors import OS_ERROR_HINTS

from .conftest import REPO, file_size_limit, plot_report


def reports(tmp_path):
    return [plot_report(tmp_path / f"m{i}" / "r.json", 0.2 + i / 10, -2.0 - i / 5, 70 + i, i) for i in range(3)]


@pytest.mark.parametrize("plot", sorted(set(plots.PLOTS) - {"table"}))  # table: below
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


# What python -m cse.results printed (a table script's table.txt): a group of 3 seeds with its paper
# row and difference, a single run, a run that failed, and a second table whose row is missing.
TABLE_TEXT = """STS (Spearman x 100)

| Model | STS12 | STS-B | Avg. |
|---|---:|---:|---:|
| mixcse (3 seeds) | 72.00 ± 2.00 | 80.00 ± 1.00 | 76.00 ± 1.50 |
| paper, Table 1: MixCSE | 71.71 | 78.48 | 75.10 |
| mixcse - paper | 0.29 | 1.52 | 0.90 |
| simcse | 68.40 | - | 68.40 |
| gone (missing) | missing | missing | missing |

Transfer tasks (accuracy x 100)

| Model | MR | Avg. |
|---|---:|---:|
| ours (1 of 2 missing) | missing | missing |
| paper, Table 2: X | 81.00 | 81.00 |
| difference | missing | missing |
"""


def test_a_printed_table_is_read_back_as_its_rows_and_paper_rows():
    first, second = plots.read_tables(TABLE_TEXT)
    assert first.title == "STS (Spearman x 100)" and first.columns == ["STS12", "STS-B", "Avg."]
    assert [r.name for r in first.rows] == ["mixcse (3 seeds)", "simcse", "gone (missing)"]
    assert first.rows[0].cells["STS12"] == (72.0, 2.0) and first.rows[0].paper.cells["STS-B"] == 78.48
    assert first.rows[1].cells == {"STS12": 68.4, "STS-B": None, "Avg.": 68.4} and first.rows[1].paper is None
    assert second.rows[0].cells == {"MR": "missing", "Avg.": "missing"} and second.rows[0].paper.cells["MR"] == 81.0


def test_the_table_figure_draws_every_cell_of_the_table():
    """The figure's artists against the text: a bar per score (ours and the paper's), an error bar of
    the seeds' standard deviation, a cross per missing cell, nothing for ``-``."""
    import matplotlib.pyplot as plt

    fig = plots.table_figure(plots.read_tables(TABLE_TEXT))
    top, bottom = fig.axes[:2]
    bars = {p.get_gid(): p.get_height() for p in top.patches}
    assert bars == {
        "mixcse (3 seeds)|STS12|ours": 72.0,
        "mixcse (3 seeds)|STS-B|ours": 80.0,
        "mixcse (3 seeds)|Avg.|ours": 76.0,
        "paper, Table 1: MixCSE|STS12|paper": 71.71,
        "paper, Table 1: MixCSE|STS-B|paper": 78.48,
        "paper, Table 1: MixCSE|Avg.|paper": 75.10,
        "simcse|STS12|ours": 68.4,
        "simcse|Avg.|ours": 68.4,
    }
    # the error bars span mean ± std: (70, 74), (79, 81), (74.5, 77.5)
    spans = sorted(tuple(seg[:, 1]) for c in top.collections for seg in c.get_segments())
    assert spans == [(70.0, 74.0), (74.5, 77.5), (79.0, 81.0)]
    crosses = sorted(line.get_gid() for line in top.lines if line.get_gid())
    assert crosses == [f"gone (missing)|{c}|missing" for c in ("Avg.", "STS-B", "STS12")]
    assert sum(t.get_text() == "missing" for t in top.texts) == 3
    assert {p.get_gid() for p in bottom.patches} == {"paper, Table 2: X|MR|paper", "paper, Table 2: X|Avg.|paper"}
    assert len([line for line in bottom.lines if line.get_gid()]) == 2
    assert top.get_title() == "STS (Spearman x 100)"
    plt.close(fig)


def test_the_table_png_shows_the_bars_at_their_heights(tmp_path):
    """The PNG itself, read back: its size is the figure's at 120 dpi, and in the pixel column through
    each of the single run's bars the bar's colour starts at the height of its score."""
    import matplotlib.image as mpimg
    import matplotlib.pyplot as plt
    from matplotlib.colors import to_rgba

    text = tmp_path / "table.txt"
    text.write_text(TABLE_TEXT)
    out = tmp_path / "table.png"
    plots.main(["table", str(out), str(text)])
    image = mpimg.imread(out)
    fig = plots.table_figure(plots.read_tables(TABLE_TEXT))
    fig.set_dpi(120)
    width, height = fig.get_size_inches() * 120
    assert image.shape[:2] == (round(height), round(width))
    ax = fig.axes[0]
    fig.canvas.draw()
    for patch in ax.patches:
        if not patch.get_gid().startswith("simcse|"):
            continue
        colour = np.array(to_rgba(patch.get_facecolor()))[:3]
        x = patch.get_x() + patch.get_width() / 2
        column_x, _ = ax.transData.transform((x, 0))
        pixels = image[:, int(round(column_x)), :3]
        rows = np.where(np.abs(pixels - colour).max(axis=1) < 0.02)[0]
        top_row = rows.min()  # the first row of the bar's colour, from the top of the image
        drawn = ax.transData.inverted().transform((column_x, height - top_row - 0.5))[1]
        pixel = np.diff(ax.get_ylim())[0] / ax.get_window_extent().height
        assert drawn == pytest.approx(patch.get_height(), abs=3 * pixel), patch.get_gid()
    plt.close(fig)


def test_a_text_without_a_table_is_refused(tmp_path, capsys):
    from .conftest import refusal

    (tmp_path / "t.txt").write_text("s1: none of its runs finished, no table\n")
    error, hint = refusal(capsys, plots.main, ["table", str(tmp_path / "f.png"), str(tmp_path / "t.txt")])
    assert error == "error: no result table in the text"
    assert hint == "  hint: pass what python -m cse.results printed, e.g. a table script's table.txt"
    error, _ = refusal(capsys, plots.main, ["table", str(tmp_path / "f.png"), str(tmp_path / "none.txt")])
    assert error == f"error: table text not found: {tmp_path / 'none.txt'}"
    assert not (tmp_path / "f.png").exists()


def test_an_output_that_is_no_image_or_is_an_input_is_refused_before_any_work(tmp_path, capsys):
    """``cse.plots table t.txt t.txt``: matplotlib's traceback came after the table was read; the name
    is refused first, and the input stays as it was."""
    from .conftest import refusal

    table_text = tmp_path / "t.txt"
    table_text.write_text("s1: none of its runs finished, no table\n")
    error, hint = refusal(capsys, plots.main, ["table", str(table_text), str(table_text)])
    assert error == f"error: {table_text}: 'txt' is not an image format matplotlib writes"
    assert hint.startswith("  hint: name the figure with one of ") and f"{tmp_path / 't'}.png" in hint
    copy = tmp_path / "t.png"
    copy.write_bytes(b"\x89PNG not a figure")
    error, _ = refusal(capsys, plots.main, ["table", str(copy), str(copy)])
    assert error == f"error: {copy} is one of the inputs"
    assert table_text.read_text() == "s1: none of its runs finished, no table\n"
    assert copy.read_bytes() == b"\x89PNG not a figure"
