"""The method records: the catalogue of methods, each the run-level facts about one part.

Each ``cse/methods/<method>.py`` declares its :class:`~cse.parts.Part` (name, paper, docs, flags,
hooks) and :func:`register`\\ s a :class:`MethodRecord`: the part, the argument dataclasses its run
script parses, the benchmark's shapes and named variants. The model card, ``python -m
cse.diagnostics``, the benchmark, the run scripts and the listings in the docs read these records;
nothing else is keyed by a method's name.

A new method is a new module under ``cse/methods/`` with its record; it is found by importing the
package (:func:`records`), with no list to extend. A part outside the package registers its record
when its file is imported (docs/extending.md).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import os
import pkgutil
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from . import citations
from .arguments import CSETrainingArguments, DataArguments, ModelArguments, read_config_file
from .errors import CSEUsageError
from .parts import NEEDS, SLOTS, Part

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# SimCSE's argument dataclasses, which every method extends or reuses
BASE_ARGUMENTS = (ModelArguments, DataArguments, CSETrainingArguments)


# A flag value of a BenchShape's ``args`` that the benchmark replaces with its random backbone's directory
BACKBONE = "{backbone}"


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
    """One method, or a composition of several (``parts``).

    ``part``: the method's :class:`~cse.parts.Part` (its name, paper, docs and flags are the part's);
    ``arguments``: the model, data and training dataclasses its run script parses (SimCSE's, or the
    method's own defaults); ``bench``: the benchmark's variants of it; ``variants``: named flag sets
    that select a variant (``python -m cse.diagnostics --method sg-opt``); ``base``: SimCSE, the base
    every part extends, which is no part of a composition; ``parts``: a composition's records;
    ``released_flags``: the flags of the paper's released code that its page (``docs``) quotes against
    ours, each with what it is (no command of ours takes them)."""

    part: type[Part]
    arguments: tuple[type, ...] = BASE_ARGUMENTS
    bench: Mapping[str, BenchShape] = field(default_factory=dict)
    variants: Mapping[str, tuple[str, ...]] | None = None
    base: bool = False
    parts: tuple[MethodRecord, ...] = ()
    released_flags: Mapping[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return "+".join(r.name for r in self.parts) if self.parts else self.part.name

    @property
    def display_name(self) -> str:
        return " + ".join(r.display_name for r in self.parts) if self.parts else self.part.display_name

    @property
    def citation(self) -> str:
        """Its paper's BibTeX entry (a composition's: see :attr:`citations`)."""
        return self.part.citation

    @property
    def docs(self) -> str:
        return "docs/composition.md" if self.parts else self.part.docs

    @property
    def method_arguments(self) -> type | None:
        """The method's own flags (its part's dataclass; None for SimCSE)."""
        return self.part.Flags

    @property
    def citations(self) -> tuple[str, ...]:
        """The BibTeX entries of its paper, or of each part's paper and SimCSE's (the base) for a composed run."""
        if not self.parts:
            return (self.part.citation,)
        return tuple(dict.fromkeys([*(part.part.citation for part in self.parts), citations.SIMCSE]))

    @property
    def argument_types(self) -> tuple[type, ...]:
        """The dataclasses its run script parses, the method's own last."""
        return (*self.arguments, *([self.method_arguments] if self.method_arguments else []))

    def preset(self, parsed: tuple) -> list[Part]:
        """The parts its run script trains, of the values its dataclasses parsed (``parsed``, in the
        order of :attr:`argument_types`, others' after them): its one part with its flags (the
        model arguments first, the method's own fourth), none for SimCSE."""
        if self.base:
            return []
        return [self.part(parsed[len(self.arguments)] if self.method_arguments else None, parsed[0])]

    def variant_flags(self) -> dict[str, tuple[str, ...]]:
        """Its variants' names and flags; a method without variants is one, by its own name."""
        return dict(self.variants) if self.variants is not None else {self.name: ()}


def composed(chosen: list[MethodRecord]) -> MethodRecord:
    """The record of the composition of ``chosen`` (a single one: its own record)."""
    return chosen[0] if len(chosen) == 1 else MethodRecord(part=Part, parts=tuple(chosen))


def record_problem(record: MethodRecord) -> str | None:
    """What a record lacks that a run needs before it ends (its model card's name, paper and page)."""
    part = record.part
    if not re.fullmatch(r"[a-z][a-z0-9_]*", part.name or ""):
        return f"{part.__name__}.name must be a lowercase identifier (how --parts names it), got {part.name!r}"
    if not part.display_name:
        return f"part {part.name!r} has no display_name (the model card's name for it)"
    if not has_title(part.citation):
        return f"part {part.name!r} has no citation with a title (a BibTeX entry: the model card cites it)"
    if not part.docs:
        return f"part {part.name!r} has no docs (its documentation page, a path or address)"
    for declared, known in (("replaces", SLOTS), ("needs", NEEDS), ("changes", NEEDS)):
        unknown = sorted(set(getattr(part, declared)) - set(known))
        if unknown:
            return f"part {part.name!r}: {declared} names {unknown[0]!r}, which is none of {', '.join(known)}"
    if part.Flags is not None and not dataclasses.is_dataclass(part.Flags):
        return f"part {part.name!r}: Flags must be a dataclass of its flags, got {part.Flags!r}"
    # A flag of the run's own dataclasses would be parsed twice (argparse refuses the second) and its
    # setting could not say which it meant; "parts" is run_cse.py's own flag.
    shared = {f.name for arguments in record.arguments for f in dataclasses.fields(arguments)} | {"parts"}
    for flag in dataclasses.fields(part.Flags) if part.Flags is not None else ():
        if flag.name in shared:
            return f"part {part.name!r}: its flag {flag.name} has the name of a shared argument (--{flag.name})"
    return None


def has_title(entry: str | None) -> bool:
    """Whether ``entry`` is a BibTeX entry with a ``title`` field, one field a line."""
    try:
        return bool(entry and citations.bibtex_field(entry, "title"))
    except KeyError:
        return False


_RECORDS: dict[str, MethodRecord] = {}
_PROBLEMS: list[str] = []


def register(record: MethodRecord) -> MethodRecord:
    """Add a method's record (one per name). A record that lacks what a run needs, or takes a name
    another has, is kept out, and :func:`records` refuses to go on, naming what is wrong: the first
    command run after the import stops before any work, in one line."""
    problem = record_problem(record)
    before = _RECORDS.get(record.name, record)
    if problem is None and before is not record:
        # --parts and the run scripts find a part by its name: two of one name would be one guess
        problem = f"two parts are named {record.name!r}: " + " and ".join(
            sorted(f"{r.part.__module__}.{r.part.__qualname__}" for r in (before, record))
        )
    if problem is not None:
        _PROBLEMS.append(problem)
        return record
    _RECORDS[record.name] = record
    return record


def records() -> list[MethodRecord]:
    """Every method's record: the modules of :mod:`cse.methods` are imported (once) to register them."""
    package = importlib.import_module("cse.methods")
    for info in pkgutil.iter_modules(package.__path__):
        importlib.import_module(f"{package.__name__}.{info.name}")
    if _PROBLEMS:
        raise CSEUsageError(_PROBLEMS[0], hint="see docs/extending.md: what a part declares")
    return list(_RECORDS.values())


def get(name: str) -> MethodRecord:
    """The record of the method ``name``."""
    found = {record.name: record for record in records()}
    if name not in found:
        raise KeyError(f"no method {name!r}; methods: {', '.join(found)}")
    return found[name]


def variant(name: str) -> tuple[MethodRecord, tuple[str, ...]]:
    """The record and flags of a method or method variant by name (``sg-opt``: SG-BERT with opt3)."""
    for record in records():
        flags = record.variant_flags()
        if name in flags:
            return record, flags[name]
    raise KeyError(f"no method or variant {name!r}")


def variant_names() -> list[str]:
    return [name for record in records() for name in record.variant_flags()]


def parts() -> list[MethodRecord]:
    """The records of the methods that are parts of compositions, in the order of their names."""
    return sorted((r for r in records() if not r.base), key=lambda r: r.name)


def part_names() -> list[str]:
    return [record.name for record in parts()]
