"""Freed memory kept in a CPU run's process (cse.cpu_memory): a block freed under glibc's defaults
goes back to the system (the resident set falls), under the run scripts' thresholds it stays, each in
a fresh process; the environment's own settings are left alone; the run scripts set the thresholds on
a CPU unless --keep_cpu_memory false."""

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
import torch
from cse.cpu_memory import keep_freed_memory
why = keep_freed_memory() if sys.argv[1] == "keep" else "not asked"
def resident():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
block = torch.ones(6 << 20)  # 24 MiB of float32, every page written
held = resident()
del block
print(json.dumps({"why": why, "released": held - resident()}))
"""


def probe(mode, **environment):
    env = {k: v for k, v in os.environ.items() if k not in cpu_memory.ENVIRONMENT}
    out = subprocess.run(
        [sys.executable, "-c", PROBE, mode], cwd=REPO, env={**env, **environment}, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.splitlines()[-1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and glibc")
def test_a_freed_block_goes_back_to_the_system_by_default_and_stays_with_the_thresholds():
    assert probe("default")["released"] >= 20 << 20  # unmapped at once
    kept = probe("keep")
    assert kept["why"] is None and abs(kept["released"]) < 2 << 20  # still in the process, for the next step


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and glibc")
@pytest.mark.parametrize("name", cpu_memory.ENVIRONMENT)
def test_the_environments_own_allocator_settings_are_left_alone(name):
    value = "glibc.malloc.check=0" if name == "GLIBC_TUNABLES" else "131072"
    result = probe("keep", **{name: value})
    assert result["why"] == f"the environment sets {name}"
    assert result["released"] >= 20 << 20  # glibc's (or the environment's) behaviour, not ours


@pytest.mark.parametrize("flag, calls", [("true", 1), ("false", 0)])
def test_a_cpu_run_keeps_freed_memory_unless_told_not_to(tiny_bert, tmp_path, monkeypatch, caplog, flag, calls):
    import cse.pipeline

    called = []
    monkeypatch.setattr(cse.pipeline, "keep_freed_memory", lambda: called.append(1) or "told so by the test")
    run_simcse.main(small_run_argv(tiny_bert, tmp_path / "out", 1, "--keep_cpu_memory", flag))
    assert len(called) == calls
    assert ("memory freed by a step goes back to the system: told so by the test" in caplog.text) == bool(calls)
