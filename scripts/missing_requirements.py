#!/usr/bin/env python3
"""The lines of requirements.txt that the running interpreter's environment lacks.

    python scripts/missing_requirements.py [REQUIREMENTS]

Prints, one a line, each ``name>=version`` requirement whose distribution is not installed (what
scripts/setup.sh installs), and exits 0. A distribution that is installed but older than its lower
bound is never upgraded over the user's copy: it ends the check with an ``error:`` and a ``hint:``
line and exit status 2. Standard library only, so it runs before anything is installed.
"""

from __future__ import annotations

import os
import re
import sys
from importlib import metadata

REQUIREMENTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "requirements.txt")
REQUIREMENT = re.compile(r"^([A-Za-z0-9_.-]+)>=(\S+)$")
# a release (2.13.0) and what follows it: a local build (+cpu) is that release, a pre-release or a
# development build (rc1, .dev20260101) comes before it
RELEASE = re.compile(r"^(\d+(?:\.\d+)*)(.*)$")
BEFORE_RELEASE = re.compile(r"^[._-]?(a|b|c|rc|alpha|beta|pre|preview|dev)", re.I)


def requirements(path: str) -> list[tuple[str, str]]:
    """``(name, minimum)`` of every ``name>=minimum`` line; comments and blank lines skipped."""
    with open(path, encoding="utf-8") as f:
        lines = [line.split("#", 1)[0].strip() for line in f]
    found = []
    for line in filter(None, lines):
        match = REQUIREMENT.match(line)
        if match is None:
            raise ValueError(f"{path}: {line!r} is not of the form name>=version")
        found.append(match.groups())
    return found


def at_least(installed: str, minimum: str) -> bool:
    """Whether version ``installed`` is ``minimum`` or later (PEP 440's order for the forms in use)."""
    have, want = RELEASE.match(installed), RELEASE.match(minimum)
    if have is None or want is None:
        return False
    release = [int(part) for part in have.group(1).split(".")]
    wanted = [int(part) for part in want.group(1).split(".")]
    width = max(len(release), len(wanted))
    release, wanted = release + [0] * (width - len(release)), wanted + [0] * (width - len(wanted))
    if release != wanted:
        return release > wanted
    return not BEFORE_RELEASE.match(have.group(2))


def main(argv: list[str]) -> int:
    path = argv[0] if argv else REQUIREMENTS
    missing, old = [], []
    for name, minimum in requirements(path):
        try:
            installed = metadata.version(name)
        except metadata.PackageNotFoundError:
            missing.append(f"{name}>={minimum}")
            continue
        if not at_least(installed, minimum):
            old.append((name, installed, minimum))
    if old:
        found = ", ".join(f"{name} {installed} (needs >= {minimum})" for name, installed, minimum in old)
        upgrade = " ".join(f"'{name}>={minimum}'" for name, _, minimum in old)
        print(f"error: {sys.prefix} holds older releases than cse needs: {found}", file=sys.stderr)
        hint = f"upgrade them yourself in that environment (pip install -U {upgrade}), then rerun"
        print(f"hint: {hint}", file=sys.stderr)
        return 2
    print("\n".join(missing))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
