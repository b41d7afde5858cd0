"""CoT-BERT's extended InfoNCE (Zhang, Chang and Li, "CoT-BERT: Enhancing Unsupervised Sentence
Representation through Chain-of-Thought", ICANN 2024, Sect. 3.2, Eq. 2-3).

Each sentence x_i has three embeddings: r_i (the anchor template's), r+_i (the positive template's)
and r-_i (the hard-negative template's, "does not mean ... cannot be summarized as"). With sim the
cosine and tau the temperature (0.05),

    a_ij+  = e^{sim(r_i, r+_j)/tau}     a_ij-  = e^{sim(r_i, r-_j)/tau}     a_i+j- = e^{sim(r+_i, r-_j)/tau}
    l_i    = -log( a_ii+ / sum_{j=1..N} (a_ij+ + a_ij- + a_i+j-) )                               (Eq. 3)
    L      = (1/N) sum_i l_i

as the authors' code computes it (ZBWpro/CoT-BERT, models.py l.288-334): one cross-entropy over the N
anchor rows of N x 3N logits ``[sim(r, r+), sim(r, r-), sim(r+, r-)] / tau``, label i. Every j runs
over the whole batch, j = i included in the second and third blocks: a sentence's own negative view
is in its denominator. The third block is CoT-BERT's own (Sect. 3.2, 4.4); ``pair_negatives=False``
drops it (the ablation "without a_i+j-", Table 4), leaving ConPVP's denominator.

``group_size`` splits the batch into consecutive groups of that many sentences, each its own loss
over its own candidates, and averages the groups' losses: the released runs trained with
``nn.DataParallel`` on two GPUs of 128 sentences each, with no process group, so each replica computed
Eq. 3 over its own 128 sentences and the Trainer averaged the two (the method's page, flag C1). None:
one loss over the whole (gathered) batch.
"""

from __future__ import annotations

import functools
import operator

import torch
import torch.nn.functional as F
from torch import nn

from ..distributed import all_gather_with_grad
from .infonce import cosine_logits
from .settings import POSITIVE, Rule, keep_settings

CITATION = """@inproceedings{zhang2024cotbert,
  title = {{CoT-BERT}: Enhancing Unsupervised Sentence Representation through Chain-of-Thought},
  author = {Zhang, Bowen and Chang, Kehua and Li, Chunping},
  booktitle = {Artificial Neural Networks and Machine Learning -- ICANN 2024},
  year = {2024},
}"""

GROUP_SIZE = Rule(lambda value: value is not None and value < 1, "must be at least 1 (or None: the whole batch)")


def extended_logits(
    anchors: torch.Tensor, positives: torch.Tensor, negatives: torch.Tensor, temperature: float, pair_negatives: bool
) -> torch.Tensor:
    """``(N, 3N)`` logits of Eq. 3, row i: ``sim(r_i, r+_j)``, ``sim(r_i, r-_j)`` and ``sim(r+_i, r-_j)``
    over every j, each / tau (``(N, 2N)`` without the last block)."""
    blocks = [cosine_logits(anchors, positives, temperature), cosine_logits(anchors, negatives, temperature)]
    if pair_negatives:
        blocks.append(cosine_logits(positives, negatives, temperature))
    return torch.cat(blocks, dim=1)


class CoTBERTLoss(nn.Module):
    """Args:
    temperature: tau (0.05).
    pair_negatives: the third block a_i+j- (CoT-BERT's; ``False``: Table 4's ablation).
    group_size: sentences per loss (the released two-GPU ``DataParallel`` run: 128 of a batch of 256);
        None: the whole batch.
    gather_across_devices: under ``torch.distributed``, gather the batch first (the groups then run
        over the global batch in rank order).

    Relations: with ``pair_negatives=False`` and no negatives it would be InfoNCE
    (:class:`~cse.losses.InfoNCELoss`); every column added grows each row's loss.

    Example::

        >>> import torch
        >>> from cse.losses.cotbert import CoTBERTLoss
        >>> r, positives, negatives = torch.randn(3, 8, 16).unbind(0)
        >>> loss = CoTBERTLoss(temperature=0.05)
        >>> bool(loss(r, positives, negatives) >= CoTBERTLoss(pair_negatives=False)(r, positives, negatives))
        True
    """

    citation = CITATION

    def __init__(
        self,
        temperature: float = 0.05,
        pair_negatives: bool = True,
        group_size: int | None = None,
        gather_across_devices: bool = True,
    ):
        super().__init__()
        keep_settings(
            self,
            {"temperature": POSITIVE, "group_size": GROUP_SIZE},
            temperature=temperature,
            pair_negatives=pair_negatives,
            group_size=group_size,
            gather_across_devices=gather_across_devices,
        )

    def forward(self, anchors: torch.Tensor, positives: torch.Tensor, negatives: torch.Tensor) -> torch.Tensor:
        if self.gather_across_devices:
            anchors, positives, negatives = map(all_gather_with_grad, (anchors, positives, negatives))
        size = anchors.shape[0] if self.group_size is None else self.group_size
        losses = []
        for a, p, n in zip(anchors.split(size), positives.split(size), negatives.split(size)):
            logits = extended_logits(a, p, n, self.temperature, self.pair_negatives)
            losses.append(F.cross_entropy(logits, torch.arange(a.shape[0], device=a.device)))
        return losses[0] if len(losses) == 1 else functools.reduce(operator.add, losses) / len(losses)

    def get_config_dict(self) -> dict:
        return {
            "temperature": self.temperature,
            "pair_negatives": self.pair_negatives,
            "group_size": self.group_size,
            "gather_across_devices": self.gather_across_devices,
        }
