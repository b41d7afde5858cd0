"""Errors caused by what the user asked for (a missing file, contradictory flags, a locked output
directory), as opposed to bugs. The ``run_*.py`` scripts print a ``CSEUsageError`` as one line with
its hint and exit with status 2; any other exception keeps its traceback."""

from __future__ import annotations

import sys


class CSEUsageError(ValueError):
    """A refusal of the user's input. ``hint`` says what to do instead (one line, optional).

    It subclasses ``ValueError`` so that code catching the argument parser's ``ValueError`` keeps
    catching it."""

    exit_code = 2

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.hint = hint

    def __str__(self) -> str:
        message = super().__str__()
        return f"{message}\n  hint: {self.hint}" if self.hint else message


def run_cli(main, argv=None):
    """Run a command-line entry point: a ``CSEUsageError`` becomes ``error: <message>`` (and its hint)
    on stderr and exit status 2, without a traceback; any other exception is a bug and keeps its
    traceback. Returns what ``main`` returns. Under torchrun each process prints its own refusal."""
    try:
        return main() if argv is None else main(argv)
    except CSEUsageError as err:
        print(f"error: {err}", file=sys.stderr, flush=True)
        raise SystemExit(err.exit_code) from None
