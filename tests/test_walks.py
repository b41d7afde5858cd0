"""The kept walk of a model's modules and parameters (cse.walks): always what torch's own walk gives."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from torch import nn
from transformers import AutoTokenizer, BertConfig, BertModel

from cse.encoders.self_guided import SelfGuidedEncoder
from cse.modeling import CSEModel

from .conftest import REPO, TOKENIZERS, free_port


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
    # what no registration hook sees: a module deleted or inserted by hand, a child converted alone, a
    # parameter written into its module's dictionary (as FSDP's sharding writes its own)
    del model.backbone.pooler
    assert_walk(model)
    model.backbone.encoder.layer.insert(0, nn.Linear(4, 4))
    assert_walk(model)
    del model.backbone.encoder.layer[1:]
    assert_walk(model)
    model.backbone.embeddings.to("meta")
    assert_walk(model)
    model.backbone.embeddings.LayerNorm._parameters["weight"] = nn.Parameter(torch.ones(8))
    assert_walk(model)


def test_a_copy_walks_itself(model):
    model.train()
    shallow = copy.copy(model)
    assert list(shallow.walk().modules)[0] is shallow
    model.eval()
    shallow.eval()
    assert not shallow.training and not model.training
    deep = copy.deepcopy(model)
    deep.train()
    assert all(m.training for m in nn.Module.modules(deep)) and not any(m.training for m in nn.Module.modules(model))


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
    # a module added in evaluation mode while the model is in training mode, by attribute or by hand
    model.backbone.added = nn.Dropout(0.5).eval()
    model.train()
    assert all(torchs(model)[1])
    model.backbone.encoder.layer.insert(0, nn.Dropout(0.5).eval())
    model.train()
    assert all(torchs(model)[1])
    for mode in ("yes", 1):
        with pytest.raises(ValueError, match="boolean"):
            model.train(mode)


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
    # the released code's reading set after construction: BERT_F follows the model's mode from the next call
    encoder.fixed_encoder_dropout = True
    encoder.train()
    assert all(m.training for m in encoder.modules())
    encoder.fixed_encoder_dropout = False
    encoder.train()
    assert encoder.backbone.training and not any(m.training for m in encoder.fixed_backbone.modules())


def test_fsdp_sharding_is_seen(tmp_path):
    """FSDP2's fully_shard (one process, gloo) replaces every parameter with a DTensor written into its
    module's dictionary: the kept walk lists the new ones, and zero_grad frees their gradients."""
    script = textwrap.dedent(
        f"""
        import os, torch
        from torch import nn
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
        from transformers import AutoTokenizer, BertConfig, BertModel
        from cse.modeling import CSEModel
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="{free_port()}")
        torch.distributed.init_process_group("gloo", rank=0, world_size=1)
        tokenizer = AutoTokenizer.from_pretrained({os.path.join(TOKENIZERS, "bert-base-uncased")!r})
        config = BertConfig(vocab_size=len(tokenizer), hidden_size=8, num_hidden_layers=1, num_attention_heads=2)
        model = CSEModel(BertModel(config), tokenizer)
        model.train()  # walked before sharding, as the run's checks walk it
        fully_shard(model, mesh=init_device_mesh("cpu", (1,)))
        assert list(model.parameters()) == list(nn.Module.parameters(model))
        assert type(next(model.parameters())).__name__ == "DTensor"
        for p in nn.Module.parameters(model):
            p.grad = torch.zeros_like(p)
        model.zero_grad()
        assert all(p.grad is None for p in nn.Module.parameters(model))
        torch.distributed.destroy_process_group()
        print("ok")
        """
    )
    env = {**os.environ, "PYTHONPATH": REPO, "OMP_NUM_THREADS": "1"}
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0 and result.stdout.strip().endswith("ok"), result.stderr[-3000:]
