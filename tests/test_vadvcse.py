"""V-advCSE: the divergences against float64 hand computations, the projection and the ascent, the
gradient of L = L_cont + lambda * L_vadv against a hand computation with r held fixed, bf16
autocast, two processes against one, resumption, and ``run_vadvcse.py`` end to end."""

import copy
import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModel, AutoTokenizer, TrainerCallback

from cse.arguments import CSETrainingArguments
from cse.data import TwoViewCollator
from cse.losses import InfoNCELoss
from cse.losses.vadvcse import (
    VirtualAdversarialLoss,
    ascent_direction,
    divergence,
    project,
    virtual_adversarial_loss,
)
from cse.methods.vadvcse import (
    MLPHeadEncoder,
    VAdvCSEArguments,
    VAdvCSETrainer,
    perturbed_word_embeddings,
    vadvcse_loss,
)
from cse.modeling import CSEModel

from .conftest import DATA, REPO, SENTEVAL, WIKI_HEAD, tiny_model_dir, torchrun
from .test_adcse import SENTENCES

# --- the divergences (Eqs. 11-14) ---------------------------------------------------------------


def hand_divergence(name, p_logits, q_logits):
    """Per row, explicit loops in float64."""
    out = []
    for a, b in zip(np.asarray(p_logits, np.float64), np.asarray(q_logits, np.float64)):
        p = [math.exp(x) for x in a]
        p = [x / sum(p) for x in p]
        q = [math.exp(x) for x in b]
        q = [x / sum(q) for x in q]
        kl = lambda u, v: sum(ui * math.log(ui / vi) for ui, vi in zip(u, v))  # noqa: E731
        if name == "kl":
            out.append(kl(p, q))
        elif name == "symmetric_kl":
            out.append(0.5 * (kl(p, q) + kl(q, p)))
        else:
            m = [(pi + qi) / 2 for pi, qi in zip(p, q)]
            out.append(0.5 * kl(p, m) + 0.5 * kl(q, m))
    return out


@pytest.mark.parametrize("name", ["kl", "symmetric_kl", "js"])
def test_divergences_equal_float64_hand_computation(name):
    g = torch.Generator().manual_seed(0)
    p, q = torch.randn(5, 7, generator=g) * 3, torch.randn(5, 7, generator=g) * 3
    values = divergence(name, p, q)
    assert values.dtype == torch.float64
    np.testing.assert_allclose(values.numpy(), hand_divergence(name, p, q), rtol=1e-10)
    assert (values > 0).all()
    assert divergence(name, p, p).abs().max() < 1e-15  # 0 for identical distributions (to rounding)
    if name != "kl":  # the symmetric ones
        torch.testing.assert_close(divergence(name, q, p), values)
    if name == "js":
        assert (values <= math.log(2)).all()
    # a shift of the logits is the same distribution
    assert divergence(name, p, p + 4.0).abs().max() < 1e-12


def test_divergence_resolves_perturbations_below_float32_resolution():
    g = torch.Generator().manual_seed(1)
    p = torch.randn(4, 6, generator=g) * 3
    q = p + 1e-4 * torch.randn(4, 6, generator=g)  # float32 logits, as the model gives them
    expected = hand_divergence("kl", p, q)  # ~1e-9
    np.testing.assert_allclose(divergence("kl", p, q).numpy(), expected, rtol=1e-4)
    # the same formula on float32 log-probabilities is off by far more than the value itself
    lp, lq = p.log_softmax(-1), q.log_softmax(-1)
    in_float32 = (lp.exp() * (lp - lq)).sum(-1).double().numpy()
    assert np.abs(in_float32 - expected).max() > 0.1 * max(expected)


# --- projection and ascent direction ---------------------------------------------------------------


@pytest.mark.parametrize("norm", ["l2", "linf"])
def test_projection_keeps_r_in_the_ball_and_leaves_points_inside_alone(norm):
    g = torch.Generator().manual_seed(2)
    r = torch.randn(4, 3, 5, generator=g)
    r[0] *= 1e-3  # inside the ball already
    eps = 0.5
    projected = project(r, eps, norm)
    sizes = projected.flatten(1).norm(dim=1) if norm == "l2" else projected.flatten(1).abs().amax(dim=1)
    assert (sizes <= eps * (1 + 1e-6)).all()
    assert torch.equal(projected[0], r[0])
    if norm == "l2":  # the nearest point of the ball: r scaled onto its surface
        for i in range(1, 4):
            expected = r[i] * eps / math.sqrt(float((r[i].double() ** 2).sum()))
            torch.testing.assert_close(projected[i], expected.float())
    else:
        assert torch.equal(projected, r.clamp(-eps, eps))
    direction = ascent_direction(r, norm)
    if norm == "l2":
        torch.testing.assert_close(direction.flatten(1).norm(dim=1), torch.ones(4))
    else:
        assert torch.equal(direction, r.sign())
    assert torch.equal(ascent_direction(torch.zeros(2, 3), norm), torch.zeros(2, 3))


# --- the search on a model ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def no_dropout_bert(tmp_path_factory):
    return tiny_model_dir(tmp_path_factory.mktemp("tiny_bert_nodrop"), "bert", dropout=0.0)


def batch_of(model_dir, sentences=SENTENCES[:6]):
    tok = AutoTokenizer.from_pretrained(model_dir)
    return TwoViewCollator(tok)([dict(tok(s)) for s in sentences])


def anchor_closure(encoder, inputs, candidates, tau=0.05):
    anchors = {k: v[:, :1] for k, v in inputs.items()}

    def perturbed_logits(r):
        with perturbed_word_embeddings(encoder.backbone, r):
            h = encoder(**anchors)[:, 0]
        return torch.nn.functional.normalize(h, dim=-1) @ torch.nn.functional.normalize(candidates, dim=-1).T / tau

    return perturbed_logits


@pytest.mark.parametrize(
    "norm,epsilon,step", [("l2", 0.5, 0.5), ("linf", 2e-2, 2e-2)], ids=["l2", "linf"]
)
@pytest.mark.parametrize("name", ["kl", "symmetric_kl", "js"])
def test_ascent_raises_the_divergence_within_the_ball_and_leaves_no_parameter_gradient(
    no_dropout_bert, name, norm, epsilon, step
):
    torch.manual_seed(0)
    encoder = MLPHeadEncoder.from_encoder(
        CSEModel.from_pretrained(no_dropout_bert, pooler_type="cls", mlp_only_train=True)
    )
    inputs = batch_of(no_dropout_bert)
    mask = inputs["attention_mask"][:, 0]
    closure = anchor_closure(encoder, inputs, encoder(**inputs)[:, 1].detach())
    clean = closure(torch.zeros(*mask.shape, 32))  # r = 0: the clean prediction (dropout off)
    noise = torch.randn(*mask.shape, 32)
    sigma = epsilon / 100
    start = divergence(name, clean, closure(sigma * noise * mask[..., None])).mean()
    r, loss = virtual_adversarial_loss(
        clean, closure, noise, mask, divergence_name=name, norm=norm, sigma=sigma, epsilon=epsilon, step_size=step
    )
    assert loss.item() > start.item() > 0
    assert all(p.grad is None for p in encoder.parameters())  # the search took gradients of r only
    sizes = r.flatten(1).norm(dim=1) if norm == "l2" else r.flatten(1).abs().amax(dim=1)
    assert (sizes <= epsilon * (1 + 1e-6)).all() and (sizes > epsilon / 2).all()
    assert torch.equal(r[mask == 0], torch.zeros_like(r[mask == 0]))  # padding is not perturbed
