"""Files that a reader sees whole or not at all.

Every file a user reads from an output directory (results JSONs, the Trainer's metrics and state,
``run_args.json``, the model card, the exported model) is written under a temporary name in its
own directory and renamed into place (``os.replace``, atomic on POSIX filesystems): a process
killed, or a disk that fills, while it writes leaves the previous file (or none) and at most a
``*.tmp`` file beside it, never a partial file under the real name. Files are flushed to disk
(``fsync``) before the rename, so a power loss after it cannot leave the new name with unwritten
contents either.

A set of files (the exported model) is written into a staging folder inside the target directory
(:func:`staging_dir`) and moved into place file by file (:func:`publish`), the files named ``last``
after the others: each file is whole at every moment, and the one that marks the set as complete
appears only when the others are there.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil

from .run_names import STAGING_NAME, TMP_SUFFIX


def _fsync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_path(path: str):
    """Yield a temporary path beside ``path`` for the caller (or a library) to write; when the block
    ends normally, flush it to disk and rename it to ``path``; on an error, remove it and re-raise."""
    tmp = path + TMP_SUFFIX
    try:
        yield tmp
        _fsync(tmp)
        os.replace(tmp, path)
    except BaseException as error:
        with contextlib.suppress(FileNotFoundError):
            os.remove(tmp)
        if isinstance(error, OSError) and error.errno is not None and error.filename is None:
            # a failed write() names no file (a full disk, a size limit): name the one being written
            error.filename = tmp
        raise


def write_bytes(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically."""
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        f.write(data)


def write_text(path: str, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    write_bytes(path, text.encode("utf-8"))


def write_json(path: str, data, **dump_kwargs) -> None:
    """Write ``data`` to ``path`` atomically as JSON (``indent=2`` unless given) with a final newline."""
    write_text(path, json.dumps(data, **{"indent": 2, **dump_kwargs}) + "\n")


def staging_dir(directory: str) -> str:
    """A fresh, empty staging folder inside ``directory`` (a leftover of a killed writer is removed)."""
    staging = os.path.join(directory, STAGING_NAME)
    shutil.rmtree(staging, ignore_errors=True)
    os.makedirs(staging)
    return staging


def publish(staging: str, directory: str, last: tuple[str, ...] = (), names_file: str | None = None) -> None:
    """Move every file under ``staging`` to the same relative path in ``directory`` (each rename
    atomic, each file flushed to disk first) and remove ``staging``. The relative paths in ``last``
    mark the set as complete: the previous ones are removed first, and the new ones come after the
    others, in that order, and after ``staging`` is gone (a writer killed before then leaves them as
    ``*.tmp`` files), so that nothing is left to clean up once they are in place. ``names_file``: a
    file that lists the relative paths being published (a JSON list) from before the first move until
    ``staging`` is gone (only the renames of ``last`` remain then): with the names still in
    ``staging``, it tells which files in ``directory`` a writer killed meanwhile had moved there
    (:func:`cse.run_dir.foreign_entries`)."""
    files = sorted(
        os.path.relpath(os.path.join(root, name), staging) for root, _, names in os.walk(staging) for name in names
    )
    if names_file is not None:
        write_json(names_file, files)
    held = [name for name in last if name in files]
    for name in held:  # the previous set's marker must not stand beside a mix of old and new files
        with contextlib.suppress(FileNotFoundError):
            os.remove(os.path.join(directory, name))
    for name in [name for name in files if name not in held] + held:
        source, target = os.path.join(staging, name), os.path.join(directory, name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        _fsync(source)
        os.replace(source, target + TMP_SUFFIX if name in held else target)
    shutil.rmtree(staging)
    if names_file is not None:  # every file is in place: the markers' renames alone remain
        os.remove(names_file)
    for name in held:
        target = os.path.join(directory, name)
        os.replace(target + TMP_SUFFIX, target)
