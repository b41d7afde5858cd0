"""A model's modules and parameters, walked once and kept until a module or parameter is registered.

The Trainer walks the whole model three times a step: ``model.train()`` sets every module's mode,
``model.parameters()`` lists every weight for gradient clipping, ``model.zero_grad()`` lists them
again. Each walk is a recursive generator over every module: at BERT-base size (228 modules, 199
weights) about 0.25-0.5 ms of the host's time each on a 2-core CPU, more than a millisecond of every
step together, in series with the GPU's work.

:class:`KeptWalk` keeps the lists of a module (a mixin before ``nn.Module``) and answers those calls
from them: ``parameters()`` from the kept list, ``train(mode)`` at once when the modules' modes are
those its last call with ``mode`` left. The lists are made again after any module or parameter is
registered anywhere in the process (torch's global registration hooks: ``setattr``,
``add_module``, ``register_parameter``, ``load_state_dict(assign=True)``) and after ``_apply``
(``.to()``, ``.cuda()``, ``.half()``, which may put new parameter objects in place). Code that writes
into a module's ``_modules`` or ``_parameters`` dictionaries directly, bypassing both, is not seen:
nothing in this package does.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from torch import nn
from torch.nn.modules.module import (
    register_module_module_registration_hook,
    register_module_parameter_registration_hook,
)

_registrations = 0  # modules and parameters registered in this process so far


def _registered(*args) -> None:
    global _registrations
    _registrations += 1


register_module_module_registration_hook(_registered)
register_module_parameter_registration_hook(_registered)


@dataclass
class Walk:
    """A module's submodules and parameters (``nn.Module.modules()``, ``parameters()``, in their
    order) as they were after ``registrations`` registrations; ``modes``: the ``training`` flag of each
    module that the last ``train(mode)`` left, with its ``mode``."""

    registrations: int
    modules: tuple[nn.Module, ...]
    parameters: tuple[nn.Parameter, ...]
    modes: tuple[bool, list[bool]] | None = field(default=None)


class KeptWalk:
    """Mixin for an ``nn.Module`` (the module docstring). A subclass that keeps some of its modules in a
    mode of their own (a frozen copy in evaluation mode) says so in :meth:`set_training`, not in
    ``train``."""

    def walk(self) -> Walk:
        """The module's walk, made again where a registration or ``_apply`` may have changed it."""
        walk = self.__dict__.get("_kept_walk")
        if walk is None or walk.registrations != _registrations:
            walk = Walk(_registrations, tuple(nn.Module.modules(self)), tuple(nn.Module.parameters(self)))
            self.__dict__["_kept_walk"] = walk  # not nn.Module.__setattr__: no registration, no hooks
        return walk

    def parameters(self, recurse: bool = True):
        if not recurse:
            return nn.Module.parameters(self, recurse=False)
        return iter(self.walk().parameters)

    def train(self, mode: bool = True):
        walk = self.walk()
        if walk.modes is not None and walk.modes == (mode, [m.training for m in walk.modules]):
            return self
        self.set_training(mode)
        walk = self.walk()
        walk.modes = (mode, [m.training for m in walk.modules])
        return self

    def set_training(self, mode: bool) -> None:
        """Put the modules in training mode (``mode``) or evaluation mode: ``nn.Module.train``."""
        nn.Module.train(self, mode)

    def _apply(self, fn, recurse=True):
        self.__dict__.pop("_kept_walk", None)
        return super()._apply(fn, recurse)
