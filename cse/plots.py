"""The papers' two pictures, as PNG files, from result JSONs of ``senteval_eval.py --analysis``
(``--output_json DIR/sts_test_analysis.json``), and any result table as a picture.

    python -m cse.plots align_uniform fig/align_uniform.png result/*/sts_test_analysis.json
    python -m cse.plots cosine_density fig/density.png result/simcse/sts_test_analysis.json ...
    python -m cse.plots table result/_sweep/simcse-table5_unsup_bert_base/table.png .../table.txt

``align_uniform``: one point per model at (uniformity, alignment), coloured by its STS average (the
figure of SimCSE Fig. 2 and its successors; lower-left is better). ``cosine_density``: per model, the
density of predicted cosines of STS-B pairs grouped by gold score (bins [0,1), [1,2), ..., [4,5]),
as in SARCSE's Appendix D. Models are named by their result's folder, or ``--names``.

``table``: the tables ``python -m cse.results`` printed (a table script's ``table.txt``, which the
sweep writes with this figure beside it), one panel per table: per column, each row's score as a bar
next to its paper row's (hatched), the standard deviation over its seeds as an error bar where the
cell is ``mean ± std``, a ``missing`` cell as a cross and the word; difference rows are left out
(they are the gaps between the bars).
"""

from __future__ import annotations

import argparse
import io
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from .atomic import write_bytes
from .errors import CSEUsageError, run_cli
from .results import MISSING, read_result_json

GOLD_BINS = ((0.0, 1.0), (1.0, 2.0), (2.0, 3.0), (3.0, 4.0), (4.0, 5.0))


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    return plt


def _analysis(name: str, report: Mapping) -> dict:
    if "analysis" not in report:
        raise CSEUsageError(f"{name}: no 'analysis' in the result JSON; evaluate with senteval_eval.py --analysis")
    return report["analysis"]


def _sts_average(name: str, report: Mapping) -> float:
    scores = report.get("score_groups", {}).get("sts") or report["scores"]
    if "Avg." not in scores:
        raise CSEUsageError(f"{name}: no STS average in the result JSON")
    return float(scores["Avg."])


def align_uniform(reports: Mapping[str, Mapping], path: str) -> None:
    """Alignment against uniformity, one labelled point per model, coloured by STS average."""
    plt = _pyplot()
    names = list(reports)
    analyses = [_analysis(n, reports[n]) for n in names]
    x = [a["uniformity"] for a in analyses]
    y = [a["alignment"] for a in analyses]
    colour = [_sts_average(n, reports[n]) for n in names]
    fig, ax = plt.subplots(figsize=(5.5, 4.5))
    points = ax.scatter(x, y, c=colour, cmap="viridis", s=80, edgecolors="black")
    for name, xi, yi in zip(names, x, y):
        ax.annotate(name, (xi, yi), textcoords="offset points", xytext=(6, 4), fontsize=8)
    fig.colorbar(points, ax=ax, label="STS Avg.")
    ax.set_xlabel(r"$\ell_{uniform}$")
    ax.set_ylabel(r"$\ell_{align}$")
    ax.set_title(f"Alignment and uniformity ({analyses[0]['split']})")
    ax.margins(0.2)  # room for the labels
    ax.grid(alpha=0.3)
    _save(fig, path, plt)


def cosine_density(reports: Mapping[str, Mapping], path: str, bins: int = 40) -> None:
    """Per model, the density of predicted cosines of STS-B pairs in each gold-score bin."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(reports), figsize=(4.5 * len(reports), 3.5), squeeze=False, sharey=True)
    for ax, (name, report) in zip(axes[0], reports.items()):
        analysis = _analysis(name, report)
        cosine, gold = np.asarray(analysis["cosines"]), np.asarray(analysis["gold"])
        for low, high in GOLD_BINS:
            last = high == GOLD_BINS[-1][1]  # the top bin includes 5
            inside = (gold >= low) & ((gold <= high) if last else (gold < high))
            if inside.sum() < 2:
                continue
            density, edges = np.histogram(cosine[inside], bins=bins, range=(-1.0, 1.0), density=True)
            # SARCSE's point in Appendix D is the spread within a bin: its mean and (sample) std are shown
            spread = f"{cosine[inside].mean():.2f} ± {cosine[inside].std(ddof=1):.2f}"
            label = f"gold {low:g}-{high:g}: n={inside.sum()}, cos {spread}"
            ax.plot((edges[:-1] + edges[1:]) / 2, density, label=label)
        ax.set_title(f"{name} ({analysis['split']})", fontsize=9)
        ax.set_xlabel("predicted cosine")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("density")
    axes[0][-1].legend(fontsize=7)
    _save(fig, path, plt)


def _save(fig, path: str, plt) -> None:
    """Render ``fig`` in memory, in the format its file name's suffix names (PNG without one), and write
    it atomically: a failed or interrupted write leaves the previous figure whole."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.tight_layout()
    image = io.BytesIO()
    fig.savefig(image, format=os.path.splitext(path)[1][1:].lower() or None, dpi=120)
    plt.close(fig)
    write_bytes(path, image.getvalue())


@dataclass
class TableRow:
    """A row of a printed table: its name and cells (a float, ``(mean, std)`` over seeds,
    :data:`~cse.results.MISSING`, or ``None`` for ``-``), and the paper's row printed under it."""

    name: str
    cells: dict
    paper: TableRow | None = None


@dataclass
class PrintedTable:
    title: str
    columns: list[str]
    rows: list[TableRow] = field(default_factory=list)


def _cell(text: str):
    if text == "-":
        return None
    if text == MISSING:
        return MISSING
    mean, _, std = text.partition(" ± ")
    try:
        return (float(mean), float(std)) if std else float(mean)
    except ValueError:
        raise CSEUsageError(f"table cell {text!r} is not a score", hint=TABLE_HINT) from None


def _is_difference(name: str) -> bool:
    return name == "difference" or name.endswith(" - paper")


def read_tables(text: str) -> list[PrintedTable]:
    """The markdown tables of ``text`` (what :mod:`cse.results` prints), each titled by the last
    line of prose above it; a ``paper, ...`` row is the paper's row of the row above it."""
    tables, title, lines = [], "", text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].strip()
        if not (line.startswith("|") and i + 1 < len(lines) and lines[i + 1].strip().startswith("|---")):
            if line and not line.startswith("|"):
                title = line.lstrip("# ")
            i += 1
            continue
        columns = [c.strip() for c in line.strip("|").split("|")][1:]
        table, i = PrintedTable(title, columns), i + 2
        while i < len(lines) and lines[i].strip().startswith("|"):
            name, *cells = [c.strip() for c in lines[i].strip().strip("|").split("|")]
            if len(cells) != len(columns):
                raise CSEUsageError(f"table row {name!r} has {len(cells)} cells for {len(columns)} columns")
            row = TableRow(name, {c: _cell(v) for c, v in zip(columns, cells)})
            if name.startswith("paper") and table.rows and table.rows[-1].paper is None:
                table.rows[-1].paper = row
            elif not _is_difference(name):
                table.rows.append(row)
            i += 1
        tables.append(table)
    if not tables:
        raise CSEUsageError("no result table in the text", hint=TABLE_HINT)
    return tables


TABLE_HINT = "pass what python -m cse.results printed, e.g. a table script's table.txt"


def _value(cell) -> float | None:
    return None if cell is None or cell == MISSING else cell[0] if isinstance(cell, tuple) else cell


def table_figure(tables: list[PrintedTable]):
    """The figure of :func:`table` (returned open, for inspection): one panel per table. Each bar
    carries its cell in ``gid`` (``row|column|ours`` or ``row|column|paper``); the error bars are
    labelled ``seeds``."""
    plt = _pyplot()
    widths = [len(t.columns) * max(1, sum(1 + (r.paper is not None) for r in t.rows)) for t in tables]
    fig, axes = plt.subplots(
        len(tables), 1, figsize=(max(6.0, 0.28 * max(widths) + 2.5) + 4.0, 3.6 * len(tables)), squeeze=False
    )
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, table in zip(axes[:, 0], tables):
        bars = [(r, r.cells, "ours", colours[i % len(colours)]) for i, r in enumerate(table.rows)]
        slots = []
        for row, cells, kind, colour in bars:
            slots.append((row.name, cells, kind, colour))
            if row.paper is not None:
                slots.append((row.paper.name, row.paper.cells, "paper", colour))
        width = 0.8 / len(slots)
        values = [_value(cells.get(c)) for _, cells, _, _ in slots for c in table.columns]
        known = [v for v in values if v is not None]
        low = max(0.0, np.floor(min(known)) - 5.0) if known else 0.0
        for k, (name, cells, kind, colour) in enumerate(slots):
            x = np.arange(len(table.columns)) - 0.4 + width * (k + 0.5)
            for xi, column in zip(x, table.columns):
                cell = cells.get(column)
                first = column == table.columns[0]
                if cell == MISSING:
                    ax.plot(
                        [xi], [low + 0.4], linestyle="none", marker="x", color=colour, markersize=7,
                        markeredgewidth=2, gid=f"{name}|{column}|missing", label=name if first else None,
                    )  # fmt: skip
                    ax.text(xi, low + 1.2, MISSING, rotation=90, ha="center", va="bottom", fontsize=7)
                    continue
                value = _value(cell)
                if value is None:
                    continue
                ax.bar(
                    xi, value, width, color=colour, alpha=0.45 if kind == "paper" else 1.0,
                    hatch="//" if kind == "paper" else None, edgecolor="black", linewidth=0.5,
                    gid=f"{name}|{column}|{kind}", label=name if first else None,
                )  # fmt: skip
                if isinstance(cell, tuple):
                    ax.errorbar(xi, value, yerr=cell[1], color="black", capsize=3, linewidth=1, label="seeds")
        ax.set_xticks(np.arange(len(table.columns)), table.columns)
        high = max(known) if known else 100.0
        ax.set_ylim(low, high + 0.08 * (high - low) + 1)
        ax.set_title(table.title or "results", fontsize=9)
        ax.grid(axis="y", alpha=0.3)
        handles, labels = ax.get_legend_handles_labels()
        keep = [(h, lab) for h, lab in zip(handles, labels) if lab != "seeds"]
        if keep:  # beside the panel, off the bars
            ax.legend(*zip(*keep), fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    return fig


def table(tables: list[PrintedTable], path: str) -> None:
    """The tables as bars: each row's scores beside its paper row's, seeds' spread, missing cells."""
    _save(table_figure(tables), path, _pyplot())


PLOTS = {"align_uniform": align_uniform, "cosine_density": cosine_density, "table": table}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False
    )
    parser.add_argument("plot", choices=sorted(PLOTS))
    parser.add_argument("output_png")
    parser.add_argument(
        "result_json", nargs="+", help="results of senteval_eval.py --analysis (table: the text cse.results printed)"
    )
    parser.add_argument("--names", nargs="+", default=None, help="model names (default: the JSONs' folders)")
    return parser


def check_output(output: str, inputs: list[str]) -> None:
    """Refuse, before any work, an output whose suffix names no image format matplotlib writes, or
    that is one of the inputs (a figure never replaces what it is drawn from)."""
    from matplotlib.backend_bases import FigureCanvasBase

    suffix = os.path.splitext(output)[1][1:].lower()
    formats = FigureCanvasBase.get_supported_filetypes()
    if suffix and suffix not in formats:
        raise CSEUsageError(
            f"{output}: {suffix!r} is not an image format matplotlib writes",
            hint=f"name the figure with one of {', '.join(sorted(formats))} (e.g. {os.path.splitext(output)[0]}.png)",
        )
    if any(os.path.exists(path) and os.path.samefile(path, output) for path in inputs if os.path.exists(output)):
        raise CSEUsageError(f"{output} is one of the inputs", hint="name another file for the figure")


def main(argv=None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    check_output(args.output_png, args.result_json)
    if args.plot == "table":
        if args.names is not None:
            parser.error("table names its rows as the printed table does: no --names")
        text = ""
        for path in args.result_json:
            if not os.path.isfile(path):
                raise CSEUsageError(f"table text not found: {path}", hint=TABLE_HINT)
            with open(path, encoding="utf-8") as f:
                text += f.read() + "\n"
        table(read_tables(text), args.output_png)
        print(args.output_png)
        return
    if args.names is not None and len(args.names) != len(args.result_json):
        parser.error(f"{len(args.result_json)} result JSON(s) but {len(args.names)} --names")
    names = args.names or [os.path.basename(os.path.dirname(os.path.abspath(p))) for p in args.result_json]
    if len(set(names)) != len(names):
        parser.error("two results have the same name: give --names")
    reports = {}
    for name, path in zip(names, args.result_json):
        reports[name] = read_result_json(path)
    try:
        PLOTS[args.plot](reports, args.output_png)
    except ValueError as error:
        parser.error(str(error))
    print(args.output_png)


if __name__ == "__main__":
    run_cli(main)
