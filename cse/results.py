"""Result tables: the papers' published numbers (``configs/paper_results.yaml``) and markdown
tables that put our scores beside them.

    python -m cse.results result/simcse/sts_test_results.json --paper_row simcse_unsup_bert_base
    python -m cse.results result/a/sts_test_results.json result/b/sts_test_results.json
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
        description="Print result JSONs of senteval_eval.py / run_*.py as one table, or one beside a paper row."
    )
    parser.add_argument("result_json", nargs="+")
    parser.add_argument("--paper_row", default=None, help="row id in configs/paper_results.yaml (one JSON only)")
    parser.add_argument("--name", nargs="+", default=None, help="row name(s); default: ours / the JSONs' folders")
    args = parser.parse_args(argv)
    if args.name is not None and len(args.name) != len(args.result_json):
        parser.error(f"{len(args.result_json)} result JSON(s) but {len(args.name)} --name(s)")
    scores = []
    for path in args.result_json:
        with open(path, encoding="utf-8") as f:
            scores.append(json.load(f)["scores"])
    if args.paper_row is not None:
        if len(scores) != 1:
            parser.error("--paper_row compares one result JSON")
        print(compare_with_paper(scores[0], args.paper_row, name=args.name[0] if args.name else "ours"))
        return
    names = args.name or [os.path.basename(os.path.dirname(os.path.abspath(p))) for p in args.result_json]
    print(markdown_table(dict(zip(names, scores)), list(scores[0])))


if __name__ == "__main__":
    main()
