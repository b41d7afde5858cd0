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

**With a base loss** (``base=MixCSELoss(...)``, form ``"released"``): the adversaries become extra
negative columns of the base's own softmax. The base gives its rows (:class:`~cse.losses.LogitBlock`:
logits, labels, and the embedding each row is anchored at); each row a gets the M columns
cos(a, n_j)/tau, and L is the mean over all rows of the cross-entropy. With MixCSE
(:class:`~cse.losses.mixcse.MixCSELoss`, whose notation this follows), ``form="released"`` of the base:

    l_i = -log( e^{S_ii} / ( sum_k e^{S_ik} + sum_k e^{B2_ik} + sum_k e^{B3_ik} + sum_j e^{cos(z1_i, n_j)/tau} ) )

over the N rows (row i is anchored at z1_i = h_i); ``form="paper"`` of the base, over 2N rows,

    l_i  = -log( e^{h_i.h'_i/tau} / ( sum_k e^{h_i.h'_k/tau} + e^{h_i.SG(h~'_i)/tau} + sum_j e^{cos(h_i, n_j)/tau} ) )
    l'_i = -log( e^{h'_i.h_i/tau} / ( sum_k e^{h'_i.h_k/tau} + e^{h'_i.SG(h~_i)/tau} + sum_j e^{cos(h'_i, n_j)/tau} ) )

L = mean of the l_i and l'_i. The rows anchored at h'_i score the adversaries against h'_i: every
column of a row is a candidate of that row's anchor (MixCSE: "both h_i and h'_i can be regarded as
the anchor feature"), and Eq. 5's adversary logits are sim(anchor, n_j); scoring them against h_i
there would put two anchors in one softmax. (Under AdCSE's momentum encoder h'_i = h_i+ carries no
gradient: those rows' adversary columns move the adversaries alone.) The mixtures keep the base's
stop-gradient; tau is the base's (``temperature`` must equal it). With ``adversary_temperature`` t,
the adversaries' gradient is that of the same L with every tau replaced by t (the base's logits
recomputed at t; B2's and B3's zeroed entries stay 0). AdCSE's ``form="paper"`` has no in-batch
negatives, and a base's negatives are in-batch (MixCSE's mixtures mix the batch's sentences), so it
takes no base.
"""

from __future__ import annotations

import torch
from torch import nn

from .. import citations
from ..distributed import all_gather_with_grad
from .infonce import LogitBlock, cosine_logits, mean_cross_entropy

LOSS_FORMS = ("released", "paper")


def stacked_rows(tensors: list[torch.Tensor]) -> torch.Tensor:
    """The blocks' rows stacked (one block: itself, not a copy, which would sum in another order)."""
    return tensors[0] if len(tensors) == 1 else torch.cat(tensors)


class AdversarialInfoNCELoss(nn.Module):
    """Args:
    hidden_size: d, the size of the embeddings and of each adversary.
    num_adversaries: M, the number of negative adversaries (64 in the paper).
    temperature: tau in Eq. 5 (0.05).
    form: ``"released"`` (in-batch negatives too, the default) or ``"paper"`` (Eq. 5 as printed).
    adversary_temperature: the temperature of the adversaries' gradient (default: ``temperature``).
    gather_across_devices: under ``torch.distributed``, use the global batch.
    base: a loss whose softmax the adversaries join as extra negatives (a module with
        ``logit_blocks``, e.g. :class:`~cse.losses.mixcse.MixCSELoss`; released form only), or None.

    Relations: ``form="released"`` is InfoNCE (:class:`~cse.losses.InfoNCELoss`) with the M
    adversaries as extra negatives, so adversaries whose softmax share vanishes leave InfoNCE; without
    adversaries (``run_adcse.py --no_adversaries``) the run uses InfoNCE itself. ``form="paper"`` is
    Eq. 5 as printed (no in-batch negatives). With ``base=MixCSELoss(...)`` it is MixCSE's loss with
    the adversaries in its denominator, and reduces to it as their share vanishes.

    Example::

        >>> import torch
        >>> from cse.losses.adcse import AdversarialInfoNCELoss
        >>> loss = AdversarialInfoNCELoss(hidden_size=16, num_adversaries=4)
        >>> anchors = torch.randn(8, 16)
        >>> value = loss(anchors, anchors + 0.01 * torch.randn(8, 16))
        >>> value.backward()  # the adversaries get a gradient; the trainer ascends it (Eq. 7)
        >>> loss.adversaries.grad.shape
        torch.Size([4, 16])
        >>> from cse.losses.mixcse import MixCSELoss  # AdCSE's adversaries in MixCSE's softmax
        >>> mixed = AdversarialInfoNCELoss(16, 4, base=MixCSELoss(temperature=0.05))
        >>> sorted(mixed.terms(anchors, anchors + 0.01 * torch.randn(8, 16))[1])
        ['adversary_cosine', 'adversary_share', 'mix_score', 'negative_score', 'positive_score']
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
        base: nn.Module | None = None,
    ):
        super().__init__()
        if num_adversaries < 1:
            raise ValueError(f"num_adversaries must be at least 1, got {num_adversaries}")
        adversary_temperature = temperature if adversary_temperature is None else adversary_temperature
        if min(temperature, adversary_temperature) <= 0:
            raise ValueError(f"temperatures must be positive, got {temperature} and {adversary_temperature}")
        if form not in LOSS_FORMS:
            raise ValueError(f"form must be one of {', '.join(LOSS_FORMS)}, got {form!r}")
        if base is not None:
            if form != "released":
                raise ValueError(
                    f"form {form!r} has no in-batch negatives, and a base's negatives are in-batch: use form='released'"
                )
            if (base.temperature, base.gather_across_devices) != (temperature, gather_across_devices):
                raise ValueError(
                    f"the base's temperature and gather_across_devices ({base.temperature}, "
                    f"{base.gather_across_devices}) must be this loss's ({temperature}, {gather_across_devices}): "
                    "the adversaries join the base's softmax"
                )
        self.temperature = temperature
        self.adversary_temperature = adversary_temperature
        self.form = form
        self.in_batch_negatives = form == "released"
        self.gather_across_devices = gather_across_devices
        self.base = base
        # Standard normal, as the released code (and AdCo) draw them. Being normalised at use, their
        # gradient scales as 1/||n|| and their change of direction per step as 1/||n||^2: the scale
        # of this draw (||n|| ~ sqrt(d)) acts as part of the adversaries' learning rate.
        self.adversaries = nn.Parameter(torch.randn(num_adversaries, hidden_size))

    @property
    def num_adversaries(self) -> int:
        return self.adversaries.shape[0]

    def logit_blocks(self, anchors, positives, temperature: float):
        """``(blocks, statistics)`` of the softmax without the adversaries, on the (gathered) batch: the
        base's, or Eq. 5's own: ``(N, N)`` logits with label i (released) or ``(N, 1)`` with label 0
        (paper), every row anchored at h_i."""
        if self.base is not None:
            return self.base.logit_blocks(anchors, positives, temperature)
        positive = cosine_logits(anchors, positives, temperature)
        n = anchors.shape[0]
        if self.in_batch_negatives:
            return [LogitBlock(positive, torch.arange(n, device=anchors.device), anchors)], {}
        return [LogitBlock(positive.diagonal()[:, None], anchors.new_zeros(n).long(), anchors)], {}

    def adversarial_blocks(self, anchors, positives, adversaries, temperature: float):
        """:meth:`logit_blocks` with the M columns cos(row's anchor, n_j) / temperature appended to
        each row."""
        if self.base is None:
            # Eq. 5's adversary columns first, as they have always been computed: the order in which
            # the anchors' gradient sums its parts, hence its rounding, stays the same
            adversarial = cosine_logits(anchors, adversaries, temperature)
            (block,), statistics = self.logit_blocks(anchors, positives, temperature)
            return [block._replace(logits=torch.cat([block.logits, adversarial], dim=1))], statistics
        blocks, statistics = self.logit_blocks(anchors, positives, temperature)
        return [
            block._replace(logits=torch.cat([block.logits, cosine_logits(block.anchors, adversaries, temperature)], 1))
            for block in blocks
        ], statistics

    def forward(self, anchors: torch.Tensor, positives: torch.Tensor) -> torch.Tensor:
        return self.terms(anchors, positives)[0]["contrastive"]

    def term_weights(self) -> dict[str, float]:
        """``adversaries`` is a split of the one softmax, not a weighted term of its own."""
        return {"adversaries": 1.0}

    def terms(self, anchors: torch.Tensor, positives: torch.Tensor, separate: bool = False):
        """``(terms, statistics)``: the loss as one term ``contrastive``, or, with ``separate``,
        ``contrastive``, q's loss without the adversaries in its softmax (:meth:`without_adversaries`),
        and ``adversaries``, what they add to it (the loss minus that, one more softmax: logging steps
        only); and the base's statistics with the adversaries' share of the softmax and mean cosine,
        for the training log."""
        loss, statistics = self._loss(anchors, positives)
        if not separate:
            return {"contrastive": loss}, statistics
        in_batch = self.without_adversaries(anchors, positives)
        return {"contrastive": in_batch, "adversaries": loss - in_batch}, statistics

    def _loss(self, anchors: torch.Tensor, positives: torch.Tensor):
        if self.gather_across_devices:
            anchors, positives = all_gather_with_grad(anchors), all_gather_with_grad(positives)
        if self.adversary_temperature == self.temperature:
            blocks, statistics = self.adversarial_blocks(anchors, positives, self.adversaries, self.temperature)
            loss = mean_cross_entropy(blocks)
        else:
            constants = self.adversaries.detach()
            blocks, statistics = self.adversarial_blocks(anchors, positives, constants, self.temperature)
            at_t, _ = self.adversarial_blocks(
                anchors.detach(), positives.detach(), self.adversaries, self.adversary_temperature
            )
            adversary_loss = mean_cross_entropy(at_t)
            # value and q's gradient from L at tau; the adversaries' gradient from L at theirs
            loss = mean_cross_entropy(blocks) + adversary_loss - adversary_loss.detach()
        with torch.no_grad():
            # The adversaries' share of each anchor's softmax scales their gradient: logged to show
            # whether they are learning (at tau = 0.05 random ones hold ~e^-20 of it).
            m = self.num_adversaries
            shares = stacked_rows([block.logits.softmax(-1)[:, -m:] for block in blocks])
            cosines = stacked_rows([block.logits[:, -m:] for block in blocks])
            statistics = {
                **statistics,
                "adversary_share": shares.sum(-1).mean(),
                "adversary_cosine": cosines.mean() * self.temperature,
            }
        return loss, statistics

    def without_adversaries(self, anchors: torch.Tensor, positives: torch.Tensor) -> torch.Tensor:
        """L with the adversaries' columns left out of the softmax: the in-batch InfoNCE (released), 0
        (paper: the positive alone), or the base's loss. L minus it is what the adversaries add to q's
        loss."""
        if self.gather_across_devices:
            anchors, positives = all_gather_with_grad(anchors), all_gather_with_grad(positives)
        return mean_cross_entropy(self.logit_blocks(anchors, positives, self.temperature)[0])

    def get_config_dict(self) -> dict:
        config = {
            "num_adversaries": self.num_adversaries,
            "temperature": self.temperature,
            "adversary_temperature": self.adversary_temperature,
            "form": self.form,
            "gather_across_devices": self.gather_across_devices,
        }
        if self.base is not None:
            config["base"] = {"loss": type(self.base).__name__, **self.base.get_config_dict()}
        return config
