"""The sweep's progress, on stderr: runs and evaluations done, running, queued and failed, and the time
left. On a terminal it is one tqdm bar that updates in place; otherwise (a log file, a SLURM job's
output) one line per change, with the event that changed it.

The time left is the benchmark's estimate of the runs not finished yet (:mod:`sweep.estimate`), less
what the running ones have already spent, over the runs that can go at once, scaled by the rate the
sweep has measured: the time its finished runs took against their estimate."""

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
        self.estimates: dict[str, float] = {}  # a queued or running run's estimated seconds
        self.started: dict[str, float] = {}
        self.spent = self.expected = 0.0  # over the runs this sweep finished, for the measured rate
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
        if kind == "runs" and new == "running":
            self.started[name] = now
        if kind == "runs" and old == "running":
            began = self.started.pop(name, now)
            estimate = self.estimates.pop(name, None)
            if new == "done" and estimate:
                self.spent, self.expected = self.spent + now - began, self.expected + estimate
        if self.bar is not None and new in ("done", "failed"):
            self.bar.update(1)
        self.show(event, keep=new == "failed")

    def skip(self, kind: str) -> None:
        """A queued job that will not run (the evaluations of a failed run)."""
        self.counts[kind]["queued"] -= 1
        self.counts[kind]["skipped"] = self.counts[kind].get("skipped", 0) + 1

    def time_left(self) -> str:
        if not self.estimates:
            return "time left unknown" if self.counts["runs"]["queued"] + self.counts["runs"]["running"] else ""
        now = time.monotonic()
        left = sum(max(0.0, s - (now - self.started[n])) if n in self.started else s for n, s in self.estimates.items())
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
        """The counts, with ``event``; on a terminal the event is written above the bar, kept, if ``keep``."""
        line = self.line()
        if self.bar is not None:
            if keep:
                self.bar.write(event, file=self.stream)
            self.bar.set_postfix_str(line, refresh=True)
            return
        if (line, event) != self.last:
            self.last = (line, event)
            print(f"{line}" + (f" | {event}" if event else ""), file=self.stream, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
