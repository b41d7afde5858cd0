"""What the sweep prints: a plan (``--plan``), the count of every table for docs/reproduce.md, and the
account of failed jobs at the end."""

from __future__ import annotations

import os
import shlex
import sys
from dataclasses import dataclass

from . import estimate
from .plan import Node, Plan
from .record import Table


def seed(node: Node) -> str:
    value = estimate.setting(node.run, "seed")
    return "-" if value is None else str(value)


def _hours(seconds: list[float | None]) -> str:
    known = [s for s in seconds if s is not None]
    unknown = len(seconds) - len(known)
    if not known and unknown:
        return "unknown"
    return estimate.human(sum(known)) + (f" + {unknown} runs of unknown length" if unknown else "")


@dataclass
class TableCount:
    name: str
    runs: int  # distinct runs
    evaluations: int
    shared: int  # runs another table names too
    seconds: list[float | None]  # each distinct run's estimate

    @property
    def row(self) -> str:
        return f"| `{self.name}` | {self.runs} | {self.evaluations} | {self.shared} | {_hours(self.seconds)} |"


def table_counts(plan: Plan) -> list[TableCount]:
    counts = []
    for table in plan.tables:
        nodes = {node.key: node for node in plan.nodes if table.name in node.tables}
        counts.append(
            TableCount(
                table.name,
                len(nodes),
                len({e.output for e in table.evaluations}),
                sum(len(n.tables) + len(n.other_tables) > 1 for n in nodes.values()),
                [estimate.seconds(n.run) for n in nodes.values()],
            )
        )
    return counts


def counts_markdown(plan: Plan) -> str:
    """The table of docs/reproduce.md: each table's runs, evaluations, shared runs and GPU time, and the
    total with every shared run counted once."""
    lines = [
        "| table | runs | evaluations | shared with another table | GPU time (training) |",
        "|---|---:|---:|---:|---:|",
    ]
    lines += [count.row for count in table_counts(plan)]
    distinct = {node.key: node for node in plan.nodes}
    lines.append(
        f"| all {len(plan.tables)} tables, shared runs once | {len(distinct)} | "
        f"{sum(len(n.evaluations) + len(n.evaluations_done) for n in plan.nodes)} | "
        f"{len([n for n in distinct.values() if len(n.tables) > 1])} | "
        f"{_hours([estimate.seconds(n.run) for n in distinct.values()])} |"
    )
    return "\n".join(lines)


def _run_lines(node: Node, index: int, table: Table | None) -> list[str]:
    run = node.run
    seconds = estimate.seconds(run)
    lines = [
        f"{index:4d}. [{node.state}] {run.script} {run.config or '(no configuration)'}  seed {seed(node)}, "
        f"batch {run.batch}" + (f", ~{estimate.human(seconds)}" if seconds is not None else ""),
        f"      flags: {shlex.join(run.flags) or '(none)'}",
        f"      output: {node.directory}"
        + "".join(f"\n      also named: {name} (a link to it)" for name in node.links),
    ]
    if table is None:
        lines.append(f"      tables: {', '.join(node.tables)}")
    elif len(node.tables) + len(node.other_tables) > 1:
        lines.append(f"      shared with: {', '.join(n for n in node.tables + node.other_tables if n != table.name)}")
    for evaluation in node.evaluations_done:
        lines.append(f"      then: {os.path.basename(evaluation.output)} (there)")
    for evaluation in node.evaluations:
        command = [arg if "\n" not in arg else "<program>" for arg in evaluation.command]
        lines.append(f"      then: {os.path.basename(evaluation.output)}: {shlex.join(command)}")
    return lines


def plan_text(plan: Plan, executor: str) -> str:
    single = plan.tables[0] if len(plan.tables) == 1 else None
    names = ", ".join(table.script for table in plan.tables) if single else f"{len(plan.tables)} tables"
    out = [f"Plan of {names} (executor: {executor})", ""]
    out.append("Runs (script, configuration, seed, global batch, flags, output directory; then its evaluations):")
    for i, node in enumerate(plan.nodes, 1):
        out += _run_lines(node, i, single)
    for table in plan.tables:
        out += ["", f"Table of {table.script}, printed when every run and evaluation has ended:"]
        out += [f"  {shlex.join(command)}" for command in table.show]
    if plan.notes:
        out += ["", "Notes:"] + [f"  {note}" for note in plan.notes]
    distinct = {node.key for node in plan.nodes}
    finished = [n for n in plan.nodes if n.finished]
    interrupted = [n for n in plan.nodes if not n.finished and n.state != "to train"]
    todo = [n for n in plan.nodes if not n.finished]
    evaluations = sum(len(n.evaluations) for n in plan.nodes)
    out += [
        "",
        f"{len(distinct)} runs: {len(finished)} finished (kept), {len(interrupted)} interrupted (resume), "
        f"{len(todo) - len(interrupted)} to train; {len(plan.shared)} shared with another table (trained once)",
    ]
    if not single:
        out.append(
            f"the tables name {plan.named} runs in {plan.directories} output directories: "
            f"{len(distinct)} distinct runs, {plan.directories - len(plan.nodes)} directories linked to another's"
        )
    out.append(f"{evaluations} evaluations to do, {sum(len(n.evaluations_done) for n in plan.nodes)} done")
    out.append(
        f"GPU time, training: {_hours([estimate.seconds(n.run) for n in todo])} for the runs left, "
        f"{_hours([estimate.seconds(n.run) for n in plan.nodes])} for all; from {estimate.SOURCE}"
    )
    if not single:
        out += ["", counts_markdown(plan)]
    return "\n".join(out)


def end(failures, stream=None) -> int:
    """Name each failed job (:class:`sweep.steps.Failure`) on ``stream``; the sweep's exit status: 0, the
    failures' status when they share one (2 for refusals), else 1."""
    stream = stream or sys.stderr
    for failure in failures:
        print("\n".join(failure.lines()), file=stream, flush=True)
    statuses = {failure.status for failure in failures}
    return 0 if not statuses else statuses.pop() if len(statuses) == 1 else 1
