"""Freed memory kept in a CPU run's process for the next step, as PyTorch's CUDA caching allocator
keeps GPU memory.

Each step frees what it allocated: the activations during the backward, the gradients when the
Trainer sets them to None (``model.zero_grad()``). glibc's allocator returns freed memory to the
system: a block above its mmap threshold (128 KiB at the start, raised as such blocks are freed, to
32 MiB at most) is unmapped at once, and free memory above its trim threshold at the top of the heap
is trimmed. The next step then maps the same memory again and faults in each page of it. On the
benchmark's 1-layer model (BENCHMARKS.md, ``cpu-micro``) that made ``zero_grad`` take 0.06 ms at one
step and 1 ms at another, depending on where the step's tensors lay in the heap; a BERT-base word
embedding's gradient (94 MB) is unmapped and faulted in again at every step.

:func:`keep_freed_memory` sets glibc's two thresholds (``mallopt``) so that blocks up to 32 MiB come
from the heap and freed memory stays in the process: its resident memory stays at the step's peak
(which the next step reaches again) instead of falling between steps. The run scripts do this on a
CPU unless ``--keep_cpu_memory false``, or the environment already sets the thresholds
(``MALLOC_TRIM_THRESHOLD_``, ``MALLOC_MMAP_THRESHOLD_``, or their tunables in ``GLIBC_TUNABLES``), or
the C library is not glibc (musl, macOS, Windows), where it does nothing; the log says which.
"""

from __future__ import annotations

import ctypes
import os
import platform

# mallopt's parameters (glibc's malloc.h)
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
TRIM_THRESHOLD = 1 << 30  # free memory at the top of the heap kept up to 1 GiB
MMAP_THRESHOLD = 32 << 20  # glibc's largest mmap threshold (DEFAULT_MMAP_THRESHOLD_MAX, 64-bit)
# where a user sets the two thresholds themselves: environment variables, or glibc's tunables
ENVIRONMENT = ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_")
TUNABLES = ("glibc.malloc.trim_threshold", "glibc.malloc.mmap_threshold")
KEPT = "memory freed by a step is kept for the next (--keep_cpu_memory)"


def thresholds_set_by_environment() -> list[str]:
    """The trim and mmap thresholds the environment sets: ``MALLOC_TRIM_THRESHOLD_`` or
    ``MALLOC_MMAP_THRESHOLD_`` (not empty), or their tunables in ``GLIBC_TUNABLES`` (another tunable
    there leaves them as they come)."""
    named = [name for name in ENVIRONMENT if os.environ.get(name)]
    tunables = [item.split("=", 1)[0] for item in os.environ.get("GLIBC_TUNABLES", "").split(":")]
    return named + [tunable for tunable in TUNABLES if tunable in tunables]


def keep_freed_memory() -> str:
    """Set glibc's trim and mmap thresholds for this process (the module docstring), unless the
    environment sets them or the C library is not glibc; returns what it did, for the log."""
    given = thresholds_set_by_environment()
    if given:
        return f"glibc's thresholds left as the environment sets them ({', '.join(given)})"
    if platform.libc_ver()[0] != "glibc":
        return "memory freed by a step goes back to the system: the C library is not glibc"
    mallopt = ctypes.CDLL(None).mallopt
    if not (mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) and mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)):
        return "memory freed by a step goes back to the system: glibc refused the thresholds"
    return KEPT
