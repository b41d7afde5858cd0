"""``senteval_eval.py`` on a real trained encoder, all-MiniLM-L6-v2 (the PyPI package).

Two independent references: the model's published MTEB scores (cosine Spearman on the same test
sets, which the SentEval "all" setting reproduces), and tests/senteval_reference.py, a step-by-step
re-statement of SentEval + SimCSE's batcher, for every pooler in both modes.
"""

import json

import pytest
from transformers import AutoModel, AutoTokenizer

from cse.evaluation import STS_DEV_TASKS, STS_TASKS, SentEvalSuite
from cse.modeling import CSEModel
from cse.pooling import POOLERS

from .conftest import MINILM_MTEB, SENTEVAL
from .senteval_reference import reference_scores

# Whole evaluations: the seven STS test sets (26,289 sentences) in several passes of a real encoder.
pytestmark = pytest.mark.e2e

COLUMN = {
    "STS12": "STS12",
    "STS13": "STS13",
    "STS14": "STS14",
    "STS15": "STS15",
    "STS16": "STS16",
    "STSBenchmark": "STS-B",
    "SICKRelatedness": "SICK-R",
}


@pytest.fixture(scope="module")
def ours():
    """Our scores per (pooler, mode), filled as tests run so that no configuration is encoded twice."""
    return {}


@pytest.fixture(scope="module")
def reference(minilm):
    """mode -> the re-statement's scores for every pooler, each mode computed when first asked for."""
    model, tok = AutoModel.from_pretrained(minilm), AutoTokenizer.from_pretrained(minilm)
    scores = {}

    def of(mode):
        if mode not in scores:
            tasks = STS_DEV_TASKS if mode == "dev" else STS_TASKS
            scores[mode] = reference_scores(model, tok, tasks, mode, SENTEVAL)
        return scores[mode]

    return of


def test_cli_reproduces_published_mteb_scores(minilm_both, ours):
    """senteval_eval.py (``conftest.minilm_both``: its SentEval half is this protocol's whole run)."""
    report, _, out, printed = minilm_both
    ours["avg", "test"] = report["scores"]
    assert "| Model | STS12 | STS13 | STS14 | STS15 | STS16 | STS-B | SICK-R | Avg. |" in printed
    for column, published in MINILM_MTEB.items():
        assert report["scores"][column] == pytest.approx(published, abs=0.01), column
        assert f"{published:.2f}" in printed
    with open(out / "r.json") as f:
        saved = json.load(f)
    assert saved["scores"] == pytest.approx(report["scores"])
    assert saved["tasks"]["STS12"]["n"] == 3108 and saved["tasks"]["STS16"]["n"] == 1186
    assert saved["tasks"]["SICKRelatedness"]["n"] == 4927 and saved["tasks"]["STSBenchmark"]["n"] == 1379
    assert set(saved["tasks"]["STS14"]["subsets"]) == {
        "deft-forum",
        "deft-news",
        "headlines",
        "images",
        "OnWN",
        "tweet-news",
    }


# Every pooler on the dev sets. The test sets (26,289 sentences, about 60 s an encoding pass on two
# CPU cores, and the re-statement's own pass) only in the long form, every pooler: a pooler computes
# the same way in both modes, and test mode is checked against the published MTEB scores (conftest.MINILM_MTEB).
CASES = [(pooler, "dev") for pooler in POOLERS]
CASES += [pytest.param(pooler, "test", marks=pytest.mark.slow) for pooler in POOLERS]


@pytest.mark.parametrize(("pooler", "mode"), CASES)
def test_every_pooler_matches_the_reference(minilm, reference, ours, pooler, mode):
    if (pooler, mode) not in ours:
        model = CSEModel.from_pretrained(minilm, pooler_type=pooler)
        ours[pooler, mode] = SentEvalSuite("sts", mode, SENTEVAL).run(lambda s: model.encode(s).numpy())["scores"]
    for task, expected in reference(mode)[pooler].items():
        assert ours[pooler, mode][COLUMN[task]] == pytest.approx(expected, abs=0.01), (pooler, mode, task)
