"""What a table script declares: its training runs, the evaluations of each, the commands that print
the table and its notes, learnt by running the script with ``CSE_SWEEP_RECORD`` set, under which
``scripts/lib.sh`` records each declaration instead of doing anything (a second of bash for the
largest table). Each declaration is its kind, its number of arguments and the arguments, every field
NUL-terminated, so that no argument needs quoting."""

from __future__ import annotations

import os
import subprocess
import tempfile
from dataclasses import dataclass, field

from cse.errors import CSEUsageError

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RECORD_ENV = "CSE_SWEEP_RECORD"
# set while recording for --plan: a missing input file is noted instead of refused
PLAN_ONLY_ENV = "CSE_SWEEP_PLAN_ONLY"
# set while recording with the driver's --mteb: each run is evaluated with MTEB too (scripts/lib.sh)
MTEB_ENV = "CSE_SWEEP_MTEB"
# the table's own output directory; the other tables of a plan are recorded without it
OUTPUT_DIR_ENV = "OUTPUT_DIR"


@dataclass(frozen=True)
class Run:
    """``train SCRIPT OUTPUT_DIR GLOBAL_BATCH ARGS...``: ``args`` starts with the configuration file."""

    script: str
    output_dir: str
    batch: int
    args: tuple[str, ...]

    @property
    def key(self) -> str:
        """What makes two runs the same run whatever their directories: the line ``launch_args.txt``
        records in a finished run's directory."""
        return " ".join([self.script, str(self.batch), *self.args])

    @property
    def config(self) -> str | None:
        return self.args[0] if self.args and self.args[0].endswith((".yaml", ".yml", ".json")) else None

    @property
    def flags(self) -> tuple[str, ...]:
        return self.args[1:] if self.config else self.args

    def flag(self, name: str, default: str | None = None) -> str | None:
        """The value of the last ``--name VALUE`` among the flags (the one the parser keeps)."""
        value = default
        for i, arg in enumerate(self.flags[:-1]):
            if arg == f"--{name}":
                value = self.flags[i + 1]
        return value


@dataclass(frozen=True)
class Evaluation:
    """``evaluate MODEL_DIR OUTPUT CMD...``, or with ``batch`` a command launched through accelerate like
    a run (``evaluate_launched MODEL_DIR OUTPUT GLOBAL_BATCH SCRIPT ARGS...``)."""

    model_dir: str
    output: str
    command: tuple[str, ...]
    batch: int | None = None


@dataclass
class Table:
    """One table script's declarations, in the order the script made them."""

    script: str  # relative to the repository when it lies in it
    runs: list[Run] = field(default_factory=list)
    evaluations: list[Evaluation] = field(default_factory=list)
    show: list[tuple[str, ...]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        """``method/table`` for the scripts of scripts/, else the script's path."""
        parts = self.script.split(os.sep)
        return "/".join(parts[1:])[: -len(".sh")] if parts[0] == "scripts" and len(parts) == 3 else self.script


class TableRefused(Exception):
    """The table script itself refused (an input it checks): its stderr and exit status."""

    def __init__(self, script: str, status: int, stderr: str):
        super().__init__(f"{script} exited with status {status}")
        self.status, self.stderr = status, stderr


def relative(path: str) -> str:
    absolute = os.path.abspath(path)
    inside = os.path.commonpath([absolute, REPO]) == REPO
    return os.path.relpath(absolute, REPO) if inside else absolute


def _batch(script: str, kind: str, value: str) -> int:
    if not value.isdigit() or int(value) == 0:
        raise CSEUsageError(f"{script}: {kind} declares the global batch {value!r}, not a positive integer")
    return int(value)


def parse(script: str, data: bytes) -> Table:
    """The declarations of ``data`` (what ``scripts/lib.sh`` wrote while ``script`` ran)."""
    fields = data.decode("utf-8", "surrogateescape").split("\0")
    if fields and fields[-1] == "":
        fields.pop()
    table, i = Table(relative(script)), 0
    while i < len(fields):
        kind, count = fields[i], int(fields[i + 1])
        args, i = fields[i + 2 : i + 2 + count], i + 2 + count
        if kind == "train":
            table.runs.append(Run(args[0], os.path.normpath(args[1]), _batch(script, kind, args[2]), tuple(args[3:])))
        elif kind == "evaluate":
            table.evaluations.append(Evaluation(os.path.normpath(args[0]), os.path.normpath(args[1]), tuple(args[2:])))
        elif kind == "evaluate_launched":
            batch = _batch(script, kind, args[2])
            table.evaluations.append(
                Evaluation(os.path.normpath(args[0]), os.path.normpath(args[1]), tuple(args[3:]), batch)
            )
        elif kind == "show":
            table.show.append(tuple(args))
        elif kind == "note":
            table.notes.append(args[0])
        else:
            raise ValueError(f"{script}: unknown declaration {kind!r}")
    return table


def record(script: str, args=(), env=None, plan_only: bool = False, own_output_dir: bool = True) -> Table:
    """Run the table script ``script`` with ``args`` in record mode and return its declarations.
    ``own_output_dir`` False records it as another table of the plan (without ``OUTPUT_DIR``)."""
    env = dict(os.environ if env is None else env)
    if not own_output_dir:
        env.pop(OUTPUT_DIR_ENV, None)
    if plan_only:
        env[PLAN_ONLY_ENV] = "1"
    else:
        env.pop(PLAN_ONLY_ENV, None)
    with tempfile.NamedTemporaryFile(prefix="cse-sweep-") as f:
        env[RECORD_ENV] = f.name
        proc = subprocess.run(["bash", script, *args], env=env, cwd=REPO, capture_output=True, text=True)
        if proc.returncode != 0:
            raise TableRefused(relative(script), proc.returncode, proc.stderr)
        data = f.read()
    return parse(script, data)
