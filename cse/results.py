"""Result tables: the papers' published numbers (``cse/paper_results.yaml``) and markdown
tables that put our scores beside them.

    python -m cse.results result/simcse/sts_test_results.json --paper_row simcse_unsup_bert_base
    python -m cse.results result/a/sts_test_results.json result/b/sts_test_results.json
    python -m cse.results result/mixcse-seed*/sts_test_results.json --paper_row mixcse_bert_base

Several JSONs with ``--paper_row`` are seeds of one model: the row shows mean ± standard deviation
(sample, n - 1) per column, and the difference is the mean's.

``--missing mark`` (the table scripts' setting) prints a result that is not there, a failed run's,
as ``missing`` cells and names how many of a row's seeds are missing, instead of refusing; a mean over
fewer seeds is never shown in its place.

``--runs`` collects many runs and seeds into paper-style tables, one per score kind (STS, transfer):

    python -m cse.results --runs result/simcse-seed1 result/simcse-seed2 result/mixcse-seed1 ... \
        --paper_row simcse=simcse_unsup_bert_base mixcse=mixcse_bert_base

Each argument is a run directory (its ``*_results.json`` files are merged) or a result JSON (its run
is its folder); runs whose names differ only by a ``seed<N>`` suffix (``-seed1``, ``_seed2``) are
the seeds of one group, shown as mean ± std. ``--paper_row GROUP=ROW`` puts a paper row and the
difference under a group (a bare ``ROW`` when there is one group).

``--difference`` puts two JSONs (a model before and after training) side by side with their
difference per column (second - first):

    python -m cse.results --difference result/base/sts_test_results.json result/simcse/sts_test_results.json

``--published`` prints every method's published STS rows (each paper's main table and its ablations,
each backbone) as one table, with its source, and names the methods whose rows are not recorded:

    python -m cse.results --published

``--environment`` prints the software and hardware each JSON was produced with (its ``environment``
block: result JSONs, ``run_args.json``, ``anli_results.json``, benchmark reports):

    python -m cse.results --environment result/simcse/sts_test_results.json result/simcse/run_args.json
"""

from __future__ import annotations

import argparse
import glob
import os
import re
from collections.abc import Mapping, Sequence

import numpy as np
import yaml

from .errors import CSEUsageError, run_cli
from .file_checks import load_json
from .paths import MissingDataError
from .run_names import ALL_RESULTS_NAME, MTEB_RESULTS_NAME, TRAIN_RESULTS_NAME

# Package data: installed with ``cse``, so the published rows are there outside a checkout too.
PAPER_RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "paper_results.yaml")
# the cell of a result that is not there (--missing mark)
MISSING = "missing"


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


def published_table(path: str = PAPER_RESULTS) -> str:
    """Every full STS row of ``path`` (the papers' main tables and their ablations, each backbone) as one
    markdown table with its source, then the methods whose rows are not recorded and why."""
    with open(path, encoding="utf-8") as f:
        data = yaml.safe_load(f)
    papers = load_paper_results(path)
    rows = {}
    for row_id, row in data["rows"].items():
        if row["columns"] == "sts":
            # 'Li et al., "AdCSE: ...", DASFAA 2022' -> 'Li et al., DASFAA 2022, Table 1' (a venue is optional)
            authors, venue = re.fullmatch(r'(.*?), ".*"(?:, (.*))?', row["paper"]).groups()
            source = ", ".join(part for part in (authors, venue, row["table"]) if part)
            rows[row["model"]] = {**papers[row_id]["scores"], "Source": source}
    notes = "".join(f"\n- {method}: no row recorded; {why}" for method, why in data.get("unrecorded", {}).items())
    title = "Published unsupervised STS results (test, Spearman x100), from cse/paper_results.yaml"
    table = markdown_table(rows, [*data["column_sets"]["sts"], "Source"])
    return f"{title}\n\n{table}\n" + (f"\nNot in the table:{notes}" if notes else "")


def format_cell(value) -> str:
    """Two decimals; a ``(mean, std)`` pair as ``mean ± std``; ``None`` as ``-``; text as it is."""
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    if isinstance(value, tuple):
        return f"{value[0]:.2f} ± {value[1]:.2f}"
    return f"{value:.2f}"


def mean_value(value) -> float:
    return value[0] if isinstance(value, tuple) else value


def aggregate_seeds(runs: Sequence[Mapping[str, float]]) -> dict:
    """The columns every run has, each as ``(mean, sample std)`` over the runs; one run is returned
    as it is (a standard deviation needs two)."""
    if not runs:
        raise CSEUsageError("no runs to aggregate")
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
    # the runs' MTEB average (--mteb) last, a column the papers do not report
    columns = [c for c in paper["scores"] if c in ours] + [c for c in ours if c == MTEB_COLUMN]
    diff = {
        c: MISSING if ours[c] == MISSING else mean_value(ours[c]) - paper["scores"][c]
        for c in columns
        if c in paper["scores"]
    }
    label = f"paper, {paper['table']}: {paper['model']}"
    table = markdown_table({name: ours, label: paper["scores"], "difference": diff}, columns)
    return f"Paper: {paper['paper']}\n\n{table}"


def difference_table(first: Mapping[str, float], second: Mapping[str, float], names: Sequence[str]) -> str:
    """Two rows of scores and their difference (second - first) over the columns both have."""
    columns = [c for c in first if c in second]
    diff = {c: second[c] - first[c] for c in columns}
    return markdown_table({names[0]: first, names[1]: second, "difference": diff}, columns)


SEED_SUFFIX = re.compile(r"[-_.]?seed[-_]?\d+$")
SCORE_KINDS = {"sts": "STS (Spearman x 100)", "transfer": "Transfer tasks (accuracy x 100)"}


def score_kind(columns) -> str:
    return "transfer" if "MR" in columns or "MRPC" in columns else "sts"


# What the Trainer writes beside a run's result JSONs: its training metrics, no scores.
TRAINER_RESULTS = (TRAIN_RESULTS_NAME, ALL_RESULTS_NAME)
RESULT_HINT = "pass a result JSON written by senteval_eval.py --output_json, or a run's sts_<mode>_results.json"


def read_result_json(path: str) -> dict:
    """The report a result JSON holds: a mapping with its ``scores`` (a mapping of task to score); a
    file that is missing, damaged or of another kind is refused in one line with :data:`RESULT_HINT`."""
    report = load_json(path, "result JSON", hint=RESULT_HINT)
    scores = report.get("scores") if isinstance(report, dict) else None
    if not isinstance(scores, dict) or not all(isinstance(v, (int, float)) for v in scores.values()):
        raise CSEUsageError(f"{path} is not a result JSON: it holds no mapping of tasks to scores", hint=RESULT_HINT)
    return report


def score_groups(report: Mapping) -> dict:
    """``{kind: scores}`` of a result JSON (``score_groups``, or its ``scores`` for older JSONs)."""
    return dict(report.get("score_groups") or {score_kind(report["scores"]): report["scores"]})


def collect_runs(paths: Sequence[str], missing_ok: bool = False) -> dict[str, list[dict]]:
    """``{group: [{kind: scores} per seed]}`` from run directories and result JSONs, in the order
    given; a run's group is its folder name less a ``seed<N>`` suffix. With ``missing_ok``, a run
    without results (a JSON or directory that is not there) is an empty ``{}``."""
    runs: dict[str, dict] = {}
    for path in paths:
        files = sorted(glob.glob(os.path.join(path, "*_results.json"))) if os.path.isdir(path) else [path]
        files = [file for file in files if os.path.exists(file)] if missing_ok else files
        if not files and not missing_ok:
            raise MissingDataError(f"{path}: no *_results.json in this run directory")
        is_json = path.endswith(".json") or os.path.isfile(path)
        run_dir = os.path.normpath(os.path.dirname(os.path.abspath(path)) if is_json else path)
        runs.setdefault(run_dir, {})
        for file in files:
            if os.path.basename(file) in TRAINER_RESULTS:  # the Trainer's, which hold no scores
                continue
            runs[run_dir].update(score_groups(read_result_json(file)))
        if not runs[run_dir] and not missing_ok:
            raise MissingDataError(f"{path}: no scores in its *_results.json")
    groups: dict[str, list[dict]] = {}
    for run_dir, kinds in runs.items():
        groups.setdefault(SEED_SUFFIX.sub("", os.path.basename(run_dir)), []).append(kinds)
    return groups


# The STS table's column of each run's MTEB average (the table scripts' --mteb), beside SentEval's.
MTEB_COLUMN = "MTEB Avg."


def _with_mteb(ours: dict, seeds: Sequence[dict]) -> dict:
    """``ours`` and :data:`MTEB_COLUMN`: the seeds' MTEB ``Avg.`` (mean ± std), ``missing`` unless every
    seed has one (never a mean over the seeds that are there)."""
    averages = [seed.get("mteb", {}).get("Avg.") for seed in seeds]
    if any(average is None for average in averages):
        return {**ours, MTEB_COLUMN: MISSING}
    return {**ours, **aggregate_seeds([{MTEB_COLUMN: average} for average in averages])}


def runs_tables(
    groups: Mapping[str, list[dict]], paper_rows: Mapping[str, str], path: str = PAPER_RESULTS, mteb: bool = False
) -> str:
    """One markdown table per score kind: each group's mean ± std over its seeds, then, where
    ``paper_rows`` names one for the group, the paper's row and the difference. With ``mteb``, the
    STS table has a last column, :data:`MTEB_COLUMN` (the papers report none: ``-`` in their rows)."""
    papers = load_paper_results(path)
    unknown = sorted(set(paper_rows.values()) - set(papers))
    if unknown:
        raise CSEUsageError(f"unknown paper row(s) {', '.join(unknown)} (see {path})")
    out = []
    # a run without results (--missing mark) belongs to every kind its group's other runs, or its
    # paper row, have; to STS when nothing says
    kinds = {
        group: {kind for seed in seeds for kind in seed}
        or {score_kind(papers[paper_rows[group]]["scores"]) if group in paper_rows else "sts"}
        for group, seeds in groups.items()
    }
    for kind, title in SCORE_KINDS.items():
        rows, columns, shapes = {}, None, [["Avg."]]
        for group, seeds in groups.items():
            if kind not in kinds[group]:
                continue
            with_kind = [seed[kind] for seed in seeds if kind in seed]
            absent = sum(not seed for seed in seeds)
            if len(with_kind) + absent != len(seeds):
                raise CSEUsageError(f"{group}: {len(seeds) - len(with_kind)} of {len(seeds)} runs lack {kind} results")
            if absent:  # never a mean over the seeds that are there
                name = f"{group} ({absent} of {len(seeds)} seeds missing)" if len(seeds) > 1 else f"{group} (missing)"
                ours = None
            else:
                name, ours = group if len(seeds) == 1 else f"{group} ({len(seeds)} seeds)", aggregate_seeds(with_kind)
                ours = _with_mteb(ours, seeds) if mteb and kind == "sts" else ours
                columns = columns or list(ours)
            rows[name] = ours
            paper = papers.get(paper_rows.get(group, ""))
            if paper is not None and score_kind(paper["scores"]) == kind:
                shapes.insert(0, list(paper["scores"]))
                rows[f"paper, {paper['table']}: {paper['model']}"] = paper["scores"]
                rows[f"{group} - paper"] = ours and {
                    c: mean_value(ours[c]) - paper["scores"][c] for c in paper["scores"] if c in ours
                }
        columns = columns or shapes[0] + ([MTEB_COLUMN] if mteb and kind == "sts" else [])
        rows = {name: {c: MISSING for c in columns} if scores is None else scores for name, scores in rows.items()}
        if rows:
            out.append(f"{title}\n\n{markdown_table(rows, columns)}")
    if not out:
        raise CSEUsageError("no scores to tabulate")
    return "\n\n".join(out)


MTEB_TITLE = "MTEB (main score x 100; its SICK-R scores all 9,927 SICK pairs, SentEval's the 4,927 test pairs)"


def mteb_runs(paths: Sequence[str], missing_ok: bool = False) -> dict[str, list[dict]]:
    """:func:`collect_runs` of the MTEB results (:data:`MTEB_RESULTS_NAME`) of the runs ``paths`` name
    (run directories, or result JSONs whose folder is the run)."""
    run_dirs = dict.fromkeys(p if os.path.isdir(p) else os.path.dirname(os.path.abspath(p)) for p in paths)
    return collect_runs([os.path.join(d, MTEB_RESULTS_NAME) for d in run_dirs], missing_ok=missing_ok)


def mteb_table(paths: Sequence[str], missing_ok: bool = False, names: Sequence[str] | None = None) -> str:
    """The MTEB scores of the runs ``paths`` name (run directories, or result JSONs whose folder is
    the run), from each run's :data:`MTEB_RESULTS_NAME`: one row per group of seeds (mean ± std), a group
    with a run lacking them ``missing`` (with ``missing_ok``; else refused). ``names`` rename the groups."""
    groups = mteb_runs(paths, missing_ok)
    if names is not None:
        if len(names) != len(groups):
            raise CSEUsageError(f"{len(groups)} group(s) of runs but {len(names)} --name(s)")
        groups = dict(zip(names, groups.values()))
    rows, columns = {}, None
    for group, seeds in groups.items():
        scores = [seed.get("mteb") for seed in seeds]
        if any(s is None for s in scores):
            absent = sum(s is None for s in scores)
            name = f"{group} ({absent} of {len(seeds)} seeds missing)" if len(seeds) > 1 else f"{group} (missing)"
            rows[name] = None
            continue
        columns = columns or list(scores[0])
        rows[group if len(seeds) == 1 else f"{group} ({len(seeds)} seeds)"] = aggregate_seeds(scores)
    columns = columns or ["Avg."]
    rows = {name: {c: MISSING for c in columns} if row is None else row for name, row in rows.items()}
    return f"{MTEB_TITLE}\n\n{markdown_table(rows, columns)}"


def format_environment(environment: Mapping) -> str:
    """An ``environment`` block (:func:`cse.environment.collect_environment`) as aligned lines."""
    git = environment.get("git")
    lines = {
        "cse": environment.get("cse_version"),
        "git": None if git is None else f"{git['commit']}" + (" (uncommitted changes)" if git["dirty"] else ""),
        "python": environment.get("python"),
        "platform": environment.get("platform"),
        **dict(environment.get("versions", {})),
        "CUDA": environment.get("cuda"),
        "cuDNN": environment.get("cudnn"),
        "GPUs": ", ".join(environment.get("gpus") or []) or "none",
        "world size": environment.get("world_size"),
        "precision": environment.get("precision"),
    }
    width = max(map(len, lines))
    return "\n".join(f"  {name:<{width}}  {'-' if value is None else value}" for name, value in lines.items())


def _paper_row_map(values: Sequence[str], groups: Sequence[str]) -> dict[str, str]:
    mapping = {}
    for value in values:
        group, sep, row = value.rpartition("=")
        if not sep:
            if len(groups) != 1:
                raise CSEUsageError(f"--paper_row {value}: {len(groups)} groups; write GROUP=ROW")
            group = groups[0]
        if group not in groups:
            raise CSEUsageError(f"--paper_row {value}: no group {group!r} (groups: {', '.join(groups)})")
        mapping[group] = row
    return mapping


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description="Print result JSONs of senteval_eval.py / run_*.py as one table, or one beside a paper row.",
        allow_abbrev=False,
    )
    parser.add_argument("result_json", nargs="*", help="result JSONs (with --runs: run directories or JSONs)")
    parser.add_argument(
        "--published",
        action="store_true",
        help="print every method's published STS rows as one table (no result JSONs)",
    )
    parser.add_argument(
        "--paper_row",
        nargs="+",
        default=None,
        help="row id in cse/paper_results.yaml; several JSONs are then seeds of one model (mean ± std). "
        "With --runs: GROUP=ROW for each group to compare",
    )
    parser.add_argument("--name", nargs="+", default=None, help="row name(s); default: ours / the JSONs' folders")
    parser.add_argument(
        "--runs", action="store_true", help="group runs by name less a seed<N> suffix; one table per score kind"
    )
    parser.add_argument(
        "--environment",
        action="store_true",
        help="print each JSON's environment block (versions, git revision, GPUs) instead of scores",
    )
    parser.add_argument(
        "--difference",
        action="store_true",
        help="two JSONs side by side (e.g. before and after training) and their difference per column",
    )
    parser.add_argument(
        "--mteb",
        action="store_true",
        help=f"also the runs' MTEB scores (each run folder's {MTEB_RESULTS_NAME}, senteval_eval.py --protocol mteb): "
        f"with --runs, an {MTEB_COLUMN!r} column in the STS table, then the MTEB table of every task",
    )
    parser.add_argument(
        "--missing",
        choices=("error", "mark"),
        default="error",
        help="a result JSON or run that is not there: an error (default), or 'missing' cells in its row (mark)",
    )
    return parser


def main(argv=None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.published:
        if args.result_json or args.paper_row or args.name or args.runs or args.environment or args.difference:
            parser.error("--published prints the papers' rows alone: no result JSONs or other options")
        print(published_table())
        return
    if not args.result_json:
        parser.error("result JSONs are required (or --published for the papers' rows)")
    if args.mteb and (args.environment or args.difference):
        parser.error("--mteb adds the runs' MTEB table to a result table: no --environment or --difference")
    # made first, so that a run without its MTEB results is refused before any table is printed;
    # its rows named as the result table's where that has one row per group (--runs, --paper_row)
    names = args.name if args.runs or args.paper_row else None
    mteb = mteb_table(args.result_json, missing_ok=args.missing == "mark", names=names) if args.mteb else None
    print_tables(parser, args)
    if mteb is not None:
        print(f"\n{mteb}")


def print_tables(parser: argparse.ArgumentParser, args) -> None:
    """The table(s) the arguments ask for, printed."""
    if args.difference and (args.runs or args.paper_row or args.environment):
        parser.error("--difference compares two result JSONs: no --runs, --paper_row or --environment")
    if args.environment:
        if args.runs or args.paper_row or args.name:
            parser.error("--environment takes JSON files only (no --runs, --paper_row or --name)")
        for path in args.result_json:
            environment = read_result_json(path).get("environment")
            if environment is None:
                parser.error(f"{path} has no environment block (written before cse recorded one)")
            print(f"{path}:\n{format_environment(environment)}")
        return
    mark = args.missing == "mark"
    if args.runs:
        groups = collect_runs(args.result_json, missing_ok=mark)
        if args.name is not None:
            if len(args.name) != len(groups):
                parser.error(f"{len(groups)} group(s) but {len(args.name)} --name(s)")
            groups = dict(zip(args.name, groups.values()))
        try:
            print(runs_tables(groups, _paper_row_map(args.paper_row or [], list(groups)), mteb=args.mteb))
        except ValueError as error:
            parser.error(str(error))
        return
    scores = []
    for path in args.result_json:
        if mark and not os.path.exists(path):
            scores.append(None)
            continue
        scores.append(read_result_json(path)["scores"])
    present = [s for s in scores if s is not None]
    absent = f"{len(scores) - len(present)} of {len(scores)} missing" if len(scores) > 1 else "missing"
    if args.paper_row is not None:
        if len(args.paper_row) != 1:
            parser.error("one --paper_row without --runs")
        if args.name is not None and len(args.name) != 1:
            parser.error("--paper_row makes one row: give one --name")
        if len(present) < len(scores):  # never a mean over the seeds that are there
            columns = [*load_paper_results()[args.paper_row[0]]["scores"], *([MTEB_COLUMN] if args.mteb else [])]
            name = f"{args.name[0] if args.name else 'ours'} ({absent})"
            print(compare_with_paper({c: MISSING for c in columns}, args.paper_row[0], name=name))
            return
        name = args.name[0] if args.name else "ours" if len(scores) == 1 else f"ours ({len(scores)} seeds)"
        ours = aggregate_seeds(scores)
        if args.mteb:  # the JSONs are the seeds of one row: their runs' MTEB average beside it
            ours = _with_mteb(ours, [seed for seeds in mteb_runs(args.result_json, mark).values() for seed in seeds])
        print(compare_with_paper(ours, args.paper_row[0], name=name))
        return
    if args.name is not None and len(args.name) != len(args.result_json):
        parser.error(f"{len(args.result_json)} result JSON(s) but {len(args.name)} --name(s)")
    names = args.name or [os.path.basename(os.path.dirname(os.path.abspath(p))) for p in args.result_json]
    if args.difference:
        if len(scores) != 2:
            parser.error(f"--difference compares two result JSONs, got {len(scores)}")
        if len(present) < 2:
            parser.error(f"--difference compares two result JSONs: {absent}")
        print(difference_table(*scores, names))
        return
    columns = list(present[0]) if present else ["Avg."]
    rows = {name: {c: MISSING for c in columns} if s is None else s for name, s in zip(names, scores)}
    print(markdown_table(rows, columns))


if __name__ == "__main__":
    run_cli(main)
