"""The SentEval readers on small fixture files written here."""

import numpy as np
import pytest

from cse.evaluation import SentEvalSuite, evaluate
from cse.evaluation.sts import cosine_scores, read_sick, read_sts_subset, read_stsb, score_sts_task
from cse.paths import MissingDataError


def write(path, text, bom=False):
    path.write_bytes((b"\xef\xbb\xbf" if bom else b"") + text.encode("utf-8"))
    return str(path)


def test_sts_subset_blank_gold_bom_and_missing_final_newline(tmp_path):
    inp = write(tmp_path / "in.txt", "A  man is\tA man was\nskip me\tplease\nTwo dogs .\t two  cats .", bom=True)
    gold = write(tmp_path / "gs.txt", "4.5\n\n1.25", bom=True)  # blank gold -> pair dropped; no final newline
    pairs = read_sts_subset(inp, gold)
    assert pairs.sentences1 == ["A man is", "Two dogs ."]  # BOM gone, whitespace normalised as SentEval's split/join
    assert pairs.sentences2 == ["A man was", "two cats ."]
    np.testing.assert_array_equal(pairs.scores, [4.5, 1.25])


def test_sts_subset_rejects_a_tab_inside_a_sentence_and_mismatched_files(tmp_path):
    inp = write(tmp_path / "in.txt", "one\ttwo\nthree\tfour\tfive\n")
    gold = write(tmp_path / "gs.txt", "1\n2\n")
    with pytest.raises(ValueError, match=r"in.txt:2: expected 2 tab-separated sentences, found 3"):
        read_sts_subset(inp, gold)
    with pytest.raises(ValueError, match="has 2 lines but"):
        read_sts_subset(inp, write(tmp_path / "short.txt", "1\n"))
    with pytest.raises(ValueError, match="not a number"):
        read_sts_subset(write(tmp_path / "ok.txt", "a\tb\n"), write(tmp_path / "bad.txt", "x\n"))


def test_stsb_takes_columns_6_and_7_and_ignores_trailing_metadata(tmp_path):
    rows = [
        "main-captions\tMSRvid\t2012test\t0001\t5.000\tA plane\tAn  air plane",
        # extra columns, as in the official release
        "main-news\theadlines\t2016\t0002\t0.5\tx y\tz\tsource-a\tsource-b",
    ]
    pairs = read_stsb(write(tmp_path / "sts-dev.csv", "\n".join(rows), bom=True))
    assert pairs.sentences1 == ["A plane", "x y"]
    assert pairs.sentences2 == ["An air plane", "z"]
    np.testing.assert_array_equal(pairs.scores, [5.0, 0.5])
    with pytest.raises(ValueError, match="at least 7"):
        read_stsb(write(tmp_path / "bad.csv", "a\tb\tc\n"))


def test_sick_skips_header(tmp_path):
    text = "pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment\n1\tA b\tC  d\t3.6\tNEUTRAL\n"
    pairs = read_sick(write(tmp_path / "SICK_trial.txt", text))
    assert (pairs.sentences1, pairs.sentences2, list(pairs.scores)) == (["A b"], ["C d"], [3.6])


def test_all_setting_differs_from_mean_of_subsets():
    # Each subset is ranked perfectly (per-subset Spearman 1) but on its own scale, so one Spearman
    # over the concatenation ("all") is lower than the mean of subsets.
    from scipy.stats import spearmanr

    from cse.evaluation.sts import STSPairs

    cosines = {"s": [0.1, 0.2, 0.3], "t": [0.0, 0.05, 0.08]}
    golds = {"s": [1.0, 2.0, 3.0], "t": [3.5, 4.0, 5.0]}
    emb = {"anchor": np.array([1.0, 0.0])}
    data = {}
    for name in cosines:
        second = [f"{name}{i}" for i in range(3)]
        for sent, c in zip(second, cosines[name]):
            emb[sent] = np.array([c, np.sqrt(1 - c * c)])
        data[name] = STSPairs(["anchor"] * 3, second, np.array(golds[name]))
    result = score_sts_task(data, emb)
    expected_all = spearmanr(cosines["s"] + cosines["t"], golds["s"] + golds["t"])[0]
    assert result["spearman"] == pytest.approx(expected_all) and expected_all < 0.9
    assert result["spearman_mean"] == pytest.approx(1.0) and result["spearman_wmean"] == pytest.approx(1.0)
    assert result["n"] == 6 and result["subsets"]["t"]["n"] == 3


def test_cosine_of_a_zero_vector_is_zero():
    sims = cosine_scores(np.array([[1.0, 0.0], [0.0, 0.0]]), np.array([[1.0, 1.0], [1.0, 0.0]]))
    np.testing.assert_allclose(sims, [2**-0.5, 0.0])  # SentEval's nan_to_num


def test_missing_data_is_named(tmp_path, monkeypatch):
    monkeypatch.delenv("CSE_DATA_DIR", raising=False)
    with pytest.raises(MissingDataError, match="CSE_DATA_DIR is not set"):
        SentEvalSuite("sts", "dev")
    with pytest.raises(MissingDataError, match="nowhere"):
        SentEvalSuite("sts", "dev", senteval_data_dir=str(tmp_path / "nowhere"))
    (tmp_path / "STS" / "STSBenchmark").mkdir(parents=True)
    with pytest.raises(MissingDataError, match="sts-dev.csv"):
        SentEvalSuite("sts", "dev", senteval_data_dir=str(tmp_path))


def test_suite_scores_a_perfect_and_an_anti_encoder(tmp_path):
    # A fixture data dir where similarity is a known function of the sentence: an encoder that maps
    # each sentence to the gold-consistent angle scores Spearman 1, the reversed one -1.
    (tmp_path / "STS" / "STSBenchmark").mkdir(parents=True)
    (tmp_path / "SICK").mkdir()
    golds = [0.5, 2.0, 3.5, 5.0]
    stsb = "\n".join(f"g\tx\ty\t{i}\t{g}\tleft\tright {i}" for i, g in enumerate(golds))
    write(tmp_path / "STS" / "STSBenchmark" / "sts-dev.csv", stsb)
    sick = "id\ta\tb\tscore\tlabel\n" + "\n".join(f"{i}\tleft\tright {i}\t{g}\tX" for i, g in enumerate(golds))
    write(tmp_path / "SICK" / "SICK_trial.txt", sick)

    def encoder(reverse):
        def encode(sentences):
            out = []
            for s in sentences:
                i = int(s.split()[1]) if s != "left" else None
                angle = 0.0 if i is None else (i if reverse else 3 - i) * 0.3
                out.append([np.cos(angle), np.sin(angle)])
            return np.array(out)

        return encode

    report = evaluate(encoder(False), "sts", "dev", senteval_data_dir=str(tmp_path))
    assert report["scores"] == {"STS-B": 100.0, "SICK-R": 100.0, "Avg.": 100.0}
    assert report["tasks"]["STSBenchmark"]["n"] == 4
    reversed_scores = evaluate(encoder(True), "sts", "dev", senteval_data_dir=str(tmp_path))["scores"]
    assert reversed_scores["STS-B"] == pytest.approx(-100.0)
