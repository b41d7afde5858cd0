"""The yardstick of the Trainer's cost per step: a training loop written by hand in plain PyTorch.

:class:`HandStep` takes a method's training step as a plain loop would: the parts' before-step hook,
then the method's math as one function of the batch (:class:`cse.step_graph.WholeStep`: the
gradients zeroed, the step program's forward and terms, ``backward``, gradient clipping, the step of
an optimizer of its own, the parts' after-step updates), then a linear schedule. It trains the run's
own model and parts (a benchmark measures time, not what is learnt), on the batch the Trainer has
just trained on, already collated and on the device: what a hand-written loop that sliced its
batches from a tokenised corpus on the device would have. No data loader, no Trainer loop, no
callbacks, no logging, no bookkeeping.

On a GPU (``capture``) the step is captured once per batch shape as a CUDA graph
(:class:`cse.step_graph.StepGraphs`), as ``--cuda_graphs`` captures the Trainer's step: the
difference between the two is then the Trainer's work around the replay.
"""

from __future__ import annotations

import inspect

import torch

from cse.step_graph import StepGraphs, WholeStep


class HandStep:
    """One hand-written training step of ``trainer``'s model, loss and parts (the module docstring),
    with an optimizer and schedule of its own (the Trainer's optimizer class and settings, the learning
    rate decaying linearly over ``total_steps``). :meth:`step` takes a collated batch on the device."""

    def __init__(self, trainer, total_steps: int, capture: bool = False):
        args = trainer.args
        self.trainer = trainer
        trained = [p for p in trainer.model.parameters() if p.requires_grad]
        trained += [t for part in trainer.parts for t in part.parameters()]
        # the Trainer's optimizer (its class and settings: fused where it is fused) over the same tensors, with
        # the learning rate in a device tensor under capture, which the schedule fills in place
        trainers = getattr(trainer.optimizer, "optimizer", trainer.optimizer)  # accelerate's wrapper holds it
        accepted = inspect.signature(type(trainers)).parameters  # defaults may hold settings it derives
        settings = {key: value for key, value in trainers.defaults.items() if key in accepted}
        if capture:
            settings.update(lr=torch.tensor(args.learning_rate, device=args.device), capturable=True)
        self.optimizer = type(trainers)(trained, **settings)
        self.base_lr, self.total_steps, self.done = args.learning_rate, total_steps, 0
        self.graphs = StepGraphs(WholeStep(trainer, trainer.model, self.optimizer), capture=capture)

    def step(self, inputs) -> torch.Tensor:
        """One step on ``inputs``; its loss."""
        for part in self.trainer.parts:
            part.step_begin(self.trainer)
        # already there where the data loader places batches on the device (a no-op then)
        device = self.trainer.args.device
        loss, _, _ = self.graphs.step({k: v.to(device, non_blocking=True) for k, v in inputs.items()})
        self.done += 1
        lr = self.base_lr * max(0.0, 1 - self.done / self.total_steps)
        for group in self.optimizer.param_groups:
            if isinstance(group["lr"], torch.Tensor):
                group["lr"].fill_(lr)
            else:
                group["lr"] = lr
        return loss
