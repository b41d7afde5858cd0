"""The kept walk of a model's modules and parameters (cse.walks): always what torch's own walk gives."""

from __future__ import annotations

import os

import pytest
import torch
from torch import nn
from transformers import AutoTokenizer, BertConfig, BertModel

from cse.encoders.self_guided import SelfGuidedEncoder
from cse.modeling import CSEModel

from .conftest import TOKENIZERS


def torchs(model):
    """torch's own walk: (parameters, each module's mode)."""
    return list(nn.Module.parameters(model)), [m.training for m in nn.Module.modules(model)]


@pytest.fixture
def model():
    tokenizer = AutoTokenizer.from_pretrained(os.path.join(TOKENIZERS, "bert-base-uncased"))
    config = BertConfig(vocab_size=len(tokenizer), hidden_size=8, num_hidden_layers=2, num_attention_heads=2)
    return CSEModel(BertModel(config), tokenizer)


def assert_walk(model):
    parameters, _ = torchs(model)
    assert list(model.parameters()) == parameters
    assert list(model.parameters(recurse=False)) == list(nn.Module.parameters(model, recurse=False))


def test_parameters_follow_every_registration_and_conversion(model):
    assert_walk(model)
    model.backbone.encoder.layer[0].extra = nn.Linear(3, 3)  # a module set as an attribute
    assert_walk(model)
    model.backbone.encoder.layer.append(nn.Linear(2, 2))  # a module added to a list
    assert_walk(model)
    model.backbone.pooler.dense.weight = nn.Parameter(torch.zeros(8, 8))  # a parameter replaced
    assert_walk(model)
    model.backbone.pooler.register_parameter("scale", nn.Parameter(torch.ones(1)))
    assert_walk(model)
    model.load_state_dict({k: v.clone() for k, v in model.state_dict().items()}, assign=True)
    assert_walk(model)
    model.to(torch.float64)
    assert_walk(model)
    assert next(model.parameters()).dtype == torch.float64
    before = list(model.parameters())
    torch.__future__.set_overwrite_module_params_on_conversion(True)  # new parameter objects
    try:
        model.to(torch.float32)
    finally:
        torch.__future__.set_overwrite_module_params_on_conversion(False)
    assert_walk(model)
    assert next(model.parameters()).dtype == torch.float32 and next(model.parameters()) is not before[0]


def test_zero_grad_clears_every_gradient(model):
    for p in nn.Module.parameters(model):
        p.grad = torch.ones_like(p)
    model.zero_grad()
    assert all(p.grad is None for p in nn.Module.parameters(model))


def test_modes_are_set_whatever_changed_them_between_calls(model):
    model.train()
    assert torchs(model)[1] == [True] * len(torchs(model)[1])
    model.eval()
    assert not any(torchs(model)[1])
    # a submodule put back in training mode on its own, then the whole model in evaluation mode again
    model.backbone.encoder.layer[1].attention.self.dropout.train()
    model.eval()
    assert not any(torchs(model)[1])
    model.train()
    model.backbone.embeddings.dropout.eval()
    model.train()
    assert all(torchs(model)[1])
    # a module added in evaluation mode while the model is in training mode
    model.backbone.added = nn.Dropout(0.5).eval()
    model.train()
    assert all(torchs(model)[1])
    with pytest.raises(ValueError):
        model.train("yes")


def test_a_fixed_copy_stays_in_evaluation_mode(model):
    """SG-BERT's BERT_F is kept deterministic whenever the Trainer puts the model in training mode."""
    encoder = SelfGuidedEncoder(model.backbone, model.tokenizer, projection_size=None)
    for _ in range(2):
        encoder.train()
        assert encoder.backbone.training and not any(m.training for m in encoder.fixed_backbone.modules())
        encoder.fixed_backbone.train()
    encoder.eval()
    assert not any(m.training for m in encoder.modules())
    encoder.train()
    assert not any(m.training for m in encoder.fixed_backbone.modules())
