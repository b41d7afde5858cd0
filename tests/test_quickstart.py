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
