"""V-advCSE's training head (Ko, "V-advCSE"): an MLP with batch normalisation on [CLS], used in
training only, and the BatchNorm it runs in float32 (the method: :mod:`cse.methods.vadvcse`)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import CSEUsageError
from ..modeling import CSEModel


class Float32BatchNorm1d(nn.BatchNorm1d):
    """``BatchNorm1d`` (with running statistics; affine or not) computed in the running statistics' dtype,
    at least float32, and returned in the input's dtype. DeepSpeed's bf16/fp16 casts the weights to
    16 bits but leaves the running statistics, buffers, in float32, a mix ``batch_norm`` refuses."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training:
            self.num_batches_tracked.add_(1)
        dtype = torch.promote_types(self.running_mean.dtype, torch.float32)
        with torch.autocast(x.device.type, enabled=False):
            y = F.batch_norm(
                x.to(dtype),
                self.running_mean,
                self.running_var,
                None if self.weight is None else self.weight.to(dtype),
                None if self.bias is None else self.bias.to(dtype),
                self.training,
                self.momentum,
                self.eps,
            )
        return y.to(x.dtype)


def mlp_head(hidden_size: int, batch_norm: bool = True) -> nn.Sequential:
    """linear -> BN -> ReLU -> linear (SimCLR's two-layer projection head, Chen et al., 2020), or the
    same without BN."""
    norm = [Float32BatchNorm1d(hidden_size)] if batch_norm else []
    return nn.Sequential(nn.Linear(hidden_size, hidden_size), *norm, nn.ReLU(), nn.Linear(hidden_size, hidden_size))


class MLPHeadEncoder(CSEModel):
    """A :class:`CSEModel` whose training forward passes [CLS] through an MLP head (``self.head``)
    instead of the backbone's linear + tanh pooling layer, which is left untouched and frozen.

    The head is used in training only, as SimCSE's unsupervised MLP: the embedding forward,
    ``encode`` and the export are the backbone's [CLS] (pooler ``cls_before_pooler``, recorded in
    ``cse_config.json``), so the exported directory is a plain Hugging Face model. The head, with its
    BN running statistics, is part of this module's state dict and so of every training checkpoint.
    In training mode BN normalises with the statistics of the batch it is given.
    """

    def __init__(self, backbone, tokenizer, batch_norm: bool = True):
        super().__init__(backbone, tokenizer, pooler_type="cls_before_pooler", mlp_only_train=False)
        self.head = mlp_head(backbone.config.hidden_size, batch_norm)

    @classmethod
    def from_encoder(cls, encoder: CSEModel, batch_norm: bool = True) -> MLPHeadEncoder:
        if encoder.pooler_type != "cls" or not encoder.mlp_only_train:
            raise CSEUsageError(
                "the MLP head follows [CLS] and is used in training only: keep --pooler_type cls and "
                f"--mlp_only_train true (got {encoder.pooler_type!r}, mlp_only_train={encoder.mlp_only_train})"
            )
        return cls(encoder.backbone, encoder.tokenizer, batch_norm=batch_norm)

    def forward(self, input_ids, attention_mask, token_type_ids=None) -> dict[str, torch.Tensor]:
        cls = super().forward(input_ids, attention_mask, token_type_ids)["embeddings"]
        batch, views, hidden = cls.shape
        # in the weights' dtype (float32) under autocast too: a bf16 head (BN statistics, the embedding
        # the loss reads) put V-advCSE's bf16 loss curve 6x further from float32's than SimCSE's
        # (tests/test_speed.py)
        with torch.autocast(cls.device.type, enabled=False):
            cls = cls.to(self.head[0].weight.dtype)
            return {"embeddings": self.head(cls.reshape(batch * views, hidden)).view(batch, views, -1)}
