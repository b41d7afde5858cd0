"""Result tables: the papers' published numbers (``configs/paper_results.yaml``) and markdown
tables that put our scores beside them.

    python -m cse.results result/simcse/sts_test_results.json --paper_row simcse_unsup_bert_base
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Mapping, Sequence

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


def compare_with_paper(
    ours: Mapping[str, float], paper_row_id: str, name: str = "ours", path: str = PAPER_RESULTS
) -> str:
    """Our scores, the paper's row and the difference (ours - paper), as one markdown table under a
    line citing the source."""
    paper = load_paper_results(path)[paper_row_id]
    columns = [c for c in paper["scores"] if c in ours]
    diff = {c: ours[c] - paper["scores"][c] for c in columns}
    label = f"paper, {paper['table']}: {paper['model']}"
    table = markdown_table({name: ours, label: paper["scores"], "difference": diff}, columns)
    return f"Paper: {paper['paper']}\n\n{table}"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(
        description="Print a result JSON of senteval_eval.py / run_*.py beside a paper row."
    )
    parser.add_argument("result_json")
    parser.add_argument("--paper_row", required=True, help="row id in configs/paper_results.yaml")
    parser.add_argument("--name", default="ours")
    args = parser.parse_args(argv)
    with open(args.result_json, encoding="utf-8") as f:
        scores = json.load(f)["scores"]
    print(compare_with_paper(scores, args.paper_row, name=args.name))


if __name__ == "__main__":
    main()
