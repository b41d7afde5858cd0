"""V-advCSE's virtual adversarial loss (Ko, "V-advCSE: Virtual Adversarial Contrastive Learning for
Sentence Embeddings", Eqs. 8-9 and 11-14, Algorithm 1).

For an input x with clean prediction p(y|x, theta_hat) (a constant: no gradient flows through it),

    L_vadv = F[ p(y|x, theta_hat), p(y|x + r_vadv, theta) ]                             (Eq. 8)
    r_vadv = argmax_{||r||_p <= eps} F[ p(y|x, theta_hat), p(y|x + r, theta) ]          (Eq. 9)

with F one of the divergences of Eqs. 11-14 and r_vadv found by projected gradient ascent
(Algorithm 1): r ~ N(0, sigma^2); K times: g = grad_r F, r <- Pi_{||r|| <= eps}(r + eta * g); then
L_vadv = F at the final r. What x, p and r are for sentence embeddings (the word embeddings, the
anchor's softmax over the in-batch candidates) is the trainer's business
(:mod:`cse.methods.vadvcse`): this module sees logits and a closure only.

The text says the norm type (L2 or L-infinity) is used "to constrain the gradient" as well as the
ball: the ascent direction is the steepest-ascent direction of that norm, g / ||g||_2 (Eq. 3) or
sign(g) (Eq. 4), as in PGD (Madry et al., 2018) and SMART (Jiang et al., 2020).
``normalize_gradient=False`` takes the raw gradient, Algorithm 1's line as printed. Algorithm 1
updates r "for all x": g_i is the gradient of example i's own F_i, so the search differentiates the
sum of F over the anchors (the gradient of their mean would shrink each example's raw step to
eta / N; the normalised directions do not depend on that scale).

The paper leaves open how F of the N anchors makes L_vadv: ``reduction="mean"`` (the default, the
usual reading of a per-example divergence, as in SMART and Miyato et al.) or ``"sum"`` over the
batch, N times larger (Sect. 5's L_vadv ~ 100 L_cont is out of reach of a JS mean, at most ln 2).

The divergences are computed in float64: at the small perturbations of the default settings the
clean and perturbed distributions agree to ~1e-5, below float32's resolution of their logarithms.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from .. import citations
from ..distributed import world_size

DIVERGENCES = ("kl", "symmetric_kl", "js")
NORMS = ("l2", "linf")
REDUCTIONS = ("mean", "sum")


@dataclass(frozen=True)
class VirtualAdversarialSearch:
    """Algorithm 1's options, checked when given (the defaults are the paper's).

    Args:
        divergence: F, ``kl``, ``symmetric_kl`` or ``js`` (Eqs. 11-14; JS is the paper's best, Table 5).
        norm: ``l2`` or ``linf``, of the ball and of the ascent step.
        sigma: standard deviation of the random start (Algorithm 1's sigma).
        epsilon: radius of the ball.
        step_size: eta.
        num_steps: K (1 in the paper, after Miyato et al., 2018).
        normalize_gradient: step along the norm's steepest-ascent direction (default) or along g_i,
            the gradient of example i's F_i.
        reduction: ``mean`` or ``sum`` of F over the rows.
    """

    divergence: str = "js"
    norm: str = "linf"
    sigma: float = 1e-5
    epsilon: float = 1e-5
    step_size: float = 1e-3
    num_steps: int = 1
    normalize_gradient: bool = True
    reduction: str = "mean"

    def __post_init__(self):
        if self.divergence not in DIVERGENCES:
            raise ValueError(f"unknown divergence {self.divergence!r}; choose one of {', '.join(DIVERGENCES)}")
        if self.norm not in NORMS:
            raise ValueError(f"unknown norm {self.norm!r}; choose one of {', '.join(NORMS)}")
        if self.sigma < 0 or self.step_size < 0 or self.epsilon <= 0:
            raise ValueError(
                f"need sigma >= 0, step_size >= 0, epsilon > 0; got {self.sigma}, {self.step_size}, {self.epsilon}"
            )
        if self.num_steps < 1:
            raise ValueError(f"num_steps (K) must be at least 1, got {self.num_steps}")
        if self.reduction not in REDUCTIONS:
            raise ValueError(f"unknown reduction {self.reduction!r}; choose one of {', '.join(REDUCTIONS)}")


# The options of the perturbation search but its reduction (which V-advCSE's flags name apart).
SEARCH_OPTIONS = tuple(f.name for f in dataclasses.fields(VirtualAdversarialSearch) if f.name != "reduction")


def _log_probs(logits: torch.Tensor) -> torch.Tensor:
    with torch.autocast(logits.device.type, enabled=False):
        return torch.log_softmax(logits.double(), dim=-1)


def _kl(log_p: torch.Tensor, log_q: torch.Tensor) -> torch.Tensor:
    """KL(P || Q) per row from log-probabilities (finite: softmaxes of finite logits)."""
    return (log_p.exp() * (log_p - log_q)).sum(-1)


def divergence(name: str, p_logits: torch.Tensor, q_logits: torch.Tensor) -> torch.Tensor:
    """F(P, Q) per row, float64, for P = softmax(p_logits), Q = softmax(q_logits):

    ``kl``            F_KL(P || Q) = sum_x P(x) log(P(x) / Q(x))                  (Eq. 11)
    ``symmetric_kl``  (F_KL(P || Q) + F_KL(Q || P)) / 2                          (Eq. 12)
    ``js``            (F_KL(P || M) + F_KL(Q || M)) / 2, M = (P + Q) / 2         (Eqs. 13-14)
    """
    log_p, log_q = _log_probs(p_logits), _log_probs(q_logits)
    if name == "kl":
        return _kl(log_p, log_q)
    if name == "symmetric_kl":
        return 0.5 * (_kl(log_p, log_q) + _kl(log_q, log_p))
    if name == "js":
        log_m = torch.logaddexp(log_p, log_q) - math.log(2.0)
        return 0.5 * (_kl(log_p, log_m) + _kl(log_q, log_m))
    raise ValueError(f"unknown divergence {name!r}; choose one of {', '.join(DIVERGENCES)}")


def _per_example_l2(r: torch.Tensor) -> torch.Tensor:
    """||r_i||_2 over every dimension but the first, shaped to broadcast against r."""
    return r.flatten(1).norm(dim=1).view(-1, *([1] * (r.dim() - 1)))


def project(r: torch.Tensor, epsilon: float, norm: str) -> torch.Tensor:
    """Pi: the nearest point of the ball ||r_i||_p <= epsilon, each example i on its own."""
    if norm == "l2":
        return r * (epsilon / _per_example_l2(r).clamp_min(epsilon))
    if norm == "linf":
        return r.clamp(-epsilon, epsilon)
    raise ValueError(f"unknown norm {norm!r}; choose one of {', '.join(NORMS)}")


def ascent_direction(g: torch.Tensor, norm: str) -> torch.Tensor:
    """The steepest ascent direction of unit ``norm``: g / ||g_i||_2 (Eq. 3) or sign(g) (Eq. 4); a
    zero gradient gives a zero step."""
    if norm == "l2":
        return g / _per_example_l2(g).clamp_min(torch.finfo(g.dtype).tiny)
    if norm == "linf":
        return g.sign()
    raise ValueError(f"unknown norm {norm!r}; choose one of {', '.join(NORMS)}")


def virtual_adversarial_loss(
    clean_logits: torch.Tensor,
    perturbed_logits: Callable[[torch.Tensor], torch.Tensor],
    noise: torch.Tensor,
    mask: torch.Tensor | None = None,
    search: VirtualAdversarialSearch = VirtualAdversarialSearch(),
) -> tuple[torch.Tensor, torch.Tensor]:
    """Algorithm 1: the perturbation r_vadv and L_vadv = mean (or sum) over rows of F(clean, perturbed(r_vadv)).

    Args:
        clean_logits: ``(n, c)`` logits of p(y|x, theta_hat); detached here, so they are a constant.
        perturbed_logits: ``r -> (n, c)`` logits of p(y|x + r, theta).
        noise: a standard normal draw shaped like r; the random start is ``sigma * noise``.
        mask: ``noise``'s leading dimensions, 1 where r may be non-zero (real tokens), 0 elsewhere.
        search: F, ||.||_p, sigma, eps, eta, K, the ascent direction and the reduction.

    Returns ``(r_vadv, L_vadv)``: r detached; L_vadv (float64) carries the gradient of the last
    ``perturbed_logits(r_vadv)`` call only. The search's gradients are taken with respect to r alone,
    so it leaves every other tensor's ``.grad`` untouched. Under data parallelism ``perturbed_logits``
    may gather the global batch with :func:`cse.distributed.all_gather_with_grad`: every process
    then computes the same F, whose gradient that gather returns summed over the processes, so it
    is divided by their number here.
    """
    clean_logits = clean_logits.detach()
    keep = None if mask is None else mask.reshape(*mask.shape, *([1] * (noise.dim() - mask.dim()))).to(noise.dtype)
    masked = (lambda t: t) if keep is None else (lambda t: t * keep)  # noqa: E731
    r = masked(search.sigma * noise)
    for _ in range(search.num_steps):
        r = r.detach().requires_grad_(True)
        with torch.enable_grad():
            f = divergence(search.divergence, clean_logits, perturbed_logits(r)).sum()
            (g,) = torch.autograd.grad(f, r)
        g = g / world_size()
        step = ascent_direction(masked(g), search.norm) if search.normalize_gradient else g
        r = masked(project(r.detach() + search.step_size * step, search.epsilon, search.norm))
    f = divergence(search.divergence, clean_logits, perturbed_logits(r))
    return r, f.sum() if search.reduction == "sum" else f.mean()


class VirtualAdversarialLoss(nn.Module):
    """:func:`virtual_adversarial_loss` as a module; its arguments are those of
    :class:`VirtualAdversarialSearch`, in its order (refused when built: a bad value never reaches a
    step).

    Relations: an added term, lambda * L_vadv on top of InfoNCE (Eq. 10); ``run_vadvcse.py
    --vadv_lambda 0`` leaves InfoNCE (SimCSE with the BatchNorm head). ``divergence="kl"`` is VAT's
    (Miyato et al., 2018), ``symmetric_kl`` with ``linf`` SMART's (Jiang et al., 2020); ``js`` is the
    paper's best (Table 5) and the default.

    Example::

        >>> import torch
        >>> from cse.losses.vadvcse import VirtualAdversarialLoss
        >>> loss = VirtualAdversarialLoss(divergence="js", norm="linf", epsilon=1e-3, step_size=1e-2)
        >>> x, weight = torch.randn(4, 8), torch.randn(8, 5)
        >>> r, value = loss(x @ weight, lambda r: (x + r) @ weight, noise=torch.randn(4, 8))
        >>> bool(r.abs().max() <= 1e-3), bool(value >= 0)  # r in the L-inf ball; F is a divergence
        (True, True)
    """

    citation = citations.VADVCSE

    def __init__(self, *args, **kwargs):
        super().__init__()
        self.search = VirtualAdversarialSearch(*args, **kwargs)

    def forward(self, clean_logits, perturbed_logits, noise, mask=None) -> tuple[torch.Tensor, torch.Tensor]:
        return virtual_adversarial_loss(clean_logits, perturbed_logits, noise, mask, self.search)

    def get_config_dict(self) -> dict:
        return dataclasses.asdict(self.search)
