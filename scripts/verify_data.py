#!/usr/bin/env python3
"""Check a data directory (what ``$CSE_DATA_DIR`` points at) against ``scripts/data_checksums.txt``.

Prints one line per problem (missing file, wrong sha256, wrong line count) and exits 1 if there is
any; prints a one-line summary and exits 0 otherwise. The manifest's header documents its format.
Standard library only, so it runs before the project's dependencies are installed.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import sys
from dataclasses import dataclass

MANIFEST = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data_checksums.txt")
SENTEVAL_PREFIX = "senteval/"
CHUNK = 1 << 20

_PREFIX_HASH = re.compile(r"^(?P<path>.+):first-(?P<n>\d+)-bytes$")


@dataclass
class Entry:
    """What the manifest pins about one file."""

    path: str
    sha256: str | None = None
    prefix_bytes: int | None = None  # the sha256 covers only this many leading bytes
    lines: int | None = None


def read_manifest(manifest: str) -> dict[str, Entry]:
    entries: dict[str, Entry] = {}

    def pin(path: str, number: int, **fields) -> None:
        entry = entries.setdefault(path, Entry(path))
        for name, value in fields.items():
            if getattr(entry, name) is not None:
                raise ValueError(f"{manifest}:{number}: {path} pinned twice ({name})")
            setattr(entry, name, value)

    with open(manifest, encoding="utf-8") as f:
        for number, raw in enumerate(f, 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            fields = line.split()
            if len(fields) == 3 and fields[0] == "lines" and fields[1].isdigit():
                pin(fields[2], number, lines=int(fields[1]))
            elif len(fields) == 2 and re.fullmatch(r"[0-9a-f]{64}", fields[0]):
                prefix = _PREFIX_HASH.match(fields[1])
                if prefix:
                    pin(prefix["path"], number, sha256=fields[0], prefix_bytes=int(prefix["n"]))
                else:
                    pin(fields[1], number, sha256=fields[0])
            else:
                raise ValueError(f"{manifest}:{number}: unrecognised manifest line: {line!r}")
    return entries


def scan(path: str, prefix_bytes: int | None) -> tuple[str, int, int]:
    """sha256 of the first ``prefix_bytes`` (None: all), size and line count, in one read of the file."""
    digest = hashlib.sha256()
    size = newlines = 0
    last = b""
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(CHUNK), b""):
            digest.update(chunk if prefix_bytes is None else chunk[: max(prefix_bytes - size, 0)])
            size += len(chunk)
            newlines += chunk.count(b"\n")
            last = chunk[-1:]
    # A final line without a newline is still a line (the corpus loader reads it as a sentence).
    lines = newlines + (1 if last not in (b"", b"\n") else 0)
    return digest.hexdigest(), size, lines


def check_file(root: str, entry: Entry) -> list[str]:
    full = os.path.join(root, entry.path)
    if not os.path.isfile(full):
        return [f"{entry.path}: missing (expected at {full})"]
    found, size, lines = scan(full, entry.prefix_bytes)
    problems = []
    if entry.sha256 is not None:
        if entry.prefix_bytes is None:
            if found != entry.sha256:
                problems.append(f"{entry.path}: sha256: expected {entry.sha256}, found {found}")
        elif size < entry.prefix_bytes:
            problems.append(f"{entry.path}: expected at least {entry.prefix_bytes} bytes to hash, found {size}")
        elif found != entry.sha256:
            problems.append(
                f"{entry.path}: sha256 of the first {entry.prefix_bytes} bytes: expected {entry.sha256}, found {found}"
            )
    if entry.lines is not None and lines != entry.lines:
        problems.append(f"{entry.path}: line count: expected {entry.lines}, found {lines}")
    return problems


def verify(root: str, entries: list[Entry]) -> list[str]:
    problems = []
    senteval = os.path.join(root, "senteval")
    if any(e.path.startswith(SENTEVAL_PREFIX) for e in entries) and not os.path.isdir(senteval):
        # One line instead of one per file, which would bury the actual cause.
        problems.append(f"senteval/: missing directory (expected at {senteval})")
        entries = [e for e in entries if not e.path.startswith(SENTEVAL_PREFIX)]
    for entry in entries:
        problems.extend(check_file(root, entry))
    return problems


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("data_dir", help="the data directory (holds senteval/ and wiki1m_for_simcse.txt)")
    skip = parser.add_mutually_exclusive_group()
    skip.add_argument("--skip-corpus", action="store_true", help="check only senteval/")
    skip.add_argument("--skip-senteval", action="store_true", help="check only the training corpus")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not os.path.isdir(args.data_dir):
        parser.error(f"not a directory: {args.data_dir}")

    entries = list(read_manifest(MANIFEST).values())
    if args.skip_corpus:
        entries = [e for e in entries if e.path.startswith(SENTEVAL_PREFIX)]
    if args.skip_senteval:
        entries = [e for e in entries if not e.path.startswith(SENTEVAL_PREFIX)]
    problems = verify(args.data_dir, entries)
    for problem in problems:
        print(problem, file=sys.stderr)
    if problems:
        print(f"FAILED: {len(problems)} problem(s) in {args.data_dir} against {MANIFEST}", file=sys.stderr)
        return 1
    print(f"OK: {len(entries)} file(s) in {args.data_dir} match {MANIFEST}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
