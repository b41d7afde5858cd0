"""Composed runs (``run_cse.py --parts mixcse,vadvcse``): SimCSE's two dropout views and InfoNCE are
the base, and each named part (:mod:`cse.parts`) adds what its paper adds to it. This module reads
the command line of such a run, and of each method's run script (:func:`parse`, the one parser of
both: a preset is its record's part with its flags), into a :class:`~cse.run.Run`, and writes
docs/composition.md; the run itself is any method's (:func:`cse.pipeline.train` of the Run).

The parts are checked before any work: unknown, repeated or empty names, and pairs that do not
combine (:func:`cse.parts.why_not`) are refused, and each part's settings are judged against the
others' slots (:meth:`~cse.parts.Part.conflict`). A single part is its method's preset: ``--parts
mixcse`` is ``run_mixcse.py``, the same flags, defaults and build.

**Flags.** A composed run takes the shared flags (model, data, training: SimCSE's defaults) and each
part's flags. A part's flag is always accepted as ``--<part>_<name>`` (``--mixcse_variant``), and as
``--<name>`` where no other part the command names has a flag of that name (``--vadv_lambda``): the
spelling depends only on the parts named, never on what else is registered. A name two named parts
share must be spelled with its part (``--adcse_variant`` and ``--mixcse_variant`` in ``--parts
adcse,mixcse``); a part's flag named like a shared one only with its part. The same holds for the
keys of a config file. ``python -m cse.composition`` prints docs/composition.md (``python -m cse.listings``
writes it).
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import sys
from dataclasses import dataclass, field

from . import registry
from .arguments import CONFIG_SUFFIXES, ArgumentParser, given_flags, parse_args, read_config_file
from .errors import CSEUsageError
from .parts import BASE_EQUATION, NEEDS, SLOTS, pairs_refused, said_of, why_not
from .parts_overview import overview
from .registry import BASE_ARGUMENTS, MethodRecord
from .run import Run


@dataclass
class PartsArguments:
    parts: str = field(
        default=None,
        metadata={"help": "The parts to combine on SimCSE's InfoNCE, comma-separated (docs/composition.md)."},
    )


def requested_parts(argv: list[str]) -> list[str]:
    """The part names of ``--parts`` (or ``--parts=``), else of the leading config file's ``parts``."""
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    parser.add_argument("--parts", action="append")
    flags, _ = parser.parse_known_args(argv)
    if flags.parts is not None and len(flags.parts) > 1:
        raise CSEUsageError(
            f"--parts given {len(flags.parts)} times ({', '.join(flags.parts)})",
            hint=f"name every part in one --parts: --parts {','.join(flags.parts)}",
        )
    value = flags.parts[0] if flags.parts else None
    if value is None and argv and argv[0].endswith(CONFIG_SUFFIXES):
        value = read_config_file(argv[0]).get("parts")
    if value is None and any(arg in ("-h", "--help") for arg in argv):
        # the flags depend on the parts: say which there are, and how to list a composition's flags
        print(overview(registry.part_names()), end="")
        raise SystemExit(0)
    if value is None:
        raise CSEUsageError(
            "--parts is missing", hint=f"e.g. --parts mixcse,vadvcse; parts: {', '.join(registry.part_names())}"
        )
    names = [str(name).strip() for name in (value if isinstance(value, list) else str(value).split(","))]
    if not any(names):
        return []
    if not all(names):
        raise CSEUsageError(
            f"--parts {','.join(names)!r} has an empty item", hint="name parts comma-separated: --parts mixcse,vadvcse"
        )
    return names


def select(names: list[str]) -> list[MethodRecord]:
    """The records of the parts ``names``, in the order of their names; unknown, repeated or
    incompatible parts are refused (:class:`~cse.errors.CSEUsageError`) before any work."""
    known = {record.name: record for record in registry.parts()}
    if not names:
        raise CSEUsageError("--parts names no part", hint=f"e.g. --parts mixcse,vadvcse; parts: {', '.join(known)}")
    unknown = [name for name in names if name not in known]
    if unknown:
        bases = [record.display_name for record in registry.records() if record.base and record.name in unknown]
        hint = f"{bases[0]}'s InfoNCE is the base of every combination, not a part" if bases else None
        raise CSEUsageError(
            f"unknown part {unknown[0]!r} in --parts; the parts are {', '.join(known)}",
            hint=hint or "name parts after the methods, comma-separated: --parts mixcse,vadvcse",
        )
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise CSEUsageError(f"--parts names {repeated[0]} twice", hint="name each part once")
    chosen = [known[name] for name in sorted(names)]
    for a, b, reason in pairs_refused([record.part for record in chosen])[:1]:
        raise CSEUsageError(f"--parts {a.name},{b.name} is not defined: {reason}", hint="see docs/composition.md")
    return chosen


# --- flags ----------------------------------------------------------------------------------------


def flag_fields(record: MethodRecord) -> dict[str, dataclasses.Field]:
    """A part's flags by name."""
    flags = record.method_arguments
    return {f.name: f for f in dataclasses.fields(flags)} if flags else {}


def flag_owner(
    name: str, chosen: list[MethodRecord], base: set[str], config_path: str | None = None
) -> tuple[MethodRecord | None, str]:
    """Who takes the flag (or, with ``config_path``, the key of that config file) ``name`` in a run of
    the parts ``chosen``, and under which of its own names: ``(None, name)`` for the shared arguments
    (and for a name nobody takes, which their parser then calls unknown), ``(record, field)`` for a
    part's (``no_<field>`` kept for a switch turned off). A name two named parts share is refused."""
    if name in base:
        return None, name
    bare = []
    for record in chosen:
        own = flag_fields(record)
        for prefix in ("", "no_"):
            namespaced = f"{prefix}{record.name}_"
            if name.startswith(namespaced) and name.removeprefix(namespaced) in own:
                return record, prefix + name.removeprefix(namespaced)
        if name in own or (name.startswith("no_") and name[3:] in own):
            bare.append(record)
    if len(bare) > 1:
        owners = " and ".join(r.name for r in bare)
        if config_path is None:
            spelled = " or ".join(f"--{r.name}_{name}" for r in bare)
            raise CSEUsageError(f"--{name} is an argument of {owners}: name its part", hint=f"spell it {spelled}")
        spelled = " or ".join(f"{r.name}_{name}" for r in bare)
        raise CSEUsageError(
            f"{config_path}: the key {name} is an argument of {owners}: name its part",
            hint=f"spell the key {spelled} in a copy of the file",
        )
    return (bare[0], name) if bare else (None, name)


def check_flags_of_other_parts(chosen: list[MethodRecord], names: set[str], base: set[str]) -> None:
    """Refuse a flag of a part that ``--parts`` does not name (``--parts mixcse --vadv_lambda 1``),
    saying whose it is, rather than calling it unknown."""
    others = [record for record in registry.parts() if record not in chosen]
    for name in sorted(names - base):
        if flag_owner(name, chosen, base)[0] is not None:
            continue
        owners = [record for record in others if flag_owner(name, [record], set())[0] is not None]
        if owners:
            spelled = ", ".join(f"--{r.name}_{name.removeprefix(f'{r.name}_')} of {r.name}" for r in owners)
            names_with = ",".join(r.name for r in [*chosen, owners[0]])
            raise CSEUsageError(
                f"--{name} is an argument of {' and '.join(r.name for r in owners)}, which --parts does not name",
                hint=f"add the part (e.g. --parts {names_with}; in a composed run: {spelled}) or leave the flag out",
            )


def split_argv(argv: list[str]) -> list[list[str]]:
    """``argv`` cut before each ``--flag``: each piece a flag and its values."""
    pieces: list[list[str]] = []
    for token in argv:
        if token.startswith("--") or not pieces:
            pieces.append([token])
        else:
            pieces[-1].append(token)
    return pieces


def route(chosen, config: dict, argv: list[str], base: set[str], config_path: str | None = None):
    """The shared arguments' values from the config file ``config_path`` and flags, and each part's
    (renamed to its own names)."""
    shared = ({}, [])
    own = {record.name: ({}, []) for record in chosen}
    spellings: dict[tuple, str] = {}

    def once(record, name: str, spelled: str, where: str) -> None:
        """Refuse one setting of a part given under both its spellings (``--mix_lambda`` and
        ``--mixcse_mix_lambda``): neither would say which it meant."""
        before = spellings.setdefault((where, record.name, name.removeprefix("no_")), spelled)
        if before != spelled:
            raise CSEUsageError(
                f"{where}{before} and {spelled} both set {record.name}'s {name.removeprefix('no_')}",
                hint="give it once",
            )

    for key, value in config.items():
        record, name = flag_owner(key, chosen, base, config_path)
        if record is not None:
            once(record, name, key, f"{config_path}: the keys ")
        (shared if record is None else own[record.name])[0][name] = value
    for piece in split_argv(argv):
        flag, _, value = piece[0].partition("=")
        if not flag.startswith("--"):
            shared[1].extend(piece)
            continue
        record, name = flag_owner(flag[2:], chosen, base)
        if record is not None:
            once(record, name, flag, "")
        spelled = [f"--{name}" + (f"={value}" if value else ""), *piece[1:]] if record is not None else piece
        (shared if record is None else own[record.name])[1].extend(spelled)
    return shared, own


def composed_help(chosen: list[MethodRecord], base_types: tuple[type, ...]) -> str:
    """``--help`` of a composition or of a part alone: each part's flags with their spellings and
    defaults first (what a user of ``--parts`` is after), then the shared flags."""
    lines = []
    for record in chosen:
        if not record.method_arguments:
            continue
        shared_names = {name for other in chosen if other is not record for name in flag_fields(other)}
        lines.append(f"{record.display_name}'s flags (--parts {record.name}; {record.docs}):")
        for name, f in flag_fields(record).items():
            spelled = f"--{record.name}_{name}" + ("" if name in shared_names else f", --{name}")
            default = "" if f.default is dataclasses.MISSING else f" (default: {f.default})"
            lines.append(f"  {spelled}\n      {f.metadata.get('help', '')}{default}")
    lines.append("\nThe shared flags (model, data, training):")
    lines.append(ArgumentParser(base_types, prog="run_cse.py", allow_abbrev=False).format_help())
    return "\n".join(lines)


def parse(argv: list[str] | None = None, extra: tuple[type, ...] = (), preset: MethodRecord | None = None) -> tuple:
    """``(run, *extra)`` of a command line: the :class:`~cse.run.Run` it names, then the values of
    the dataclasses ``extra`` (another command's own flags, ``python -m cse.diagnostics``'). The one
    parser of the run scripts and ``run_cse.py``: with ``preset``, a method's run script's command
    line (its record's dataclasses, the part's flags spelled as they name them); else ``run_cse.py``'s,
    whose ``--parts`` names a single part's preset (the same dataclasses and defaults, the part's flags
    spelled either way) or a composition of SimCSE's shared arguments and the parts, whose names and
    flags are checked before anything else. A preset is its record's one part with its flags
    (:meth:`~cse.registry.MethodRecord.preset`), none for SimCSE."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if preset is not None:
        return preset_run(preset, parse_args((*preset.argument_types, *extra), argv))
    chosen = select(requested_parts(argv))
    config_path = argv[0] if argv and argv[0].endswith(CONFIG_SUFFIXES) else None
    config, argv = (read_config_file(config_path), argv[1:]) if config_path else ({}, argv)
    flags = given_flags(argv) | set(config)
    if any(arg in ("-h", "--help") for arg in argv):
        shared_types = chosen[0].arguments if len(chosen) == 1 else BASE_ARGUMENTS  # a preset's defaults
        print(composed_help(chosen, (*shared_types, PartsArguments, *extra)), end="")
        raise SystemExit(0)
    if len(chosen) == 1:
        # the preset: its run script's dataclasses, the part's flags spelled either way
        record = chosen[0]
        types = (*record.argument_types, PartsArguments, *extra)
        base = names_of(types) - set(flag_fields(record))
        shared, own = route(chosen, config, argv, base, config_path)
        check_flags_of_other_parts(chosen, flags, base)
        tokens, values = [*shared[1], *own[record.name][1]], {**shared[0], **own[record.name][0]}
        parsed = parse_args(types, tokens, config=values, config_path=config_path)
        own_types = len(record.argument_types)
        return preset_run(record, (*parsed[:own_types], *parsed[own_types + 1 :]))  # run_cse.py's --parts left out
    base_types = (*BASE_ARGUMENTS, PartsArguments, *extra)
    base = names_of(base_types)
    shared, own = route(chosen, config, argv, base, config_path)  # a shared config key named as the file's
    check_flags_of_other_parts(chosen, flags, base)
    parsed = parse_args(base_types, shared[1], config=shared[0], config_path=config_path)
    model_args = parsed[0]
    parts = []
    for record in chosen:
        values, tokens = own[record.name]
        args = None
        if record.method_arguments:
            try:
                (args,) = parse_args((record.method_arguments,), tokens, config=values, config_path=config_path)
            except CSEUsageError as err:
                raise CSEUsageError(f"{record.name}: {err.args[0]}", hint=err.hint) from err
        parts.append(record.part(args, model_args))
    for part in parts:
        reason = part.conflict([other for other in parts if other is not part])
        if reason:
            raise CSEUsageError(f"--parts {','.join(r.name for r in chosen)}: {reason}", hint="see docs/composition.md")
    return (Run(registry.composed(chosen), parts, *parsed[:3]), *parsed[len(BASE_ARGUMENTS) + 1 :])


def preset_run(record: MethodRecord, parsed: tuple) -> tuple:
    """``(run, *rest)``: the preset of ``record`` of the values its dataclasses parsed (``parsed``, in
    the order of its :attr:`~cse.registry.MethodRecord.argument_types`), and the values after them."""
    return (Run(record, record.preset(parsed), *parsed[:3]), *parsed[len(record.argument_types) :])


def names_of(types: tuple[type, ...]) -> set[str]:
    return {f.name for dtype in types for f in dataclasses.fields(dtype)}


def main(argv: list[str] | None = None, callbacks=()):
    """``run_cse.py``: train and evaluate the composition the command line ``argv`` names;
    ``callbacks`` (``TrainerCallback`` objects) join the Trainer's. Returns the trainer. A script that
    registers a part of its own (docs/extending.md) calls this after registering it."""
    return start(argv, callbacks)


def run_method(record: MethodRecord, argv: list[str] | None = None, callbacks=()):
    r"""The ``main`` of a method's run script: train the preset of ``record`` as the command line
    ``argv`` says (its record's dataclasses: a config file first, then flags). ``callbacks``
    (``TrainerCallback``\ s) join the Trainer's, e.g. the benchmark's step timer. Returns the trainer."""
    return start(argv, callbacks, preset=record)


def start(argv: list[str] | None, callbacks, preset: MethodRecord | None = None):
    """Check the library versions, :func:`parse` ``argv`` (with ``preset``: a run script's) into its
    run and train it (:func:`cse.pipeline.train`)."""
    from .environment import check_min_versions

    check_min_versions()
    (run,) = parse(argv, preset=preset)
    from .pipeline import train  # after parse: --help and refusals answer without loading the trainer

    return train(run, callbacks)


# --- the documentation --------------------------------------------------------------------------


def markdown() -> str:
    """docs/composition.md: the parts, what each adds, and the matrix of the pairs that combine."""
    chosen = registry.parts()
    lines = [
        "# Composition: parts from different papers in one run",
        "",
        "<!-- generated by `python -m cse.listings` from the method records; tests/test_composition.py checks it -->",
        "",
        "`run_cse.py --parts a,b,...` trains SimCSE's base with the named parts on top:",
        "",
        f"- **base**: {BASE_EQUATION}.",
    ]
    for record in chosen:
        replaced = ", ".join(SLOTS[slot] for slot in sorted(record.part.replaces)) or "nothing"
        needs = "".join(f" Needs {NEEDS[need]}." for need in sorted(record.part.needs))
        needs += "".join(f" Changes {NEEDS[need]}." for need in sorted(record.part.changes))
        lines.append(
            f"- **{record.name}** ({record.display_name}, [docs]({record.docs.removeprefix('docs/')})): "
            f"{record.part.equation}. Replaces: {replaced}.{needs}"
        )
    lines += [
        "",
        "A composed run's loss is the sum of the terms the parts give (each logged as `term_<name>` with "
        "`--log_term_gradients`, and read by `python -m cse.diagnostics`); the parts act in the order of "
        "their names, whatever order the command names them in. A part's flag is spelled `--<part>_<name>` "
        "(`--mixcse_variant`) in any composition, and `--<name>` where no other part the command names has a "
        f"flag of that name; names that two parts share: {', '.join(f'`{n}`' for n in shared_flag_names())}. "
        "The shared arguments (model, data, training) take SimCSE's defaults; a single part is its method's "
        "preset (`--parts mixcse` is `run_mixcse.py`, flags and defaults included).",
        "",
        "A pair of which one part needs something of the batch or the model that the other changes (as the "
        "parts declare it) does not combine either.",
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
        cells = ["-" if a is b else ("yes" if why_not(a.part, b.part) is None else "no") for b in chosen]
        lines.append(f"| **{a.name}** | " + " | ".join(cells) + " |")
    lines += ["", "A set of parts combines when each of its pairs does.", "", "## Each pair", ""]
    for a, b in itertools.combinations(chosen, 2):
        reason = why_not(a.part, b.part)
        if reason:
            lines.append(f"- **{a.name} + {b.name}**: not defined: {reason}.")
            continue
        notes = [note for x, y in ((a, b), (b, a)) for note in said_of(x.part.notes, y.part)]
        lines.append(f"- **{a.name} + {b.name}**: the base with both parts' changes. " + " ".join(notes))
    return "\n".join(lines) + "\n"


def shared_flag_names() -> list[str]:
    """The flag names more than one part has (each spelled with its part where both are named)."""
    counts: dict[str, int] = {}
    for record in registry.parts():
        for name in flag_fields(record):
            counts[name] = counts.get(name, 0) + 1
    return sorted(name for name, count in counts.items() if count > 1)


if __name__ == "__main__":
    sys.stdout.write(markdown())
