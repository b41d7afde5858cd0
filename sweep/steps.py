"""What the executors run: a run's training, or its evaluations, as a job of steps, each one process
whose output goes to a log in the run's directory (``_logs/train.log``, ``_logs/<result>.log``).

A step is skipped when its result is there (a run finished with the same arguments, an evaluation's
output), so that a job started again, by a rerun of the sweep or by SLURM after a requeue, does only
what is left, and an interrupted run resumes from its last checkpoint (the run scripts do that when
started again with the same command). A failed step's status and the lines that say why (its
``error:``/``hint:`` refusal, else its last line) are read back from its log.

Each job holds a lock while a process of it runs, ``_logs/train.lock`` or ``_logs/evaluations.lock``:
an flock (``filelock.FileLock``) taken by the sweep and passed to the step's process, which holds it
as long as it lives, whatever becomes of the sweep; the lock file names the process, its host and the
GPUs it was given. A job whose lock a live process holds is waited for, and its GPUs are not handed
out meanwhile. A run's key is written into its directory before it is launched (``_logs/launch_args.txt``),
so that the run, once finished, is known for this run whoever watched it end."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field

import filelock

from cse.atomic import write_text
from cse.run_names import LOCK_NAME

from .plan import Node, is_finished, job_lock_path, launch_args, launch_args_path, log_path
from .record import REPO, Evaluation, Run

# how long a job stopped by SIGTERM gets to stop at its step before the rest of its processes are killed
STOP_GRACE_S = 120
# how often a job that another live process holds is looked at again
HOLDER_POLL_S = 2.0
# runs a command ignoring SIGUSR2 (exec keeps an ignored signal ignored); not a preexec_fn, under
# which filelock's fork handler would close the job lock's descriptor before the step inherits it
SHIELD = ("/bin/sh", "-c", 'trap "" USR2; exec "$@"', "sh")
HEADER = "[sweep] "
STATUS = re.compile(r"^\[sweep\] exit status (-?\d+)$")


def launch_command(script: str, args, batch: int, processes: int, output_dir: str | None = None) -> list[str]:
    """``accelerate launch`` of ``script`` on ``processes`` processes, the global ``batch`` split over them."""
    command = ["accelerate", "launch", "--num_processes", str(processes)]
    if processes > 1:
        command.append("--multi_gpu")
    command += [script, *args]
    if output_dir is not None:
        command += ["--output_dir", output_dir]
    return command + ["--per_device_train_batch_size", str(batch // processes)]


@dataclass(frozen=True)
class Holder:
    """A live process that holds a job or a run's directory: its PID, its host and the GPUs it was given
    (its CUDA_VISIBLE_DEVICES; None: every GPU it sees, or GPUs not known)."""

    pid: str
    host: str
    gpus: str | None = None

    def holds(self, slot: str | None) -> bool:
        """Whether any GPU of ``slot`` (None: every GPU) is the holder's."""
        if slot is None or self.gpus is None:
            return True
        return bool(set(slot.split(",")) & set(self.gpus.split(",")))

    @property
    def where(self) -> str:
        return "this machine" if self.host == socket.gethostname() else f"host {self.host}"


def lock_holder(directory: str) -> Holder | None:
    """The live process on this host that holds ``directory``'s run lock (the run's own), else None."""
    try:
        with open(os.path.join(directory, LOCK_NAME), encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    if len(lines) < 2 or lines[1] != socket.gethostname() or not lines[0].isdigit():
        return None
    try:
        os.kill(int(lines[0]), 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass
    return Holder(lines[0], lines[1])


def job_holder(path: str) -> Holder | None:
    """The process that holds the job lock ``path``, None when no live process holds it (its holder
    ended, however: the system releases an flock with the last descriptor of it)."""
    if not os.path.exists(path):
        return None
    probe = filelock.FileLock(path, timeout=0, thread_local=False)
    try:
        probe.acquire()
    except filelock.Timeout:
        try:
            with open(path, encoding="utf-8") as f:
                record = json.load(f)
            return Holder(str(record["pid"]), record["host"], record["gpus"])
        except (OSError, ValueError, KeyError, TypeError):
            return Holder("?", "?")  # taken an instant ago: its holder is not written yet
    probe.release()
    return None


@dataclass
class Failure:
    """A job that failed: what it was, its exit status, its log and the lines that say why."""

    what: str
    status: int
    log: str | None
    why: list[str]

    def lines(self) -> list[str]:
        where = f"; log: {self.log}" if self.log else ""
        return [f"failed: {self.what}, exit status {self.status}{where}", *self.why]


@dataclass
class Step:
    """One process: ``argv`` (None: nothing left to do), its log, its job's lock, and what marks it done."""

    what: str
    directory: str
    log: str
    argv: list[str] | None
    lock: str
    run: Run | None = None  # for a training step: its arguments, recorded before it is launched
    output: str | None = None  # for an evaluation: the file it writes
    held: filelock.FileLock | None = field(default=None, repr=False)

    def done(self) -> bool:
        if self.run is not None:
            return is_finished(self.directory) and launch_args(self.directory) == self.run.key
        return os.path.isfile(self.output)

    def refusal(self) -> str | None:
        """Why the step cannot start at all: a finished run with other arguments."""
        if self.run is not None and is_finished(self.directory) and not self.done():
            return f"{self.directory} holds a run trained with other arguments"
        return None

    def held_by(self) -> Holder | None:
        """The live process of the step's job (left by a sweep killed outright, or of another sweep), or
        for a run the process that trains into its directory."""
        holder = job_holder(self.lock)
        if holder is None and self.run is not None:
            holder = lock_holder(self.directory)
        return holder

    def start(self, env: dict, devices: str | None, shielded: bool = False) -> subprocess.Popen:
        """Start the step in a session of its own (a signal to the sweep reaches it only through the
        sweep), its output appended to its log under a header naming the command, its job's lock taken
        and passed to it (``filelock.Timeout`` when another process holds it). ``shielded``: it
        ignores SIGUSR2, which SLURM sends to every process of a job before its time limit, and which
        is the job's to answer (:class:`sweep.slurm.SweepJob`)."""
        os.makedirs(os.path.dirname(self.log), exist_ok=True)
        descriptors = []
        lock = filelock.FileLock(self.lock, timeout=0, thread_local=False, on_acquired=descriptors.append)
        lock.acquire()
        env = dict(env)
        if devices is not None:
            env["CUDA_VISIBLE_DEVICES"] = devices
        try:
            if self.run is not None:
                write_text(launch_args_path(self.directory), self.run.key + "\n")
            with open(self.log, "a", encoding="utf-8") as log:
                shown = f" (CUDA_VISIBLE_DEVICES={devices})" if devices is not None else ""
                log.write(f"{HEADER}{time.strftime('%Y-%m-%d %H:%M:%S')} {shlex.join(self.argv)}{shown}\n")
                log.flush()
                proc = subprocess.Popen(
                    [*SHIELD, *self.argv] if shielded else self.argv,
                    cwd=REPO,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    pass_fds=descriptors[-1:],  # the lock lives as long as the process, sweep or no sweep
                )
        except BaseException:
            lock.release()
            raise
        holder = {"pid": proc.pid, "host": socket.gethostname(), "gpus": env.get("CUDA_VISIBLE_DEVICES")}
        os.ftruncate(descriptors[-1], 0)
        os.pwrite(descriptors[-1], json.dumps(holder).encode(), 0)
        self.held = lock
        return proc

    def failure(self, status: int) -> Failure:
        what = f"{self.directory}" if self.run is not None else f"{self.what} of {self.directory}"
        return Failure(what, status, self.log, outcome(self.log, status)[1])

    def finish(self, status: int) -> int:
        """Record the end of the step in its log and release its job's lock; a refusal's status is the
        run's own (see :func:`outcome`)."""
        status = outcome(self.log, 128 - status if status < 0 else status)[0]  # killed by a signal: 128 + it
        with open(self.log, "a", encoding="utf-8") as log:
            log.write(f"{HEADER}exit status {status}\n")
        if self.held is not None:
            self.held.release()
            self.held = None
        return status


def group_alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    return True


def stop_group(group: int, reap, deadline: float) -> int:
    """Wait until the launcher of ``group`` has ended and no process of the group is left (its children
    stop after it), killing every one left at ``deadline`` (a ``time.monotonic`` time); the launcher's
    exit status. ``reap()``: that status once the launcher has ended, else None, without blocking; an
    unreaped launcher still counts as a member of its group, so it is reaped while the group is watched."""
    status = reap()
    while status is None or group_alive(group):
        if time.monotonic() > deadline:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(group, signal.SIGKILL)
        time.sleep(0.2)
        if status is None:
            status = reap()
    return status


def _last_attempt(log: str) -> list[str]:
    try:
        with open(log, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return []
    starts = [i for i, line in enumerate(lines) if line.startswith(HEADER) and not STATUS.match(line)]
    return lines[starts[-1] + 1 :] if starts else lines


def outcome(log: str, status: int) -> tuple[int, list[str]]:
    """The status of a step that exited with ``status`` and the lines of its log's last attempt that say
    why it failed. A refusal (``error: ...`` and ``  hint: ...``) keeps its own status, 2, or 130 and
    143 for a run stopped by SIGINT and SIGTERM, rather than the launcher's 1 after it (accelerate's
    report of a failed child); any other failure keeps its status and its last line."""
    if status == 0:
        return 0, []
    lines = [line for line in _last_attempt(log) if not STATUS.match(line)]
    errors = [i for i, line in enumerate(lines) if line.startswith("error: ")]
    if errors:
        error = lines[errors[-1]]
        hint = [line for line in lines[errors[-1] + 1 : errors[-1] + 2] if line.startswith("  hint: ")]
        status = 130 if error.startswith("error: SIGINT stopped") else 143 if "error: SIGTERM stopped" in error else 2
        return status, [error, *hint]
    last = [line for line in lines if line.strip()][-1:]
    return status, last


def recorded_status(log: str) -> int | None:
    """The exit status the log's last attempt recorded, None when it recorded none (still running, or
    killed before it could)."""
    try:
        with open(log, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return None
    for line in reversed(lines):
        match = STATUS.match(line)
        if match:
            return int(match.group(1))
        if line.startswith(HEADER):
            return None
    return None


@dataclass
class Job:
    """What takes a slot: a run's training, or the evaluations of one run in the order declared."""

    kind: str  # "run" or "evaluations"
    node: Node
    steps: list[Step] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"{self.kind} {self.node.directory}" if self.kind == "evaluations" else self.node.directory

    @property
    def log(self) -> str:
        return self.steps[0].log


def train_job(node: Node, processes: int) -> Job:
    run = node.run
    argv = launch_command(run.script, run.args, run.batch, processes, node.directory)
    lock = job_lock_path(node.directory, "run")
    return Job("run", node, [Step("training", node.directory, node.log, argv, lock, run=run)])


def evaluation_step(evaluation: Evaluation, processes: int) -> Step:
    if evaluation.batch is None:
        argv = list(evaluation.command)
    else:
        argv = launch_command(evaluation.command[0], evaluation.command[1:], evaluation.batch, processes)
    name = os.path.splitext(os.path.basename(evaluation.output))[0]
    directory = evaluation.model_dir
    lock = job_lock_path(directory, "evaluations")
    return Step(name, directory, log_path(directory, name), argv, lock, output=evaluation.output)


def evaluation_job(node: Node, processes: int) -> Job | None:
    if not node.evaluations:
        return None
    return Job("evaluations", node, [evaluation_step(e, processes) for e in node.evaluations])


def link(node: Node) -> None:
    """Make each other name of the node's run a symbolic link to the directory that trains it (a link
    left dangling by a deleted run is replaced: links hold nothing of their own)."""
    if os.path.islink(node.directory) and not os.path.exists(node.directory):
        os.remove(node.directory)  # a link left by a run that was deleted since: it trains here now
    for name in node.links:
        parent = os.path.dirname(os.path.abspath(name))
        if os.path.islink(name):
            if os.path.realpath(name) == os.path.realpath(node.directory):
                continue
            os.remove(name)
        os.makedirs(parent, exist_ok=True)
        os.symlink(os.path.relpath(os.path.abspath(node.directory), parent), name)


def run_job(job: Job, env: dict, started=None) -> tuple[int, Step | None]:
    """Run ``job``'s steps one after another, shielded from SIGUSR2 (the SLURM executor's job); the
    first failure ends it. A step whose job another live process holds is waited for. ``started(process,
    step)`` hears of each process. Returns the job's status and the step that failed."""
    for step in job.steps:
        holder = step.held_by()
        if holder is not None:
            os.makedirs(os.path.dirname(step.log), exist_ok=True)
            with open(step.log, "a", encoding="utf-8") as log:
                log.write(f"{HEADER}waiting: PID {holder.pid} on {holder.where} holds it\n")
            while step.held_by() is not None:
                time.sleep(HOLDER_POLL_S)
        if step.done():
            continue
        refusal = step.refusal()
        if refusal:
            os.makedirs(os.path.dirname(step.log), exist_ok=True)
            with open(step.log, "a", encoding="utf-8") as log:
                log.write(f"{HEADER}start\nerror: {refusal}\n")
            return step.finish(2), step
        proc = step.start(env, None, shielded=True)
        if started is not None:
            started(proc, step)
        status = step.finish(proc.wait())
        if status != 0:
            return status, step
    return 0, None


# the figure of a table script's printed tables (python -m cse.plots table), beside its table.txt
TABLE_NAME, FIGURE_NAME = "table.txt", "table.png"


def state_dir(plan) -> str:
    """``<the runs' common folder>/_sweep/<table>``: the printed table, its figure and the SLURM
    executor's files."""
    parents = [os.path.dirname(os.path.abspath(node.directory)) for node in plan.nodes] or [os.getcwd()]
    table = plan.tables[0]
    if len(plan.tables) > 1:
        name = f"{len(plan.tables)}-tables"
    elif table.script.startswith("scripts" + os.sep):
        name = table.name.replace("/", "-")
    else:
        name = os.path.basename(table.script).removesuffix(".sh")
    return os.path.join(os.path.commonpath(parents), "_sweep", name)


def write_tables(plan, env: dict, path: str, echo=None) -> list[Failure]:
    """:func:`run_tables` into ``path`` (whole or not at all: written beside, then renamed), its text
    also on ``echo``; then, when the tables are result tables (``python -m cse.results``), their figure
    beside it (:data:`FIGURE_NAME`, ``python -m cse.plots table``)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".partial"
    with open(tmp, "w", encoding="utf-8") as out:
        failures = run_tables(plan, env, out)
    with open(tmp, encoding="utf-8") as f:
        text = f.read()
    os.replace(tmp, path)
    if echo is not None:
        echo.write(text)
        echo.flush()
    shows_results = any(command[1:3] == ("-m", "cse.results") for t in plan.tables for command in t.show)
    if shows_results and "|---" in text:  # a table none of whose runs finished prints none
        figure = os.path.join(os.path.dirname(path), FIGURE_NAME)
        command = ["python", "-m", "cse.plots", "table", figure, path]
        status = subprocess.run(command, cwd=REPO, env=env, stdout=subprocess.DEVNULL).returncode
        if status != 0:
            failures.append(Failure(f"the figure of the table: {shlex.join(command)}", status, None, []))
        else:
            print(f"the table and its figure: {path}, {figure}", file=sys.stderr, flush=True)
    return failures


def run_tables(plan, env: dict, stdout) -> list[Failure]:
    """Run the commands of each table of ``plan`` in order, their output on ``stdout`` (a heading per
    table when there are several). A table none of whose runs finished prints nothing but a line on
    stderr."""
    failures = []
    for table in plan.tables:
        if len(plan.tables) > 1:
            print(f"\n## {table.script}\n", file=stdout, flush=True)
        directories = {run.output_dir for run in table.runs}
        if table.runs and not any(node.finished for node in plan.nodes if {node.directory, *node.links} & directories):
            print(f"{table.script}: none of its runs finished, no table", file=sys.stderr, flush=True)
            continue
        for command in table.show:
            stdout.flush()
            status = subprocess.run(command, cwd=REPO, env=env, stdout=stdout, stdin=subprocess.DEVNULL).returncode
            if status != 0:
                failures.append(Failure(f"the table of {table.script}: {shlex.join(command)}", status, None, []))
    return failures
