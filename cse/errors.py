"""Errors caused by what the user asked for (a missing file, contradictory flags, a locked output
directory) or by the machine the run is on (a full disk, a read-only path), as opposed to bugs. The
``run_*.py`` scripts print a ``CSEUsageError``, and an ``OSError`` of :data:`OS_ERROR_HINTS`, as one
line with its hint and exit with status 2; any other exception keeps its traceback."""

from __future__ import annotations

import errno
import os
import shutil
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


# The faults of a path that the user, not the code, has to mend; each with what to do.
OS_ERROR_HINTS = {
    errno.ENOSPC: "free space on that file system and rerun the same command: a run resumes from its newest complete "
    "checkpoint",
    errno.EDQUOT: "free space within your quota on that file system and rerun the same command",
    errno.EROFS: "choose a path on a writable file system",
    errno.EACCES: "choose a path you may write (or read), or change its permissions",
    errno.EPERM: "choose a path you may write (or read), or change its permissions",
    errno.EEXIST: "choose another path, or move the file there away",
    errno.EISDIR: "pass the file itself, not its directory",
    errno.ENOTDIR: "a part of the path is a file, not a directory: correct the path",
    errno.EFBIG: "a limit on the size of a file (ulimit -f, or the file system's) stopped the write: raise it or "
    "write to another file system",
}

# How libraries that bypass Python's OSError report a full disk: safetensors (Rust's io::Error) and
# the C library's message.
_DISK_FULL_TEXTS = (f"(os error {errno.ENOSPC})", os.strerror(errno.ENOSPC))


def human_size(size: float) -> str:
    """``size`` bytes in words: ``512 B``, ``5.7 MiB``."""
    unit = "B"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            break
        size /= 1024
    return f"{size:.0f} B" if unit == "B" else f"{size:.1f} {unit}"


def exception_chain(err: BaseException):
    """``err`` and the exceptions it was raised from or while handling, outermost first."""
    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        yield err
        err = err.__cause__ or err.__context__


def is_disk_full(err: BaseException) -> bool:
    """Whether ``err`` (or what it was raised from) says the device has no space left."""
    return any(
        getattr(cause, "errno", None) in (errno.ENOSPC, errno.EDQUOT)
        or any(text in str(cause) for text in _DISK_FULL_TEXTS)
        for cause in exception_chain(err)
    )


def nearest_existing(path: str) -> str:
    """``path`` made absolute, or its nearest parent that exists (what a write there would create under)."""
    path = os.path.abspath(path)
    while not os.path.exists(path):
        path = os.path.dirname(path)
    return path


def free_space(path: str) -> str:
    """The free space of the file system holding ``path`` (or its nearest existing parent), in words."""
    usage = shutil.disk_usage(nearest_existing(path))
    return f"{human_size(usage.free)} free of {human_size(usage.total)}"


def os_error_refusal(err: BaseException) -> CSEUsageError | None:
    """``err`` as a one-line refusal when it, or what it was raised from, is an ``OSError`` of
    :data:`OS_ERROR_HINTS` (a fault of a path, not of the code); None otherwise."""
    for cause in exception_chain(err):
        if isinstance(cause, OSError) and cause.errno in OS_ERROR_HINTS:
            where = " -> ".join(str(name) for name in (cause.filename, cause.filename2) if name is not None)
            message = f"{cause.strerror or os.strerror(cause.errno)}{f': {where}' if where else ''}"
            if cause.errno in (errno.ENOSPC, errno.EDQUOT) and cause.filename is not None:
                message += f" ({free_space(os.path.dirname(os.path.abspath(cause.filename)))})"
            return CSEUsageError(message, hint=OS_ERROR_HINTS[cause.errno])
    if is_disk_full(err):
        return CSEUsageError(f"no space left on device: {err}", hint=OS_ERROR_HINTS[errno.ENOSPC])
    return None


def run_cli(main, argv=None):
    """Run a command-line entry point: a ``CSEUsageError``, or an ``OSError`` that a path caused (see
    :func:`os_error_refusal`), becomes ``error: <message>`` (and its hint) on stderr and its exit
    status (2), without a traceback; any other exception is a bug and keeps its traceback. Returns
    what ``main`` returns. Under torchrun each process prints its own refusal."""
    try:
        result = main() if argv is None else main(argv)
    except SystemExit:  # --help, or a script's own exit
        release_process_group()
        raise
    except Exception as err:
        refusal = err if isinstance(err, CSEUsageError) else os_error_refusal(err)
        if refusal is None:
            raise
        print(f"error: {refusal}", file=sys.stderr, flush=True)
        release_process_group()
        raise SystemExit(refusal.exit_code) from None
    release_process_group()
    return result


def release_process_group() -> None:
    """Destroy the default process group of a multi-process run, if one was set up. A group left to
    the interpreter's exit can abort it: gloo's worker threads outlive it and the process dies of
    SIGABRT ("terminate called without an active exception") after a run that succeeded, which the
    launcher reports as a failed run. A bug's traceback leaves the group alone: a process whose
    peers may still wait in a collective must not block on tearing it down."""
    dist = sys.modules.get("torch.distributed")  # never imported by the entry points that train nothing
    if dist is not None and dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
