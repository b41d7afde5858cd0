"""MixCSE's contrastive loss with mixed hard negatives (Zhang et al., "Unsupervised Sentence
Representation via Contrastive Learning with Mixing Negatives", AAAI 2022, Sect. "MixCSE").

Notation: h_i and h'_i are the two dropout views of sentence i (``anchors`` and ``positives``), tau
the temperature (0.05), lambda the mixing coefficient ``mix_lambda`` (0.2). For each sentence the
"random in-batch negative" j is the **next row of the batch**, cyclically: j = i + 1 mod N. The
batch is a random sample of the shuffled corpus, so the next row is a random other sentence; the
authors' code pairs rows the same way, and a fixed rule keeps seeds reproducible. Under data
parallelism the batch is gathered first, so N and "next row" run over the **global** batch in rank
order (the last sentence of rank r mixes with the first of rank r + 1, the last of the last rank
with the first of rank 0): every process computes the loss of one process on the concatenated batch.

``form="paper"`` (the text). With unit vectors h, the mixed negative of anchor h_i (unnumbered
equation after Eq. 1, the paper's h~'_{i,j}) is

    h~'_i = (lambda h'_i + (1 - lambda) h'_j) / ||lambda h'_i + (1 - lambda) h'_j||

and it joins SimCSE's denominator through a stop-gradient SG(.) (the paper's L_mix):

    l_i = -log( e^{h_i.h'_i/tau} / ( sum_k e^{h_i.h'_k/tau} + e^{h_i.SG(h~'_i)/tau} ) ).

"Both h_i and h'_i can be regarded as the anchor feature", with h~_i built from h_i and h_j the
same way, so the loss is the mean over 2N rows: N anchored at h_i (candidates h'_k) and N anchored
at h'_i (candidates h_k, mixed negative h~_i).

``form="released"`` (the authors' code, which produced the published tables; the default). One
cross-entropy over N rows (label i) of N x 3N logits ``[S, B2, B3]``, each entry a cosine / tau of
the raw (not unit-normalised) embeddings z1 = h, z2 = h':

    S[i, k]  = cos(z1_i, z2_k)                     SimCSE's logits
    B2[i, k] = cos(z1_i, SG(m_k)),  m_k = lambda z2_k + (1 - lambda) z2_{k+1};  B2[i, i-1] = 0
    B3[i, k] = cos(SG(w_i), z2_k),  w_i = lambda z1_i + (1 - lambda) z1_{i+1};  B3[i, i+1] = 0

B2's diagonal holds the paper's h_i.h~'_i; B3's diagonal holds h'_i.h~_i, the second anchor
direction moved into row i. The other entries are further mixtures of two sentences. The one
entry of each block that pairs a mixture with the positive it mostly contains (weight
1 - lambda = 0.8: m_{i-1} holds z2_i, w_i holds z1_{i+1} whose positive is z2_{i+1}) is set to 0,
not -inf, so it still adds e^0 = 1 to the denominator, as in that code.

Ablations (Table 3): ``single`` (MixCSE_single) keeps only the mixed negatives of anchor h_i (paper:
no h~_i in the h'_i rows; released: no B3); ``stop_gradient=False`` (MixCSE_wo sg) lets the gradient
flow through the mixtures.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .. import citations
from ..distributed import all_gather_with_grad
from .infonce import LogitBlock, cosine_logits, mean_cross_entropy
from .settings import POSITIVE, Rule, keep_settings, one_of

LOSS_FORMS = ("released", "paper")
# lambda, the weight of the positive in the mixed negative (a refusal says why 1 is out).
MIX_LAMBDA = Rule(
    lambda value: not 0.0 <= value < 1.0, "must lie in [0, 1)", why=": at 1 the mixed negative is the positive itself"
)


def next_row(x: torch.Tensor) -> torch.Tensor:
    """Row i holds x[i + 1 mod N]: each sentence's "random in-batch negative"."""
    return torch.roll(x, shifts=-1, dims=0)


def mix(x: torch.Tensor, mix_lambda: float) -> torch.Tensor:
    """lambda x_i + (1 - lambda) x_{i+1}, row by row."""
    return mix_lambda * x + (1.0 - mix_lambda) * next_row(x)


class MixCSELoss(nn.Module):
    """Args:
    temperature: tau (0.05).
    mix_lambda: lambda, the weight of the anchor's own positive in its mixed negative (0.2).
    form: ``"released"`` (the authors' code, default) or ``"paper"`` (L_mix as printed, both anchors).
    single: mixed negatives for h_i only (MixCSE_single).
    stop_gradient: SG on the mixed negatives (``False``: MixCSE_wo sg).
    gather_across_devices: under ``torch.distributed``, use the global batch.

    Relations: InfoNCE (:class:`~cse.losses.InfoNCELoss`) with extra, stop-gradient mixed negatives
    in the denominator; no flag removes them (SimCSE is ``run_simcse.py``). ``form="released"`` is
    the authors' code (default, the published tables), ``form="paper"`` L_mix as printed;
    ``single=True`` is MixCSE_single and ``stop_gradient=False`` MixCSE_wo sg (Table 3).
    ``AdversarialInfoNCELoss(..., base=MixCSELoss(...))`` (:mod:`cse.losses.adcse`) adds AdCSE's
    adversaries to its softmax, row by row (:meth:`logit_blocks`).

    Example::

        >>> import torch
        >>> from cse.losses.mixcse import MixCSELoss
        >>> loss = MixCSELoss(temperature=0.05, mix_lambda=0.2)
        >>> anchors = torch.randn(8, 16)
        >>> loss(anchors, anchors + 0.01 * torch.randn(8, 16)).shape
        torch.Size([])
        >>> terms, statistics = loss.terms(anchors, anchors + 0.01 * torch.randn(8, 16))
        >>> list(terms), sorted(statistics)  # the one term; Fig. 4(a)'s batch means
        (['contrastive'], ['mix_score', 'negative_score', 'positive_score'])
    """

    citation = citations.MIXCSE

    def __init__(
        self,
        temperature: float = 0.05,
        mix_lambda: float = 0.2,
        form: str = "released",
        single: bool = False,
        stop_gradient: bool = True,
        gather_across_devices: bool = True,
    ):
        super().__init__()
        keep_settings(
            self,
            {"temperature": POSITIVE, "mix_lambda": MIX_LAMBDA, "form": one_of(LOSS_FORMS)},
            temperature=temperature,
            mix_lambda=mix_lambda,
            form=form,
            single=single,
            stop_gradient=stop_gradient,
            gather_across_devices=gather_across_devices,
        )

    def _mixed(self, x: torch.Tensor) -> torch.Tensor:
        mixed = mix(x, self.mix_lambda)
        return mixed.detach() if self.stop_gradient else mixed

    def forward(self, anchors: torch.Tensor, positives: torch.Tensor) -> torch.Tensor:
        return self.terms(anchors, positives)[0]["contrastive"]

    def terms(self, anchors: torch.Tensor, positives: torch.Tensor, separate: bool = False):
        """``({"contrastive": loss}, statistics)``: the loss (one term: the mixed negatives change its
        denominator, they add no term; ``separate`` changes nothing) and Fig. 4(a)'s batch means for
        the training log."""
        if self.gather_across_devices:
            anchors, positives = all_gather_with_grad(anchors), all_gather_with_grad(positives)
        blocks, statistics = self.logit_blocks(anchors, positives)
        return {"contrastive": mean_cross_entropy(blocks)}, statistics

    def logit_blocks(self, anchors: torch.Tensor, positives: torch.Tensor, temperature: float | None = None):
        """``(blocks, statistics)`` of the (gathered) batch: the rows of the loss as
        :class:`~cse.losses.LogitBlock`\\ s, whose :func:`~cse.losses.mean_cross_entropy` is the loss,
        and Fig. 4(a)'s batch means. ``released``: one block of N x 3N logits, row i anchored at z1_i;
        ``paper``: the N rows anchored at h_i, then the N anchored at h'_i. ``temperature`` replaces
        tau throughout (the zeroed entries of B2 and B3 stay 0)."""
        temperature = self.temperature if temperature is None else temperature
        n = anchors.shape[0]
        if n < 2:
            raise ValueError(f"MixCSE needs at least 2 sentences per (global) batch to mix negatives, got {n}")
        # float32 whatever the autocast dtype: at tau = 0.05 rounding errors are magnified twentyfold
        z1, z2 = anchors.float(), positives.float()
        similarities = cosine_logits(z1, z2, temperature)
        labels = torch.arange(n, device=z1.device)
        if self.form == "released":
            blocks, mix_scores = self._released(z1, z2, similarities, labels, temperature)
        else:
            blocks, mix_scores = self._paper(z1, z2, similarities, labels, temperature)
        with torch.no_grad():
            # Fig. 4(a): batch means of h_i.h'_i/tau, h_i.h'_j/tau (j != i) and the anchors' mixed scores
            # (the off-diagonal mean from sums: selecting it with a mask would wait for the GPU)
            diagonal = similarities.diagonal()
            statistics = {
                "positive_score": diagonal.mean(),
                "negative_score": (similarities.sum() - diagonal.sum()) / (n * (n - 1)),
                "mix_score": torch.cat(mix_scores).mean(),
            }
        return blocks, statistics

    def _released(self, z1, z2, similarities, labels, temperature):
        eye = torch.eye(len(labels), dtype=torch.bool, device=z1.device)
        # B2[i, i-1] and B3[i, i+1] pair a mixture with the positive that makes up 1 - lambda of it
        b2 = cosine_logits(z1, self._mixed(z2), temperature).masked_fill(eye.roll(-1, dims=1), 0.0)
        blocks, mix_scores = [similarities, b2], [b2.diagonal()]
        if not self.single:
            b3 = cosine_logits(self._mixed(z1), z2, temperature).masked_fill(eye.roll(1, dims=1), 0.0)
            blocks.append(b3)
            mix_scores.append(b3.diagonal())
        return [LogitBlock(torch.cat(blocks, dim=1), labels, z1)], mix_scores

    def _paper(self, z1, z2, similarities, labels, temperature):
        h, h_prime = F.normalize(z1, dim=-1), F.normalize(z2, dim=-1)
        # h_i . h~'_i / tau: the anchor h_i against its own mixed negative
        mixed_for_h = (h * F.normalize(self._mixed(h_prime), dim=-1)).sum(-1) / temperature
        mix_scores = [mixed_for_h]
        reverse = similarities.T  # rows anchored at h'_i: h'_i . h_k / tau
        if not self.single:
            mixed_for_h_prime = (h_prime * F.normalize(self._mixed(h), dim=-1)).sum(-1) / temperature
            reverse = torch.cat([reverse, mixed_for_h_prime[:, None]], dim=1)
            mix_scores.append(mixed_for_h_prime)
        anchored_at_h = LogitBlock(torch.cat([similarities, mixed_for_h[:, None]], dim=1), labels, z1)
        return [anchored_at_h, LogitBlock(reverse, labels, z2)], mix_scores

    def get_config_dict(self) -> dict:
        return {
            "temperature": self.temperature,
            "mix_lambda": self.mix_lambda,
            "form": self.form,
            "single": self.single,
            "stop_gradient": self.stop_gradient,
            "gather_across_devices": self.gather_across_devices,
        }
