"""``python -m cse.results --runs``: many runs and seeds as paper-style tables beside paper rows."""

import json

import numpy as np
import pytest

from cse import results
from cse.errors import CSEUsageError

STS = ["STS12", "STS13", "STS14", "STS15", "STS16", "STS-B", "SICK-R"]
TRANSFER = ["MR", "CR", "SUBJ", "MPQA", "SST2", "TREC", "MRPC"]


def write_runs(root):
    """Two methods x three seeds; simcse also has transfer results. Returns the values written."""
    written = {}
    for method, base in (("simcse", 70.0), ("mixcse", 72.0)):
        for seed in (1, 2, 3):
            run = root / f"{method}-seed{seed}"
            run.mkdir()
            sts = {c: base + i + seed * 0.5 + (seed == 3) * i * 0.1 for i, c in enumerate(STS)}
            sts["Avg."] = float(np.mean(list(sts.values())))
            (run / "sts_test_results.json").write_text(json.dumps({"scores": sts}))
            written.setdefault((method, "sts"), []).append(sts)
            if method == "simcse":
                transfer = {c: 80.0 + i - seed for i, c in enumerate(TRANSFER)}
                transfer["Avg."] = float(np.mean(list(transfer.values())))
                report = {"scores": transfer, "score_groups": {"transfer": transfer}}
                (run / "transfer_test_results.json").write_text(json.dumps(report))
                written.setdefault((method, "transfer"), []).append(transfer)
    return written


def cells(line):
    return [c.strip() for c in line.strip().strip("|").split("|")]


def test_runs_and_seeds_as_mean_and_std_beside_the_paper(tmp_path, capsys):
    written = write_runs(tmp_path)
    for run in tmp_path.iterdir():  # what the Trainer writes beside them holds no scores
        (run / "train_results.json").write_text(json.dumps({"train_loss": 1.0, "epoch": 1.0}))
    runs = sorted(str(p) for p in tmp_path.iterdir())
    results.main(["--runs", *runs, "--paper_row", "simcse=simcse_unsup_bert_base"])
    out = capsys.readouterr().out
    sts_part = out[: out.index("Transfer tasks")]
    lines = {cells(line)[0]: cells(line)[1:] for line in sts_part.splitlines() if line.startswith("| ")}
    paper = results.load_paper_results()["simcse_unsup_bert_base"]["scores"]
    sts_columns = [*STS, "Avg."]
    for method in ("simcse", "mixcse"):
        row = lines[f"{method} (3 seeds)"][: len(sts_columns)]
        for cell, column in zip(row, sts_columns):
            values = [seed[column] for seed in written[method, "sts"]]
            mean = sum(values) / 3
            std = (sum((v - mean) ** 2 for v in values) / 2) ** 0.5  # sample standard deviation
            assert cell == f"{mean:.2f} ± {std:.2f}", (method, column)
    # simcse: 70 + i + {0.5, 1, 1.5 + 0.1 i} -> STS12 mean 71.00, std 0.50; the difference is the mean's
    assert lines["simcse (3 seeds)"][0] == "71.00 ± 0.50"
    assert lines["simcse - paper"][0] == f"{71.0 - paper['STS12']:.2f}"
    assert "mixcse - paper" not in lines
    # the transfer table: simcse only (mixcse has no transfer results), 80 + i - seed -> MR 78.00 ± 1.00
    assert out.index("Transfer tasks") > out.index("STS (Spearman")
    transfer_part = out[out.index("Transfer tasks") :]
    assert "| simcse (3 seeds) | 78.00 ± 1.00 | 79.00 ± 1.00 |" in transfer_part
    assert "mixcse" not in transfer_part


def test_single_group_bare_row_and_errors(tmp_path, capsys):
    write_runs(tmp_path)
    seeds = [str(tmp_path / f"mixcse-seed{s}" / "sts_test_results.json") for s in (1, 2, 3)]
    results.main(["--runs", *seeds, "--paper_row", "simcse_unsup_bert_base", "--name", "MixCSE"])
    assert "| MixCSE - paper |" in capsys.readouterr().out
    with pytest.raises(SystemExit):  # two groups need GROUP=ROW
        results.main(["--runs", str(tmp_path / "simcse-seed1"), *seeds, "--paper_row", "simcse_unsup_bert_base"])
    with pytest.raises(SystemExit):
        results.main(["--runs", *seeds, "--paper_row", "mixcse=no_such_row"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no \\*_results.json"):
        results.collect_runs([str(tmp_path / "empty")])


def test_missing_results_are_marked_never_averaged_over_fewer_seeds(tmp_path, capsys):
    write_runs(tmp_path)
    seeds = [str(tmp_path / f"mixcse-seed{s}" / "sts_test_results.json") for s in (1, 2, 3, 4)]  # seed 4 failed
    results.main([*seeds, "--paper_row", "simcse_unsup_bert_base", "--name", "MixCSE", "--missing", "mark"])
    lines = {cells(line)[0]: cells(line)[1:] for line in capsys.readouterr().out.splitlines() if line.startswith("| ")}
    assert lines["MixCSE (1 of 4 missing)"] == ["missing"] * 8 and lines["difference"] == ["missing"] * 8
    # --runs: the group with a missing seed, and a group whose only run is missing, are marked; the others not
    runs = [str(tmp_path / f"mixcse-seed{s}") for s in (1, 2, 3, 4)] + [str(tmp_path / "simcse-seed1")]
    results.main(["--runs", *runs, str(tmp_path / "adcse"), "--missing", "mark"])
    sts = capsys.readouterr().out.split("Transfer tasks")[0]
    lines = {cells(line)[0]: cells(line)[1:] for line in sts.splitlines() if line.startswith("| ")}
    assert lines["mixcse (1 of 4 seeds missing)"] == ["missing"] * 8 and lines["adcse (missing)"] == ["missing"] * 8
    assert lines["simcse"][0] == "70.50"  # seed 1 alone: 70 + 0 + 0.5
    # a row per JSON
    results.main([seeds[0], seeds[3], "--name", "one", "four", "--missing", "mark"])
    lines = {cells(line)[0]: cells(line)[1:] for line in capsys.readouterr().out.splitlines() if line.startswith("| ")}
    assert lines["four"] == ["missing"] * 8 and lines["one"][0] == "72.50"  # mixcse: 72 + 0 + 0.5
    with pytest.raises(CSEUsageError, match="result JSON not found"):  # without --missing mark: refused
        results.main([seeds[0], seeds[3]])
