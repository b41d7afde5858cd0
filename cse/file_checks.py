"""Whether a file a run reads is whole, from its structure, at a cost independent of its size: JSON
is parsed; a safetensors header must describe exactly the bytes that follow it; a ``torch.save``
file (a zip archive) must end with its central directory. Each format ends with what is checked, so
a file cut short (a killed writer, an interrupted copy) fails the check. Checkpoints
(:mod:`cse.resume`) and model directories (:mod:`cse.modeling`) are checked this way before they
are loaded."""

from __future__ import annotations

import json
import os
import stat
import zipfile

from safetensors import safe_open

from .errors import CSEUsageError

CHECKED_SUFFIXES = (".json", ".safetensors", ".pt", ".pth", ".bin")

# What a path that is not a regular file is, in words (by ``stat``'s file type).
_FILE_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def not_a_regular_file(path: str) -> str | None:
    """What the existing ``path`` (followed through links) is when it is not a regular file: ``a
    directory``, ``a FIFO (named pipe)``, ``a character device``, ``a block device``, ``a socket``;
    None for a regular file or a path that does not exist. Read from ``stat`` alone: nothing is
    opened, so a FIFO without a writer is not waited on."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    if stat.S_ISREG(mode):
        return None
    return next((kind for test, kind in _FILE_KINDS if test(mode)), "not a regular file")


def require_regular_file(path: str, what: str, hint: str) -> None:
    """Refuse an existing ``path`` (``what`` it is, for the message) that is not a regular file
    (:func:`not_a_regular_file`): a FIFO, a device or a socket gives no size and can be read only once,
    or never ends (``/dev/zero``), and a directory holds no data of its own."""
    kind = not_a_regular_file(path)
    if kind is not None:
        raise CSEUsageError(f"{what} {path} is {kind}, not a regular file", hint=hint)


def unreadable(path: str) -> str | None:
    """Why the file at ``path`` cannot be loaded (``missing``, ``unreadable (...)``), or None."""
    if not os.path.isfile(path):
        return "missing"
    try:
        if path.endswith(".json"):
            with open(path, encoding="utf-8") as f:
                json.load(f)
        elif path.endswith(".safetensors"):
            with safe_open(path, framework="pt") as f:
                f.keys()
        elif path.endswith((".pt", ".pth", ".bin")):
            with zipfile.ZipFile(path) as archive:
                archive.namelist()
    except Exception as error:  # any parse failure means the same: the file is torn
        return f"unreadable ({type(error).__name__}: {' '.join(str(error).split())})"
    return None


def load_json(path: str, what: str, hint: str):
    """The JSON value the file ``path`` (``what`` it is, for the message) holds; a file that is
    missing, a directory, not UTF-8 or not valid JSON is refused in one line with ``hint``."""
    if os.path.isdir(path):
        raise CSEUsageError(f"{what} {path} is a directory, not a JSON file", hint=hint)
    if not os.path.isfile(path):
        raise CSEUsageError(f"{what} not found: {path}", hint=hint)
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except UnicodeDecodeError as error:
        raise CSEUsageError(f"{what} {path} is not UTF-8 text (byte {error.start})", hint=hint) from None
    except ValueError as error:
        raise CSEUsageError(f"{what} {path} is not valid JSON: {error}", hint=hint) from None


def load_mapping(path: str, what: str, hint: str) -> dict:
    """The JSON object the file ``path`` holds (:func:`load_json`); a file holding any other JSON value
    is refused in one line with ``hint`` too."""
    value = load_json(path, what, hint=hint)
    if not isinstance(value, dict):
        raise CSEUsageError(f"{what} {path} hold a {type(value).__name__}, not a mapping", hint=hint)
    return value
