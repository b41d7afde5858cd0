"""Result tables: the papers' published numbers (``configs/paper_results.yaml``) and markdown
tables that put our scores beside them."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

import yaml

STS_COLUMNS = ("STS12", "STS13", "STS14", "STS15", "STS16", "STS-B", "SICK-R", "Avg.")
PAPER_RESULTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "configs", "paper_results.yaml")


def load_paper_results(path: str = PAPER_RESULTS) -> dict:
    """``{row_id: {"paper", "table", "model", "scores": {column: value}}}``."""
    with open(path, encoding="utf-8") as f:
        data = yaml.safe_load(f)
    rows = {}
    for row_id, row in data["rows"].items():
        scores = dict(zip(row["columns"], row["values"]))
        if len(scores) != len(row["values"]) or len(row["columns"]) != len(row["values"]):
            raise ValueError(f"{path}: row {row_id} has {len(row['values'])} values for {len(row['columns'])} columns")
        rows[row_id] = {**{k: v for k, v in row.items() if k not in ("columns", "values")}, "scores": scores}
    return rows


def markdown_table(rows: Mapping[str, Mapping[str, float]], columns: Sequence[str], first: str = "Model") -> str:
    """A markdown table, one row per entry, two decimals; a missing value prints as ``-``."""
    lines = [
        "| " + " | ".join([first, *columns]) + " |",
        "|" + "|".join(["---"] + ["---:"] * len(columns)) + "|",
    ]
    for name, scores in rows.items():
        cells = [f"{scores[c]:.2f}" if c in scores and scores[c] is not None else "-" for c in columns]
        lines.append("| " + " | ".join([name, *cells]) + " |")
    return "\n".join(lines)


def compare_with_paper(ours: Mapping[str, float], paper_row_id: str, name: str = "ours", path: str = PAPER_RESULTS) -> str:
    """Our scores, the paper's row and the difference, as one markdown table."""
    paper = load_paper_results(path)[paper_row_id]
    columns = [c for c in paper["scores"] if c in ours]
    diff = {c: ours[c] - paper["scores"][c] for c in columns}
    label = f"{paper['paper']} {paper['table']}: {paper['model']}"
    return markdown_table({name: ours, label: paper["scores"], "difference": diff}, columns)
