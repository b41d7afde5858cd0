"""The reproduction scripts' shared launcher (scripts/lib.sh) with a stand-in ``accelerate``, and the
scripts' syntax and paper rows."""

import glob
import os
import re
import subprocess

import pytest

from cse.results import load_paper_results

from .conftest import REPO

SCRIPTS = sorted(glob.glob(os.path.join(REPO, "scripts", "*", "*.sh")))


def train(tmp_path, gpus, *args):
    fake = tmp_path / "bin"
    fake.mkdir(exist_ok=True)
    (fake / "accelerate").write_text('#!/usr/bin/env bash\necho "accelerate $*"\n')
    (fake / "accelerate").chmod(0o755)
    env = {**os.environ, "PATH": f"{fake}:{os.environ['PATH']}", "NUM_GPUS": str(gpus)}
    script = f"source scripts/lib.sh && train {' '.join(args)}"
    return subprocess.run(["bash", "-c", script], cwd=REPO, env=env, capture_output=True, text=True)


def test_train_splits_the_global_batch_over_the_processes(tmp_path):
    out = tmp_path / "run"
    proc = train(tmp_path, 4, "run_adcse.py", str(out), "64", "configs/adcse_bert_base.yaml", "--seed", "3")
    assert proc.returncode == 0, proc.stderr
    assert (
        proc.stdout.split()
        == (
            f"accelerate launch --num_processes 4 --multi_gpu run_adcse.py configs/adcse_bert_base.yaml --seed 3 "
            f"--output_dir {out} --per_device_train_batch_size 16"
        ).split()
    )
    one = train(tmp_path, 1, "run_simcse.py", str(out), "64")
    assert one.stdout.split()[:4] == ["accelerate", "launch", "--num_processes", "1"]
    assert "--multi_gpu" not in one.stdout


def test_train_refuses_a_batch_the_processes_do_not_divide_and_keeps_finished_runs(tmp_path):
    proc = train(tmp_path, 3, "run_adcse.py", str(tmp_path / "run"), "64")
    assert proc.returncode == 2 and "NUM_GPUS=3 does not divide the global batch of 64" in proc.stderr
    finished = tmp_path / "done"
    finished.mkdir()
    (finished / "cse_config.json").write_text("{}")
    proc = train(tmp_path, 1, "run_adcse.py", str(finished), "64")
    assert proc.returncode == 0 and proc.stdout == "" and "already trained" in proc.stderr


@pytest.mark.parametrize("script", SCRIPTS, ids=[os.path.relpath(s, REPO) for s in SCRIPTS])
def test_scripts_parse_and_name_existing_paper_rows(script):
    assert subprocess.run(["bash", "-n", script]).returncode == 0
    text = open(script, encoding="utf-8").read()
    rows = load_paper_results()
    # row ids: --paper_row arguments and the ids a script lists (file names such as configs/*.yaml aside)
    named = set(re.findall(r"--paper_row (\w+)", text)) | set(re.findall(r"\b((?:adcse|mixcse)_\w+)\b(?![./])", text))
    assert all(row in rows for row in named), named - set(rows)
