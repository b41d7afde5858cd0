"""The reproduction scripts' shared launcher (scripts/lib.sh) with a stand-in ``accelerate``, and the
scripts' syntax and paper rows."""

import glob
import os
import re
import subprocess

import pytest

from cse.results import load_paper_results

from .conftest import REPO, fake_tools, launches

SCRIPTS = sorted(glob.glob(os.path.join(REPO, "scripts", "*", "*.sh")))


def train(tmp_path, gpus, *args):
    env, _ = fake_tools(tmp_path)
    script = f"source scripts/lib.sh && train {' '.join(args)}"
    return subprocess.run(
        ["bash", "-c", script], cwd=REPO, env={**env, "NUM_GPUS": str(gpus)}, capture_output=True, text=True
    )


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
    one = train(tmp_path, 1, "run_simcse.py", str(tmp_path / "one"), "64")
    assert one.stdout.split()[:4] == ["accelerate", "launch", "--num_processes", "1"]
    assert "--multi_gpu" not in one.stdout


def test_train_refuses_a_batch_the_processes_do_not_divide_and_keeps_finished_runs(tmp_path):
    proc = train(tmp_path, 3, "run_adcse.py", str(tmp_path / "run"), "64")
    assert proc.returncode == 2 and "NUM_GPUS=3 does not divide the global batch of 64" in proc.stderr
    out = str(tmp_path / "done")
    assert train(tmp_path, 1, "run_adcse.py", out, "64", "--seed", "1").returncode == 0
    again = train(tmp_path, 2, "run_adcse.py", out, "64", "--seed", "1")  # same run, other GPU count
    assert again.returncode == 0 and again.stdout == "" and "already trained" in again.stderr
    other = train(tmp_path, 1, "run_adcse.py", out, "64", "--seed", "2")
    assert other.returncode == 2 and "trained with other arguments" in other.stderr


def test_adcse_scripts_pass_each_runs_settings(tmp_path):
    runs, printed = launches(tmp_path / "t2", "scripts/adcse/table2_ablations.sh")
    flags = [[a for a in run if a.startswith("--no_")] for run in runs]
    assert flags == [
        [],
        ["--no_adversaries"],
        ["--no_untied_dual_encoder"],
        ["--no_adversaries", "--no_untied_dual_encoder"],
    ]
    assert all(run[4:6] == ["run_adcse.py", "configs/adcse_bert_base.yaml"] for run in runs)
    # each row beside its own paper row
    assert re.findall(r"--paper_row (\w+)", printed) == [
        "adcse_bert_base",
        "adcse_bert_base_no_adversaries",
        "adcse_bert_base_no_untied_dual_encoder",
        "adcse_bert_base_no_both",
    ]
    assert all(row in load_paper_results() for row in re.findall(r"--paper_row (\w+)", printed))
    runs, _ = launches(tmp_path / "f4a", "scripts/adcse/fig4a_batch_size.sh")
    adcse = [run for run in runs if "run_adcse.py" in run]
    assert [(r[r.index("--num_adversaries") + 1], r[-1]) for r in adcse] == [(b, b) for b in ("32", "64", "96", "128")]
    assert [r[-1] for r in runs if "run_simcse.py" in r] == ["32", "64", "96", "128"]
    runs, _ = launches(tmp_path / "f4b", "scripts/adcse/fig4b_temperature.sh")
    assert [r[r.index("--temp") + 1] for r in runs] == ["0.01", "0.05", "0.1", "0.2", "0.5"]
    runs, printed = launches(tmp_path / "t1", "scripts/adcse/table1_main.sh", "--variant", "paper")
    assert runs[0][-6:-4] == ["--variant", "paper"] and "--paper_row adcse_bert_base" in printed


@pytest.mark.parametrize("script", SCRIPTS, ids=[os.path.relpath(s, REPO) for s in SCRIPTS])
def test_scripts_parse_and_name_existing_paper_rows(script):
    assert subprocess.run(["bash", "-n", script]).returncode == 0
    text = open(script, encoding="utf-8").read()
    rows = load_paper_results()
    named = set(re.findall(r"--paper_row (\w+)", text))
    assert all(row in rows for row in named), named - set(rows)
