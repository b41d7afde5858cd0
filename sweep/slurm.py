"""The ``slurm`` executor: a sweep's runs as one SLURM job array through submitit, each run's
evaluations as a job that starts when its run's job has succeeded (``afterok``; cancelled when it
fails), and the table as a job that starts when every other job has ended (``afterany``) and writes
the printed table to ``<sweep>/table.txt``.

A job that SLURM signals before its time limit, or when it preempts it (submitit's ``--signal
USR2@90``), stops its running step with SIGTERM (a run stops at its step, its last checkpoint on
disk) and requeues itself; started again, its steps skip what is done and the interrupted run resumes
from its last checkpoint. Each job's id is kept beside its logs (``_logs/slurm_job``,
``_logs/slurm_evaluations``): the same command run again follows the jobs still queued or running
instead of submitting them twice, and submits again only what ended without finishing.

The driver waits for the table job, showing the jobs' progress, and prints the table; stopping it
leaves the jobs to SLURM (``--slurm_no_wait`` returns as soon as they are submitted)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field

import yaml

from cse.atomic import write_json
from cse.errors import CSEUsageError
from cse.run_names import LAUNCHER_LOGS_NAME, SLURM_JOB_NAMES

from . import estimate
from .plan import Plan
from .progress import Progress
from .report import end
from .steps import (
    FIGURE_NAME,
    STOP_GRACE_S,
    TABLE_NAME,
    Failure,
    Job,
    evaluation_job,
    link,
    recorded_status,
    run_job,
    state_dir,
    stop_group,
    train_job,
    write_tables,
)

POLL_S = 5.0
# how many times a job may reach its time limit and be requeued (preemptions are not counted)
MAX_TIMEOUTS = 10
# what SLURM says when no node has what the jobs ask: the hint then lists what the partitions offer
RESOURCES = re.compile(r"gres|generic resource|feature|constraint|node|gpu", re.IGNORECASE)
CONFIG_KEYS = {"partition", "time", "gpus_per_job", "account", "options", "max_parallel"}


@dataclass
class SlurmSettings:
    partition: str | None = None
    minutes: int = 24 * 60
    gpus_per_job: int = 1
    account: str | None = None
    options: dict = field(default_factory=dict)
    max_parallel: int | None = None
    wait: bool = True

    @property
    def processes(self) -> int:
        """A run's processes: one per GPU of its job (one on a CPU job)."""
        return max(1, self.gpus_per_job)


def minutes(value) -> int:
    """SLURM's time formats: minutes, H:MM:SS, MM:SS, D-HH[:MM[:SS]]."""
    text = str(value).strip()
    match = re.fullmatch(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?", text)
    if not match:
        raise CSEUsageError(f"--slurm_time {text}: not a SLURM time", hint="minutes (90), or H:MM:SS (4:00:00)")
    days, first, second, third = match.groups()
    if days is not None:  # D-HH[:MM[:SS]]
        total = int(days) * 1440 + int(first) * 60 + int(second or 0) + int(third or 0) / 60
    elif third is not None:  # H:MM:SS
        total = int(first) * 60 + int(second) + int(third) / 60
    elif second is not None:  # MM:SS
        total = int(first) + int(second) / 60
    else:
        total = int(first)
    if total <= 0:
        raise CSEUsageError(f"--slurm_time {text}: no time at all", hint="minutes (90), or H:MM:SS (4:00:00)")
    return max(1, round(total))


def _options(items) -> dict:
    options = {}
    for item in items or ():
        key, sep, value = str(item).partition("=")
        key = key.strip().lstrip("-")
        if not sep or not key:
            raise CSEUsageError(
                f"--slurm_option {item}: not KEY=VALUE",
                hint="an sbatch option by its long name: --slurm_option qos=high",
            )
        options[key] = value
    return options


def _partitions() -> list[str]:
    proc = subprocess.run(["sinfo", "--noheader", "--format=%R"], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise CSEUsageError(f"sinfo failed: {proc.stderr.strip()}", hint="is the SLURM controller reachable from here?")
    return sorted(set(proc.stdout.split()))


def _partition_limit(partition: str | None) -> int | None:
    command = ["sinfo", "--noheader", "--format=%l"] + (["--partition", partition] if partition else [])
    limits = subprocess.run(command, capture_output=True, text=True, check=False).stdout.split()
    finite = [minutes(limit) for limit in limits if limit not in ("infinite", "n/a")]
    return min(finite) if finite else None


def settings(args, processes: int, check_cluster: bool = True) -> SlurmSettings:
    """The executor's settings from ``--slurm_config`` and the flags (which win); with
    ``check_cluster``, refused when sbatch is not on the PATH, the partition is unknown to SLURM or
    SLURM would not take the jobs (:func:`check_submission`)."""
    config = {}
    if args.slurm_config:
        try:
            with open(args.slurm_config, encoding="utf-8") as f:
                config = yaml.safe_load(f) or {}
        except OSError as error:
            raise CSEUsageError(f"--slurm_config {args.slurm_config}: {error.strerror}") from None
        unknown = sorted(set(config) - CONFIG_KEYS) if isinstance(config, dict) else ["(not a mapping)"]
        if unknown:
            raise CSEUsageError(
                f"--slurm_config {args.slurm_config}: unknown key(s) {', '.join(map(str, unknown))}",
                hint=f"its keys: {', '.join(sorted(CONFIG_KEYS))}",
            )
    pick = {key: config.get(key) for key in CONFIG_KEYS}
    for key in ("partition", "time", "gpus_per_job", "account", "max_parallel"):
        given = args.max_parallel if key == "max_parallel" else getattr(args, f"slurm_{key}")
        if given is not None:
            pick[key] = given
    options = config.get("options") or {}
    options = _options([f"{k}={v}" for k, v in options.items()] if isinstance(options, dict) else options)
    options.update(_options(args.slurm_option))
    gpus = pick["gpus_per_job"]
    if gpus is not None and "NUM_GPUS" in os.environ and max(1, int(gpus)) != processes:
        raise CSEUsageError(
            f"NUM_GPUS={processes} and {gpus} GPUs per job disagree",
            hint="a run takes one process per GPU of its job: set one of them",
        )
    result = SlurmSettings(
        partition=pick["partition"],
        gpus_per_job=processes if gpus is None else int(gpus),
        account=pick["account"],
        options=options,
        max_parallel=pick["max_parallel"],
        wait=not args.slurm_no_wait,
    )
    if pick["time"] is not None:
        result.minutes = minutes(pick["time"])
    if check_cluster:
        if shutil.which("sbatch") is None:
            raise CSEUsageError(
                "--executor slurm: sbatch is not on the PATH",
                hint="run the sweep on a machine that submits to your SLURM cluster (a login node)",
            )
        if result.partition is not None:
            # sbatch takes a comma list of partitions (the job starts in the first that can run it)
            known = _partitions()
            unknown = [name for name in str(result.partition).split(",") if name not in known]
            if unknown:
                raise CSEUsageError(
                    f"SLURM has no partition {unknown[0]!r}"
                    + (f" (of --slurm_partition {result.partition})" if unknown[0] != result.partition else ""),
                    hint=f"its partitions: {', '.join(known)}",
                )
        if pick["time"] is None:
            result.minutes = _partition_limit(result.partition) or result.minutes
        check_submission(result)
    return result


def make_executor(settings: SlurmSettings, folder: str, gpus: int):
    """The submitit executor of the sweep's jobs with ``gpus`` GPUs each (0: the table's job)."""
    import submitit

    executor = submitit.SlurmExecutor(folder=os.path.join(folder, "%j"), max_num_timeout=MAX_TIMEOUTS)
    options = dict(settings.options)
    if settings.account:
        options["account"] = settings.account
    parameters = dict(time=settings.minutes, job_name="cse-sweep", additional_parameters=options)
    if settings.partition:
        parameters["partition"] = settings.partition
    if gpus:
        parameters["gpus_per_node"] = gpus
    if settings.max_parallel:
        parameters["array_parallelism"] = settings.max_parallel
    executor.update_parameters(**parameters)
    return executor


def _asked(settings: SlurmSettings, gpus: int) -> str:
    """The sbatch options a job takes from the settings, as sbatch spells them."""
    asked = {"partition": settings.partition, "time": settings.minutes, "gpus-per-node": gpus or None}
    asked.update(account=settings.account, **settings.options)
    return " ".join(f"--{key}={value}" for key, value in asked.items() if value is not None)


def check_submission(settings: SlurmSettings) -> None:
    """Ask SLURM whether it would take the sweep's jobs (``sbatch --test-only`` with the batch script
    submitit writes for them: the same options), before anything is submitted or written: a
    setting it refuses (a feature no node has, GPUs on a cluster without them, an unknown account or
    QOS) is one line with what the jobs ask and what the cluster offers."""
    for gpus in dict.fromkeys((settings.gpus_per_job, 0)):
        # submitit's own batch script, the one its submit() writes (a private method: submitit has no
        # public one); the file names in it are never created, as --test-only submits nothing
        script = make_executor(settings, os.path.join(os.getcwd(), "_sweep"), gpus)._make_submission_file_text(
            "true", "test"
        )
        proc = subprocess.run(["sbatch", "--test-only"], input=script, capture_output=True, text=True, check=False)
        if proc.returncode == 0:
            continue
        said = [line.removeprefix("sbatch: error: ").strip() for line in proc.stderr.splitlines() if line.strip()]
        reason = said[-1] if said else f"sbatch --test-only exited {proc.returncode}"
        hint = f"the jobs ask {_asked(settings, gpus)}; "
        if RESOURCES.search(reason):
            offered = subprocess.run(
                ["sinfo", "--noheader", "--format=%P GRES %G, features %f"], capture_output=True, text=True, check=False
            ).stdout.split("\n")
            hint += "the partitions offer: " + (
                "; ".join(line.strip() for line in offered if line.strip()) or "(sinfo says nothing)"
            )
        else:
            hint += "correct the option SLURM names (man sbatch gives the values each takes)"
        raise CSEUsageError(f"SLURM refuses the sweep's jobs: {reason}", hint=hint)


class SweepJob:
    """A job's steps, run in a SLURM job; submitit calls :meth:`checkpoint` on the signal that comes
    before the time limit or with a preemption, and requeues the job when it returns."""

    def __init__(self, job: Job):
        self.job = job
        self.proc = self.step = None

    def _started(self, proc, step) -> None:
        self.proc, self.step = proc, step

    def __call__(self) -> int:
        status, step = run_job(self.job, dict(os.environ), started=self._started)
        if status != 0:
            raise RuntimeError(f"{step.what} of {step.directory} exited with status {status}; log: {step.log}")
        return status

    def checkpoint(self):
        from submitit.helpers import DelayedSubmission

        if self.proc is not None and self.proc.returncode is None:
            # The step's process group gets SIGTERM: a run stops at its step and releases its
            # directory. This runs in the signal's handler, which interrupted Popen.wait in __call__
            # (it holds Popen's lock, so Popen.poll would never see the end): the launcher is reaped
            # here directly, and the group is watched until it is gone.
            group = self.proc.pid
            with contextlib.suppress(ProcessLookupError):
                os.killpg(group, signal.SIGTERM)
            self.step.finish(stop_group(group, lambda: _reap(group), time.monotonic() + STOP_GRACE_S))
        return DelayedSubmission(SweepJob(self.job))


def _reap(pid: int) -> int | None:
    """The exit status of the child ``pid`` once it has ended (reaping it), else None, without blocking."""
    ended, status = os.waitpid(pid, os.WNOHANG)
    return os.waitstatus_to_exitcode(status) if ended else None


class TableJob:
    """The tables' commands in a SLURM job, the output written to ``path`` when they have all run."""

    def __init__(self, plan: Plan, path: str):
        self.plan, self.path = plan, path

    def __call__(self) -> int:
        failures = write_tables(self.plan, dict(os.environ), self.path)
        if failures:
            raise RuntimeError("; ".join(f.lines()[0] for f in failures))
        return 0


def _record(directory: str, kind: str) -> str:
    """Where the id of the SLURM job of ``kind`` (``run``, ``evaluations``) for ``directory`` is kept."""
    return os.path.join(directory, LAUNCHER_LOGS_NAME, SLURM_JOB_NAMES[kind])


def _keep_id(path: str, job_id: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    write_json(path, {"job_id": job_id})


def _read_id(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)["job_id"]
    except (OSError, ValueError, KeyError):
        return None


def squeue(ids) -> dict[str, str]:
    """The state (PENDING, RUNNING, ...) of each of ``ids`` SLURM still lists."""
    ids = [i for i in ids if i]
    if not ids:
        return {}
    proc = subprocess.run(
        ["squeue", "--noheader", "--array", "--format=%i %T", "--jobs", ",".join(ids)],
        capture_output=True,
        text=True,
        check=False,
    )
    states = dict(line.split(maxsplit=1) for line in proc.stdout.splitlines() if line.strip())
    return {i: states[i] for i in ids if i in states}


class SlurmExecutor:
    def __init__(self, settings: SlurmSettings, env: dict):
        self.settings, self.env = settings, env

    def _submit(self, executor, function, dependency: str | None = None):
        options = dict(self.settings.options)
        if dependency:
            options.update(dependency=dependency, **{"kill-on-invalid-dep": "yes"})
        executor.update_parameters(additional_parameters=options)
        return executor.submit(function).job_id

    def run(self, plan: Plan) -> int:
        state = state_dir(plan)
        os.makedirs(state, exist_ok=True)
        for node in plan.nodes:
            link(node)
        folder = os.path.join(state, "slurm")
        processes = self.settings.processes
        runs = {node.directory: train_job(node, processes) for node in plan.nodes if not node.finished}
        evaluations = {n.directory: evaluation_job(n, processes) for n in plan.nodes if n.evaluations}
        records = {d: _read_id(_record(d, "run")) for d in runs}
        records.update({("evaluations", d): _read_id(_record(d, "evaluations")) for d in evaluations})
        table_record = os.path.join(state, "table_job")
        records["table"] = _read_id(table_record)
        alive = squeue(records.values())
        ids = {key: job_id for key, job_id in records.items() if job_id in alive}
        followed = [key for key in ids if key != "table"]  # submitted before, still queued or running
        submitted = 0

        new_runs = [job for d, job in runs.items() if d not in ids]
        if new_runs:
            executor = make_executor(self.settings, folder, self.settings.gpus_per_job)
            with executor.batch():
                handles = [executor.submit(SweepJob(job)) for job in new_runs]
            for job, handle in zip(new_runs, handles):
                ids[job.node.directory] = handle.job_id
                _keep_id(_record(job.node.directory, "run"), handle.job_id)
            submitted += len(new_runs)
        executor = make_executor(self.settings, folder, self.settings.gpus_per_job)
        for directory, job in evaluations.items():
            if ("evaluations", directory) in ids:
                continue
            run_id = ids.get(directory)
            ids[("evaluations", directory)] = self._submit(executor, SweepJob(job), run_id and f"afterok:{run_id}")
            _keep_id(_record(directory, "evaluations"), ids[("evaluations", directory)])
            submitted += 1
        table_path = os.path.join(state, TABLE_NAME)
        table_submitted = bool(submitted) or "table" not in ids
        if table_submitted:
            if "table" in ids:  # it would not wait for the jobs just submitted
                subprocess.run(["scancel", ids.pop("table")], check=False)
            for stale in (table_path, os.path.join(state, FIGURE_NAME)):  # the table job writes them anew
                if os.path.exists(stale):
                    os.remove(stale)
            others = [job_id for key, job_id in ids.items() if key != "table"]
            table_executor = make_executor(self.settings, folder, 0)
            ids["table"] = self._submit(
                table_executor, TableJob(plan, table_path), others and "afterany:" + ":".join(others)
            )
            _keep_id(table_record, ids["table"])
        print(
            f"{_submission(submitted, followed, ids['table'], table_submitted)}; logs in each run's "
            f"{LAUNCHER_LOGS_NAME}/ and {folder}",
            file=sys.stderr,
            flush=True,
        )
        if not self.settings.wait:
            print(f"the table will be in {table_path}; rerun the same command to follow the jobs", file=sys.stderr)
            return 0
        return self._follow(plan, runs, evaluations, ids, table_path)

    def _follow(self, plan, runs, evaluations, ids, table_path) -> int:
        """Wait for the table's job, showing the jobs' progress; then print the table and what failed."""
        jobs = {**runs, **{("evaluations", d): job for d, job in evaluations.items()}}
        progress = Progress(len(runs), len(evaluations), self.settings.max_parallel or len(runs) or 1)
        for job in runs.values():
            progress.expect(job.name, estimate.seconds(job.node.run))
        seen = {key: "queued" for key in jobs}
        stopped = []
        signals = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
        handlers = {s: signal.signal(s, lambda signum, frame: stopped.append(signum)) for s in signals}
        try:
            while not stopped:
                states = squeue(ids.values())
                for key, job in jobs.items():
                    new = _state(job, ids[key], states)
                    old = seen[key]
                    if new == old:
                        continue
                    kind = "runs" if job.kind == "run" else "evaluations"
                    if (
                        job.kind == "evaluations"
                        and old == "queued"
                        and new == "failed"
                        and seen.get(job.node.directory) == "failed"
                    ):
                        progress.skip(kind)  # SLURM cancelled them with the run they evaluate: never run
                        seen[key] = new
                        continue
                    if old == "queued" and new in ("done", "failed"):
                        progress.move(kind, job.name, "queued", "running", "")
                        old = "running"
                    progress.move(kind, job.name, old, new, f"{new}: {job.name} (job {ids[key]})")
                    seen[key] = new
                if ids["table"] not in states:
                    break
                time.sleep(POLL_S)
        finally:
            for signum, handler in handlers.items():
                signal.signal(signum, handler)
            progress.close()
        if stopped:
            name = signal.Signals(stopped[0]).name
            print(f"error: {name} stopped the driver; the jobs go on in SLURM", file=sys.stderr)
            print("  hint: rerun the same command to follow them", file=sys.stderr)
            return 128 + stopped[0]
        if os.path.exists(table_path):
            with open(table_path, encoding="utf-8") as f:
                sys.stdout.write(f.read())
            sys.stdout.flush()
        # a failed run's evaluations were cancelled with it: its failure says it
        failed = {key: f for key, job in jobs.items() if (f := _failure(job)) is not None}
        unrun = {d for d in runs if d in failed}
        failures = [
            f
            for key, f in failed.items()
            if not (jobs[key].kind == "evaluations" and jobs[key].node.directory in unrun)
        ]
        if not os.path.exists(table_path):
            failures.append(Failure(f"the table's job {ids['table']}", 1, None, []))
        return end(failures)


def _submission(submitted: int, followed: list, table_id: str, table_submitted: bool) -> str:
    """What the sweep did with SLURM: the jobs it submitted, and those of an earlier submission it follows."""
    table = f"the table's job ({table_id})"
    before = f"{len(followed)} job(s) submitted before, still in SLURM"
    if submitted:
        return f"submitted to SLURM: {submitted} job(s) and {table}" + (f"; following {before}" if followed else "")
    if table_submitted:
        return f"following {before}; submitted to SLURM: {table}" if followed else f"submitted to SLURM: {table}"
    return f"following {before}, and {table}; nothing submitted"


def _state(job: Job, job_id: str, states: dict) -> str:
    if job_id in states:
        return "running" if states[job_id] in ("RUNNING", "COMPLETING") else "queued"
    return "done" if all(step.done() for step in job.steps) else "failed"


def _failure(job: Job) -> Failure | None:
    """The first step of ``job`` that is not done: its failure, as its log recorded it."""
    for step in job.steps:
        if step.done():
            continue
        status = recorded_status(step.log)
        if status is None:  # its log names no attempt, or one that ended with nothing recorded
            started = os.path.exists(step.log)
            if started:
                why = ["its job ended while it ran, recording nothing (killed outright, or its node failed)"]
            else:
                why = ["its job ended before it ran (cancelled, or the run it evaluates failed)"]
            return Failure(f"{job.name} ({step.what})", 1, step.log if started else None, why)
        return step.failure(status)
    return None
