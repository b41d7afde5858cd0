"""The sweep's progress, on stderr: runs and evaluations done, running, queued, failed and skipped, and
the time left. On a terminal it is one tqdm bar that updates in place, the jobs running named after
it, each event written above it; otherwise (a log file, a SLURM job's output) one line per change,
with the event that changed it.

The time left is the benchmark's estimate of the runs not finished yet (:mod:`sweep.estimate`), less
what they have already spent running (a run stopped and requeued by SLURM resumes from its
checkpoint: its time so far is kept), over the runs that can go at once, scaled by the rate the
sweep has measured: the time its finished runs took against their estimate. A job another live
process does (one left by a sweep killed outright) counts as running while the sweep waits for it;
a run waited for is left out of the measured rate, as the sweep does not know when it began."""

from __future__ import annotations

import sys
import time

from .estimate import human


class Progress:
    def __init__(self, runs: int, evaluations: int, parallel: int, stream=None):
        self.stream = stream or sys.stderr
        self.parallel = max(1, parallel)
        self.counts = {
            kind: {"done": 0, "running": 0, "queued": total, "failed": 0}
            for kind, total in (("runs", runs), ("evaluations", evaluations))
        }
        self.estimates: dict[str, float] = {}  # a run not ended yet: its estimated seconds
        self.ran: dict[str, float] = {}  # a run not ended yet: the seconds it ran before it was requeued
        self.started: dict[str, float] = {}  # a running run: when it (last) started
        self.running: dict[str, None] = {}  # the jobs running, in the order they started
        self.spent = self.expected = 0.0  # over the runs this sweep finished, for the measured rate
        self.unmeasured: set[str] = set()  # the runs waited for: begun before the sweep saw them
        self.bar = None
        if getattr(self.stream, "isatty", lambda: False)():
            from tqdm import tqdm

            self.bar = tqdm(total=runs + evaluations, file=self.stream, unit="job", dynamic_ncols=True)
        self.last = None

    def expect(self, name: str, seconds: float | None) -> None:
        if seconds is not None:
            self.estimates[name] = seconds

    def move(self, kind: str, name: str, old: str, new: str, event: str) -> None:
        counts = self.counts[kind]
        counts[old] -= 1
        counts[new] += 1
        now = time.monotonic()
        if new == "running":
            self.running[name] = None
        if old == "running":
            self.running.pop(name, None)
        if kind == "runs" and new == "running":
            self.started[name] = now
        if kind == "runs" and old == "running":
            ran = self.ran.pop(name, 0.0) + now - self.started.pop(name, now)
            if new in ("done", "failed"):
                estimate = self.estimates.pop(name, None)
                if new == "done" and estimate and name not in self.unmeasured:
                    self.spent, self.expected = self.spent + ran, self.expected + estimate
            else:  # requeued: it resumes, its estimate less what it has run
                self.ran[name] = ran
        if self.bar is not None and new in ("done", "failed"):
            self.bar.update(1)
        self.show(event, keep=True)

    def wait(self, kind: str, name: str, event: str) -> None:
        """A queued job another live process is doing: running, its run's full estimate left."""
        self.move(kind, name, "queued", "running", event)
        self.started.pop(name, None)
        self.unmeasured.add(name)

    def skip(self, kind: str) -> None:
        """A queued job that will not run (the evaluations of a failed run): counted as ended."""
        self.counts[kind]["queued"] -= 1
        self.counts[kind]["skipped"] = self.counts[kind].get("skipped", 0) + 1
        if self.bar is not None:
            self.bar.update(1)
        self.show()

    def time_left(self) -> str:
        if not self.estimates:
            return "time left unknown" if self.counts["runs"]["queued"] + self.counts["runs"]["running"] else ""
        now = time.monotonic()
        left = sum(
            max(0.0, seconds - self.ran.get(name, 0.0) - (now - self.started[name] if name in self.started else 0.0))
            for name, seconds in self.estimates.items()
        )
        rate = self.spent / self.expected if self.expected else 1.0
        return f"about {human(left * rate / self.parallel)} left"

    def line(self) -> str:
        parts = [
            f"{kind} {c['done']} done, {c['running']} running, {c['queued']} queued, {c['failed']} failed"
            + (f", {c['skipped']} skipped" if c.get("skipped") else "")
            for kind, c in self.counts.items()
            if sum(c.values())
        ]
        left = self.time_left()
        return "; ".join(parts + ([left] if left else []))

    def show(self, event: str = "", keep: bool = False) -> None:
        """The counts, with ``event``; on a terminal the event is written above the bar if ``keep``, and
        the bar names the jobs running."""
        line = self.line()
        if self.bar is not None:
            if keep and event:
                self.bar.write(event, file=self.stream)
            running = f" | running: {', '.join(self.running)}" if self.running else ""
            self.bar.set_postfix_str(line + running, refresh=True)
            return
        if (line, event) != self.last:
            self.last = (line, event)
            print(f"{line}" + (f" | {event}" if event else ""), file=self.stream, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
