"""Faults of the paths a run writes or reads end in one line (``error:`` and ``hint:``, exit 2), and a
run stopped by a full disk resumes with the same command once there is space.

The faults are real: a small tmpfs that fills up, a read-only tmpfs, ``/dev/full`` (every write
fails with ENOSPC), a file where a directory should be, a directory this user may not write (as
root, a process without the capabilities that override permission bits). Mounting needs root
(CAP_SYS_ADMIN): where it is refused, the tmpfs tests skip with the reason and the test whose
checkpoint write raises ENOSPC still covers a full disk."""

import errno
import json
import math
import os
import shutil
import subprocess
import sys

import pytest
import safetensors.torch
from transformers import TrainerCallback, TrainingArguments

import run_simcse
from cse.errors import OS_ERROR_HINTS, human_size, run_cli
from cse.resume import checkpoint_problem
from cse.run_names import LOCK_NAME

from .conftest import REPO, assert_nothing_written, overridden, refusal, tmpfs, train_argv


def run_argv(model, out, *extra):
    """A 4-step run saving a checkpoint every 2 steps, the last two kept."""
    return train_argv(model, out, *overridden(RUN_FLAGS, extra))


RUN_FLAGS = (
    "--max_train_samples 64 --per_device_train_batch_size 8 --max_steps 4 --save_strategy steps --save_steps 2 "
    "--save_total_limit 2 --eval_strategy no --load_best_model_at_end false --final_eval none --disable_tqdm true"
).split()


def tree_size(path) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)


class FillDisk(TrainerCallback):
    """Once the checkpoint of ``step`` is saved, another writer fills the disk of ``filler`` but for
    ``left`` bytes: a disk that fills during a run which had room for it when it started."""

    def __init__(self, filler, step, left):
        self.filler, self.step, self.left = filler, step, left

    def on_save(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            with open(self.filler, "wb") as f:
                f.write(b"x" * (shutil.disk_usage(os.path.dirname(self.filler)).free - self.left))


def filling(step, filler, left=2 << 20):
    """``run_simcse.main`` with the disk of ``filler`` filled after the checkpoint of ``step``."""
    return lambda argv: run_simcse.main(argv, callbacks=[FillDisk(str(filler), step, left)])


@pytest.mark.e2e
def test_full_disk_is_one_line_and_the_same_command_resumes_once_there_is_space(capsys, caplog, tiny_bert, tmp_path):
    # A tiny model's checkpoint takes 12.3 MiB; 40 MiB holds the run (two checkpoints, the export), but
    # after the first checkpoint another writer leaves 2 MiB: the second does not fit.
    with tmpfs(tmp_path / "disk", "size=40m") as disk:
        out = disk / "run"
        lines = refusal(capsys, filling(2, disk / "filler"), run_argv(tiny_bert, out))
        first = out / "checkpoint-2"
        size = human_size(tree_size(first))
        # what was being written: the second checkpoint (however its writer names the files on the way)
        target = lines[0].removeprefix("error: no space left on device writing ").split(" (", 1)[0]
        assert target.startswith(str(out)) and "checkpoint-4" in target
        # the free space is what the other writer left, 2 MiB or less (the failed write's start)
        free = lines[0].split(" free of 40.0 MiB); a complete checkpoint of this run, ")[0].rsplit("; ", 1)[1]
        value, unit = free.split()
        assert float(value) * {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20}[unit] <= 2.05 * 2**20, free
        assert f" free of 40.0 MiB); a complete checkpoint of this run, {first}, takes {size}" in lines[0]
        assert lines[0].endswith("nothing complete was deleted")
        assert lines[1] == (
            f"  hint: free at least {size} on the file system of {out} and rerun the same command: it resumes from "
            f"{first}"
        )
        assert checkpoint_problem(str(first), TrainingArguments(output_dir=str(out))) is None
        assert not (out / LOCK_NAME).exists()
        subprocess.run(["mount", "-o", "remount,size=80m", str(disk)], check=True)
        with caplog.at_level("WARNING", logger="cse.resume"):
            run_cli(run_simcse.main, run_argv(tiny_bert, out))
        assert f"resuming from {first}" in caplog.text
        state = json.loads((out / "trainer_state.json").read_text())
        assert state["global_step"] == 4 and (out / "model.safetensors").is_file()


@pytest.mark.e2e
def test_a_full_disk_in_the_run_s_tail_asks_for_the_space_the_export_needs(capsys, tiny_bert, tmp_path):
    """Training ends (its one checkpoint, 12.3 MiB, fits in 24 MiB, with the export), another writer
    leaves 2 MiB, then the export (4.6 MiB) fills the disk: the line asks for about the export's size,
    not the checkpoint's, and the same command completes the run once that much is free."""
    flags = ["--max_train_samples", "64", "--per_device_train_batch_size", "8", "--max_steps", "4"]
    flags += "--save_strategy steps --save_steps 4 --eval_strategy no --load_best_model_at_end false".split()
    flags += "--final_eval none --disable_tqdm true".split()
    with tmpfs(tmp_path / "disk", "size=24m") as disk:
        out = disk / "run"
        error, hint = refusal(capsys, filling(4, disk / "filler"), train_argv(tiny_bert, out, *flags))
        checkpoint = out / "checkpoint-4"
        assert error.startswith(f"error: no space left on device writing {out / '_export.tmp'}")
        asked = error.split("; training has ended, and the export of its model takes about ")[1].split(";")[0]
        assert hint == (
            f"  hint: free at least {asked} on the file system of {out} and rerun the same command: it completes "
            f"the run from {checkpoint}"
        )
        assert human_size(tree_size(checkpoint)) not in error + hint
        subprocess.run(
            ["mount", "-o", f"remount,size={24 + math.ceil(float(asked.split()[0]))}m", str(disk)], check=True
        )
        run_cli(run_simcse.main, train_argv(tiny_bert, out, *flags))
        assert (out / "cse_config.json").is_file()
        exported = (
            tree_size(out)
            - tree_size(checkpoint)
            - sum(os.path.getsize(out / name) for name in ("run_args.json", "trainer_state.json"))
        )
        # what was asked covers the export, and is not far above it
        assert exported <= float(asked.split()[0]) * 2**20 <= 1.15 * exported, (exported, asked)


@pytest.mark.e2e
def test_a_checkpoint_write_failing_with_enospc_is_one_line(capsys, monkeypatch, tiny_bert, tmp_path):
    def full(tensors, filename, *args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), filename)

    monkeypatch.setattr(safetensors.torch, "save_file", full)
    out = tmp_path / "run"
    lines = refusal(capsys, run_simcse.main, run_argv(tiny_bert, out))
    target = out / "checkpoint-2" / "model.safetensors"
    assert lines[0].startswith(f"error: no space left on device writing {target} (0 B of it written; ")
    # no checkpoint is complete: the hint names none to resume from
    assert lines[1] == (
        f"  hint: free space on the file system of {out} and rerun the same command: no checkpoint of this run is "
        "complete, so it trains from the start"
    )
    assert not (out / LOCK_NAME).exists()


def test_os_errors_outside_a_run_are_one_line(capsys, tmp_path):
    def write_to_full_device(argv):
        with open("/dev/full", "w") as f:
            f.write("x")

    assert refusal(capsys, write_to_full_device, []) == [
        "error: No space left on device",
        f"  hint: {OS_ERROR_HINTS[errno.ENOSPC]}",
    ]
    assert refusal(capsys, lambda argv: open(tmp_path), []) == [
        f"error: Is a directory: {tmp_path}",
        "  hint: pass the file itself, not its directory",
    ]
    (tmp_path / "file").write_text("")
    assert refusal(capsys, lambda argv: os.makedirs(tmp_path / "file" / "sub"), [])[0] == (
        f"error: Not a directory: {tmp_path / 'file' / 'sub'}"
    )

    def refuse_connection(argv):
        raise ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused")

    with pytest.raises(ConnectionRefusedError):  # not a fault of a path: a traceback
        run_cli(refuse_connection, [])


def test_read_only_output_dir_is_refused_before_work(capsys, tiny_bert, tmp_path):
    with tmpfs(tmp_path / "ro", "ro,size=1m") as ro:
        lines = refusal(capsys, run_simcse.main, run_argv(tiny_bert, ro / "run"))
        assert lines == [
            f"error: --output_dir {ro / 'run'} cannot be written: {ro} is on a read-only file system",
            "  hint: choose an --output_dir on a writable file system",
        ]
        # a write the checks before the run cannot foresee is one line too
        assert refusal(capsys, lambda argv: os.makedirs(ro / "x"), []) == [
            f"error: Read-only file system: {ro / 'x'}",
            "  hint: choose a path on a writable file system",
        ]


def test_output_dir_that_is_a_file_is_refused_before_work(capsys, tiny_bert, tmp_path):
    path = tmp_path / "a_file"
    path.write_text("keep me")
    assert refusal(capsys, run_simcse.main, run_argv(tiny_bert, path)) == [
        f"error: --output_dir {path} exists and is not a directory",
        "  hint: choose another --output_dir, or move the file",
    ]
    assert refusal(capsys, run_simcse.main, run_argv(tiny_bert, path / "run"))[0] == (
        f"error: --output_dir {path / 'run'} goes through {path}, a file"
    )
    assert path.read_text() == "keep me"


@pytest.mark.parametrize("name", ["corpus", "corpus.txt"])
def test_train_file_that_is_a_directory_is_refused_before_work(capsys, tiny_bert, tmp_path, name):
    directory = tmp_path / name
    directory.mkdir()
    out = tmp_path / "out"
    lines = refusal(capsys, run_simcse.main, run_argv(tiny_bert, out, "--train_file", str(directory)))
    assert lines == [
        f"error: --train_file {directory} is a directory, not a corpus file",
        "  hint: pass a .txt (one sentence a line) or .csv file",
    ]
    (directory / "wiki.txt").write_text("a sentence\n")
    lines = refusal(capsys, run_simcse.main, run_argv(tiny_bert, out, "--train_file", str(directory)))
    assert lines[1] == f"  hint: pass a file in it, e.g. --train_file {directory / 'wiki.txt'}"
    assert_nothing_written(out)


def bound_by_permissions(command):
    """``command`` run so that permission bits bind it: as it is for a user other than root; as root,
    without the capabilities that override them (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH), which
    ``setpriv`` drops from what the command's process may hold."""
    if os.geteuid() != 0:
        return command
    if shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv (util-linux): permission bits do not bind")
    caps = "-dac_override,-dac_read_search"
    return ["setpriv", f"--bounding-set={caps}", f"--inh-caps={caps}", *command]


@pytest.mark.e2e
def test_a_cache_directory_this_user_may_not_write_is_one_line(tiny_bert, tmp_path):
    """A real EACCES (not foreseen by the checks before the run: the cache is written after the model
    loads), seen as a shell sees it: exit 2, the line and its hint last on stderr."""
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o555)
    out = tmp_path / "out"
    argv = train_argv(tiny_bert, out, "--cache_dir", str(locked / "cache"))
    command = bound_by_permissions([sys.executable, os.path.join(REPO, "run_simcse.py"), *argv])
    proc = subprocess.run(command, capture_output=True, text=True, cwd=REPO)
    if proc.stderr.startswith("setpriv:"):
        pytest.skip(f"setpriv may not drop capabilities here: {proc.stderr.strip()}")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert proc.stderr.strip().splitlines()[-2:] == [
        f"error: Permission denied: {locked / 'cache'}",
        f"  hint: {OS_ERROR_HINTS[errno.EACCES]}",
    ]
    assert os.listdir(locked) == []
    assert_nothing_written(out)


def test_a_cache_directory_that_is_a_file_is_one_line(capsys, tiny_bert, tmp_path):
    """A real EEXIST: the run creates its cache directory where a file is."""
    cache = tmp_path / "cache"
    cache.write_text("keep me")
    out = tmp_path / "out"
    assert refusal(capsys, run_simcse.main, train_argv(tiny_bert, out, "--cache_dir", str(cache))) == [
        f"error: File exists: {cache}",
        f"  hint: {OS_ERROR_HINTS[errno.EEXIST]}",
    ]
    assert cache.read_text() == "keep me"
    assert_nothing_written(out)
