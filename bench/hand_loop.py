"""The yardstick of the Trainer's cost per step: a training step written by hand in plain PyTorch.

:class:`HandStep` does a method's math on a batch as a plain loop would: the parts' before-step
hook, the method's step program (forward and loss terms: ``trainer.step_loss_function``, compiled
when the run compiles), ``backward``, gradient clipping, the step of an optimizer of its own (the
Trainer's class and settings) on a linear schedule, the parts' after-step updates. It trains the
run's own model and parts (a benchmark measures time, not what is learnt), on the batch the Trainer
has just trained on, already collated and on the device: what a hand-written loop that sliced its
batches from a tokenised corpus on the device would have. No data loader, no callbacks, no logging,
no bookkeeping.

On a GPU (``capture``) the step is captured once per batch shape as a CUDA graph
(:class:`cse.step_graph.StepGraphs`), as ``--cuda_graphs`` captures the Trainer's step.
"""

from __future__ import annotations

import inspect

import torch


class HandStep:
    """One hand-written training step of ``trainer``'s model, loss and parts (the module docstring),
    with an optimizer and schedule of its own (the Trainer's optimizer class and settings, the learning
    rate decaying linearly over ``total_steps``). Call it with a collated batch on the device; it returns the loss."""

    def __init__(self, trainer, total_steps: int, capture: bool = False):
        from cse.step_graph import StepGraphs

        args = trainer.args
        self.trainer = trainer
        self.model = trainer.model
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.trained = self.params + [t for part in trainer.parts for t in part.parameters()]
        # the Trainer's optimizer (its class and settings: fused where it is fused) over the same tensors, with
        # the learning rate in a device tensor under capture, which the schedule fills in place
        trainers = getattr(trainer.optimizer, "optimizer", trainer.optimizer)  # accelerate's wrapper holds it
        accepted = inspect.signature(type(trainers)).parameters  # defaults may hold settings it derives
        settings = {key: value for key, value in trainers.defaults.items() if key in accepted}
        if capture:
            settings.update(lr=torch.tensor(args.learning_rate, device=args.device), capturable=True)
        self.optimizer = type(trainers)(self.trained, **settings)
        self.base_lr, self.total_steps, self.done = args.learning_rate, total_steps, 0
        self.grads = [torch.zeros_like(t) for t in self.trained]
        self.graphs = StepGraphs(self, capture=capture)

    def attach(self) -> None:
        for t, g in zip(self.trained, self.grads):
            t.grad = g

    def detach(self) -> None:
        for t in self.trained:
            t.grad = None

    def __call__(self, inputs):
        """The step's tensor work, all of it on the device (what a capture records)."""
        trainer = self.trainer
        torch._foreach_zero_(self.grads)
        loss, _ = trainer.step_loss_function(self.model, inputs)
        loss.backward()
        max_norm = trainer.args.max_grad_norm
        torch.nn.utils.clip_grad_norm_(self.params, max_norm if max_norm > 0 else float("inf"))
        self.optimizer.step()
        for part in trainer.parts:
            part.after_step(trainer)
        return loss.detach()

    def step(self, inputs) -> torch.Tensor:
        for part in self.trainer.parts:
            part.step_begin(self.trainer)
        loss = self.graphs.step(inputs)
        self.done += 1
        lr = self.base_lr * max(0.0, 1 - self.done / self.total_steps)
        for group in self.optimizer.param_groups:
            if isinstance(group["lr"], torch.Tensor):
                group["lr"].fill_(lr)
            else:
                group["lr"] = lr
        return loss
