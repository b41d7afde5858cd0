"""The papers' two pictures, as PNG files, from result JSONs of ``senteval_eval.py --analysis``
(``--output_json DIR/sts_test_analysis.json``).

    python -m cse.plots align_uniform fig/align_uniform.png result/*/sts_test_analysis.json
    python -m cse.plots cosine_density fig/density.png result/simcse/sts_test_analysis.json ...

``align_uniform``: one point per model at (uniformity, alignment), coloured by its STS average (the
figure of SimCSE Fig. 2 and its successors; lower-left is better). ``cosine_density``: per model, the
density of predicted cosines of STS-B pairs grouped by gold score (bins [0,1), [1,2), ..., [4,5]),
as in SARCSE's Appendix D. Models are named by their result's folder, or ``--names``.
"""

from __future__ import annotations

import argparse
import io
import os
from collections.abc import Mapping

import numpy as np

from .atomic import write_bytes
from .errors import CSEUsageError, run_cli
from .results import read_result_json

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


PLOTS = {"align_uniform": align_uniform, "cosine_density": cosine_density}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False
    )
    parser.add_argument("plot", choices=sorted(PLOTS))
    parser.add_argument("output_png")
    parser.add_argument("result_json", nargs="+", help="results of senteval_eval.py --analysis")
    parser.add_argument("--names", nargs="+", default=None, help="model names (default: the JSONs' folders)")
    return parser


def main(argv=None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
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
