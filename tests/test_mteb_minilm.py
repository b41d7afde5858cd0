"""``senteval_eval.py --protocol both`` on a real trained encoder, all-MiniLM-L6-v2 (the PyPI package),
offline (``conftest.minilm_both``, run once with tests/test_senteval_minilm.py): mteb's STS tasks
built from the SentEval files give the model's published MTEB scores and our SentEval "all"
figures; SICK-R differs by what is scored, and our evaluator on the pairs MTEB scores gives MTEB's
figure."""

import json

import mteb
import pytest
import yaml

from cse.evaluation.mteb_protocol import local_pairs
from cse.evaluation.sts import score_sts_task
from cse.modeling import load_model

from .conftest import MINILM_MTEB as PUBLISHED
from .conftest import SENTEVAL

# Whole evaluations: SentEval's seven STS test sets, then mteb's seven tasks (27,372 encodings).
pytestmark = pytest.mark.e2e

SENTEVAL_COLUMNS = ("STS12", "STS13", "STS14", "STS15", "STS16", "STS-B")
# all-MiniLM-L6-v2's SICK-R on the MTEB leaderboard: all 9,927 SICK pairs
PUBLISHED_SICK_R = 77.58


def test_offline_mteb_sts_equals_senteval_all_and_the_published_scores(minilm_both):
    report, _, out, _ = minilm_both
    ours, theirs = report["scores"], report["mteb"]["scores"]
    for column in SENTEVAL_COLUMNS:
        assert theirs[column] == pytest.approx(ours[column], abs=0.01), column
        assert theirs[column] == pytest.approx(PUBLISHED[column], abs=0.01), column
    # SentEval scores SICK's test split, MTEB all of SICK: different sets, different figures
    assert report["tasks"]["SICKRelatedness"]["n"] == 4927
    assert abs(theirs["SICK-R"] - ours["SICK-R"]) > 0.1
    assert theirs["SICK-R"] == pytest.approx(PUBLISHED_SICK_R, abs=0.01)
    with open(out / "r.json") as f:
        saved = json.load(f)
    assert saved["score_groups"]["mteb"] == pytest.approx(theirs)


def test_mteb_sick_r_is_our_evaluator_on_all_9927_pairs(minilm_both, minilm):
    report = minilm_both[0]
    pairs = local_pairs("SICK-R", SENTEVAL)
    assert len(pairs.scores) == 9927  # 4,500 train + 500 trial + 4,927 test
    model = load_model(minilm, pooler_type="avg")
    sentences = list(dict.fromkeys(pairs.sentences1 + pairs.sentences2))
    embeddings = dict(zip(sentences, model.encode(sentences).numpy()))
    ours_on_all = 100 * score_sts_task({"all": pairs}, embeddings)["spearman"]
    assert report["mteb"]["scores"]["SICK-R"] == pytest.approx(ours_on_all, abs=0.01)


def test_results_load_with_mteb_and_reach_the_model_card(minilm_both):
    report, model_dir, out, _ = minilm_both
    loaded = mteb.ResultCache(str(out / "mteb")).load_results()
    (model,) = loaded.model_results
    assert model.model_name == "cse/minilm"
    scores = {t.task_name: 100 * t.get_score() for t in model.task_results}
    assert set(scores) == {"STS12", "STS13", "STS14", "STS15", "STS16", "STSBenchmark", "SICK-R"}
    assert scores["STS12"] == pytest.approx(report["mteb"]["scores"]["STS12"])
    front = (model_dir / "README.md").read_text().split("---")[1]
    (entry,) = yaml.safe_load(front)["model-index"]
    found = {r["dataset"]["type"]: r["metrics"][0]["value"] for r in entry["results"]}
    assert found["mteb/sts12-sts"] == pytest.approx(report["mteb"]["scores"]["STS12"] / 100)
    assert len(found) == 7
