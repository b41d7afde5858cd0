"""AdCSE's contrastive loss against a bank of learnable negative adversaries (Li et al., DASFAA
2022, Eq. 5).

With h_i = g_q(f_q(x_i)) (encoder q), h_i+ = g_p(f_p(x_i)) (momentum encoder p) and M adversaries
n_1..n_M (the parameters theta_n, randomly initialised), the paper's loss is

    L = -(1/N) sum_i log( e^{sim(h_i, h_i+)/tau} / ( e^{sim(h_i, h_i+)/tau} + sum_j e^{sim(h_i, n_j)/tau} ) )

with sim the cosine and tau the temperature (form ``"paper"``: no in-batch negatives). The authors'
released code (form ``"released"``, which produced the published tables) also puts the other
sentences' positives in the denominator: logits ``[h h+^T (N x N), h n^T (N x M)] / tau`` with label
i. Both normalise the adversaries at use (``n_j / ||n_j||``), which is what the cosine does; the raw
n_j are the parameters, so their gradient passes through the normalisation.

Encoder q descends L (Eq. 6); the adversaries ascend it (Eq. 7): the loss only computes L, the
trainer (``cse.methods.adcse``) steps each side. Under data parallelism the batch is gathered, so N
is the global batch and every process computes the same L and the same adversary gradient.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..distributed import all_gather_with_grad
from .infonce import cosine_logits

LOSS_FORMS = ("released", "paper")


class AdversarialInfoNCELoss(nn.Module):
    """Args:
    hidden_size: d, the size of the embeddings and of each adversary.
    num_adversaries: M, the number of negative adversaries (64 in the paper).
    temperature: tau in Eq. 5 (0.05).
    form: ``"released"`` (in-batch negatives too, the default) or ``"paper"`` (Eq. 5 as printed).
    gather_across_devices: under ``torch.distributed``, use the global batch.
    """

    def __init__(
        self,
        hidden_size: int,
        num_adversaries: int = 64,
        temperature: float = 0.05,
        form: str = "released",
        gather_across_devices: bool = True,
    ):
        super().__init__()
        if num_adversaries < 1:
            raise ValueError(f"num_adversaries must be at least 1, got {num_adversaries}")
        if temperature <= 0:
            raise ValueError(f"temperature must be positive, got {temperature}")
        if form not in LOSS_FORMS:
            raise ValueError(f"form must be one of {', '.join(LOSS_FORMS)}, got {form!r}")
        self.temperature = temperature
        self.form = form
        self.gather_across_devices = gather_across_devices
        # Standard normal, as the released code (and AdCo) draw them; only their directions matter.
        self.adversaries = nn.Parameter(torch.randn(num_adversaries, hidden_size))
        self.statistics: dict[str, torch.Tensor] = {}  # of the last batch, for the training log

    @property
    def num_adversaries(self) -> int:
        return self.adversaries.shape[0]

    def logits(self, anchors: torch.Tensor, positives: torch.Tensor) -> torch.Tensor:
        """``(N, N + M)`` logits with label i (released) or ``(N, 1 + M)`` with label 0 (paper)."""
        adversarial = cosine_logits(anchors, self.adversaries, self.temperature)
        positive = cosine_logits(anchors, positives, self.temperature)
        if self.form == "paper":
            positive = positive.diagonal()[:, None]
        return torch.cat([positive, adversarial], dim=1)

    def forward(self, anchors: torch.Tensor, positives: torch.Tensor) -> torch.Tensor:
        if self.gather_across_devices:
            anchors, positives = all_gather_with_grad(anchors), all_gather_with_grad(positives)
        logits = self.logits(anchors, positives)
        n = logits.shape[0]
        labels = torch.arange(n, device=logits.device) if self.form == "released" else logits.new_zeros(n).long()
        with torch.no_grad():
            # The adversaries' share of each anchor's softmax scales their gradient: logged to show
            # whether they are learning (at tau = 0.05 random ones hold ~e^-20 of it).
            self.statistics = {
                "adversary_share": logits.softmax(-1)[:, -self.num_adversaries :].sum(-1).mean(),
                "adversary_cosine": logits[:, -self.num_adversaries :].mean() * self.temperature,
            }
        return F.cross_entropy(logits, labels)

    def get_config_dict(self) -> dict:
        return {
            "num_adversaries": self.num_adversaries,
            "temperature": self.temperature,
            "form": self.form,
            "gather_across_devices": self.gather_across_devices,
        }
