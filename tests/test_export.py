"""Saved models load in sentence-transformers and embed exactly as our evaluator's pooler does."""

import json
import os

import numpy as np
import pytest
from sentence_transformers import SentenceTransformer
from transformers import AutoModel, AutoTokenizer

from cse.export import EXPORTABLE_POOLERS
from cse.modeling import CSEModel

from .conftest import run_simcse

SENTENCES = [
    "A man is playing a guitar.",
    "Two dogs run through a snowy field while the sun sets behind the hills.",
    "ok",
    "The quick brown fox jumps over the lazy dog near the riverbank.",
]


def ours_and_theirs(model_dir, pooler=None):
    ours = CSEModel.from_pretrained(model_dir, pooler_type=pooler).encode(SENTENCES, batch_size=2).numpy()
    theirs = SentenceTransformer(model_dir, device="cpu").encode(SENTENCES, batch_size=3, convert_to_numpy=True)
    return ours, theirs


@pytest.mark.e2e
def test_a_model_saved_by_run_simcse_loads_in_sentence_transformers(tiny_bert, tmp_path):
    out = str(tmp_path / "run")
    run_simcse(["--model_name_or_path", tiny_bert, "--output_dir", out, "--max_steps", "4", "--final_eval", "none"])
    with open(os.path.join(out, "modules.json")) as f:
        assert [m["type"].rsplit(".", 1)[1] for m in json.load(f)] == ["Transformer", "Pooling"]
    ours, theirs = ours_and_theirs(out)  # the recorded pooler: cls_before_pooler (mlp_only_train)
    assert ours.shape == theirs.shape == (len(SENTENCES), 32)
    np.testing.assert_allclose(theirs, ours, atol=1e-5, rtol=0)


@pytest.mark.parametrize("pooler", [*EXPORTABLE_POOLERS, "avg_top2"])
def test_every_exportable_pooler_matches(tiny_roberta, tmp_path, pooler):
    out = str(tmp_path / pooler)
    CSEModel(
        AutoModel.from_pretrained(tiny_roberta), AutoTokenizer.from_pretrained(tiny_roberta), pooler
    ).save_pretrained(out)
    if pooler not in EXPORTABLE_POOLERS:  # reads intermediate layers: no module files, CSEModel only
        assert not os.path.exists(os.path.join(out, "modules.json"))
        return
    ours, theirs = ours_and_theirs(out)
    np.testing.assert_allclose(theirs, ours, atol=1e-5, rtol=0)
    # the cls head really is applied: the embedding differs from the raw [CLS] state
    if pooler == "cls":
        raw = CSEModel.from_pretrained(out, pooler_type="cls_before_pooler").encode(SENTENCES).numpy()
        assert np.abs(raw - theirs).max() > 1e-2
    with open(os.path.join(out, "sentence_bert_config.json")) as f:
        assert json.load(f)["max_seq_length"] == 512
