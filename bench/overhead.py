"""The Trainer's cost per step beside a hand-written loop's, in one process, interleaved step by step.

:class:`InterleavedTimer` times the run script's steps as :class:`bench.timer.StepTimer` does and,
after each of them, one :class:`bench.hand_loop.HandStep` on the batch the Trainer has just trained
on, timed on its own: the two loops share the process, the machine and whatever else runs on it at
that moment, so their difference is the Trainer's, not the machine's. The hand step is kept out of
the Trainer's step time.

:class:`Breakdown` says where the difference goes: the time (exclusive of what it calls that is
timed too) of each piece of the Trainer's step that the hand loop does not have, summed over the
timed steps: fetching and collating the batch (``get_batch_samples``, which also moves it to the
device), the copy in ``training_step`` (``_prepare_inputs``), the callbacks (the timer's own work
excluded), logging (``_maybe_log_save_evaluate``) and the scheduler's step. What is left is the
Trainer's own loop and bookkeeping. Two more pieces run in both loops, and are given for scale: the
step program's Python around the model's forward (``training_loss`` less the forward) and the
parts' before- and after-step hooks.
"""

from __future__ import annotations

import time
from collections import defaultdict

from transformers import Trainer
from transformers.trainer_callback import CallbackHandler

from cse.modeling import CSEModel
from cse.trainer import CSETrainer, PartHooks

from .hand_loop import HandStep
from .timer import StepTimer, synchronize

# component -> the (class, method)s timed for it in the Trainer's steps; the scheduler is timed on its instance
COMPONENTS = {
    "batch": [(CSETrainer, "get_batch_samples")],
    "copy": [(Trainer, "_prepare_inputs")],
    "callbacks": [(CallbackHandler, "call_event")],
    "logging": [(Trainer, "_maybe_log_save_evaluate")],
    "step_program": [(CSETrainer, "training_loss")],
    "forward": [(CSEModel, "forward")],
    # the parts' hooks, which the hand-written step runs too, are kept out of the callbacks' time
    "part_hooks": [(PartHooks, "on_step_begin"), (PartHooks, "on_optimizer_step")],
}


class Breakdown:
    """Exclusive time in each of :data:`COMPONENTS` while ``active``; the trainer and its latest batch
    as ``get_batch_samples`` hands them out. :meth:`install` patches the classes of this process."""

    def __init__(self):
        self.active = False
        self.totals: dict[str, float] = defaultdict(float)
        self._children: list[float] = []
        self.trainer = None
        self.last_batch = None

    def timed(self, function, key: str):
        breakdown = self

        def wrapper(*args, **kwargs):
            if not breakdown.active:
                return function(*args, **kwargs)
            breakdown._children.append(0.0)
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                elapsed = time.perf_counter() - start
                breakdown.totals[key] += elapsed - breakdown._children.pop()
                breakdown.exclude(elapsed)

        return wrapper

    def exclude(self, seconds: float) -> None:
        """Time spent inside the innermost timed call that is not its own."""
        if self._children:
            self._children[-1] += seconds

    def install(self, timed: bool = True) -> None:
        """Time the components (``timed``: not in a compiled, captured run, whose traced code they would
        change), and keep the trainer and its latest batch."""
        for key, methods in COMPONENTS.items() if timed else ():
            for owner, name in methods:
                setattr(owner, name, self.timed(getattr(owner, name), key))
        batches = CSETrainer.get_batch_samples

        def get_batch_samples(trainer, *args, **kwargs):
            self.trainer = trainer
            samples, count = batches(trainer, *args, **kwargs)
            self.last_batch = samples[-1]
            return samples, count

        CSETrainer.get_batch_samples = get_batch_samples

    def reset(self) -> None:
        self.totals.clear()

    def per_step(self, steps: int) -> dict[str, float]:
        """Mean seconds per step of each component; the step program without the forward."""
        means = {key: self.totals.get(key, 0.0) / steps for key in (*COMPONENTS, "scheduler")}
        means.pop("forward")
        return means


class InterleavedTimer(StepTimer):
    """:class:`StepTimer`'s steps of the Trainer, each followed by one hand-written step, timed apart."""

    def __init__(self, warmup_steps: int, steps: int, breakdown: Breakdown, capture: bool = False):
        super().__init__(warmup_steps, steps, count_flops=False)
        self.breakdown = breakdown
        self.capture = capture
        self.hand: HandStep | None = None
        self.hand_times: list[float] = []
        self.hand_cpu_times: list[float] = []

    def on_train_begin(self, args, state, control, lr_scheduler=None, **kwargs):
        if not self.capture:
            lr_scheduler.step = self.breakdown.timed(lr_scheduler.step, "scheduler")

    def on_step_end(self, args, state, control, **kwargs):
        own = time.perf_counter()
        breakdown = self.breakdown
        breakdown.active = False
        super().on_step_end(args, state, control, **kwargs)
        if self.hand is None:
            self.hand = HandStep(breakdown.trainer, self.warmup_steps + self.steps, capture=self.capture)
        start, cpu = time.perf_counter(), time.process_time()
        self.hand.step(breakdown.last_batch)
        synchronize(args.device)
        if state.global_step > self.warmup_steps:
            self.hand_times.append(time.perf_counter() - start)
            self.hand_cpu_times.append(time.process_time() - cpu)
        if state.global_step == self.warmup_steps:
            breakdown.reset()
        breakdown.active = not control.should_training_stop
        self.restart()
        breakdown.exclude(time.perf_counter() - own)
