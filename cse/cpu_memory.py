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
(``MALLOC_TRIM_THRESHOLD_``, ``MALLOC_MMAP_THRESHOLD_``, ``GLIBC_TUNABLES``), or the C library is
not glibc (musl, macOS, Windows), where it does nothing.
"""

from __future__ import annotations

import ctypes
import logging
import os
import platform

logger = logging.getLogger(__name__)

# mallopt's parameters (glibc's malloc.h)
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
TRIM_THRESHOLD = 1 << 30  # free memory at the top of the heap kept up to 1 GiB
MMAP_THRESHOLD = 32 << 20  # glibc's largest mmap threshold (DEFAULT_MMAP_THRESHOLD_MAX, 64-bit)
ENVIRONMENT = ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "GLIBC_TUNABLES")


def keep_freed_memory() -> str | None:
    """Set glibc's trim and mmap thresholds for this process (the module docstring); returns why it
    did not (None when it did)."""
    given = [name for name in ENVIRONMENT if name in os.environ]
    if given:
        return f"the environment sets {given[0]}"
    if platform.libc_ver()[0] != "glibc":
        return "the C library is not glibc"
    mallopt = ctypes.CDLL(None).mallopt
    if not (mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) and mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)):
        return "glibc refused the thresholds"
    return None
