"""Result tables: the papers' published numbers (``configs/paper_results.yaml``) and markdown
tables that put our scores beside them.

    python -m cse.results result/simcse/sts_test_results.json --paper_row simcse_unsup_bert_base
    python -m cse.results result/a/sts_test_results.json result/b/sts_test_results.json
    python -m cse.results result/mixcse-seed*/sts_test_results.json --paper_row mixcse_bert_base

Several JSONs with ``--paper_row`` are seeds of one model: the row shows mean ± standard deviation
(sample, n - 1) per column, and the difference is the mean's.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Mapping, Sequence

import numpy as np
import yaml

PAPER_RESULTS = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "configs", "paper_results.yaml"
)


def load_paper_results(path: str = PAPER_RESULTS) -> dict:
    """``{row_id: {"paper", "table", "model", "scores": {column: value}}}``."""
    with open(path, encoding="utf-8") as f:
        data = yaml.safe_load(f)
    rows = {}
    for row_id, row in data["rows"].items():
        columns = data["column_sets"][row["columns"]]
        if len(columns) != len(row["values"]):
            raise ValueError(f"{path}: row {row_id} has {len(row['values'])} values for {len(columns)} columns")
        scores = dict(zip(columns, row["values"]))
        rows[row_id] = {**{k: v for k, v in row.items() if k not in ("columns", "values")}, "scores": scores}
    return rows


def format_cell(value) -> str:
    """Two decimals; a ``(mean, std)`` pair as ``mean ± std``; ``None`` as ``-``."""
    if value is None:
        return "-"
    if isinstance(value, tuple):
        return f"{value[0]:.2f} ± {value[1]:.2f}"
    return f"{value:.2f}"


def mean_value(value) -> float:
    return value[0] if isinstance(value, tuple) else value


def aggregate_seeds(runs: Sequence[Mapping[str, float]]) -> dict:
    """The columns every run has, each as ``(mean, sample std)`` over the runs; one run is returned
    as it is (a standard deviation needs two)."""
    if not runs:
        raise ValueError("no runs to aggregate")
    if len(runs) == 1:
        return dict(runs[0])
    columns = [c for c in runs[0] if all(c in run and run[c] is not None for run in runs)]
    values = {c: np.array([run[c] for run in runs], dtype=np.float64) for c in columns}
    return {c: (float(v.mean()), float(v.std(ddof=1))) for c, v in values.items()}


def markdown_table(rows: Mapping[str, Mapping[str, float]], columns: Sequence[str], first: str = "Model") -> str:
    """A markdown table, one row per entry (see :func:`format_cell`); a missing value prints as ``-``."""
    lines = [
        "| " + " | ".join([first, *columns]) + " |",
        "|" + "|".join(["---"] + ["---:"] * len(columns)) + "|",
    ]
    for name, scores in rows.items():
        cells = [format_cell(scores.get(c)) for c in columns]
        lines.append("| " + " | ".join([name, *cells]) + " |")
    return "\n".join(lines)


def compare_with_paper(
    ours: Mapping[str, float], paper_row_id: str, name: str = "ours", path: str = PAPER_RESULTS
) -> str:
    """Our scores (floats, or ``(mean, std)`` over seeds), the paper's row and the difference (ours, or
    our mean, - paper), as one markdown table under a line citing the source."""
    paper = load_paper_results(path)[paper_row_id]
    columns = [c for c in paper["scores"] if c in ours]
    diff = {c: mean_value(ours[c]) - paper["scores"][c] for c in columns}
    label = f"paper, {paper['table']}: {paper['model']}"
    table = markdown_table({name: ours, label: paper["scores"], "difference": diff}, columns)
    return f"Paper: {paper['paper']}\n\n{table}"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(
        description="Print result JSONs of senteval_eval.py / run_*.py as one table, or one beside a paper row."
    )
    parser.add_argument("result_json", nargs="+")
    parser.add_argument(
        "--paper_row",
        default=None,
        help="row id in configs/paper_results.yaml; several JSONs are then seeds of one model (mean ± std)",
    )
    parser.add_argument("--name", nargs="+", default=None, help="row name(s); default: ours / the JSONs' folders")
    args = parser.parse_args(argv)
    scores = []
    for path in args.result_json:
        with open(path, encoding="utf-8") as f:
            scores.append(json.load(f)["scores"])
    if args.paper_row is not None:
        if args.name is not None and len(args.name) != 1:
            parser.error("--paper_row makes one row: give one --name")
        name = args.name[0] if args.name else "ours" if len(scores) == 1 else f"ours ({len(scores)} seeds)"
        print(compare_with_paper(aggregate_seeds(scores), args.paper_row, name=name))
        return
    if args.name is not None and len(args.name) != len(args.result_json):
        parser.error(f"{len(args.result_json)} result JSON(s) but {len(args.name)} --name(s)")
    names = args.name or [os.path.basename(os.path.dirname(os.path.abspath(p))) for p in args.result_json]
    print(markdown_table(dict(zip(names, scores)), list(scores[0])))


if __name__ == "__main__":
    main()
