"""SG-BERT's objectives (Kim, Yoo and Lee, "Self-Guided Contrastive Learning for BERT Sentence
Representations", ACL 2021, Sect. 3): the sentence embedding c_i (BERT_T's last-layer [CLS]) is pulled
towards views h_{i,k} of the same sentence taken from the hidden layers of a frozen copy, BERT_F.

With phi(u, v) = exp(cos(f(u), f(v)) / tau), f the projection head (:class:`ProjectionHead`) and b
the batch:

``base`` (SG, Sect. 3.1): NT-Xent over X = {c_i} u {h_i} (2b vectors, h_i one sampled view),
    L_m = -log( phi(x_m, mu(x_m)) / sum_{n != m} phi(x_m, x_n) ),  averaged over the 2b vectors.
``opt1`` (Sect. 3.2): only c_i are anchors,
    L_i = -log( phi(c_i, h_i) / (sum_{j != i} phi(c_i, c_j) + sum_j phi(c_i, h_j)) ).
``opt2``: L_i = -log( phi(c_i, h_i) / sum_j phi(c_i, h_j) ).
``opt3`` (SG-OPT): every layer's view guides c_i,
    L_{i,k} = -log( phi(c_i, h_{i,k}) / (phi(c_i, h_{i,k}) + sum_{m != i} sum_n phi(c_i, h_{m,n})) ),
    averaged over the b (l + 1) pairs (i, k).

Each adds lambda * L_reg with L_reg = ||theta_F - theta_T||^2 (Eq. of L^base and L^opt), which the
model computes (:meth:`cse.encoders.self_guided.SelfGuidedEncoder.parameter_distance`) and passes in.
Under data parallelism c and the views are gathered, so b is the global batch.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .. import citations
from ..distributed import all_gather_with_grad
from .infonce import cosine_logits
from .settings import NON_NEGATIVE, POSITIVE, keep_settings, one_of

LOSS_VARIANTS = ("base", "opt1", "opt2", "opt3")


class ProjectionHead(nn.Sequential):
    """f: "a two-layered MLP whose hidden size is 4096. Each linear layer in the MLP is followed by a
    GELU function" (footnote 4). Initialised as the released code does: N(0, initializer_range)
    weights, zero biases."""

    def __init__(self, hidden_size: int, width: int = 4096, initializer_range: float = 0.02):
        if width < 1:
            raise ValueError(f"the projection head's width must be positive, got {width}")
        super().__init__(nn.Linear(hidden_size, width), nn.GELU(), nn.Linear(width, width), nn.GELU())
        for layer in (self[0], self[2]):
            nn.init.normal_(layer.weight, mean=0.0, std=initializer_range)
            nn.init.zeros_(layer.bias)


class SelfGuidedLoss(nn.Module):
    """Args:
    variant: ``base`` (SG), ``opt1``, ``opt2`` or ``opt3`` (SG-OPT).
    temperature: tau (0.01, Table 8).
    reg_lambda: lambda, the weight of L_reg (0.1, Table 8).
    gather_across_devices: under ``torch.distributed``, use the global batch.

    ``forward(embeddings, views, parameter_distance)`` takes the projected c_i ``(b, D)``, the
    projected views ``(b, K, D)`` (K = 1, the sampled view, for base/opt1/opt2; every layer of the
    layer set for opt3) and L_reg, a scalar.

    Relations: ``opt2`` with ``reg_lambda=0`` is InfoNCE (:class:`~cse.losses.InfoNCELoss`) between
    c_i and the guiding views; ``base`` is NT-Xent (SimCLR) over the 2b vectors; ``opt3`` (SG-OPT,
    the paper's final objective) is the default.

    Example::

        >>> import torch
        >>> from cse.losses.sgbert import SelfGuidedLoss
        >>> loss = SelfGuidedLoss(variant="opt3", temperature=0.01, reg_lambda=0.1)
        >>> c, views = torch.randn(4, 16), torch.randn(4, 3, 16)  # 3 layer views per sentence (opt3)
        >>> loss(c, views, parameter_distance=torch.tensor(0.0)).shape
        torch.Size([])
        >>> opt2 = SelfGuidedLoss(variant="opt2", reg_lambda=0.0)
        >>> h = torch.randn(4, 16)
        >>> from cse.losses import InfoNCELoss
        >>> bool(torch.isclose(opt2(c, h[:, None], torch.tensor(5.0)), InfoNCELoss(0.01)(c, h)))
        True
    """

    citation = citations.SGBERT

    def __init__(
        self, variant: str = "opt3", temperature: float = 0.01, reg_lambda: float = 0.1, gather_across_devices=True
    ):
        super().__init__()
        keep_settings(
            self,
            {
                "variant": one_of(LOSS_VARIANTS, name="loss variant"),
                "temperature": POSITIVE,
                "reg_lambda": NON_NEGATIVE,
            },
            variant=variant,
            temperature=temperature,
            reg_lambda=reg_lambda,
            gather_across_devices=gather_across_devices,
        )

    @property
    def uses_all_views(self) -> bool:
        """opt3 uses every layer's view; the others one view per sentence, drawn by the sampler."""
        return self.variant == "opt3"

    def contrastive(self, c: torch.Tensor, views: torch.Tensor) -> torch.Tensor:
        b = c.shape[0]
        if self.uses_all_views:
            # logits[i, m, n] = cos(c_i, h_{m,n}) / tau
            logits = cosine_logits(c, views.flatten(0, 1), self.temperature).view(b, b, -1)
            own = torch.eye(b, dtype=torch.bool, device=c.device)
            positives = logits.diagonal().T  # (b, K): i, k
            negatives = logits.masked_fill(own[:, :, None], float("-inf")).flatten(1).logsumexp(1)  # m != i, all n
            return (torch.logaddexp(positives, negatives[:, None]) - positives).mean()
        if views.shape[1] != 1:
            raise ValueError(f"loss {self.variant!r} takes one sampled view per sentence, got {views.shape[1]}")
        h = views[:, 0]
        labels = torch.arange(b, device=c.device)
        if self.variant == "opt2":
            return F.cross_entropy(cosine_logits(c, h, self.temperature), labels)
        self_pairs = torch.eye(b, dtype=torch.bool, device=c.device)
        c_to_c = cosine_logits(c, c, self.temperature).masked_fill(self_pairs, float("-inf"))
        c_to_h = cosine_logits(c, h, self.temperature)
        if self.variant == "opt1":
            return F.cross_entropy(torch.cat([c_to_c, c_to_h], dim=1), labels + b)
        # base: the h_i are anchors too, with the other h_j and every c_j as their normaliser
        h_to_h = cosine_logits(h, h, self.temperature).masked_fill(self_pairs, float("-inf"))
        logits = torch.cat([torch.cat([c_to_c, c_to_h], 1), torch.cat([c_to_h.T, h_to_h], 1)], 0)
        return F.cross_entropy(logits, torch.cat([labels + b, labels]))

    def terms(self, embeddings, views, parameter_distance) -> dict[str, torch.Tensor]:
        """The two terms of the loss, ``{"contrastive": ..., "regularization": lambda * L_reg}``."""
        if self.gather_across_devices:
            embeddings, views = all_gather_with_grad(embeddings), all_gather_with_grad(views)
        contrastive = self.contrastive(embeddings, views)
        return {"contrastive": contrastive, "regularization": self.reg_lambda * parameter_distance}

    def term_weights(self) -> dict[str, float]:
        return {"regularization": self.reg_lambda}

    def forward(self, embeddings: torch.Tensor, views: torch.Tensor, parameter_distance: torch.Tensor) -> torch.Tensor:
        terms = self.terms(embeddings, views, parameter_distance)
        return terms["contrastive"] + terms["regularization"]

    def get_config_dict(self) -> dict:
        return {
            "variant": self.variant,
            "temperature": self.temperature,
            "reg_lambda": self.reg_lambda,
            "gather_across_devices": self.gather_across_devices,
        }
