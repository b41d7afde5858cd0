"""Where data lives: explicit paths first, then the ``CSE_DATA_DIR`` environment variable.

``CSE_DATA_DIR`` holds ``senteval/`` (SentEval's data layout) and the training corpus
(``wiki1m_for_simcse.txt``), as ``scripts/download_data.sh`` lays them out.
"""

from __future__ import annotations

import os

from .errors import CSEUsageError

DATA_DIR_ENV = "CSE_DATA_DIR"
DEFAULT_CORPUS = "wiki1m_for_simcse.txt"
# What a training corpus that holds no sentence is refused with.
EMPTY_CORPUS_HINT = "pass a corpus of one sentence a line (e.g. wiki1m_for_simcse.txt, scripts/download_data.sh)"


def corpus_emptiness(path: str, chunk: int = 1 << 16) -> str | None:
    """Why the regular file ``path`` holds no sentence, in words (size 0, or a ``.txt`` of blank lines
    alone), or None. Read up to its first byte that is not ASCII whitespace, the first chunk of any
    corpus with a sentence: a refusal comes before ``datasets`` reads (and reports progress on) the file."""
    if os.path.getsize(path) == 0:
        return f"training corpus is empty: {path}"
    if not path.lower().endswith(".txt"):
        return None
    with open(path, "rb") as f:
        while block := f.read(chunk):
            if block.strip():
                return None
    return f"training corpus has no non-blank line: {path}"


# What a training corpus that is not a regular file (a FIFO, a device, a socket) is refused with.
CORPUS_FILE_HINT = (
    "pass a regular file of one sentence a line (.txt) or a .csv; to train on a stream, save it first "
    "(cat STREAM > corpus.txt)"
)


class MissingDataError(CSEUsageError, FileNotFoundError):
    """A data file or directory the run needs is absent; the message names it and how to get it."""


_HOW_TO_GET = f"the repository's scripts/download_data.sh fills ${DATA_DIR_ENV}; or pass the path explicitly"


def _data_root(what: str) -> str:
    root = os.environ.get(DATA_DIR_ENV)
    if not root:
        raise MissingDataError(f"no path given for {what} and ${DATA_DIR_ENV} is not set", hint=_HOW_TO_GET)
    return root


def require_path(path: str, what: str) -> str:
    if not os.path.exists(path):
        raise MissingDataError(f"{what} not found: {path}", hint=f"check the path; {_HOW_TO_GET}")
    return path


def senteval_dir(explicit: str | None = None) -> str:
    """The SentEval data directory: ``explicit`` or ``$CSE_DATA_DIR/senteval``."""
    path = explicit if explicit else os.path.join(_data_root("the SentEval data"), "senteval")
    if not os.path.isdir(path):
        raise MissingDataError(f"SentEval data directory not found: {path}", hint=f"check the path; {_HOW_TO_GET}")
    return path


def default_train_file() -> str:
    return require_path(os.path.join(_data_root("the training corpus"), DEFAULT_CORPUS), "training corpus")
