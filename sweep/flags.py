"""The arguments a table accepts: the driver's own options, and the flags that every run script the
table passes them to accepts, as its argument parser declares them. A table script passes the
arguments that are not the driver's to its training runs (its ``"$@"``: to all of them, or, as in
AdCSE's Fig. 4(a), to the runs of one method), so an argument outside both would be launched with
each such run and refused by each (a misspelled ``--max-parallel``, ``--executer``, ``--sead``): it
is refused here, before anything runs, under ``--plan`` too. The runs that receive the arguments
are those whose recorded arguments hold them, in order.

A run script's flags are read from its parser, never listed by hand: a method's script
(``run_simcse.py``, ...: its ``RECORD``) parses its record's ``HfArgumentParser`` dataclasses; the
composition's (``run_cse.py``: ``cse.composition.main``) the shared dataclasses, ``--parts`` and
each part's flags, also spelled with its part's name (``--mixcse_variant``). Reading them imports
the run scripts (and torch), so it is done only when the command line has arguments for the runs.
A script that declares neither has its flags judged by its own parser when it starts.

The values are judged too: each distinct command line of a method's script that receives the
arguments (its configuration file and flags) goes through that script's parser and the checks it
makes before any dataclass is built (:func:`cse.arguments.check_command_line`: a value of the wrong
type, a flag without its value, NaN, a training argument outside its range), without training; a
refusal is the run's own message, after its script's name. The composition's command lines
(``run_cse.py``) are judged by its own parser when it starts."""

from __future__ import annotations

import functools
import os
import re
import runpy
from difflib import get_close_matches

from cse.errors import CSEUsageError

from .record import REPO, Run, Table

# what argparse reads as a value, not an option: a negative number (-1, -.5, -1e-5)
NUMBER = re.compile(r"-\.?\d")


def given_options(argv: list[str]) -> list[str]:
    """The option names (``--name`` of ``--name value`` and ``--name=value``) among ``argv``."""
    return [arg.split("=", 1)[0] for arg in argv if arg.startswith("-") and arg != "-" and not NUMBER.match(arg)]


def _options(parser) -> set[str]:
    return {option for action in parser._actions for option in action.option_strings}


def _composition_flags() -> set[str]:
    from cse import registry
    from cse.arguments import ArgumentParser
    from cse.composition import PartsArguments

    flags = _options(ArgumentParser((*registry.BASE_ARGUMENTS, PartsArguments)))
    for record in registry.parts():
        if record.method_arguments is not None:
            own = _options(ArgumentParser((record.method_arguments,), add_help=False))
            flags |= own | {f"--{record.name}_{option[2:]}" for option in own}
    return flags


@functools.cache
def _declarations(script: str) -> dict:
    path = os.path.join(REPO, script)
    if not os.path.isfile(path):
        raise CSEUsageError(
            f"the tables train with {script}, which does not exist", hint="correct `train` in the table"
        )
    # run as a module, not as __main__: its imports and declarations, not its training
    return runpy.run_path(path, run_name="cse_sweep_flags")


def argument_types(script: str) -> tuple[type, ...] | None:
    """The dataclasses of the method's run script ``script`` (its ``RECORD``); None for another script."""
    from cse.registry import MethodRecord

    record = _declarations(script).get("RECORD")
    return record.argument_types if isinstance(record, MethodRecord) else None


def script_flags(script: str) -> set[str] | None:
    """The flags the run script ``script`` accepts, from its parser; None for a script that declares
    no parser the driver can read."""
    from cse import composition
    from cse.arguments import ArgumentParser

    types = argument_types(script)
    if types is not None:
        return _options(ArgumentParser(types))
    if _declarations(script).get("main") is composition.main:
        return _composition_flags()
    return None


def receives(run: Run, run_flags: list[str]) -> bool:
    """Whether the table passed ``run_flags`` on to ``run`` (its ``"$@"``): they lie, in order, among
    its recorded arguments."""
    n = len(run_flags)
    return any(list(run.args[i : i + n]) == run_flags for i in range(len(run.args) - n + 1))


def check_run_flags(tables: list[Table], run_flags: list[str], driver_options: set[str]) -> None:
    """Refuse an option of ``run_flags`` (the arguments that are not the driver's) that a run script
    the tables pass them to does not accept: each such run would be launched with it, and refuse it."""
    given = [name for name in dict.fromkeys(given_options(run_flags)) if name not in driver_options]
    if not given:
        return
    scripts = sorted({run.script for table in tables for run in table.runs if receives(run, run_flags)})
    if not scripts:
        raise CSEUsageError(
            f"{given[0]} is not an option of the sweep, and the tables pass no argument to their runs",
            hint="python3 -m sweep --help lists the driver's options",
        )
    accepted = {script: script_flags(script) for script in scripts}
    known = {script: flags for script, flags in accepted.items() if flags is not None}
    for name in given:
        taking = [script for script, flags in known.items() if name in flags]
        refusing = [script for script in known if script not in taking]
        if not refusing:
            continue
        if taking:
            raise CSEUsageError(
                f"{name} is a flag of {', '.join(taking)} but not of {', '.join(refusing)}, which the tables pass "
                "it to as well",
                hint="give it to a table whose runs all take it",
            )
        everything = sorted(driver_options | {flag for flags in known.values() for flag in flags})
        close = get_close_matches(name, everything, n=1)
        raise CSEUsageError(
            f"{name} is neither an option of the sweep nor a flag of {', '.join(refusing)}",
            hint=(f"did you mean {close[0]}? " if close else "")
            + f"python3 -m sweep --help; python {refusing[0]} --help",
        )
    check_run_values(tables, run_flags)


def check_run_values(tables: list[Table], run_flags: list[str]) -> None:
    """Refuse a command line of a run that receives ``run_flags`` which its script's parser refuses
    (:func:`cse.arguments.check_command_line`): the run would be launched only to fail."""
    from cse.arguments import check_command_line

    commands = {(run.script, run.args) for table in tables for run in table.runs if receives(run, run_flags)}
    for script, args in sorted(commands):
        types = argument_types(script)
        if types is None:
            continue
        try:
            check_command_line(types, list(args))
        except CSEUsageError as refused:
            raise CSEUsageError(f"{script}: {refused.args[0]}", hint=refused.hint) from refused
