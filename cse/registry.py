"""The method records: everything the rest of the code base knows about a method, in one place.

Each ``cse/methods/<method>.py`` declares one :class:`MethodRecord` and :func:`register`\\ s it. The
model card (name, paper), ``python -m cse.diagnostics`` (arguments, build, term weights), the
benchmark (script and paper configuration), :func:`cse.modeling.load_model` (exported model kinds)
and the run scripts read these records; nothing else is keyed by a method's name.

A new method is a new module under ``cse/methods/`` with its record; it is found by importing the
package (:func:`records`), with no list to extend.
"""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from . import citations
from .arguments import CSETrainingArguments, DataArguments, ModelArguments, read_config_file

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# SimCSE's argument dataclasses, which every method extends or reuses
BASE_ARGUMENTS = (ModelArguments, DataArguments, CSETrainingArguments)


@dataclass(frozen=True)
class BenchShape:
    """How the benchmark (``python -m bench``) times one variant of a method: the run script whose
    ``main()`` it calls, the paper configuration it reads the shapes from, the backbone family, the
    flags after the configuration that select the variant, and the step-time target relative to
    SimCSE's on the same shapes (BENCHMARKS.md), if any."""

    script: str  # the module whose main() is timed
    config: str  # the paper's configuration, relative to the repository root
    backbone: str  # "bert" or "roberta": the paper's backbone family
    args: tuple[str, ...] = ()
    evaluates: bool = True  # its trainer runs the SentEval suites (CSETrainer.evaluate)
    overhead_target: float | None = None

    def shapes(self) -> dict:
        """The batch size and max length of the paper configuration, as the variant's flags change them."""
        config = read_config_file(os.path.join(REPO, self.config))
        paper = {"batch_size": config["per_device_train_batch_size"], "max_seq_length": config["max_seq_length"]}
        return {**paper, **shape_overrides(list(self.args))}


def shape_overrides(argv: list[str]) -> dict:
    """The batch size and max length that command-line flags set, if any."""
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    parser.add_argument("--per_device_train_batch_size", dest="batch_size", type=int)
    parser.add_argument("--max_seq_length", type=int)
    overrides, _ = parser.parse_known_args(argv)
    return {k: v for k, v in vars(overrides).items() if v is not None}


@dataclass(frozen=True)
class MethodRecord:
    """One method.

    ``build(model_args, method_args)`` returns ``(model, loss, trainer_class, trainer_kwargs)``, the
    pieces ``cse.pipeline.train_built`` trains (without one, those of its ``part`` alone on SimCSE's
    base, :func:`cse.composition.build`); ``method_arguments`` is the method's own dataclass
    (``None`` for SimCSE), ``arguments`` the model, data and training dataclasses its script parses.
    ``variants``: named flag sets that select a variant (``python -m cse.diagnostics --method``).
    ``model_kinds``: the ``model_kind`` its exports record in ``cse_config.json`` -> the class that
    loads them. ``part``: what it adds to a composed run (:class:`cse.composition.Part`). The terms
    and their weights, and the state files a checkpoint holds, are the trainer's to say
    (``step_terms``, ``term_weights``, ``checkpoint_files``): they depend on the run's settings, and
    a composed trainer gathers its parts' through ``super()``."""

    name: str
    display_name: str
    citation: str
    docs: str  # its page, relative to the repository root
    build: Callable | None = None
    method_arguments: type | None = None
    arguments: tuple[type, ...] = BASE_ARGUMENTS
    bench: Mapping[str, BenchShape] = field(default_factory=dict)
    variants: Mapping[str, tuple[str, ...]] | None = None
    model_kinds: Mapping[str, type] = field(default_factory=dict)
    # what the method adds to a composed run (cse.composition.Part), None if it is no part
    part: Any = None
    # a composed run's record: the records of its parts (cse.composition.composed_record)
    parts: tuple[MethodRecord, ...] = ()
    # further per-batch readings of ``python -m cse.diagnostics``, each reported under its key:
    # (trainer, model, inputs) -> {name: float}, or {} where they do not apply
    readings: Mapping[str, Callable] = field(default_factory=dict)
    # the flags that make a run of it small, for smoke tests on a tiny random backbone of its ``bench``
    # family: what the method adds made small, what a few steps cannot use switched off (``()``: none)
    tiny_args: tuple[str, ...] | None = None
    # the base every composed run extends and the benchmark's overheads are measured against (SimCSE):
    # it is no part of a composition
    base: bool = False

    @property
    def citations(self) -> tuple[str, ...]:
        """The BibTeX entries of its paper, or of each part's paper and SimCSE's (the base) for a composed run."""
        if not self.parts:
            return (self.citation,)
        return tuple(dict.fromkeys([*(part.citation for part in self.parts), citations.SIMCSE]))

    @property
    def argument_types(self) -> tuple[type, ...]:
        """The dataclasses its run script parses, the method's own last."""
        return (*self.arguments, *([self.method_arguments] if self.method_arguments else []))

    def pieces(self, model_args, method_args=None) -> tuple:
        """:attr:`build`'s ``(model, loss, trainer_class, trainer_kwargs)``, the trainer told which method
        it trains (``method=self``: the model card's name and paper)."""
        if self.build is not None:
            model, loss, trainer_class, trainer_kwargs = self.build(model_args, method_args)
            return model, loss, trainer_class, {**trainer_kwargs, "method": self}
        from .composition import build  # which imports this module

        model, loss, trainer_class, trainer_kwargs = build([self], model_args, [method_args])
        # a composition of one part: the card names it as a part and cites SimCSE, the base
        return model, loss, trainer_class, {**trainer_kwargs, "method": replace(self, parts=(self,))}

    def variant_flags(self) -> dict[str, tuple[str, ...]]:
        """Its variants' names and flags; a method without variants is one, by its own name."""
        return dict(self.variants) if self.variants is not None else {self.name: ()}


_RECORDS: dict[str, MethodRecord] = {}


def register(record: MethodRecord) -> MethodRecord:
    """Add a method's record (once per name)."""
    if _RECORDS.get(record.name, record) is not record:
        raise ValueError(f"a method named {record.name!r} is registered already")
    _RECORDS[record.name] = record
    return record


def records() -> list[MethodRecord]:
    """Every method's record: the modules of :mod:`cse.methods` are imported (once) to register them."""
    package = importlib.import_module("cse.methods")
    for info in pkgutil.iter_modules(package.__path__):
        importlib.import_module(f"{package.__name__}.{info.name}")
    return list(_RECORDS.values())


def get(name: str) -> MethodRecord:
    """The record of the method ``name``."""
    found = {record.name: record for record in records()}
    if name not in found:
        raise KeyError(f"no method {name!r}; methods: {', '.join(found)}")
    return found[name]


def model_kind(kind: str) -> type | None:
    """The class that loads exports whose ``cse_config.json`` records ``model_kind: kind``."""
    for record in records():
        if kind in record.model_kinds:
            return record.model_kinds[kind]
    return None


def variant(name: str) -> tuple[MethodRecord, tuple[str, ...]]:
    """The record and flags of a method or method variant by name (``sg-opt``: SG-BERT with opt3)."""
    for record in records():
        flags = record.variant_flags()
        if name in flags:
            return record, flags[name]
    raise KeyError(f"no method or variant {name!r}")


def variant_names() -> list[str]:
    return [name for record in records() for name in record.variant_flags()]
