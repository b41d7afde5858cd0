"""SARCSE's self-adaptive reconstruction loss (Liu et al., arXiv 2402.15153, Sect. 2.3, Eqs. 8-10).

For the N real tokens w_1..w_N of a sentence (``<s>``, ``</s>`` and padding are not reconstructed),
their states x_i and the autoencoder's reconstructions x'_i (:mod:`cse.encoders.textcnn`):

    f(w)  = max(theta, 1 - lambda * freq(w))                      (Eq. 8; theta = 0.1, lambda = 50)
    L_R   = (1/N) sum_i f(w_i) * MSE(x_i, x'_i)                    (Eq. 9)
    L_R+  = the same for the second dropout view X+                 (Eq. 10)

freq(w) is w's count over the count of all tokens of the training sentences, as they are trained on
(tokenised and truncated to ``max_seq_length``), special tokens and padding not counted. The batch
loss is the mean of the sentences' L_R; a sentence with no real token (N = 0) contributes 0.

The paper does not say how MSE reduces over the d hidden dimensions: ``reduction="mean"`` (the
default, ``torch.nn.MSELoss``'s, which the paper names) or ``"sum"`` (the squared distance, d times
larger: 768 for RoBERTa-base, which gives beta L_R a share of the gradient of the size Table 1's
"w/o decoder" ablation implies; docs/diagnostics.md measures both).

``self_adaptive=False`` is Table 1's plain-MSE ablation: f = 1 for every real token, and no
frequency table. Special tokens and padding weigh 0 in both.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import numpy as np
import torch
from torch import nn

from .. import citations
from .settings import NON_NEGATIVE, Rule, keep_settings, one_of

REDUCTIONS = ("mean", "sum")
# theta of Eq. 8: a floor under the weight 1 - lambda freq(w), itself a weight.
THETA = Rule(lambda value: not 0.0 <= value <= 1.0, "must lie in [0, 1] (a weight floor under 1 - lambda freq)")

logger = logging.getLogger(__name__)


def count_tokens(sentences: Iterable[list[int]], vocab_size: int, special_ids: Iterable[int]) -> torch.Tensor:
    """Occurrences of each token id over ``sentences`` (token-id lists), special ids left at 0: an
    int64 tensor of ``vocab_size``."""
    counts = np.zeros(vocab_size, dtype=np.int64)
    chunk: list[int] = []
    for ids in sentences:
        chunk.extend(ids)
        if len(chunk) >= 1 << 20:
            counts += np.bincount(np.asarray(chunk, dtype=np.int64), minlength=vocab_size)[:vocab_size]
            chunk = []
    if chunk:
        counts += np.bincount(np.asarray(chunk, dtype=np.int64), minlength=vocab_size)[:vocab_size]
    counts[list(special_ids)] = 0
    return torch.from_numpy(counts)


class SelfAdaptiveReconstructionLoss(nn.Module):
    """Args:
    vocab_size: size of the token-count table.
    special_ids: token ids never reconstructed (weight 0): ``<s>``, ``</s>``, padding.
    theta: theta in Eq. 8, the smallest weight of a real token.
    freq_lambda: lambda in Eq. 8.
    self_adaptive: Eq. 8's weights (True) or the plain MSE of Table 1's ablation (all weights 1).
    reduction: MSE over the hidden dimensions, ``mean`` or ``sum``.

    Relations: not contrastive; SARCSE adds it to InfoNCE on Z (Eq. 12), and ``run_sarcse.py
    --no_decoder`` drops it (InfoNCE on Z alone, Table 1). ``self_adaptive=False``
    (``--plain_mse``), like ``theta=1`` or ``freq_lambda=0``, weighs every real token 1: the plain MSE.

    Example::

        >>> import torch
        >>> from cse.losses.reconstruction import SelfAdaptiveReconstructionLoss
        >>> loss = SelfAdaptiveReconstructionLoss(vocab_size=10, special_ids=[0, 1], theta=0.1, freq_lambda=2.0)
        >>> loss.set_counts(torch.tensor([0, 0, 6, 2, 2, 0, 0, 0, 0, 0]))  # freq(2) = 0.6
        >>> [round(w, 6) for w in loss.token_weights(torch.tensor([0, 2, 3])).tolist()]  # 0; max(0.1, -0.2); 0.6
        [0.0, 0.1, 0.6]
        >>> states, ids, mask = torch.zeros(1, 3, 4), torch.tensor([[0, 2, 3]]), torch.ones(1, 3)
        >>> loss(states, torch.ones(1, 3, 4), ids, mask)  # (0.1 * 1 + 0.6 * 1) / 2 real tokens
        tensor([0.3500])
    """

    citation = citations.SARCSE

    def __init__(
        self,
        vocab_size: int,
        special_ids: Iterable[int],
        theta: float = 0.1,
        freq_lambda: float = 50.0,
        self_adaptive: bool = True,
        reduction: str = "mean",
    ):
        super().__init__()
        keep_settings(
            self,
            {"reduction": one_of(REDUCTIONS), "theta": THETA, "freq_lambda": NON_NEGATIVE},
            theta=theta,
            freq_lambda=freq_lambda,
            self_adaptive=self_adaptive,
            reduction=reduction,
        )
        self.special_ids = sorted(set(special_ids))
        self.register_buffer("special_id_tensor", torch.tensor(self.special_ids, dtype=torch.long), persistent=False)
        # Counted once on the training sentences (set_counts); the trainer saves it with every
        # checkpoint and the final model, and restores it on resume.
        self.register_buffer("token_counts", torch.zeros(vocab_size, dtype=torch.int64), persistent=False)
        # f(w) of Eq. 8 for every id, computed once from the counts (set_counts)
        self.register_buffer("weight_table", torch.zeros(vocab_size), persistent=False)
        self.counted = False

    @property
    def needs_counts(self) -> bool:
        return self.self_adaptive

    def set_counts(self, counts: torch.Tensor) -> None:
        if counts.shape != self.token_counts.shape:
            raise ValueError(
                f"token counts for a vocabulary of {counts.shape[0]}, "
                f"but this tokenizer has {self.token_counts.shape[0]}"
            )
        if int(counts.sum()) <= 0:
            raise ValueError("the token-count table is empty: no real token in the training sentences")
        if int(counts[self.special_ids].abs().sum()) != 0:
            raise ValueError("the token-count table counts special tokens, which are never reconstructed")
        self.token_counts.copy_(counts)
        freq = self.token_counts.double() / self.token_counts.sum().double()
        self.weight_table.copy_(torch.clamp(1.0 - self.freq_lambda * freq, min=self.theta))
        self.counted = True

    def is_special(self, token_ids: torch.Tensor) -> torch.Tensor:
        return torch.isin(token_ids, self.special_id_tensor)

    def token_weights(self, token_ids: torch.Tensor) -> torch.Tensor:
        """f(w) of Eq. 8 for each id (float32), 0 for special ids and padding."""
        special = self.is_special(token_ids)
        if not self.self_adaptive:
            return (~special).float()
        if not self.counted:
            raise RuntimeError("token frequencies not counted yet: call set_counts with the training corpus counts")
        return self.weight_table[token_ids].masked_fill(special, 0.0)

    def forward(
        self, states: torch.Tensor, reconstruction: torch.Tensor, token_ids: torch.Tensor, mask: torch.Tensor
    ) -> torch.Tensor:
        """Per-sentence L_R (Eq. 9), shape (B,): ``states`` x and ``reconstruction`` x' (B, L, d),
        ``token_ids`` and ``mask`` (B, L), mask 0 at padding. N counts the real tokens: neither
        padding nor special ids."""
        with torch.autocast(states.device.type, enabled=False):
            squared = (states.float() - reconstruction.float()).pow(2)
            mse = squared.sum(-1) if self.reduction == "sum" else squared.mean(-1)  # (B, L)
            real = (mask.bool() & ~self.is_special(token_ids)).float()
            n = real.sum(1)
            return (self.token_weights(token_ids) * real * mse).sum(1) / n.clamp_min(1.0)

    def get_config_dict(self) -> dict:
        return {
            "theta": self.theta,
            "freq_lambda": self.freq_lambda,
            "self_adaptive": self.self_adaptive,
            "reduction": self.reduction,
        }
