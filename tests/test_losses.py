import math

import numpy as np
import pytest
import torch

from cse.losses import InfoNCELoss, cosine_logits


def hand_infonce(a, p, tau):
    """Eq. 1 of SimCSE with explicit float64 loops."""
    a, p = np.asarray(a, dtype=np.float64), np.asarray(p, dtype=np.float64)
    cos = lambda x, y: float(x @ y / math.sqrt((x @ x) * (y @ y)))  # noqa: E731
    total = 0.0
    for i in range(len(a)):
        num = math.exp(cos(a[i], p[i]) / tau)
        den = sum(math.exp(cos(a[i], p[j]) / tau) for j in range(len(p)))
        total += -math.log(num / den)
    return total / len(a)


@pytest.mark.parametrize("tau", [0.05, 0.1, 1.0])
def test_infonce_equals_hand_computation(tau):
    g = torch.Generator().manual_seed(0)
    a, p = torch.randn(6, 5, generator=g), torch.randn(6, 5, generator=g)
    loss = InfoNCELoss(temperature=tau)(a, p)
    assert loss.item() == pytest.approx(hand_infonce(a.numpy(), p.numpy(), tau), rel=1e-5)


def test_temperature_scales_the_logits():
    g = torch.Generator().manual_seed(1)
    a, p = torch.randn(4, 3, generator=g), torch.randn(4, 3, generator=g)
    # logits at tau are the tau = 1 logits (plain cosines) divided by tau
    torch.testing.assert_close(cosine_logits(a, p, 0.05), cosine_logits(a, p, 1.0) / 0.05)
    cos01 = float(torch.nn.functional.cosine_similarity(a[0], p[1], dim=0))
    assert cosine_logits(a, p, 0.1)[0, 1].item() == pytest.approx(cos01 / 0.1, rel=1e-5)


def test_infonce_limits():
    # identical views, orthogonal sentences: the positive dominates as tau -> 0 and the loss -> 0;
    # at tau -> infinity every candidate is equally likely and the loss -> log N
    a = torch.eye(4)
    assert InfoNCELoss(1e-3)(a, a).item() < 1e-6
    assert InfoNCELoss(1e6)(a, a).item() == pytest.approx(math.log(4), rel=1e-5)


def test_infonce_is_scale_invariant_and_float32_under_bf16():
    g = torch.Generator().manual_seed(2)
    a, p = torch.randn(5, 8, generator=g), torch.randn(5, 8, generator=g)
    loss = InfoNCELoss()(a, p)
    assert InfoNCELoss()(3 * a, 0.5 * p).item() == pytest.approx(loss.item(), rel=1e-5)
    assert cosine_logits(a.bfloat16(), p.bfloat16(), 0.05).dtype == torch.float32


def test_logits_stay_float32_inside_autocast():
    g = torch.Generator().manual_seed(4)
    a, p = torch.randn(6, 16, generator=g), torch.randn(6, 16, generator=g)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = cosine_logits(a, p, 0.05)
        loss = InfoNCELoss(0.05)(a, p)
    assert logits.dtype == torch.float32
    assert loss.item() == pytest.approx(hand_infonce(a.numpy(), p.numpy(), 0.05), rel=1e-5)


def test_infonce_gradient_matches_float64_autograd():
    g = torch.Generator().manual_seed(3)
    a = torch.randn(4, 6, generator=g, dtype=torch.float64, requires_grad=True)
    p = torch.randn(4, 6, generator=g, dtype=torch.float64, requires_grad=True)
    an, pn = a / a.norm(dim=1, keepdim=True), p / p.norm(dim=1, keepdim=True)
    logits = an @ pn.T / 0.05
    ref = (-(torch.diagonal(logits) - torch.logsumexp(logits, dim=1))).mean()
    ref.backward()
    a32, p32 = a.detach().float().requires_grad_(), p.detach().float().requires_grad_()
    InfoNCELoss(0.05)(a32, p32).backward()
    torch.testing.assert_close(a32.grad.double(), a.grad, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(p32.grad.double(), p.grad, rtol=1e-4, atol=1e-5)


def test_bad_temperature():
    with pytest.raises(ValueError, match="temperature"):
        InfoNCELoss(0.0)
