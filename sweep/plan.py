"""A sweep's plan: the distinct runs of one or more tables, which are finished, interrupted or new,
which other tables share them, the evaluations that depend on each and the commands of each table.

One run per distinct script, configuration, flags, seed and global batch (:attr:`Run.key`), whatever
the directory a table names it by: the first directory that holds it (finished, else interrupted) or
else the first one named trains it, and every other name becomes a symbolic link to it when the sweep
starts, so that each table reads its results under its own names. A directory that already exists
is never replaced: it keeps, or trains, its own copy. ``_logs/launch_args.txt`` records a run's key, written
before the run is launched, so that the run, once finished, is known for this run whoever watched it
end; a finished run with another key is refused before anything starts."""

from __future__ import annotations

import glob
import os
import re
import shlex
from dataclasses import dataclass, field, replace

from cse.errors import CSEUsageError
from cse.run_names import CSE_CONFIG_NAME, JOB_LOCK_NAMES, LAUNCH_ARGS_NAME, LAUNCHER_LOGS_NAME, log_name

from .record import REPO, Evaluation, Run, Table, record

CHECKPOINT = re.compile(r"checkpoint-(\d+)$")


def table_scripts() -> list[str]:
    """Every paper-table script: the bash scripts of scripts/<method>/ (not the sourced helpers)."""
    found = []
    for path in sorted(glob.glob(os.path.join(REPO, "scripts", "*", "*.sh"))):
        with open(path, encoding="utf-8") as f:
            if f.readline().startswith("#!"):
                found.append(os.path.relpath(path, REPO))
    return found


def launch_args_path(directory: str) -> str:
    return os.path.join(directory, LAUNCHER_LOGS_NAME, LAUNCH_ARGS_NAME)


def launch_args(directory: str) -> str | None:
    """The key of the run launched into ``directory``, None when no sweep recorded one."""
    for path in (launch_args_path(directory), os.path.join(directory, LAUNCH_ARGS_NAME)):
        try:
            with open(path, encoding="utf-8") as f:
                return f.read().rstrip("\n")
        except FileNotFoundError:
            continue
    return None


def is_finished(directory: str) -> bool:
    return os.path.isfile(os.path.join(directory, CSE_CONFIG_NAME))


def last_checkpoint(directory: str) -> str | None:
    steps = {}
    if os.path.isdir(directory):
        for name in os.listdir(directory):
            match = CHECKPOINT.match(name)
            if match:
                steps[name] = int(match.group(1))
    return max(steps, key=steps.get) if steps else None


def log_path(directory: str, name: str) -> str:
    return os.path.join(directory, LAUNCHER_LOGS_NAME, log_name(name))


def job_lock_path(directory: str, kind: str) -> str:
    return os.path.join(directory, LAUNCHER_LOGS_NAME, JOB_LOCK_NAMES[kind])


@dataclass
class Node:
    """One distinct run: the directory that trains it, the other names linked to it, the tables that
    name it (in this plan and among the other tables), and its evaluations still to do."""

    run: Run
    directory: str
    links: list[str] = field(default_factory=list)
    tables: list[str] = field(default_factory=list)
    other_tables: list[str] = field(default_factory=list)
    evaluations: list[Evaluation] = field(default_factory=list)
    evaluations_done: list[Evaluation] = field(default_factory=list)

    @property
    def key(self) -> str:
        return self.run.key

    @property
    def finished(self) -> bool:
        return is_finished(self.directory)

    @property
    def state(self) -> str:
        if self.finished:
            return "finished"
        checkpoint = last_checkpoint(self.directory)
        return f"interrupted, resumes from {checkpoint}" if checkpoint else "to train"

    @property
    def log(self) -> str:
        return log_path(self.directory, "train")


@dataclass
class Plan:
    tables: list[Table]
    nodes: list[Node]
    named: int  # runs the tables name, a run named by two tables (or twice) counted each time
    directories: int  # distinct directories they name

    def node_of(self, directory: str) -> Node | None:
        directory = os.path.normpath(directory)
        for node in self.nodes:
            if directory == node.directory or directory in node.links:
                return node
        return None

    @property
    def shared(self) -> list[Node]:
        """Runs that another table names too (in this plan or outside it)."""
        return [node for node in self.nodes if len(node.tables) + len(node.other_tables) > 1]

    @property
    def notes(self) -> list[str]:
        return [note for table in self.tables for note in table.notes]


def _physical(path: str, aliases: dict[str, str]) -> str:
    """``path`` with a leading linked directory replaced by the directory it links to."""
    for alias, target in aliases.items():
        if path == alias or path.startswith(alias + os.sep):
            return target + path[len(alias) :]
    return path


def _existing_key(directory: str) -> str | None:
    """The key of the finished run in ``directory``, "" for a finished run with no record of it, None
    when it holds no finished run."""
    if not is_finished(directory):
        return None
    return launch_args(directory) or ""


def build(tables: list[Table], others: list[Table] = ()) -> Plan:
    """The plan of ``tables``; ``others`` (the other tables, recorded with their defaults) only say
    which runs are shared and where one may already be finished."""
    by_key: dict[str, list[tuple[Run, str]]] = {}
    named, dirs_named = 0, {}
    for table in tables:
        for run in table.runs:
            named += 1
            other_key = dirs_named.setdefault(run.output_dir, run.key)
            if other_key != run.key:
                raise CSEUsageError(
                    f"two runs of this plan are named {run.output_dir} with other arguments: {other_key!r} and "
                    f"{run.key!r}",
                    hint="give the tables different output directories (OUTPUT_DIR, RESULT_ROOT)",
                )
            by_key.setdefault(run.key, []).append((run, table.name))
    elsewhere: dict[str, list[tuple[Run, str]]] = {}
    for table in others:
        for run in table.runs:
            elsewhere.setdefault(run.key, []).append((run, table.name))

    nodes, aliases = [], {}
    for key, named_by in by_key.items():
        own = list(dict.fromkeys(run.output_dir for run, _ in named_by))
        candidates = own + [run.output_dir for run, _ in elsewhere.get(key, []) if run.output_dir not in own]
        for directory in own:
            found = _existing_key(directory)
            if found is not None and found != key:
                elsewhere_hint = "set OUTPUT_DIR (or RESULT_ROOT) to train this table elsewhere"
                if found:
                    raise CSEUsageError(
                        f"{directory} holds a run trained with other arguments ({found})",
                        hint=f"delete it, or {elsewhere_hint}",
                    )
                # a finished run no sweep recorded: one whose sweep was killed outright before a version
                # that writes the record before launching; only its user knows what launched it
                record = launch_args_path(directory)
                write = f"mkdir -p {shlex.quote(os.path.dirname(record))} && printf '%s\\n' {shlex.quote(key)} > "
                raise CSEUsageError(
                    f"{directory} holds a finished run with no record of the arguments it was launched with "
                    f"({record} is missing)",
                    hint=f"if this table's command launched it, record that: {write}{shlex.quote(record)}; "
                    f"else delete it, or {elsewhere_hint}",
                )
        finished = [d for d in candidates if _existing_key(d) == key]
        started = [d for d in candidates if os.path.isdir(d) and not os.path.islink(d) and last_checkpoint(d)]
        home = (finished or started or own)[0]
        node = Node(named_by[0][0], home)
        # the other names: linked to home unless they hold something of their own
        for directory in own:
            if directory == home:
                continue
            linked_elsewhere = os.path.islink(directory) and os.path.realpath(directory) != os.path.realpath(home)
            if os.path.isdir(directory) and (linked_elsewhere or not os.path.islink(directory)):
                # a directory that exists is never replaced: it keeps, or trains, its own copy
                nodes.append(Node(replace(node.run, output_dir=directory), directory))
                continue
            node.links.append(directory)
            aliases[directory] = home
        node.tables = list(dict.fromkeys(table for _, table in named_by))
        node.other_tables = list(dict.fromkeys(t for _, t in elsewhere.get(key, []) if t not in node.tables))
        nodes.append(node)
    for node in nodes:
        if not node.tables:
            node.tables = list(dict.fromkeys(t for r, t in by_key[node.key] if r.output_dir == node.directory))

    seen = set()
    for table in tables:
        for evaluation in table.evaluations:
            target = _physical(evaluation.output, aliases)
            if target in seen:
                continue
            seen.add(target)
            model_dir = _physical(evaluation.model_dir, aliases)
            node = next((n for n in nodes if n.directory == model_dir), None)
            if node is None:
                raise CSEUsageError(
                    f"{table.script} evaluates {evaluation.model_dir}, which none of its runs trains",
                    hint="declare the run with `train` before its evaluations",
                )
            done = os.path.isfile(target)
            (node.evaluations_done if done else node.evaluations).append(evaluation)
    return Plan(list(tables), nodes, named, len(dirs_named))


def plan_tables(scripts: list[str], args=(), env=None, plan_only: bool = False) -> Plan:
    """Record ``scripts`` (with ``args``, their own ``OUTPUT_DIR`` when there is one) and every other
    table script (with their defaults), and build the plan of ``scripts``."""
    own = [os.path.normpath(os.path.relpath(os.path.abspath(s), REPO)) for s in scripts]
    tables = [record(script, args, env, plan_only=plan_only) for script in scripts]
    others = [
        record(script, (), env, plan_only=True, own_output_dir=False) for script in table_scripts() if script not in own
    ]
    return build(tables, others)
