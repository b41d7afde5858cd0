"""The executors of one machine: ``sequential`` (one job at a time, on the GPUs the runs see; a run
over several with NUM_GPUS) and ``gpus`` (one job per slot of the GPU list at once, each process
seeing only its slot's GPUs through CUDA_VISIBLE_DEVICES).

A run's evaluations start in the first free slot as soon as it ends, before any queued run; a failed
run leaves the others going and its evaluations unstarted. SIGINT, SIGTERM or SIGHUP (Ctrl-C, kill, a
lost SSH session) stop the running jobs with SIGTERM, which the run scripts answer by stopping at the
step they are in, and end the sweep: the same command finishes the table later, the interrupted runs
resuming from their last checkpoint. A job whose lock another live process holds (a job left by a
sweep that was killed outright, :mod:`sweep.steps`) is waited for, never started twice, and the GPUs
that process was given are handed to no other job until it has ended."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import sys
import time

from . import estimate
from .plan import Plan
from .progress import Progress
from .report import end
from .steps import (
    STOP_GRACE_S,
    TABLE_NAME,
    Holder,
    Job,
    evaluation_job,
    link,
    state_dir,
    stop_group,
    train_job,
    write_tables,
)

# The loop sleeps until a child ends or a signal comes (SIGCHLD through a wakeup pipe), at most this long
POLL_S = 2.0
_NONE = object()  # no slot free


class Stopped(Exception):
    def __init__(self, signum: int):
        self.signum = signum


class LocalExecutor:
    """``slots``: the CUDA_VISIBLE_DEVICES of each slot (None: leave the variable as it is)."""

    def __init__(self, slots: list[str | None], processes: int, env: dict, stream=None):
        self.slots, self.processes, self.env, self.stream = list(slots), processes, env, stream
        self.failures: list = []  # steps.Failure
        self.stopping: int | None = None
        self.running: dict[int, tuple] = {}  # pid -> (process, job, step index, slot)

    def _signal(self, signum, frame) -> None:
        if self.stopping is not None:  # a second signal: no more grace
            for proc, *_ in self.running.values():
                _kill(proc, signal.SIGKILL)
        self.stopping = signum

    def run(self, plan: Plan) -> int | None:
        """Run every job of ``plan``; returns None, or the signal that stopped the sweep."""
        for node in plan.nodes:
            link(node)
        runs = [train_job(node, self.processes) for node in plan.nodes if not node.finished]
        evaluations = {node.directory: evaluation_job(node, self.processes) for node in plan.nodes}
        evaluations = {d: job for d, job in evaluations.items() if job is not None}
        self.progress = Progress(len(runs), len(evaluations), len(self.slots), self.stream)
        for job in runs:
            self.progress.expect(job.name, estimate.seconds(job.node.run))
        queue = list(runs)
        ready = [job for job in evaluations.values() if job.node.finished]
        waiting: dict[int, tuple[Job, Holder]] = {}  # id(job) -> the job, its live holder
        self.waited: set[int] = set()  # id(job): counted running since the sweep began to wait for it
        for job in queue + ready:
            self._hold(job, queue, ready, waiting)
        free = list(self.slots)
        handlers = {s: signal.signal(s, self._signal) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
        handlers[signal.SIGCHLD] = signal.signal(signal.SIGCHLD, lambda signum, frame: None)
        wake, woken = os.pipe()
        os.set_blocking(wake, False)
        os.set_blocking(woken, False)
        wakeup = signal.set_wakeup_fd(woken)
        self.progress.show()
        try:
            while queue or ready or waiting or self.running:
                if self.stopping is not None:
                    self._stop()
                    return self.stopping
                for key, (job, _) in list(waiting.items()):
                    if job.steps[0].held_by() is None:
                        del waiting[key]
                        (ready if job.kind == "evaluations" else queue).insert(0, job)
                while ready or queue:
                    # a slot none of whose GPUs a waited-for process holds
                    slot = next((s for s in free if not any(h.holds(s) for _, h in waiting.values())), _NONE)
                    if slot is _NONE:
                        break
                    job = ready.pop(0) if ready else queue.pop(0)
                    if self._hold(job, queue, ready, waiting):
                        continue
                    free.remove(slot)
                    where = f" (CUDA_VISIBLE_DEVICES={slot})" if slot is not None else ""
                    if id(job) not in self.waited:
                        self.progress.move(_kind(job), job.name, "queued", "running", f"started {job.name}{where}")
                    if not self._next(job, 0, slot):
                        # what it waited for did it all: it ends without being started
                        free.append(slot)
                        self._ended(job, evaluations, ready)
                    elif id(job) in self.waited:  # what it waited for left it unfinished: it resumes
                        self.progress.show(f"started {job.name}{where}", keep=True)
                if not any(proc.poll() is not None for proc, *_ in self.running.values()):
                    select.select([wake], [], [], POLL_S)
                with contextlib.suppress(BlockingIOError):
                    os.read(wake, 4096)
                for pid, (proc, job, index, slot) in list(self.running.items()):
                    status = proc.poll()
                    if status is None:
                        continue
                    del self.running[pid]
                    status = job.steps[index].finish(status)
                    if status != 0:
                        self.failures.append(job.steps[index].failure(status))
                        free.append(slot)
                        self._ended(job, evaluations, ready, failed=status)
                    elif not self._next(job, index + 1, slot):
                        free.append(slot)
                        self._ended(job, evaluations, ready)
        finally:
            signal.set_wakeup_fd(wakeup)
            os.close(wake)
            os.close(woken)
            for signum, handler in handlers.items():
                signal.signal(signum, handler)
            self.progress.close()
        return None

    def _hold(self, job: Job, queue: list, ready: list, waiting: dict) -> bool:
        """Move ``job`` to ``waiting`` when another live process holds it; whether one does."""
        holder = job.steps[0].held_by()
        if holder is None:
            return False
        for jobs in (queue, ready):
            if job in jobs:
                jobs.remove(job)
        waiting[id(job)] = (job, holder)
        gpus = f" on CUDA_VISIBLE_DEVICES={holder.gpus}" if holder.gpus is not None else ""
        doing = "trains" if job.kind == "run" else "runs"
        event = f"waiting for {job.name}: PID {holder.pid} on {holder.where} {doing} it{gpus}"
        if id(job) in self.waited:
            self.progress.show(event, keep=True)
        else:
            self.waited.add(id(job))
            self.progress.wait(_kind(job), job.name, event)
        return True

    def _next(self, job: Job, index: int, slot: str | None) -> bool:
        """Start the job's first step from ``index`` that is not done; False when none is left."""
        for i in range(index, len(job.steps)):
            if not job.steps[i].done():
                proc = job.steps[i].start(self.env, slot)
                self.running[proc.pid] = (proc, job, i, slot)
                return True
        return False

    def _ended(self, job: Job, evaluations: dict, ready: list, failed: int | None = None) -> None:
        if failed is not None:
            self.progress.move(_kind(job), job.name, "running", "failed", f"failed {job.name} (exit status {failed})")
            if job.kind == "run" and job.node.directory in evaluations:
                self.progress.skip("evaluations")
            return
        self.progress.move(_kind(job), job.name, "running", "done", f"finished {job.name}")
        if job.kind == "run" and job.node.directory in evaluations:
            ready.append(evaluations[job.node.directory])

    def _stop(self) -> None:
        """SIGTERM to every running job's processes; each gets STOP_GRACE_S to stop at its step."""
        for proc, *_ in self.running.values():
            _kill(proc, signal.SIGTERM)
        name = signal.Signals(self.stopping).name
        self.progress.show(f"{name}: stopping {len(self.running)} running job(s) at their step")
        deadline = time.monotonic() + STOP_GRACE_S
        for proc, job, index, _ in list(self.running.values()):
            job.steps[index].finish(stop_group(proc.pid, proc.poll, deadline))
        self.running.clear()


def _kill(proc, signum: int) -> None:
    try:
        os.killpg(proc.pid, signum)
    except ProcessLookupError:
        pass


def _kind(job: Job) -> str:
    return "runs" if job.kind == "run" else "evaluations"


def run_local(plan: Plan, slots: list[str | None], processes: int, env: dict) -> int:
    """Run ``plan`` in ``slots``, print its tables and name what failed; the sweep's exit status."""
    executor = LocalExecutor(slots, processes, env)
    stopped = executor.run(plan)
    if stopped is not None:
        status = end(executor.failures)
        name = signal.Signals(stopped).name
        print(
            f"error: {name} stopped the sweep; the runs it stopped resume from their last checkpoint", file=sys.stderr
        )
        print("  hint: rerun the same command to finish the table", file=sys.stderr)
        return 128 + stopped if not status else status
    table = os.path.join(state_dir(plan), TABLE_NAME)
    return end(executor.failures + write_tables(plan, env, table, echo=sys.stdout))
