"""AdCSE's adversaries in MixCSE's softmax (``AdversarialInfoNCELoss(base=MixCSELoss(...))``): the
loss of both MixCSE forms against float64 hand computations of the rows' logits, the adversaries'
gradient against finite differences of that hand loss at their own temperature, the reduction to
MixCSE when the adversaries hold no share, and the citations of both papers."""

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from cse import citations
from cse.losses.adcse import AdversarialInfoNCELoss
from cse.losses.mixcse import MixCSELoss
from cse.trainer import CSETrainer


def unit(x):
    return x / np.linalg.norm(x)


def cos(a, b):
    return float(unit(a) @ unit(b))


def mix(x, i, lam):
    """lambda x_i + (1 - lambda) x_{i+1 mod N} (MixCSE's mixed negative, the next row as partner)."""
    return lam * x[i] + (1 - lam) * x[(i + 1) % len(x)]


def hand_rows(z1, z2, n, tau, lam, form, single):
    """Each row of the combined softmax as (logits, label), in float64 from the papers' equations.
    Released MixCSE (N rows, anchor z1_i): cos(z1_i, z2_k), cos(z1_i, m_k) except 0 at k = i - 1,
    cos(w_i, z2_k) except 0 at k = i + 1 (m, w mixtures of the raw vectors); paper MixCSE (2N rows):
    h_i against h'_k and unit(mix(h')_i), then h'_i against h_k and unit(mix(h)_i). Every row then
    gets cos(its anchor, n_j) for the M adversaries; all over tau."""
    rows = []
    size = len(z1)
    if form == "released":
        for i in range(size):
            logits = [cos(z1[i], z2[k]) for k in range(size)]
            logits += [0.0 if k == (i - 1) % size else cos(z1[i], mix(z2, k, lam)) for k in range(size)]
            if not single:
                logits += [0.0 if k == (i + 1) % size else cos(mix(z1, i, lam), z2[k]) for k in range(size)]
            rows.append(([v / tau for v in logits] + [cos(z1[i], nj) / tau for nj in n], i))
        return rows
    h, hp = [unit(v) for v in z1], [unit(v) for v in z2]
    for i in range(size):
        logits = [h[i] @ hp[k] for k in range(size)] + [h[i] @ unit(mix(hp, i, lam))]
        rows.append(([v / tau for v in logits] + [cos(h[i], nj) / tau for nj in n], i))
    for i in range(size):
        logits = [hp[i] @ h[k] for k in range(size)] + ([] if single else [hp[i] @ unit(mix(h, i, lam))])
        rows.append(([v / tau for v in logits] + [cos(hp[i], nj) / tau for nj in n], i))
    return rows


def hand_loss(z1, z2, n, tau, lam, form, single, num_adversaries):
    """The mean cross-entropy over the rows, and the adversaries' mean share of a row's softmax."""
    total = share = 0.0
    rows = hand_rows(z1, z2, n, tau, lam, form, single)
    for logits, label in rows:
        top = max(logits)
        weights = [math.exp(v - top) for v in logits]
        total += -(logits[label] - top - math.log(sum(weights)))
        share += sum(weights[-num_adversaries:]) / sum(weights)
    return total / len(rows), share / len(rows)


def batch(seed=3, size=6, d=5, m=3):
    g = torch.Generator().manual_seed(seed)
    scale = torch.linspace(0.3, 4.0, size)[:, None]  # norms far from 1: the released form mixes raw vectors
    z1 = torch.randn(size, d, generator=g, dtype=torch.float64) * scale
    z2 = torch.randn(size, d, generator=g, dtype=torch.float64) * scale.flip(0)
    return z1, z2, torch.randn(m, d, generator=g, dtype=torch.float64) * 2.0


def combined(n, tau, lam, form, single, adversary_temperature=None):
    base = MixCSELoss(temperature=tau, mix_lambda=lam, form=form, single=single)
    loss = AdversarialInfoNCELoss(
        n.shape[1], n.shape[0], tau, adversary_temperature=adversary_temperature, base=base
    ).double()
    with torch.no_grad():
        loss.adversaries.copy_(n)
    return loss


@pytest.mark.parametrize("single", [False, True], ids=["both", "single"])
@pytest.mark.parametrize("form", ["released", "paper"])
@pytest.mark.parametrize("adversary_temperature", [None, 0.7], ids=["t=tau", "t=0.7"])
def test_loss_and_adversary_gradient_equal_float64_hand_computation(form, single, adversary_temperature):
    tau, lam = 0.3, 0.2
    z1, z2, n = batch()
    loss = combined(n, tau, lam, form, single, adversary_temperature)
    a, p = z1.clone().requires_grad_(True), z2.clone().requires_grad_(True)
    terms, statistics = loss.terms(a, p)
    args = (lam, form, single, n.shape[0])
    expected, share = hand_loss(z1.numpy(), z2.numpy(), n.numpy(), tau, *args)
    # the value is L at tau whatever the adversaries' temperature (the logits are float32)
    assert list(terms) == ["contrastive"] and terms["contrastive"].item() == pytest.approx(expected, rel=1e-5)
    assert statistics["adversary_share"].item() == pytest.approx(share, rel=1e-4)
    assert {"positive_score", "negative_score", "mix_score"} <= set(statistics)  # MixCSE's Fig. 4(a)
    terms["contrastive"].backward()
    # the adversaries' gradient: that of the hand loss at their temperature t, by central differences
    t = tau if adversary_temperature is None else adversary_temperature
    numeric = np.zeros(n.shape)
    for index in np.ndindex(*n.shape):
        step = np.zeros(n.shape)
        step[index] = 1e-6
        up = hand_loss(z1.numpy(), z2.numpy(), n.numpy() + step, t, *args)[0]
        down = hand_loss(z1.numpy(), z2.numpy(), n.numpy() - step, t, *args)[0]
        numeric[index] = (up - down) / 2e-6
    np.testing.assert_allclose(loss.adversaries.grad.numpy(), numeric, rtol=1e-4, atol=1e-6)
    if adversary_temperature is not None:
        # not vacuous: at tau the gradient differs; and the encoder's gradient is L's at tau, adversaries fixed
        at_tau = combined(n, tau, lam, form, single)
        a_tau, p_tau = z1.clone().requires_grad_(True), z2.clone().requires_grad_(True)
        at_tau(a_tau, p_tau).backward()
        assert not torch.allclose(at_tau.adversaries.grad, loss.adversaries.grad, rtol=1e-2)
        torch.testing.assert_close(a.grad, a_tau.grad)
        torch.testing.assert_close(p.grad, p_tau.grad)


@pytest.mark.parametrize("form", ["released", "paper"])
def test_adversaries_without_share_leave_mixcse(form):
    """Sentences clustered around e_0, adversaries pointing at -e_0, tau = 0.05: each adversary's
    logit is about -1/tau against a positive's +1/tau, so their share is ~e^-40 and the loss is
    MixCSE's; with ``separate`` the adversaries' term is ~0 and the rest is MixCSE's loss."""
    z1, z2, _ = batch(seed=4)
    offset = torch.zeros(z1.shape[1], dtype=torch.float64)
    offset[0] = 20.0
    z1, z2 = z1 + offset, z2 + offset
    n = -offset.expand(3, -1) + 0.1 * torch.randn(3, z1.shape[1], dtype=torch.float64)
    loss = combined(n, 0.05, 0.2, form, False, adversary_temperature=0.05)
    mixcse = MixCSELoss(temperature=0.05, mix_lambda=0.2, form=form)
    terms, statistics = loss.terms(z1, z2)
    expected_terms, expected_statistics = mixcse.terms(z1, z2)
    assert statistics["adversary_share"].item() < 1e-12
    assert terms["contrastive"].item() == pytest.approx(expected_terms["contrastive"].item(), rel=1e-6)
    for name, value in expected_statistics.items():
        assert torch.equal(statistics[name], value), name
    separate, _ = loss.terms(z1, z2, separate=True)
    assert torch.equal(separate["contrastive"], expected_terms["contrastive"])
    assert abs(separate["adversaries"].item()) < 1e-6


def test_both_papers_are_cited_and_the_configuration_names_the_base():
    loss = AdversarialInfoNCELoss(4, 2, 0.1, base=MixCSELoss(temperature=0.1, form="paper"))
    trainer = SimpleNamespace(parts=[], loss_fn=loss)  # what CSETrainer.citations reads
    assert CSETrainer.citations.fget(trainer) == [citations.ADCSE, citations.MIXCSE]
    config = loss.get_config_dict()
    assert config["base"]["loss"] == "MixCSELoss" and config["base"]["form"] == "paper"
    assert (config["form"], config["temperature"], loss.temperature) == ("released", 0.1, 0.1)
    assert "base" not in AdversarialInfoNCELoss(4, 2).get_config_dict()


def test_bases_that_cannot_join_are_refused():
    with pytest.raises(ValueError, match="form 'paper' has no in-batch negatives"):
        AdversarialInfoNCELoss(4, 2, 0.05, form="paper", base=MixCSELoss(temperature=0.05))
    with pytest.raises(ValueError, match="must be this loss's"):
        AdversarialInfoNCELoss(4, 2, 0.1, base=MixCSELoss(temperature=0.05))
    with pytest.raises(ValueError, match="must be this loss's"):
        AdversarialInfoNCELoss(4, 2, 0.05, base=MixCSELoss(temperature=0.05, gather_across_devices=False))
