"""Composed runs (``run_cse.py --parts mixcse,vadvcse``): SimCSE's two dropout views and InfoNCE are
the base, and each named part adds what its paper adds to it.

A part is a method's :class:`Part`, declared beside its :class:`~cse.registry.MethodRecord` in
``cse/methods/<method>.py``. A composed run builds its pieces in stages, each part acting where it
has something to add:

1. **the sentence embedding**: the part that replaces it (SARCSE's Z) builds the encoder, else the
   pretrained backbone with SimCSE's pooler;
2. **the encoder's wrappers**, in the parts' order: V-advCSE's training head, AdCSE's momentum
   encoder of the positives; then SimCSE's fresh head on [CLS] where no part replaced it;
3. **the loss**: InfoNCE, replaced by the part that replaces the softmax (MixCSE's mixed negatives),
   then extended by the parts that add columns to it (AdCSE's adversaries);
4. **the trainer**: one class whose bases are the parts' trainers (mixins and ``CSETrainer``
   subclasses that extend ``step_terms``, ``train`` and the checkpoint hooks through ``super()``),
   so every part's terms, statistics and state survive: ``class ComposedTrainer(ReconstructionMixin,
   VAdvCSETrainer, MixCSETrainer)``.

Two parts combine unless they replace the same thing (:data:`SLOTS`) or one of them says why not
(:attr:`Part.refuses`, by what the other replaces, never by its name: a new part is judged by what it
does); a set of parts combines when each pair does. A single part is its method's
preset: ``--parts mixcse`` is ``run_mixcse.py``, the same flags, defaults and build. ``docs/composition.md``
is :func:`markdown`'s output (``python -m cse.composition``).
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import sys
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from .arguments import CONFIG_SUFFIXES, parse_args, read_config_file
from .errors import CSEUsageError
from .registry import BASE_ARGUMENTS, MethodRecord, records

# What a part may replace; two parts that replace the same thing do not combine.
SLOTS = {
    "views": "the training batch (two dropout views of each sentence)",
    "embedding": "the sentence embedding (the pooler after the backbone)",
    "positives": "the encoder of the positive view",
    "softmax": "the contrastive loss's softmax (InfoNCE's columns)",
}
BASE_EQUATION = (
    "L_cont = -(1/N) sum_i log( e^{s(h_i, h_i+)/tau} / sum_j e^{s(h_i, h_j+)/tau} ), h_i and h_i+ the two "
    "dropout views' embeddings, s the cosine (SimCSE, Gao et al. 2021)"
)
EVERY_PART = "*"  # a key of Part.refuses and Part.notes: every other part


@dataclass(frozen=True)
class Part:
    """What a method adds to a composed run. Each callable gets the model arguments (``model_args``)
    and the part's own arguments (``args``, its method's dataclass).

    trainer: the class the composed trainer inherits from, which adds the part's terms, statistics,
        state and hooks through cooperative ``super()`` calls.
    equation: what the part changes or adds, for docs/composition.md.
    replaces: the :data:`SLOTS` it replaces.
    encoder: ``(model_args, args) -> CSEModel``, the encoder whose forward gives the sentence
        embedding (with ``replaces`` "embedding").
    wrap: ``(model, model_args, args) -> model``, applied in the parts' order after the encoder.
    loss: ``(loss, model, model_args, args) -> loss``: the contrastive loss after this part, from the
        one before it (InfoNCE, or what the parts before changed).
    trainer_kwargs: ``(model, model_args, args) -> dict``, the trainer's keyword arguments for it.
    refuses: a :data:`SLOTS` key -> why the part does not combine with a part that replaces it
        (:data:`EVERY_PART`: with any other).
    notes: a :data:`SLOTS` key -> what the combination with a part that replaces it computes beyond
        the two equations, for the docs (:data:`EVERY_PART`: with any other).
    order: the place of ``trainer`` in the composed trainer's bases, lowest first (a mixin that adds a
        term to whatever loss the others compute goes first).
    conflict: ``(args, other parts' records) -> str | None``: why the part's settings do not combine
        with the other parts (a variant that one of them cannot take), checked before any work.
    """

    trainer: type
    equation: str
    replaces: frozenset[str] = frozenset()
    encoder: Callable | None = None
    wrap: Callable | None = None
    loss: Callable | None = None
    trainer_kwargs: Callable | None = None
    refuses: Mapping[str, str] = field(default_factory=dict)
    notes: Mapping[str, str] = field(default_factory=dict)
    order: int = 0
    # (args, the other parts' records) -> why these settings do not combine with them, or None
    conflict: Callable | None = None


def parts() -> list[MethodRecord]:
    """The records of the methods that are parts, in their canonical order."""
    return sorted((r for r in records() if r.part is not None), key=lambda r: (r.part.order, r.name))


def part_names() -> list[str]:
    return [record.name for record in parts()]


def said_of(said: Mapping[str, str], other: MethodRecord) -> list[str]:
    """What a part's ``refuses`` or ``notes`` say of a combination with ``other``: under each slot
    ``other`` replaces, then under :data:`EVERY_PART`."""
    return [said[key] for key in [*sorted(other.part.replaces), EVERY_PART] if key in said]


def why_not(a: MethodRecord, b: MethodRecord) -> str | None:
    """Why parts ``a`` and ``b`` do not combine, or None if they do: a part that refuses every other
    says why first, then a part that refuses what the other replaces."""
    pairs = ((a, b), (b, a))
    reasons = [x.part.refuses[EVERY_PART] for x, _ in pairs if EVERY_PART in x.part.refuses]
    reasons += [reason for x, y in pairs for reason in said_of(x.part.refuses, y)]
    if reasons:
        return reasons[0]
    shared = sorted(a.part.replaces & b.part.replaces)
    if shared:
        return f"both replace {SLOTS[shared[0]]}"
    return None


def select(names: list[str]) -> list[MethodRecord]:
    """The records of the parts ``names`` in canonical order; unknown, repeated or incompatible parts
    are refused (:class:`~cse.errors.CSEUsageError`) before any work."""
    known = {record.name: record for record in parts()}
    if not names:
        raise CSEUsageError("--parts names no part", hint=f"e.g. --parts mixcse,vadvcse; parts: {', '.join(known)}")
    unknown = [name for name in names if name not in known]
    if unknown:
        bases = [record.display_name for record in records() if record.base and record.name in unknown]
        hint = f"{bases[0]}'s InfoNCE is the base of every combination, not a part" if bases else None
        raise CSEUsageError(
            f"unknown part {unknown[0]!r} in --parts; the parts are {', '.join(known)}",
            hint=hint or "name parts after the methods, comma-separated: --parts mixcse,vadvcse",
        )
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise CSEUsageError(f"--parts names {repeated[0]} twice", hint="name each part once")
    chosen = [record for record in parts() if record.name in names]
    for a, b in itertools.combinations(chosen, 2):
        reason = why_not(a, b)
        if reason:
            raise CSEUsageError(f"--parts {a.name},{b.name} is not defined: {reason}", hint="see docs/composition.md")
    return chosen


# --- arguments ----------------------------------------------------------------------------------


def shared_names() -> set[str]:
    """The argument names that more than one part, or a part and the base arguments, define: each
    part's is spelled ``--<part>_<name>`` in a composed run (``--adcse_variant``, ``--mixcse_variant``),
    whichever parts the run names, so that a flag means the same in every composition."""
    base = {f.name for dtype in BASE_ARGUMENTS for f in dataclasses.fields(dtype)}
    owners: dict[str, int] = {}
    for record in parts():
        for f in dataclasses.fields(record.method_arguments):
            owners[f.name] = owners.get(f.name, 0) + 1
    return {name for name, count in owners.items() if count > 1 or name in base}


def flag_name(part: str, name: str) -> str:
    """The name of a part's argument in a composed run (:func:`shared_names`)."""
    return f"{part}_{name}" if name in shared_names() else name


def namespaced_arguments(record: MethodRecord) -> type:
    """The part's argument dataclass with its shared names spelled :func:`flag_name`'s way and no
    checks of its own (they run when :func:`part_arguments` builds the method's own dataclass)."""
    hints = typing.get_type_hints(record.method_arguments)
    specs = []
    for f in dataclasses.fields(record.method_arguments):
        default = {"default": f.default} if f.default is not dataclasses.MISSING else {}
        if f.default_factory is not dataclasses.MISSING:
            default = {"default_factory": f.default_factory}
        metadata = dict(f.metadata)
        if "help" in metadata:
            metadata["help"] = f"[{record.name}] {metadata['help']}"
        specs.append((flag_name(record.name, f.name), hints[f.name], field(metadata=metadata, **default)))
    return dataclasses.make_dataclass(f"{record.method_arguments.__name__}Flags", specs)


def part_arguments(record: MethodRecord, flags) -> object:
    """The method's own argument dataclass from its :func:`namespaced_arguments` values (its checks run)."""
    values = {
        f.name: getattr(flags, flag_name(record.name, f.name)) for f in dataclasses.fields(record.method_arguments)
    }
    try:
        return record.method_arguments(**values)
    except ValueError as err:
        raise CSEUsageError(f"{record.name}: {err}") from err


@dataclass
class PartsArguments:
    parts: str = field(
        default=None,
        metadata={"help": "The parts to combine on SimCSE's InfoNCE, comma-separated (docs/composition.md)."},
    )


def composition_arguments(chosen: list[MethodRecord], values: list) -> object:
    """One dataclass holding the parts' names and each part's arguments, as ``run_args.json`` records
    them (a resume with other parts or other part arguments is refused)."""
    specs = [("parts", list[str]), *((r.name, r.method_arguments) for r in chosen)]
    return dataclasses.make_dataclass("CompositionArguments", specs)([r.name for r in chosen], *values)


def requested_parts(argv: list[str]) -> list[str]:
    """The part names of ``--parts`` (or ``--parts=``), else of the leading config file's ``parts``."""
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    parser.add_argument("--parts")
    flags, _ = parser.parse_known_args(argv)
    value = flags.parts
    if value is None and argv and argv[0].endswith(CONFIG_SUFFIXES):
        value = read_config_file(argv[0]).get("parts")
    if value is None and any(arg in ("-h", "--help") for arg in argv):
        # the flags depend on the parts: say which there are, and how to list a composition's flags
        print(
            "usage: run_cse.py --parts PART[,PART...] [flags]\n\n"
            f"Parts from different papers on SimCSE's InfoNCE (docs/composition.md): {', '.join(part_names())}.\n"
            "A composition's flags: run_cse.py --parts mixcse,vadvcse --help"
        )
        raise SystemExit(0)
    if value is None:
        raise CSEUsageError("--parts is missing", hint=f"e.g. --parts mixcse,vadvcse; parts: {', '.join(part_names())}")
    names = value if isinstance(value, list) else str(value).split(",")
    return [name.strip() for name in names if name.strip()]


def parse(argv: list[str] | None = None, extra: tuple[type, ...] = ()):
    """``(model_args, data_args, training_args, record, arguments, *extra)`` of a ``run_cse.py``
    command line: a single part's preset arguments and record, or SimCSE's shared arguments, the
    composed record and :func:`composition_arguments`; then the dataclasses ``extra`` (another
    command's own flags, ``python -m cse.diagnostics``'). The parts are checked (:func:`select`)
    before anything else."""
    argv = list(sys.argv[1:] if argv is None else argv)
    chosen = select(requested_parts(argv))
    check_flags_of_other_parts(chosen, argv, extra)
    if len(chosen) == 1:
        record = chosen[0]
        parsed = parse_args((*record.argument_types, PartsArguments, *extra), argv)
        *shared, arguments = parsed[: len(record.argument_types)]
        return (*shared, record, arguments, *parsed[len(record.argument_types) + 1 :])
    flag_types = [namespaced_arguments(record) for record in chosen]
    parsed = parse_args((*BASE_ARGUMENTS, PartsArguments, *extra, *flag_types), argv)
    n = len(BASE_ARGUMENTS) + 1 + len(extra)
    shared, extras, flags = parsed[: len(BASE_ARGUMENTS)], parsed[len(BASE_ARGUMENTS) + 1 : n], parsed[n:]
    values = [part_arguments(record, f) for record, f in zip(chosen, flags)]
    for record, args in zip(chosen, values):
        others = [r for r in chosen if r is not record]
        reason = record.part.conflict(args, others) if record.part.conflict else None
        if reason:
            raise CSEUsageError(f"--parts {','.join(r.name for r in chosen)}: {reason}", hint="see docs/composition.md")
    return (*shared, composed_record(chosen), composition_arguments(chosen, values), *extras)


def check_flags_of_other_parts(chosen: list[MethodRecord], argv: list[str], extra: tuple[type, ...] = ()) -> None:
    """Refuse a flag of a part that ``--parts`` does not name (``--parts mixcse --vadv_lambda 1``),
    saying whose it is, rather than calling it unknown. ``extra``: the command's own dataclasses."""
    parsed = [*BASE_ARGUMENTS, PartsArguments, *extra]
    for record in chosen:
        parsed += [*record.argument_types, namespaced_arguments(record)]
    accepted = {f.name for dtype in parsed for f in dataclasses.fields(dtype)}
    given = {arg[2:].split("=", 1)[0] for arg in argv if arg.startswith("--")} - accepted
    owners: dict[str, list[MethodRecord]] = {}
    for record in parts():
        for f in dataclasses.fields(record.method_arguments):
            for name in {f.name, flag_name(record.name, f.name)} & given:
                if record not in chosen:
                    owners.setdefault(name, []).append(record)
    for name, records in owners.items():
        spelled = ", ".join(f"--{flag_name(r.name, name.removeprefix(f'{r.name}_'))} of {r.name}" for r in records)
        names = ",".join(r.name for r in [*chosen, records[0]])
        raise CSEUsageError(
            f"--{name} is an argument of {' and '.join(r.name for r in records)}, which --parts does not name",
            hint=f"add the part (e.g. --parts {names}; in a composed run: {spelled}) or leave the flag out",
        )


# --- the build ----------------------------------------------------------------------------------


def composed_record(chosen: list[MethodRecord]) -> MethodRecord:
    """The record of the composition of ``chosen``: the card's name and papers, ``build`` :func:`build`."""
    if len(chosen) == 1:
        return chosen[0]
    return MethodRecord(
        name="+".join(r.name for r in chosen),
        display_name=" + ".join(r.display_name for r in chosen),
        citation=chosen[0].citation,
        build=lambda model_args, arguments: build(chosen, model_args, [getattr(arguments, r.name) for r in chosen]),
        docs="docs/composition.md",
        parts=tuple(chosen),
        readings={key: read for record in chosen for key, read in record.readings.items()},
    )


def build(chosen: list[MethodRecord], model_args, values: list):
    """``(model, loss, trainer_class, trainer_kwargs)`` of the parts ``chosen`` (in canonical order)
    with their arguments ``values``, in the stages of the module's docstring."""
    from .losses import InfoNCELoss
    from .pipeline import load_encoder
    from .trainer import CSETrainer

    steps = [(record.part, args) for record, args in zip(chosen, values)]
    embedding = [(part, args) for part, args in steps if part.encoder is not None]
    model = embedding[0][0].encoder(model_args, embedding[0][1]) if embedding else load_encoder(model_args)
    for part, args in steps:
        if part.wrap is not None:
            model = part.wrap(model, model_args, args)
    if model.pooler_type == "cls":
        model.reset_head()
    loss = InfoNCELoss(temperature=model_args.temp)
    for part, args in sorted(steps, key=lambda step: "softmax" not in step[0].replaces):
        if part.loss is not None:
            loss = part.loss(loss, model, model_args, args)
    bases = tuple(dict.fromkeys(part.trainer for part, _ in steps if part.trainer is not CSETrainer))
    if not any(issubclass(base, CSETrainer) for base in bases):  # mixins alone extend the plain trainer
        bases += (CSETrainer,)
    trainer_class = type("ComposedTrainer", bases, {"__module__": __name__})
    kwargs = {}
    for part, args in steps:
        if part.trainer_kwargs is not None:
            kwargs.update(part.trainer_kwargs(model, model_args, args))
    return model, loss, trainer_class, kwargs


def main(argv: list[str] | None = None, callbacks=()):
    """``run_cse.py``: train and evaluate the composition the command line ``argv`` names;
    ``callbacks`` (``TrainerCallback``s) join the Trainer's. Returns the trainer. A script that
    registers a part of its own (docs/extending.md) calls this after registering it."""
    from transformers import set_seed

    from .environment import check_min_versions
    from .pipeline import setup_logging, train_built

    check_min_versions()
    model_args, data_args, training_args, record, arguments = parse(argv)
    setup_logging(training_args)
    set_seed(training_args.seed)
    built = record.pieces(model_args, arguments)
    return train_built(model_args, data_args, training_args, built, arguments, callbacks)


# --- the documentation --------------------------------------------------------------------------


def markdown() -> str:
    """docs/composition.md: the parts, what each adds, and the matrix of the pairs that combine."""
    chosen = parts()
    lines = [
        "# Composition: parts from different papers in one run",
        "",
        "<!-- generated by `python -m cse.composition > docs/composition.md`; tests/test_composition.py checks it -->",
        "",
        "`run_cse.py --parts a,b,...` trains SimCSE's base with the named parts on top:",
        "",
        f"- **base**: {BASE_EQUATION}.",
    ]
    for record in chosen:
        replaced = ", ".join(SLOTS[slot] for slot in sorted(record.part.replaces)) or "nothing"
        lines.append(
            f"- **{record.name}** ({record.display_name}, [docs]({record.docs.removeprefix('docs/')})): "
            f"{record.part.equation}. Replaces: {replaced}."
        )
    lines += [
        "",
        "A composed run's loss is the sum of the terms the parts give (each logged as `term_<name>` with "
        "`--log_term_gradients`, and read by `python -m cse.diagnostics`). A part's arguments keep their "
        "names, except those that two parts (or a part and the shared arguments) define, spelled "
        f"`--<part>_<name>`: {', '.join(f'`--{p}_{n}`' for p, n in namespaced_flags())}. The shared "
        "arguments (model, data, training) take SimCSE's defaults; a single part is its method's preset "
        "(`--parts mixcse` is `run_mixcse.py`, flags and defaults included).",
        "",
        "A part can live outside the package, in one file: [extending.md](extending.md), which also lists the files "
        "a new paper method touches in the repository.",
        "",
        "## Which pairs combine",
        "",
        "| | " + " | ".join(r.name for r in chosen) + " |",
        "|---|" + "---|" * len(chosen),
    ]
    for a in chosen:
        cells = ["-" if a is b else ("yes" if why_not(a, b) is None else "no") for b in chosen]
        lines.append(f"| **{a.name}** | " + " | ".join(cells) + " |")
    lines += ["", "A set of parts combines when each of its pairs does.", "", "## Each pair", ""]
    for a, b in itertools.combinations(chosen, 2):
        reason = why_not(a, b)
        if reason:
            lines.append(f"- **{a.name} + {b.name}**: not defined: {reason}.")
            continue
        notes = [note for x, y in ((a, b), (b, a)) for note in said_of(x.part.notes, y)]
        lines.append(f"- **{a.name} + {b.name}**: the base with both parts' changes. " + " ".join(notes))
    return "\n".join(lines) + "\n"


def namespaced_flags() -> list[tuple[str, str]]:
    shared = shared_names()
    return [
        (record.name, f.name)
        for record in parts()
        for f in dataclasses.fields(record.method_arguments)
        if f.name in shared
    ]


if __name__ == "__main__":
    sys.stdout.write(markdown())
