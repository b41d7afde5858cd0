"""Whether a file a run reads is whole, from its structure, at a cost independent of its size: JSON
is parsed; a safetensors header must describe exactly the bytes that follow it; a ``torch.save``
file (a zip archive) must end with its central directory. Each format ends with what is checked, so
a file cut short (a killed writer, an interrupted copy) fails the check. Checkpoints
(:mod:`cse.resume`) and model directories (:mod:`cse.modeling`) are checked this way before they
are loaded."""

from __future__ import annotations

import json
import os
import zipfile

from safetensors import safe_open

from .errors import CSEUsageError

CHECKED_SUFFIXES = (".json", ".safetensors", ".pt", ".pth", ".bin")


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
