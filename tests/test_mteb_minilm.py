"""``senteval_eval.py --protocol both`` on a real trained encoder, all-MiniLM-L6-v2 (the PyPI package),
offline: mteb's STS tasks built from the SentEval files give the model's published MTEB scores and
our SentEval "all" figures; SICK-R differs by what is scored, and our evaluator on the pairs MTEB
scores gives MTEB's figure."""

import json
import os

import mteb
import pytest
import yaml

import senteval_eval
from cse.evaluation.mteb_protocol import local_pairs
from cse.evaluation.sts import score_sts_task
from cse.modeling import load_model

from .conftest import MINILM_MTEB as PUBLISHED
from .conftest import SENTEVAL

# Whole evaluations: SentEval's seven STS test sets, then mteb's seven tasks (47,700 encodings).
pytestmark = pytest.mark.e2e

SENTEVAL_COLUMNS = ("STS12", "STS13", "STS14", "STS15", "STS16", "STS-B")
# all-MiniLM-L6-v2's SICK-R on the MTEB leaderboard: all 9,927 SICK pairs
PUBLISHED_SICK_R = 77.58


@pytest.fixture(scope="module")
def both(minilm, tmp_path_factory):
    """The report of --protocol both, printed output and paths, on a copy of the model with a cse card."""
    out = tmp_path_factory.mktemp("mteb")
    model_dir = out / "minilm"
    model_dir.mkdir()
    for name in os.listdir(minilm):
        if os.path.isfile(os.path.join(minilm, name)) and name != "README.md":
            os.symlink(os.path.join(minilm, name), model_dir / name)
    (model_dir / "README.md").write_text("---\ntags:\n- cse\nlicense: apache-2.0\n---\n\n# card\n")
    report = senteval_eval.main(
        [
            "--model_name_or_path",
            str(model_dir),
            "--pooler",
            "avg",
            "--protocol",
            "both",
            "--senteval_data_dir",
            SENTEVAL,
            "--mteb_output_dir",
            str(out / "mteb"),
            "--output_json",
            str(out / "r.json"),
        ]
    )
    return report, model_dir, out


def test_offline_mteb_sts_equals_senteval_all_and_the_published_scores(both, capsys):
    report, _, out = both
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


def test_mteb_sick_r_is_our_evaluator_on_all_9927_pairs(both, minilm):
    report = both[0]
    pairs = local_pairs("SICK-R", SENTEVAL)
    assert len(pairs.scores) == 9927  # 4,500 train + 500 trial + 4,927 test
    model = load_model(minilm, pooler_type="avg")
    sentences = list(dict.fromkeys(pairs.sentences1 + pairs.sentences2))
    embeddings = dict(zip(sentences, model.encode(sentences).numpy()))
    ours_on_all = 100 * score_sts_task({"all": pairs}, embeddings)["spearman"]
    assert report["mteb"]["scores"]["SICK-R"] == pytest.approx(ours_on_all, abs=0.01)


def test_results_load_with_mteb_and_reach_the_model_card(both):
    report, model_dir, out = both
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
