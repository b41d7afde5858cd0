"""The encoder hook (cse.embedding_encoder) and what parts declare of each other: a part outside the
package that replaces the embedding (examples/self_attentive.py, copied outside the checkout) trains,
exports and loads again, its class only when trusted; a pair of which one part needs what the other
changes is refused before any work; the build re-initialises the head where the pooler reads it."""

import importlib
import json
import os
import re
import shutil
import sys
from dataclasses import dataclass

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModel, AutoTokenizer

from cse import citations, composition, registry
from cse.build import build
from cse.errors import CSEUsageError
from cse.modeling import load_model
from cse.parts import Part
from cse.pooling import NEEDS_POOLING_LAYER, POOLERS

from .conftest import REPO, assert_sentence_transformers_refuses, train_argv, train_outside

EXAMPLE = os.path.join(REPO, "examples", "self_attentive.py")
SENTENCES = ["a man plays a guitar", "the weather is cold today", "ok"]


@pytest.fixture
def outside(tmp_path, monkeypatch):
    """The example copied to a folder outside the checkout, that folder on the path, and the file
    imported from there as the module ``self_attentive`` (its part registered in a copy of the registry)."""
    elsewhere = tmp_path / "parts"
    elsewhere.mkdir()
    shutil.copy(EXAMPLE, elsewhere)
    monkeypatch.syspath_prepend(str(elsewhere))
    monkeypatch.setattr(registry, "_RECORDS", {record.name: record for record in registry.records()})
    module = importlib.import_module("self_attentive")
    monkeypatch.setitem(sys.modules, "self_attentive", module)  # removed again after the test
    return module


def hand_embeddings(directory, sentences):
    """m = sum_t a_t h_t, a = softmax_t(w_2 tanh(W_1 h_t)) of each sentence alone (no padding), from the
    plain Hugging Face backbone the directory holds and the weights beside it, by the equation."""
    backbone, tokenizer = AutoModel.from_pretrained(directory), AutoTokenizer.from_pretrained(directory)
    weights = load_file(os.path.join(directory, "encoder_weights.safetensors"))
    w1, w2 = weights["attention.0.weight"], weights["attention.2.weight"]
    rows = []
    with torch.no_grad():
        for sentence in sentences:
            h = backbone(**tokenizer(sentence, return_tensors="pt")).last_hidden_state[0]
            a = torch.softmax((torch.tanh(h @ w1.T) @ w2.T)[:, 0], dim=0)
            rows.append((a[:, None] * h).sum(0))
    return torch.stack(rows)


def test_an_outside_encoder_exports_and_loads_again_only_when_trusted(outside, tiny_bert, tmp_path):
    encoder = load_model(tiny_bert, pooler_type="avg")
    torch.manual_seed(0)
    model = outside.SelfAttentiveEncoder(encoder.backbone, encoder.tokenizer, attention_size=5)
    out = str(tmp_path / "export")
    model.save_pretrained(out)
    config = json.loads((tmp_path / "export" / "cse_config.json").read_text())
    assert config == {
        "model_class": "self_attentive:SelfAttentiveEncoder",
        "pooler": "self_attentive",
        "attention_size": 5,
    }
    assert_sentence_transformers_refuses(out)  # no sentence-transformers module computes it
    with pytest.raises(
        CSEUsageError, match=re.escape("names the encoder class self_attentive:SelfAttentiveEncoder, outside")
    ) as refused:
        load_model(out)
    assert "trust_remote_code=True" in refused.value.hint
    loaded = load_model(out, trust_remote_code=True)
    assert type(loaded) is outside.SelfAttentiveEncoder and loaded.pooler_type == "self_attentive"
    expected = hand_embeddings(out, SENTENCES)
    torch.testing.assert_close(loaded.encode(SENTENCES, batch_size=2), expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(loaded.encode(SENTENCES), model.encode(SENTENCES), rtol=0, atol=0)
    with pytest.raises(CSEUsageError, match="its embedding is 'self_attentive', not pooler 'avg'"):
        load_model(out, pooler_type="avg", trust_remote_code=True)
    os.remove(os.path.join(out, "encoder_weights.safetensors"))
    with pytest.raises(CSEUsageError, match="lacks encoder_weights.safetensors"):
        load_model(out, trust_remote_code=True)


@pytest.mark.e2e
def test_an_outside_part_that_replaces_the_embedding_trains_with_mixcse_exports_and_loads(
    tiny_bert, tmp_path, monkeypatch
):
    """``python self_attentive.py --parts mixcse,self_attentive`` run outside the checkout for two
    steps; its export loads again with the folder of its file on the path, when trusted."""
    flags = ["--parts", "mixcse,self_attentive", "--attention_size", "6", "--log_term_gradients", "true"]
    out, logs = train_outside(EXAMPLE, tiny_bert, tmp_path, *flags)
    assert len(logs) == 2 and all("mix_score" in log for log in logs)
    config = json.loads((out / "cse_config.json").read_text())
    assert config["model_class"] == "self_attentive:SelfAttentiveEncoder" and config["attention_size"] == 6
    card = (out / "README.md").read_text(encoding="utf-8")
    assert "A Structured Self-attentive Sentence Embedding" in card and "- sentence-transformers\n" not in card
    assert "the encoder's class is of the module `self_attentive`" in card and ", trust_remote_code=True)" in card
    with pytest.raises(CSEUsageError, match="outside this package"):
        load_model(str(out))
    monkeypatch.syspath_prepend(str(tmp_path / "parts"))
    monkeypatch.setattr(registry, "_RECORDS", {record.name: record for record in registry.records()})
    loaded = load_model(str(out), trust_remote_code=True)
    assert type(loaded).__name__ == "SelfAttentiveEncoder"
    torch.testing.assert_close(loaded.encode(SENTENCES), hand_embeddings(str(out), SENTENCES), rtol=1e-5, atol=1e-5)


@dataclass
class NoFlags:
    pass


class Prompted(Part):
    """A part that puts template tokens inside the model's input (as a prompt-based embedding does)."""

    name, display_name, docs, citation = "prompted", "Prompted", "docs/extending.md", citations.SIMCSE
    changes = frozenset({"token_inputs"})


def test_a_part_that_changes_what_another_needs_is_refused_before_any_work(tmp_path, monkeypatch):
    monkeypatch.setattr(registry, "_RECORDS", {record.name: record for record in registry.records()})
    registry.register(registry.MethodRecord(part=Prompted))
    out = tmp_path / "out"
    message = (
        "--parts prompted,vadvcse is not defined: vadvcse needs the backbone's word-embedding input to have the "
        "batch's shape (one position per token of each view's input_ids), which prompted changes"
    )
    with pytest.raises(CSEUsageError, match=f"^{re.escape(message)}\\n") as refused:
        composition.parse(train_argv("unused", out, "--parts", "vadvcse,prompted"))
    assert refused.value.hint == "see docs/composition.md" and not out.exists()
    # with a part that needs nothing of it, it combines
    assert composition.select(["prompted", "mixcse"])


def test_a_part_declaring_an_unknown_need_is_kept_out(monkeypatch):
    class Unknown(Prompted):
        name = "unknown_need"
        needs = frozenset({"token_input"})

    monkeypatch.setattr(registry, "_RECORDS", {record.name: record for record in registry.records()})
    monkeypatch.setattr(registry, "_PROBLEMS", [])
    registry.register(registry.MethodRecord(part=Unknown))
    with pytest.raises(CSEUsageError, match="part 'unknown_need': needs names 'token_input', which is none of"):
        registry.records()


@pytest.mark.parametrize("pooler", POOLERS)
def test_the_build_reinitialises_the_head_where_the_pooler_reads_it(pooler, tiny_bert):
    """SimCSE's fresh head (N(0, 0.02) weights, zero bias) where the pooler reads the pooling layer; the
    pretrained layer, unused and frozen, elsewhere."""
    model_args = registry.BASE_ARGUMENTS[0](model_name_or_path=tiny_bert, pooler_type=pooler, mlp_only_train=False)
    model, _ = build([], model_args)
    pretrained = AutoModel.from_pretrained(tiny_bert).pooler.dense
    head = model.backbone.pooler.dense
    reset = pooler in NEEDS_POOLING_LAYER
    assert torch.equal(head.weight, pretrained.weight) is not reset and head.weight.requires_grad is reset
    assert not reset or head.weight.std().item() == pytest.approx(0.02, rel=0.3)
