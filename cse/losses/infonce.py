"""In-batch InfoNCE, the unsupervised SimCSE objective (Gao et al., 2021, Eq. 1).

For a batch of N sentences with two views h_i and h_i+ (dropout noise),

    l_i = -log( exp(sim(h_i, h_i+)/tau) / sum_j exp(sim(h_i, h_j+)/tau) ),   L = mean_i l_i,

with sim the cosine similarity and tau the temperature (0.05). Under data parallelism the
candidates h_j+ (and anchors) come from every rank, so N is the global batch.
"""

from __future__ import annotations

import functools
import operator
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from .. import citations
from ..distributed import all_gather_with_grad
from .settings import POSITIVE, keep_settings


def cosine_logits(anchors: torch.Tensor, candidates: torch.Tensor, temperature: float) -> torch.Tensor:
    """``cos(anchors_i, candidates_j) / temperature`` in float32, inside autocast too: at tau = 0.05
    a bf16 cosine's rounding error would be magnified twentyfold in the logits."""
    with torch.autocast(anchors.device.type, enabled=False):
        a = F.normalize(anchors.float(), dim=-1)
        c = F.normalize(candidates.float(), dim=-1)
        return a @ c.T / temperature


class LogitBlock(NamedTuple):
    """Rows of a softmax cross-entropy: ``logits`` (rows, candidates), each a score / temperature;
    ``labels`` (rows,), the column of each row's positive; ``anchors`` (rows, d), the embedding each
    row scores its candidates against, so that a negative n appended to the row scores
    ``cos(anchor, n) / temperature`` (:class:`~cse.losses.adcse.AdversarialInfoNCELoss` with a base)."""

    logits: torch.Tensor
    labels: torch.Tensor
    anchors: torch.Tensor


def mean_cross_entropy(blocks: list[LogitBlock]) -> torch.Tensor:
    """The mean of the blocks' mean cross-entropies: the mean over all their rows, the blocks holding
    one row per sentence each."""
    losses = [F.cross_entropy(block.logits, block.labels) for block in blocks]
    return losses[0] if len(losses) == 1 else functools.reduce(operator.add, losses) / len(losses)


class InfoNCELoss(nn.Module):
    """Args:
    temperature: tau in Eq. 1.
    gather_across_devices: under ``torch.distributed``, use the global batch as negatives.

    Relations: the base objective of every method here. ``AdversarialInfoNCELoss`` without adversaries
    (``run_adcse.py --no_adversaries``), ``SelfGuidedLoss(variant="opt2", reg_lambda=0)`` with the
    second view as the guide, and V-advCSE at ``--vadv_lambda 0`` reduce to it.

    Example::

        >>> import torch
        >>> from cse.losses import InfoNCELoss
        >>> loss = InfoNCELoss(temperature=0.05)
        >>> anchors = torch.randn(8, 16)
        >>> loss(anchors, anchors + 0.01 * torch.randn(8, 16)).shape
        torch.Size([])
        >>> # orthogonal sentences, identical views: each row is log(1 + 3 e^{-1/tau})
        >>> bool(abs(loss(torch.eye(4), torch.eye(4)) - torch.log(1 + 3 * torch.exp(torch.tensor(-20.0)))) < 1e-7)
        True
    """

    citation = citations.SIMCSE

    def __init__(self, temperature: float = 0.05, gather_across_devices: bool = True):
        super().__init__()
        keep_settings(
            self, {"temperature": POSITIVE}, temperature=temperature, gather_across_devices=gather_across_devices
        )

    def forward(self, anchors: torch.Tensor, positives: torch.Tensor) -> torch.Tensor:
        if self.gather_across_devices:
            anchors, positives = all_gather_with_grad(anchors), all_gather_with_grad(positives)
        logits = cosine_logits(anchors, positives, self.temperature)
        labels = torch.arange(logits.shape[0], device=logits.device)
        return F.cross_entropy(logits, labels)

    def get_config_dict(self) -> dict:
        return {"temperature": self.temperature, "gather_across_devices": self.gather_across_devices}
