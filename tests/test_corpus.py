"""What a run says about its corpus: the distinct sentences and the duplicate share (wiki1m's head
counted independently), the probability that a batch holds a sentence twice (against the
hypergeometric closed form and a seeded Monte Carlo), the real batch of a corpus smaller than the
global batch, and the model card's note when training ends before its first dev evaluation."""

import json
import logging
import math
import os
from fractions import Fraction

import numpy as np
import pytest
from scipy.stats import hypergeom

import run_simcse
from cse.data import CorpusStatistics, check_corpus, corpus_statistics, load_corpus
from cse.errors import CSEUsageError

from .conftest import SENTEVAL, WIKI_HEAD


@pytest.mark.parametrize("n, k, batch", [(100, 5, 10), (11915, 14, 64), (1000, 2, 999), (40, 40, 3), (500, 30, 64)])
def test_one_repeated_sentence_matches_the_hypergeometric_closed_form(n, k, batch):
    """A sentence k times among n lines, the rest once: a batch holds it twice when X >= 2,
    X ~ Hypergeometric(n, k, batch), the number of its copies drawn; P(X <= 1) in exact integers.
    (The float64 log-gamma terms, about 1e5 for n = 11,915, leave ~1e-9 relative error after 1 - P.)"""
    multiplicities = {k: 1} if k == n else {1: n - k, k: 1}
    at_most_one = Fraction(math.comb(n - k, batch) + k * math.comb(n - k, batch - 1), math.comb(n, batch))
    expected = float(1 - at_most_one)
    assert expected == pytest.approx(hypergeom.sf(1, n, k, batch), rel=1e-6)
    assert CorpusStatistics(n, multiplicities).repeat_probability(batch) == pytest.approx(expected, rel=1e-8, abs=1e-15)


def test_several_multiplicities_match_a_seeded_monte_carlo():
    multiplicities = {1: 40, 2: 6, 3: 2, 7: 1}
    lines = np.repeat(np.arange(sum(multiplicities.values())), [c for c, m in multiplicities.items() for _ in range(m)])
    n, batch, draws = len(lines), 6, 200_000
    rng = np.random.default_rng(0)
    batches = np.argsort(rng.random((draws, n)), axis=1)[:, :batch]  # each row: a batch without replacement
    drawn = np.sort(lines[batches], axis=1)
    share = np.mean((np.diff(drawn, axis=1) == 0).any(axis=1))
    p = CorpusStatistics(n, multiplicities).repeat_probability(batch)
    assert 0.1 < p < 0.9
    assert abs(share - p) < 4 * np.sqrt(p * (1 - p) / draws)


def test_a_corpus_smaller_than_the_batch_is_one_batch():
    assert CorpusStatistics(3, {1: 3}).repeat_probability(16) == 0.0
    assert CorpusStatistics(3, {1: 1, 2: 1}).repeat_probability(16) == 1.0


def test_wiki1m_head_counts_and_its_few_duplicates_warn_only_in_large_batches(caplog):
    with open(WIKI_HEAD, "rb") as f:
        raw = f.read()
    # 1,280,000 bytes: 11,914 complete lines and the start of the next, without a final newline, which
    # `wc -l` (it counts newlines) leaves out.
    assert (len(raw), raw.count(b"\n"), raw.endswith(b"\n")) == (1_280_000, 11_914, False)
    lines = raw.decode("utf-8").split("\n")
    assert len(lines) == 11_915 and all(line.strip() for line in lines)

    statistics = corpus_statistics(load_corpus(WIKI_HEAD))
    assert (statistics.sentences, statistics.distinct) == (11_915, len(set(lines))) == (11_915, 11_549)
    assert statistics.duplicate_share == pytest.approx(366 / 11_915)
    with caplog.at_level(logging.INFO, logger="cse.data"):
        check_corpus(statistics, 16, "head")
    assert "head: 11,549 distinct sentences of 11,915 (3.07% of the lines repeat another)" in caplog.text
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="cse.data"):
        check_corpus(statistics, 64, "head")
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "same sentence twice into 2.8% of batches of 64" in warning


def test_a_corpus_of_one_sentence_is_refused():
    with pytest.raises(CSEUsageError, match="holds 1 distinct sentence\\(s\\) in 2,000 lines"):
        check_corpus(CorpusStatistics(2000, {2000: 1}), 16, "same.txt")


@pytest.mark.e2e
def test_a_tiny_corpus_logs_its_batch_and_the_card_says_no_checkpoint_was_selected(tiny_bert, tmp_path, caplog):
    corpus = tmp_path / "three.txt"
    corpus.write_text("a man plays a guitar.\nthe cat sleeps.\nit rains in paris.\n")
    out = tmp_path / "run"
    with caplog.at_level(logging.INFO):
        run_simcse.main(
            ["--model_name_or_path", tiny_bert, "--train_file", str(corpus), "--output_dir", str(out)]
            + ["--per_device_train_batch_size", "3", "--max_steps", "4", "--eval_steps", "125"]
            + ["--senteval_data_dir", SENTEVAL, "--final_eval", "none", "--use_cpu", "true", "--report_to", "none"]
            + ["--disable_tqdm", "true"]
        )
    assert "contrastive batch: 3 sentences per step across 1 process(es), 2 in-batch negatives" in caplog.text
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    # the Trainer evaluates the last step too: one evaluation, nothing to select from
    note = (
        "training ended at step 4 with a single dev evaluation, at step 4 (scheduled every 125 steps), so no "
        "checkpoint was selected: the exported weights are step 4's, the last step"
    )
    assert any(w.startswith(note) for w in warnings)
    with open(out / "README.md", encoding="utf-8") as f:
        card = f.read()
    assert f"Model selection: {note}.\n" in card
    assert f"3 sentences from `{corpus}`, 3 of them distinct" in card
    with open(os.path.join(out, "run_args.json")) as f:
        assert json.load(f)["corpus"] == {"sentences": 3, "distinct": 3}
