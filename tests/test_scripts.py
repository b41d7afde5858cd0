"""The reproduction scripts' shared launcher (scripts/lib.sh) with a stand-in ``accelerate``, and the
scripts' syntax and paper rows."""

import glob
import os
import re
import subprocess

import pytest

from cse.results import load_paper_results

from .conftest import REPO, fake_tools, launches, table_script

SCRIPTS = sorted(glob.glob(os.path.join(REPO, "scripts", "*", "*.sh")))


def train(tmp_path, gpus, *args):
    """A table of the one run ``train ARGS`` with the stand-in launchers, on ``gpus`` processes."""
    env, _ = fake_tools(tmp_path)
    script = table_script(tmp_path / "table.sh", "train " + " ".join(args))
    return subprocess.run(
        ["bash", script], cwd=REPO, env={**env, "NUM_GPUS": str(gpus)}, capture_output=True, text=True
    )


def launched(tmp_path):
    log = tmp_path / "launch.log"
    return log.read_text().splitlines() if log.exists() else []


def test_train_splits_the_global_batch_over_the_processes(tmp_path):
    out = tmp_path / "run"
    proc = train(tmp_path, 4, "run_adcse.py", str(out), "64", "configs/adcse_bert_base.yaml", "--seed", "3")
    assert proc.returncode == 0, proc.stderr
    assert (
        launched(tmp_path)[0].split()
        == (
            f"accelerate launch --num_processes 4 --multi_gpu run_adcse.py configs/adcse_bert_base.yaml --seed 3 "
            f"--output_dir {out} --per_device_train_batch_size 16"
        ).split()
    )
    # the run's output is its log, in its directory
    assert "accelerate launch --num_processes 4" in (out / "_logs" / "train.log").read_text()
    train(tmp_path / "one", 1, "run_simcse.py", str(tmp_path / "one" / "run"), "64")
    assert launched(tmp_path / "one")[0].split()[:4] == ["accelerate", "launch", "--num_processes", "1"]
    assert "--multi_gpu" not in launched(tmp_path / "one")[0]


def test_train_refuses_a_batch_the_processes_do_not_divide_and_keeps_finished_runs(tmp_path):
    proc = train(tmp_path, 3, "run_adcse.py", str(tmp_path / "run"), "64")
    assert proc.returncode == 2 and proc.stderr.startswith("error: 3 processes a run do not divide the global batch")
    assert len(proc.stderr.strip().splitlines()) == 2 and not (tmp_path / "run").exists()
    out = str(tmp_path / "done")
    assert train(tmp_path, 1, "run_adcse.py", out, "64", "--seed", "1").returncode == 0
    again = train(tmp_path, 2, "run_adcse.py", out, "64", "--seed", "1")  # same run, other GPU count: kept
    assert again.returncode == 0 and len(launched(tmp_path)) == 1
    other = train(tmp_path, 1, "run_adcse.py", out, "64", "--seed", "2")
    assert other.returncode == 2 and "holds a run trained with other arguments" in other.stderr
    assert len(launched(tmp_path)) == 1
    # a finished run with no record of its launch (its sweep killed outright under a version that
    # recorded it only once the run ended): refused, never relaunched; the hint's command records it
    os.remove(os.path.join(out, "_logs", "launch_args.txt"))
    unknown = train(tmp_path, 1, "run_adcse.py", out, "64", "--seed", "1")
    assert unknown.returncode == 2 and len(launched(tmp_path)) == 1
    error, hint = unknown.stderr.strip().splitlines()
    assert error == f"error: {out} holds a finished run with no record of the arguments it was launched with " + (
        f"({out}/_logs/launch_args.txt is missing)"
    )
    record = hint.split("record that: ", 1)[1].split("; else delete it", 1)[0]
    subprocess.run(["bash", "-c", record], check=True)
    kept = train(tmp_path, 1, "run_adcse.py", out, "64", "--seed", "1")
    assert kept.returncode == 0, kept.stderr
    assert len(launched(tmp_path)) == 1


@pytest.mark.e2e  # launches processes or sweeps that read the run scripts' parsers (torch)
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
    if text.startswith("#!"):  # a table: from the repository root it hands itself to the sweep driver
        assert re.search(r'^cd "\$\(dirname "\$0"\)/\.\./\.\."\nsource scripts/(lib|\w+/common)\.sh$', text, re.M)
    rows = load_paper_results()
    named = set(re.findall(r"--paper_row (\w+)", text))
    assert all(row in rows for row in named), named - set(rows)
