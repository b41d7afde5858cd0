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
trainer (``cse.methods.adcse``) steps each side. The released code computes the adversaries'
gradient at a temperature of their own (its ``mem_t``, 0.05 like tau by default): with
``adversary_temperature`` set, the adversaries receive the gradient of L at that temperature while
the value and q's gradient stay those of L at tau. Under data parallelism the batch is gathered, so N
is the global batch and every process computes the same L and the same adversary gradient.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .. import citations
from ..distributed import all_gather_with_grad
from .infonce import cosine_logits

LOSS_FORMS = ("released", "paper")


class AdversarialInfoNCELoss(nn.Module):
    """Args:
    hidden_size: d, the size of the embeddings and of each adversary.
    num_adversaries: M, the number of negative adversaries (64 in the paper).
    temperature: tau in Eq. 5 (0.05).
    form: ``"released"`` (in-batch negatives too, the default) or ``"paper"`` (Eq. 5 as printed).
    adversary_temperature: the temperature of the adversaries' gradient (default: ``temperature``).
    gather_across_devices: under ``torch.distributed``, use the global batch.

    Relations: ``form="released"`` is InfoNCE (:class:`~cse.losses.InfoNCELoss`) with the M
    adversaries as extra negatives, so adversaries whose softmax share vanishes leave InfoNCE; without
    adversaries (``run_adcse.py --no_adversaries``) the run uses InfoNCE itself. ``form="paper"`` is
    Eq. 5 as printed (no in-batch negatives).

    Example::

        >>> import torch
        >>> from cse.losses.adcse import AdversarialInfoNCELoss
        >>> loss = AdversarialInfoNCELoss(hidden_size=16, num_adversaries=4)
        >>> anchors = torch.randn(8, 16)
        >>> value = loss(anchors, anchors + 0.01 * torch.randn(8, 16))
        >>> value.backward()  # the adversaries get a gradient; the trainer ascends it (Eq. 7)
        >>> loss.adversaries.grad.shape
        torch.Size([4, 16])
    """

    citation = citations.ADCSE

    def __init__(
        self,
        hidden_size: int,
        num_adversaries: int = 64,
        temperature: float = 0.05,
        form: str = "released",
        adversary_temperature: float | None = None,
        gather_across_devices: bool = True,
    ):
        super().__init__()
        if num_adversaries < 1:
            raise ValueError(f"num_adversaries must be at least 1, got {num_adversaries}")
        adversary_temperature = temperature if adversary_temperature is None else adversary_temperature
        if min(temperature, adversary_temperature) <= 0:
            raise ValueError(f"temperatures must be positive, got {temperature} and {adversary_temperature}")
        if form not in LOSS_FORMS:
            raise ValueError(f"form must be one of {', '.join(LOSS_FORMS)}, got {form!r}")
        self.temperature = temperature
        self.adversary_temperature = adversary_temperature
        self.form = form
        self.in_batch_negatives = form == "released"
        self.gather_across_devices = gather_across_devices
        # Standard normal, as the released code (and AdCo) draw them. Being normalised at use, their
        # gradient scales as 1/||n|| and their change of direction per step as 1/||n||^2: the scale
        # of this draw (||n|| ~ sqrt(d)) acts as part of the adversaries' learning rate.
        self.adversaries = nn.Parameter(torch.randn(num_adversaries, hidden_size))

    @property
    def num_adversaries(self) -> int:
        return self.adversaries.shape[0]

    def logits(self, anchors, positives, adversaries=None, temperature=None) -> torch.Tensor:
        """``(N, N + M)`` logits with label i (released) or ``(N, 1 + M)`` with label 0 (paper)."""
        adversaries = self.adversaries if adversaries is None else adversaries
        temperature = self.temperature if temperature is None else temperature
        adversarial = cosine_logits(anchors, adversaries, temperature)
        positive = cosine_logits(anchors, positives, temperature)
        if not self.in_batch_negatives:
            positive = positive.diagonal()[:, None]
        return torch.cat([positive, adversarial], dim=1)

    def forward(self, anchors: torch.Tensor, positives: torch.Tensor) -> torch.Tensor:
        return self.terms(anchors, positives)[0]["contrastive"]

    def terms(self, anchors: torch.Tensor, positives: torch.Tensor, separate: bool = False):
        """``(terms, statistics)``: the loss as one term ``contrastive``, or, with ``separate``,
        ``contrastive``, q's loss without the adversaries in its softmax (:meth:`without_adversaries`),
        and ``adversaries``, what they add to it (the loss minus that, one more softmax: logging steps
        only); and the adversaries' share of the softmax and mean cosine, for the training log."""
        loss, statistics = self._loss(anchors, positives)
        if not separate:
            return {"contrastive": loss}, statistics
        in_batch = self.without_adversaries(anchors, positives)
        return {"contrastive": in_batch, "adversaries": loss - in_batch}, statistics

    def _loss(self, anchors: torch.Tensor, positives: torch.Tensor):
        if self.gather_across_devices:
            anchors, positives = all_gather_with_grad(anchors), all_gather_with_grad(positives)
        n = anchors.shape[0]
        labels = torch.arange(n, device=anchors.device) if self.in_batch_negatives else anchors.new_zeros(n).long()
        if self.adversary_temperature == self.temperature:
            logits = self.logits(anchors, positives)
            loss = F.cross_entropy(logits, labels)
        else:
            logits = self.logits(anchors, positives, adversaries=self.adversaries.detach())
            adversary_loss = F.cross_entropy(
                self.logits(anchors.detach(), positives.detach(), temperature=self.adversary_temperature), labels
            )
            # value and q's gradient from L at tau; the adversaries' gradient from L at theirs
            loss = F.cross_entropy(logits, labels) + adversary_loss - adversary_loss.detach()
        with torch.no_grad():
            # The adversaries' share of each anchor's softmax scales their gradient: logged to show
            # whether they are learning (at tau = 0.05 random ones hold ~e^-20 of it).
            statistics = {
                "adversary_share": logits.softmax(-1)[:, -self.num_adversaries :].sum(-1).mean(),
                "adversary_cosine": logits[:, -self.num_adversaries :].mean() * self.temperature,
            }
        return loss, statistics

    def without_adversaries(self, anchors: torch.Tensor, positives: torch.Tensor) -> torch.Tensor:
        """L with the adversaries' columns left out of the softmax: the in-batch InfoNCE (released), 0
        (paper: the positive alone). L minus it is what the adversaries add to q's loss."""
        if self.gather_across_devices:
            anchors, positives = all_gather_with_grad(anchors), all_gather_with_grad(positives)
        n = anchors.shape[0]
        labels = torch.arange(n, device=anchors.device) if self.in_batch_negatives else anchors.new_zeros(n).long()
        logits = self.logits(anchors, positives, adversaries=self.adversaries.detach())
        return F.cross_entropy(logits[:, : -self.num_adversaries], labels)

    def get_config_dict(self) -> dict:
        return {
            "num_adversaries": self.num_adversaries,
            "temperature": self.temperature,
            "adversary_temperature": self.adversary_temperature,
            "form": self.form,
            "gather_across_devices": self.gather_across_devices,
        }
