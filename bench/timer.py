"""``StepTimer``: a ``TrainerCallback`` that times the optimizer steps of the real Trainer, counts the
model FLOPs of one step and records peak memory over the timed steps."""

from __future__ import annotations

import time

import torch
from torch.utils.flop_counter import FlopCounterMode
from transformers import TrainerCallback

CLEAR_REFS = "/proc/self/clear_refs"


def reset_peak_memory(device: torch.device) -> None:
    """Start a new peak: CUDA's allocator statistics, or on the CPU the process's peak resident set
    (Linux resets VmHWM when "5" is written to ``clear_refs``)."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    else:
        try:
            with open(CLEAR_REFS, "w") as f:
                f.write("5")
        except OSError as error:
            raise RuntimeError(f"cannot reset the peak resident set through {CLEAR_REFS} (Linux only): {error}")


def peak_memory(device: torch.device) -> tuple[int, str]:
    """The peak since :func:`reset_peak_memory`, in bytes, and what was measured."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device), "cuda_max_memory_allocated"
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024, "cpu_peak_rss"
    raise RuntimeError("/proc/self/status has no VmHWM line: the peak resident set cannot be read here")


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class StepTimer(TrainerCallback):
    """Time ``steps`` optimizer steps after ``warmup_steps`` of them.

    A step's time runs from the end of the previous step to the end of this one (``on_step_end``, CUDA
    synchronised there and nowhere else), so it holds everything the Trainer does per step: fetching
    and collating the batch, forward, backward, clipping, the optimizer, the method's own updates
    and the Trainer's bookkeeping. The process's CPU time (user + system, all threads) is taken at
    the same points: on a CPU shared with other jobs it is less disturbed than wall-clock time.
    The last warm-up step runs under ``FlopCounterMode`` (when ``count_flops``), so counting costs
    no timed step; peak memory is reset after it. The callback stops training once the timed steps
    are done.
    """

    def __init__(self, warmup_steps: int, steps: int, count_flops: bool = True):
        if warmup_steps < 1 or steps < 1:
            raise ValueError(f"need at least one warm-up and one timed step, got {warmup_steps} and {steps}")
        self.warmup_steps, self.steps, self.count_flops = warmup_steps, steps, count_flops
        self.step_ends: list[float] = []
        self.cpu_ends: list[float] = []
        # when each step after the first began: the previous one's end, unless a subclass spends time between
        self.step_starts: list[float] = []
        self.cpu_starts: list[float] = []
        self.flops_per_step: int | None = None
        self.peak_memory: tuple[int, str] | None = None
        self._counter: FlopCounterMode | None = None

    def on_step_begin(self, args, state, control, **kwargs):
        if self.count_flops and state.global_step == self.warmup_steps - 1:
            self._counter = FlopCounterMode(display=False)
            self._counter.__enter__()

    def on_step_end(self, args, state, control, **kwargs):
        if self._counter is not None:
            self._counter.__exit__(None, None, None)
            self.flops_per_step = self._counter.get_total_flops()
            self._counter = None
        synchronize(args.device)
        self.step_ends.append(time.perf_counter())
        self.cpu_ends.append(time.process_time())
        self.step_starts.append(self.step_ends[-1])
        self.cpu_starts.append(self.cpu_ends[-1])
        if state.global_step == self.warmup_steps:
            reset_peak_memory(args.device)
        elif state.global_step == self.warmup_steps + self.steps:
            self.peak_memory = peak_memory(args.device)
            control.should_training_stop = True

    def step_times(self, cpu: bool = False) -> list[float]:
        """Seconds of each timed step: wall-clock, or the process's CPU time."""
        if self.peak_memory is None:
            raise RuntimeError(
                f"training stopped after {len(self.step_ends)} steps, before the {self.warmup_steps} warm-up "
                f"and {self.steps} timed steps were done"
            )
        starts = (self.cpu_starts if cpu else self.step_starts)[self.warmup_steps - 1 : -1]
        ends = (self.cpu_ends if cpu else self.step_ends)[self.warmup_steps :]
        return [b - a for a, b in zip(starts, ends)]

    def restart(self) -> None:
        """The current step's clock starts now (after work between steps that is not the Trainer's)."""
        self.step_starts[-1] = time.perf_counter()
        self.cpu_starts[-1] = time.process_time()
