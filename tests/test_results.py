import json

import numpy as np
import pytest

from cse import results


def test_paper_rows_are_consistent():
    rows = results.load_paper_results()
    simcse = rows["simcse_unsup_bert_base"]["scores"]
    assert simcse == {
        "STS12": 68.40,
        "STS13": 82.41,
        "STS14": 74.38,
        "STS15": 80.91,
        "STS16": 78.56,
        "STS-B": 76.85,
        "SICK-R": 72.23,
        "Avg.": 76.25,
    }
    for row_id, row in rows.items():
        assert {"paper", "table", "model"} <= set(row), row_id
        if "Avg." not in row["scores"]:  # column sets without an average (e.g. STS-B dev, ANLI)
            continue
        values = [v for k, v in row["scores"].items() if k != "Avg."]
        # a typo in a transcribed row shows as an average that no longer matches its cells
        # (rows of averages only, such as SG-BERT's Table 5, have no cells to check it against)
        if values:
            # a row marked printed_avg_differs is the paper's own rounding (checked against its text)
            tolerance = 0.02 if row.get("printed_avg_differs") else 0.01
            assert np.mean(values) == pytest.approx(row["scores"]["Avg."], abs=tolerance), row_id


def test_markdown_table_and_comparison(tmp_path, capsys):
    table = results.markdown_table({"a": {"x": 1.0, "y": 2.345}, "b": {"x": 3.0}}, ["x", "y"])
    assert table.splitlines() == ["| Model | x | y |", "|---|---:|---:|", "| a | 1.00 | 2.35 |", "| b | 3.00 | - |"]
    ours = {
        "STS12": 70.0,
        "STS13": 80.0,
        "STS14": 75.0,
        "STS15": 81.0,
        "STS16": 78.0,
        "STS-B": 77.0,
        "SICK-R": 71.0,
        "Avg.": 76.0,
    }
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"scores": ours}))
    results.main([str(path), "--paper_row", "simcse_unsup_bert_base"])
    lines = capsys.readouterr().out.splitlines()[2:]
    assert lines[2].startswith("| ours | 70.00 | 80.00 |")
    assert "Table 5: Unsup-SimCSE-BERT-base | 68.40 | 82.41" in lines[3]
    assert lines[4] == "| difference | 1.60 | -2.41 | 0.62 | 0.09 | -0.56 | 0.15 | -1.23 | -0.25 |"


def test_several_results_in_one_table(tmp_path, capsys):
    for name, value in (("a", 70.0), ("b", 71.5)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "r.json").write_text(json.dumps({"scores": {"STS12": value, "Avg.": value + 1}}))
    paths = [str(tmp_path / "a" / "r.json"), str(tmp_path / "b" / "r.json")]
    results.main(paths)
    assert capsys.readouterr().out.splitlines()[2:] == ["| a | 70.00 | 71.00 |", "| b | 71.50 | 72.50 |"]
    results.main([*paths, "--name", "bs 32", "bs 64"])
    assert capsys.readouterr().out.splitlines()[3] == "| bs 64 | 71.50 | 72.50 |"
    with pytest.raises(SystemExit):
        results.main([*paths, "--paper_row", "simcse_unsup_bert_base", "--name", "a", "b"])


def test_seeds_beside_the_paper_row_as_mean_and_sample_std(tmp_path, capsys):
    seeds = [{"STS12": 68.0, "Avg.": 75.0}, {"STS12": 70.0, "Avg.": 76.0}, {"STS12": 69.0, "Avg.": 80.0}]
    paths = []
    for i, scores in enumerate(seeds):
        paths.append(str(tmp_path / f"seed{i}.json"))
        (tmp_path / f"seed{i}.json").write_text(json.dumps({"scores": scores}))
    results.main([*paths, "--paper_row", "simcse_unsup_bert_base"])
    lines = capsys.readouterr().out.splitlines()
    # STS12: mean 69, sample std 1; Avg.: mean 77, sample std sqrt(((-2)^2 + (-1)^2 + 3^2) / 2) = sqrt(7)
    assert lines[2] == "| Model | STS12 | Avg. |"
    assert lines[4] == f"| ours (3 seeds) | 69.00 ± 1.00 | 77.00 ± {7**0.5:.2f} |"
    assert lines[6] == "| difference | 0.60 | 0.75 |"
    assert results.aggregate_seeds(seeds[:1]) == seeds[0]
    with pytest.raises(ValueError):
        results.aggregate_seeds([])


def test_mteb_prints_the_runs_mteb_table_beside_the_sentEval_one(tmp_path, capsys):
    """--mteb: each run folder's mteb_test_results.json, seeds as mean ± std (hand-computed), a run
    without them missing: an MTEB column in the SentEval table, then the MTEB table of every task."""

    def run(name, sts, mteb=None):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "sts_test_results.json").write_text(json.dumps({"scores": {"STS12": sts, "Avg.": sts}}))
        if mteb is not None:
            scores = {"STS12": mteb, "SICK-R": mteb + 2, "Avg.": mteb + 1}
            (folder / "mteb_test_results.json").write_text(
                json.dumps({"scores": scores, "score_groups": {"mteb": scores}})
            )
        return str(folder)

    runs = [run("a-seed1", 70.0, 71.0), run("a-seed2", 72.0, 73.0), run("b", 60.0)]
    results.main(["--runs", *runs, "--missing", "mark"])
    plain = capsys.readouterr().out
    results.main(["--runs", *runs, "--missing", "mark", "--mteb"])
    out = capsys.readouterr().out
    assert "MTEB" not in plain
    assert out == (
        "STS (Spearman x 100)\n\n"
        "| Model | STS12 | Avg. | MTEB Avg. |\n|---|---:|---:|---:|\n"
        "| a (2 seeds) | 71.00 ± 1.41 | 71.00 ± 1.41 | 73.00 ± 1.41 |\n"
        "| b | 60.00 | 60.00 | missing |\n"
        f"\n{results.MTEB_TITLE}\n\n"
        "| Model | STS12 | SICK-R | Avg. |\n|---|---:|---:|---:|\n"
        "| a (2 seeds) | 72.00 ± 1.41 | 74.00 ± 1.41 | 73.00 ± 1.41 |\n"
        "| b (missing) | missing | missing | missing |\n"
    )
    # beside a paper's row, which reports no MTEB score
    results.main(["--runs", *runs[:2], "--mteb", "--paper_row", "a=vadvcse_simcse_bert_base"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[2].endswith("| Avg. | MTEB Avg. |") and lines[4].endswith("| 73.00 ± 1.41 |")
    assert lines[5].startswith("| paper, ") and lines[5].endswith("| - |")
    # the JSONs of a table are their runs too
    results.main([f"{runs[0]}/sts_test_results.json", "--mteb"])
    assert "| a | 71.00 | 73.00 | 72.00 |" in capsys.readouterr().out


def test_mteb_beside_a_paper_row_as_the_table_scripts_print_it(tmp_path, capsys):
    """The table scripts' form (result JSONs, one --paper_row, one --name) with --mteb: the STS table
    gains the runs' MTEB average (the mean over the seeds, by hand: (71 + 73) / 2), '-' in the paper's
    and the difference's rows; the MTEB table's row carries the --name; a run without MTEB results
    is refused before any table is printed."""
    jsons = []
    for seed, mteb in ((1, 71.0), (2, 73.0)):
        folder = tmp_path / f"esim-seed{seed}"
        folder.mkdir()
        (folder / "sts_test_results.json").write_text(json.dumps({"scores": {"STS12": 60.0, "Avg.": 60.0}}))
        scores = {"STS12": mteb, "Avg.": mteb}
        (folder / "mteb_test_results.json").write_text(json.dumps({"scores": scores, "score_groups": {"mteb": scores}}))
        jsons.append(str(folder / "sts_test_results.json"))
    argv = [*jsons, "--paper_row", "esimcse_bert_base", "--name", "ours, BERT-base", "--mteb"]
    results.main(argv)
    lines = capsys.readouterr().out.splitlines()
    assert lines[2] == "| Model | STS12 | Avg. | MTEB Avg. |"
    assert lines[4] == "| ours, BERT-base | 60.00 ± 0.00 | 60.00 ± 0.00 | 72.00 ± 1.41 |"
    assert lines[5].startswith("| paper, ") and lines[5].endswith("| 73.40 | 78.27 | - |")
    assert lines[6] == "| difference | -13.40 | -18.27 | - |"
    assert "| ours, BERT-base (2 seeds) | 72.00 ± 1.41 | 72.00 ± 1.41 |" in lines
    (tmp_path / "esim-seed2" / "mteb_test_results.json").unlink()
    with pytest.raises(results.CSEUsageError, match="mteb_test_results.json"):
        results.main(argv)
    assert capsys.readouterr().out == ""


def test_published_prints_every_methods_sts_rows_in_one_table(capsys):
    """``--published``: one table whose rows are the YAML's full STS rows with their source; every
    method of the package has a row there or is named, with the reason, below the table."""
    import yaml

    from cse import registry

    results.main(["--published"])
    out = capsys.readouterr().out
    table = [line for line in out.splitlines() if line.startswith("| ")]
    assert table[0] == "| Model | STS12 | STS13 | STS14 | STS15 | STS16 | STS-B | SICK-R | Avg. | Source |"
    # two rows typed from the papers (SimCSE Table 5, MixCSE Table 1), not from the YAML
    simcse = "| Unsup-SimCSE-BERT-base | 68.40 | 82.41 | 74.38 | 80.91 | 78.56 | 76.85 | 72.23 | 76.25 |"
    mixcse = "| MixCSE-BERT-base (mean of 5 runs) | 71.71 | 83.14 | 75.49 | 83.64 | 79.00 | 78.48 | 72.19 | 77.66 |"
    assert f"{simcse} Gao, Yao and Chen, EMNLP 2021, Table 5 |" in table
    assert f"{mixcse} Zhang et al., AAAI 2022, Table 1 |" in table
    with open(results.PAPER_RESULTS, encoding="utf-8") as f:
        data = yaml.safe_load(f)
    sts_rows = {row_id: row for row_id, row in data["rows"].items() if row["columns"] == "sts"}
    assert len(table) == 1 + len(sts_rows)  # the header, then a row each
    for record in registry.records():
        has_row = any(row_id.startswith(f"{record.name}_") for row_id in sts_rows)
        named = f"- {record.display_name}: no row recorded; " in out
        assert has_row != named, record.name  # one or the other, never both
    with pytest.raises(SystemExit) as refused:
        results.main(["--published", "r.json"])
    assert refused.value.code == 2
