"""The quickstart's before/after table: ``python -m cse.results --difference``."""

import json

import pytest

from cse.results import main as results_main


def write(path, scores):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"scores": scores}))
    return str(path)


def test_difference_puts_two_runs_side_by_side(tmp_path, capsys):
    base = write(tmp_path / "base" / "sts_test_results.json", {"STS12": 72.37, "STS-B": 82.03, "Avg.": 77.2})
    # a column only one side has is left out; the trained model's column order is the first's
    trained = write(tmp_path / "run" / "sts_test_results.json", {"Avg.": 78.0, "STS12": 70.0, "STS-B": 84.5, "X": 1})
    results_main(["--difference", base, trained, "--name", "all-MiniLM-L6-v2", "+ SimCSE"])
    assert capsys.readouterr().out.splitlines() == [
        "| Model | STS12 | STS-B | Avg. |",
        "|---|---:|---:|---:|",
        "| all-MiniLM-L6-v2 | 72.37 | 82.03 | 77.20 |",
        "| + SimCSE | 70.00 | 84.50 | 78.00 |",
        "| difference | -2.37 | 2.47 | 0.80 |",
    ]
    results_main(["--difference", base, trained])  # rows named by the runs' folders
    assert capsys.readouterr().out.splitlines()[2:4] == [
        "| base | 72.37 | 82.03 | 77.20 |",
        "| run | 70.00 | 84.50 | 78.00 |",
    ]


def test_difference_needs_two_jsons(tmp_path, capsys):
    one = write(tmp_path / "a" / "r.json", {"STS12": 1.0})
    for argv in (["--difference", one], ["--difference", one, one, one], ["--difference", one, one, "--runs"]):
        with pytest.raises(SystemExit) as error:
            results_main(argv)
        assert error.value.code == 2
    assert "--difference compares two result JSONs" in capsys.readouterr().err


@pytest.mark.e2e  # launches processes that import torch
def test_only_an_earlier_quick_start_s_results_are_removed(tmp_path):
    """scripts/quickstart.sh starts afresh: it removes result/quickstart only where it is a run of this
    package (marked run_args.json) and result/quickstart-base only where it holds the base model's
    results alone; a folder of the user's stops it before any work, and nothing is removed."""
    import subprocess
    import sys

    from cse.run_names import RUN_FORMAT, WRITTEN_BY_KEY

    from .conftest import REPO

    def check(run, base):
        argv = [sys.executable, f"{REPO}/scripts/earlier_quickstart.py", str(run), str(base)]
        return subprocess.run(argv, capture_output=True, text=True)

    run, base = tmp_path / "quickstart", tmp_path / "quickstart-base"
    assert check(run, base).returncode == 0 and check(run, base).stdout == ""  # nothing there yet
    run.mkdir()
    with open(f"{REPO}/tests/fixtures/run_78ca14f.json", encoding="utf-8") as f:
        settings = json.load(f)["run_args"]  # a run's settings, as it records them
    settings[WRITTEN_BY_KEY] = {"package": "cse", "format": RUN_FORMAT}
    (run / "run_args.json").write_text(json.dumps(settings))
    write(base / "sts_test_results.json", {"STS12": 1.0})
    said = check(run, base)
    assert said.returncode == 0 and said.stdout == f"removing the earlier quick start's {run} and {base}\n"
    (base / "notes.txt").write_text("mine")
    refused = check(run, base)
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr.splitlines() == [
        f"error: {base} holds files that are not an earlier quick start's",
        "hint: move them away (the quick start writes its run and results there), then rerun",
    ]
    (base / "notes.txt").unlink()
    (run / "run_args.json").write_text(json.dumps({"my": "settings"}))  # a user's file of that name
    assert check(run, base).stderr.startswith(f"error: {run} holds files")
    assert (run / "run_args.json").exists() and (base / "sts_test_results.json").exists()
