"""ESimCSE's contrastive loss: InfoNCE whose negatives are the batch's positives and a queue of
earlier batches' sentence embeddings (Wu et al., "ESimCSE: Enhanced Sample Building Method for
Contrastive Learning of Unsupervised Sentence Embedding", COLING 2022, Sect. 3.2, "momentum
contrast").

With h_i and h_i+ the two views' embeddings of sentence i (the anchor, view 0, and the positive,
view 1: the sentence with some tokens repeated), q_1..q_M the queue, sim the cosine and tau the
temperature (0.05):

    l_i = -log( e^{sim(h_i, h_i+)/tau} / ( sum_{j=1..N} e^{sim(h_i, h_j+)/tau} + sum_{m=1..M} e^{sim(h_i, q_m)/tau} ) )
    L   = (1/N) sum_i l_i

as the authors' code computes it (ESimCSE/esimcse/models.py, ``cos_sim_neg``): N x (N + M)
logits ``[sim(z1, z2), sim(z1, queue)] / tau``, label i, one direction (rows anchored at view 0;
the symmetric term is commented out there). The queue rows are constants (detached: they come from
the momentum encoder under ``no_grad``) and are stored raw, not normalised: the cosine normalises
them, so their scale does not matter. With an empty queue (the first step) L is SimCSE's InfoNCE.

The queue itself, what fills it and when, is the method's (:mod:`cse.methods.esimcse`): this module
reads :attr:`ESimCSELoss.queue` as it is when the loss is computed. Under data parallelism the batch
is gathered (N is the global batch), and the queue is what the method keeps: the same on every
process (its default) or each process's own.

**With a base loss** (``base=MixCSELoss(...)``): the queue's M columns cos(a, q_m)/tau are appended to
each row of the base's softmax (:class:`~cse.losses.LogitBlock`, each row with the embedding a it is
anchored at), and L is the mean cross-entropy over all the base's rows: the queue joins MixCSE's
denominators beside its mixed negatives.
"""

from __future__ import annotations

import torch
from torch import nn

from ..distributed import all_gather_with_grad
from .infonce import LogitBlock, cosine_logits, mean_cross_entropy

CITATION = """@inproceedings{wu2022esimcse,
  title = {{ESimCSE}: Enhanced Sample Building Method for Contrastive Learning of Unsupervised Sentence Embedding},
  author = {Wu, Xing and Gao, Chaochen and Zang, Liangjun and Han, Jizhong and Wang, Zhongyuan and Hu, Songlin},
  booktitle = {Proceedings of the 29th International Conference on Computational Linguistics (COLING 2022)},
  pages = {3898--3907},
  year = {2022},
}"""


class ESimCSELoss(nn.Module):
    """Args:
    temperature: tau (0.05).
    gather_across_devices: under ``torch.distributed``, use the global batch.
    base: a loss whose softmax the queue joins (a module with ``logit_blocks``, e.g.
        :class:`~cse.losses.mixcse.MixCSELoss`), or None: InfoNCE's.

    ``queue``: the queue's rows, ``(M, d)``, raw (the cosine normalises them), or None before the
    first batch is enqueued; set by the method before each loss.

    Relations: with an empty queue it is InfoNCE (:class:`~cse.losses.InfoNCELoss`), or the base's loss;
    a row's loss grows with every queue row added (one more term in its denominator).

    Example::

        >>> import torch
        >>> from cse.losses.esimcse import ESimCSELoss
        >>> loss = ESimCSELoss(temperature=0.05)
        >>> anchors = torch.randn(8, 16)
        >>> positives = anchors + 0.01 * torch.randn(8, 16)
        >>> without = loss(anchors, positives)  # no queue yet: InfoNCE
        >>> loss.queue = torch.randn(5, 16)      # 5 earlier sentences' momentum embeddings
        >>> terms, statistics = loss.terms(anchors, positives)
        >>> list(terms), sorted(statistics), bool(terms["contrastive"] >= without)
        (['contrastive'], ['queue_share'], True)
    """

    citation = CITATION

    def __init__(self, temperature: float = 0.05, gather_across_devices: bool = True, base: nn.Module | None = None):
        super().__init__()
        if temperature <= 0:
            raise ValueError(f"temperature must be positive, got {temperature}")
        if base is not None and (base.temperature, base.gather_across_devices) != (temperature, gather_across_devices):
            raise ValueError(
                f"the base's temperature and gather_across_devices ({base.temperature}, {base.gather_across_devices}) "
                f"must be this loss's ({temperature}, {gather_across_devices}): the queue joins the base's softmax"
            )
        self.temperature = temperature
        self.gather_across_devices = gather_across_devices
        self.base = base
        self.queue: torch.Tensor | None = None

    def logit_blocks(self, anchors, positives, temperature: float | None = None):
        """``(blocks, statistics)`` of the softmax without the queue, on the (gathered) batch: the
        base's, or InfoNCE's ``(N, N)`` logits with label i, rows anchored at the anchors."""
        temperature = self.temperature if temperature is None else temperature
        if self.base is not None:
            return self.base.logit_blocks(anchors, positives, temperature)
        labels = torch.arange(anchors.shape[0], device=anchors.device)
        return [LogitBlock(cosine_logits(anchors, positives, temperature), labels, anchors)], {}

    def forward(self, anchors: torch.Tensor, positives: torch.Tensor) -> torch.Tensor:
        return self.terms(anchors, positives)[0]["contrastive"]

    def term_weights(self) -> dict[str, float]:
        """``queue`` is a split of the one softmax (:meth:`terms` with ``separate``), not a weighted term."""
        return {"queue": 1.0}

    def terms(self, anchors: torch.Tensor, positives: torch.Tensor, separate: bool = False):
        """``(terms, statistics)``: the loss as one term ``contrastive``, or, with ``separate`` (the
        logging steps of ``--log_term_gradients``), ``contrastive`` without the queue in the softmax and
        ``queue``, what the queue adds to it; the statistics: the base's, and ``queue_share``, the mean
        share of each row's softmax that falls on the queue (0 without one)."""
        if self.gather_across_devices:
            anchors, positives = all_gather_with_grad(anchors), all_gather_with_grad(positives)
        blocks, statistics = self.logit_blocks(anchors, positives)
        in_batch = blocks
        queue = self.queue
        if queue is not None and queue.shape[0] > 0:
            queue = queue.detach()
            blocks = [
                block._replace(
                    logits=torch.cat([block.logits, cosine_logits(block.anchors, queue, self.temperature)], 1)
                )
                for block in blocks
            ]
        loss = mean_cross_entropy(blocks)
        with torch.no_grad():
            m = 0 if queue is None else queue.shape[0]
            shares = [block.logits.softmax(-1)[:, block.logits.shape[1] - m :].sum(-1) for block in blocks]
            statistics = {**statistics, "queue_share": torch.cat(shares).mean()}
        if not separate:
            return {"contrastive": loss}, statistics
        without = mean_cross_entropy(in_batch)
        return {"contrastive": without, "queue": loss - without}, statistics

    def get_config_dict(self) -> dict:
        config = {"temperature": self.temperature, "gather_across_devices": self.gather_across_devices}
        if self.base is not None:
            config["base"] = {"loss": type(self.base).__name__, **self.base.get_config_dict()}
        return config
