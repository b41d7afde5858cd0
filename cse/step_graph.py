"""The whole training step as one function, and on a GPU as one CUDA graph per input shape
(``--cuda_graphs true``).

:class:`WholeStep` is the step of :class:`cse.trainer.CSETrainer` as a single function of a batch:
the gradients zeroed in place, the step program of the parts (forward, the loss's and the parts'
terms, their sum), the backward, gradient clipping (``foreach``, no host sync), the optimizer's step
and each part's after-step update (AdCSE's adversaries and momentum encoder). Nothing in it reads a
value on the host, so on a CUDA device :class:`StepGraphs` captures it once per input shape into a
``torch.cuda.CUDAGraph`` and replays it: one launch a step instead of about a thousand.

What the capture needs, and how the trainer gives it:

* **state that exists before the capture**: each input shape's first steps (``warmup``) run the
  function eagerly, as real training steps, on a side stream, so that the optimizer's state and the
  compiled kernels exist; the next step of that shape is captured, then replayed, and every later one
  replayed. A resumed run captures after the checkpoint's state is loaded: the capture reads the
  optimizer's state tensors, which a resume fills in place.
* **learning rates on the device**: each parameter group's ``lr`` becomes a device tensor that
  :class:`TensorLearningRate` fills in place with the scheduler's float value after each step (the
  Trainer's ``lr_scheduler.step()``); the optimizer must be capturable (fused or ``capturable``
  AdamW).
* **gradients in fixed tensors**: allocated once, zeroed in place at the start of the step and kept
  by this object, not by the parameters, between steps: the Trainer's own clipping, optimizer step
  and ``zero_grad`` after ``training_step`` then find no gradient and do nothing, since the graph did
  all of it. The pre-clip gradient norm of the last step is the graph's output, which the log reads.
* **static inputs**: each batch is copied into the captured input tensors of its shape; the collator
  pads batches to a few lengths (``--cuda_graph_lengths``) so that the shapes are few, padding masked.
* **autocast without its weight cache** (``cache_enabled=False``): a cached cast would be a tensor
  of the capture's that a replay does not recompute.
* **randomness from the default generator**: dropout, V-advCSE's random start and SG-BERT's view
  draws use the default CUDA generator, which graph capture supports (each replay draws new values).

A step the trainer cannot capture (``--log_term_gradients``' logging steps, which take one backward
per term; a batch shape not seen ``warmup`` times) runs eagerly, through the Trainer's own path.
"""

from __future__ import annotations

import logging
import time

import torch

logger = logging.getLogger(__name__)


class TensorLearningRate:
    """A learning-rate scheduler whose values go into device tensors: the scheduler it wraps computes
    its float schedule on a copy of the optimizer's parameter groups (whose ``lr`` stay floats), and
    each ``step()`` fills each group's ``lr`` tensor with that value in place, with no host sync. Its
    state (``state_dict``, ``get_last_lr``, ``last_epoch``) is the wrapped scheduler's, so checkpoints
    are those of a run without it."""

    def __init__(self, scheduler, optimizer, device):
        self.scheduler = scheduler
        self.optimizer = optimizer
        self.tensors = []
        shadow = []
        # fused AdamW's CUDA kernel reads a float32 lr, as it narrows a float one; the CPU's reads the
        # value on the host as a double: float64 there gives the float schedule's steps exactly
        dtype = torch.float32 if torch.device(device).type == "cuda" else torch.float64
        for group in optimizer.param_groups:
            value = float(group["lr"])
            shadow.append({key: value for key, value in group.items() if key != "params"} | {"lr": value})
            group["lr"] = torch.tensor(value, dtype=dtype, device=device)
            self.tensors.append(group["lr"])
        # the scheduler reads and writes the float copies; the optimizer reads the tensors
        scheduler.optimizer = _FloatGroups(scheduler.optimizer, shadow)

    def step(self, *args, **kwargs):
        self.scheduler.step(*args, **kwargs)
        for tensor, group in zip(self.tensors, self.scheduler.optimizer.param_groups):
            tensor.fill_(group["lr"])

    def __getattr__(self, name):
        return getattr(self.scheduler, name)


class _FloatGroups:
    """An optimizer as its scheduler sees it: its parameter groups as float copies, the rest its own."""

    def __init__(self, optimizer, param_groups):
        self.optimizer = optimizer
        self.param_groups = param_groups

    def __getattr__(self, name):
        return getattr(self.optimizer, name)


class WholeStep:
    """One training step of ``trainer`` as a function of a batch (the module docstring): returns the
    loss, the pre-clip gradient norm and the step's statistics, detached. ``grads``: one tensor per
    trained tensor (the model's trainable parameters and the parts' own), allocated here, zeroed in
    place by each step."""

    def __init__(self, trainer, model, optimizer):
        self.trainer = trainer
        self.model = model
        self.optimizer = optimizer
        parts = [t for part in trainer.parts for t in part.parameters()]
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.trained = self.params + parts
        self.grads = [torch.zeros_like(t) for t in self.trained]

    def attach(self) -> None:
        """The fixed gradient tensors as the trained tensors' ``.grad``, for one step."""
        for t, g in zip(self.trained, self.grads):
            t.grad = g

    def detach(self) -> None:
        """No gradient on the trained tensors between steps: what the Trainer does with them after
        ``training_step`` (clipping, ``optimizer.step()``, ``zero_grad``) then does nothing."""
        for t in self.trained:
            t.grad = None

    def __call__(self, inputs):
        trainer = self.trainer
        torch._foreach_zero_(self.grads)
        # mixed precision as in the Trainer's step: the forward's own autocast (accelerate's, without
        # its weight cache under --cuda_graphs), the losses in their own precision
        loss, step = trainer.step_loss_function(self.model, inputs)
        loss.backward()
        max_norm = trainer.args.max_grad_norm
        # the Trainer's clipping (multi-tensor kernels on a GPU, no host sync); inf measures alone
        norm = torch.nn.utils.clip_grad_norm_(self.params, max_norm if max_norm > 0 else float("inf"))
        self.optimizer.step()
        for part in trainer.parts:
            part.after_step(trainer)
        return loss.detach(), norm.detach(), {name: value.detach() for name, value in step.statistics.items()}


class StepGraphs:
    """:class:`WholeStep` captured once per input shape into a CUDA graph and replayed (``capture``),
    or run eagerly for every batch (without ``capture``: the same function on any device, which is
    how the tests check it on the CPU). ``warmup``: the eager steps of each shape before its capture;
    ``what``: the step's name in the log (:mod:`cse.encoding` captures the evaluation's batches too).

    ``step(inputs)`` takes one training step and returns ``(loss, grad_norm, statistics)``; the graphs
    of all shapes share one memory pool (they never run at once, and their outputs are read before
    the next step's)."""

    def __init__(self, whole_step: WholeStep, capture: bool, warmup: int = 2, what: str = "training step"):
        self.whole_step = whole_step
        self.what = what
        self.capture = capture
        self.warmup = warmup
        self.seen: dict[tuple, int] = {}
        self.graphs: dict[tuple, tuple] = {}
        self.pool = None
        self.stream = torch.cuda.Stream() if capture else None
        self.captured: list[str] = []

    @staticmethod
    def shape(inputs) -> tuple:
        return tuple(sorted((name, tuple(t.shape)) for name, t in inputs.items()))

    def step(self, inputs):
        key = self.shape(inputs)
        if key in self.graphs:
            static, graph, outputs = self.graphs[key]
            for name, tensor in inputs.items():
                static[name].copy_(tensor, non_blocking=True)
            graph.replay()
            return outputs
        self.seen[key] = self.seen.get(key, 0) + 1
        if not self.capture or self.seen[key] <= self.warmup:
            return self.eager(inputs)
        return self.record(key, inputs)

    def eager(self, inputs):
        whole_step = self.whole_step
        whole_step.attach()
        try:
            if self.stream is None:
                return whole_step(inputs)
            # on a side stream, as the capture will run: the work it prepares (handles, kernels) is that stream's
            self.stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(self.stream):
                out = whole_step(inputs)
            torch.cuda.current_stream().wait_stream(self.stream)
            return out
        finally:
            whole_step.detach()

    def record(self, key, inputs):
        """Capture the step for this shape, then replay it for this batch."""
        start = time.perf_counter()
        static = {name: tensor.clone() for name, tensor in inputs.items()}
        graph = torch.cuda.CUDAGraph()
        self.whole_step.attach()
        torch.cuda.synchronize()
        try:
            # other threads (the data loader's page-locking one) may call CUDA meanwhile
            with torch.cuda.graph(graph, pool=self.pool, stream=self.stream, capture_error_mode="thread_local"):
                outputs = self.whole_step(static)
        finally:
            self.whole_step.detach()
        self.pool = self.pool or graph.pool()
        self.graphs[key] = (static, graph, outputs)
        shapes = ", ".join(f"{name} {'x'.join(map(str, shape))}" for name, shape in key)
        self.captured.append(shapes)
        logger.info(
            "captured the %s as a CUDA graph for batches of %s in %.1f s (after %d eager runs)",
            self.what,
            shapes,
            time.perf_counter() - start,
            self.warmup,
        )
        graph.replay()
        return outputs
