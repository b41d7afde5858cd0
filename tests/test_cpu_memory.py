"""Freed memory kept in a CPU run's process (cse.cpu_memory): a block freed under glibc's defaults
goes back to the system (the resident set falls), under the run scripts' thresholds it stays, each in
a fresh process; the environment's own thresholds are left alone (and only those: another glibc
tunable, or an empty variable, sets none); the run scripts set the thresholds on a CPU unless
--keep_cpu_memory false, and log which."""

import json
import os
import subprocess
import sys

import pytest

import run_simcse
from cse import cpu_memory

from .conftest import REPO, small_run_argv

# A fresh process allocates and touches 24 MiB (above glibc's first mmap threshold of 128 KiB, below its
# largest, 32 MiB), frees it, and prints its resident set (/proc/self/statm) before and after the free.
PROBE = """
import json, os, sys
import numpy as np
from cse.cpu_memory import keep_freed_memory
why = keep_freed_memory() if sys.argv[1] == "keep" else "not asked"
def resident():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
block = np.ones(6 << 20, dtype=np.float32)  # 24 MiB from malloc, every page written
held = resident()
del block
print(json.dumps({"why": why, "released": held - resident()}))
"""


def probe(mode, **environment):
    env = {k: v for k, v in os.environ.items() if k not in (*cpu_memory.ENVIRONMENT, "GLIBC_TUNABLES")}
    out = subprocess.run(
        [sys.executable, "-c", PROBE, mode], cwd=REPO, env={**env, **environment}, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.splitlines()[-1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and glibc")
def test_a_freed_block_goes_back_to_the_system_by_default_and_stays_with_the_thresholds():
    assert probe("default")["released"] >= 20 << 20  # unmapped at once
    kept = probe("keep")
    assert kept["why"] == cpu_memory.KEPT and abs(kept["released"]) < 2 << 20  # still in the process


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and glibc")
@pytest.mark.parametrize(
    "name, value, given",
    [
        ("MALLOC_TRIM_THRESHOLD_", "131072", "MALLOC_TRIM_THRESHOLD_"),
        ("MALLOC_MMAP_THRESHOLD_", "131072", "MALLOC_MMAP_THRESHOLD_"),
        ("GLIBC_TUNABLES", "glibc.cpu.hwcap_mask=0:glibc.malloc.trim_threshold=131072", "glibc.malloc.trim_threshold"),
        ("GLIBC_TUNABLES", "glibc.malloc.mmap_threshold=131072", "glibc.malloc.mmap_threshold"),
    ],
)
def test_the_environments_own_thresholds_are_left_alone(name, value, given):
    result = probe("keep", **{name: value})
    assert result["why"] == f"glibc's thresholds left as the environment sets them ({given})"
    assert result["released"] >= 20 << 20  # the environment's thresholds (128 KiB) at work, not ours


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and glibc")
@pytest.mark.parametrize("name, value", [("GLIBC_TUNABLES", "glibc.cpu.hwcap_mask=0"), ("MALLOC_TRIM_THRESHOLD_", "")])
def test_other_tunables_and_empty_variables_set_no_threshold(name, value):
    result = probe("keep", **{name: value})
    assert result["why"] == cpu_memory.KEPT and abs(result["released"]) < 2 << 20


@pytest.mark.parametrize("flag, calls", [("true", 1), ("false", 0)])
def test_a_cpu_run_keeps_freed_memory_unless_told_not_to(tiny_bert, tmp_path, monkeypatch, caplog, flag, calls):
    import cse.pipeline

    called = []
    monkeypatch.setattr(cse.pipeline, "keep_freed_memory", lambda: called.append(1) or "what the test did")
    with caplog.at_level("INFO", logger="cse"):
        run_simcse.main(small_run_argv(tiny_bert, tmp_path / "out", 1, "--keep_cpu_memory", flag))
    assert len(called) == calls
    assert ("what the test did" in caplog.text) == bool(calls)
    assert ("allocator as it comes" in caplog.text) == (not calls)
