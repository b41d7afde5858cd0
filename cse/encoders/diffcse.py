"""DiffCSE's training encoder (Chuang et al., NAACL 2022): [CLS] through the BatchNorm projector as the
training embedding, and the conditional discriminator D of the replaced-token detection (the method:
:mod:`cse.methods.diffcse`).

* **projector** (released ``diffcse/models.py``, ``ProjectionMLP`` with ``--batchnorm``):
  ``Linear(d, 2d, bias=False) -> BatchNorm1d(2d) -> ReLU -> Linear(2d, d, bias=False) ->
  BatchNorm1d(d, affine=False)`` on the last layer's [CLS], in training only (``--mlp_only_train``).
  In training BatchNorm normalises with the statistics of the batch's rows of both views together
  (the released code reshapes to ``(batch * views, d)`` before it). The linear layers start as the
  released ``init_weights`` leaves them, N(0, initializer_range); BatchNorm at PyTorch's defaults.
* **discriminator**: a second copy of the pretrained backbone without its pooling layer (released
  ``train.py``: ``BertForPreTraining.from_pretrained(model).bert`` loaded into
  ``BertModel(config, add_pooling_layer=False)``), trainable, not shared with the encoder, and a
  two-class head ``electra_head = Linear(d, 2)`` at PyTorch's default init on every position.
* **conditioning**: the sentence embedding h replaces the output of D's embedding layer at position 0
  (the patched ``BertModel.forward(cls_input=h)`` of the release, ``modeling_bert.py:952-961``): after
  the word, position and type embeddings, LayerNorm and dropout, so h gets none of them, and it is not
  detached, so the RTD loss reaches the encoder through h.

The evaluation and the export are the backbone's [CLS] before the projector (pooler
``cls_before_pooler``): the projector, D and its head are training modules only, in the model's state
dict (so in every checkpoint) but not in the export, which is a plain Hugging Face model.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from ..errors import CSEUsageError
from ..modeling import CSEModel
from .mlp_head import Float32BatchNorm1d


def projector(hidden_size: int, std: float) -> nn.Sequential:
    """The released ``ProjectionMLP`` (with ``--batchnorm``), its linear layers drawn from N(0, std)."""
    layers = nn.Sequential(
        nn.Linear(hidden_size, 2 * hidden_size, bias=False),
        Float32BatchNorm1d(2 * hidden_size),
        nn.ReLU(),
        nn.Linear(2 * hidden_size, hidden_size, bias=False),
        Float32BatchNorm1d(hidden_size, affine=False),
    )
    for layer in (layers[0], layers[3]):
        nn.init.normal_(layer.weight, mean=0.0, std=std)
    return layers


class _FirstPosition:
    """A forward hook on an embedding layer: while ``h`` is set, the layer's output at position 0 is
    ``h``. It stays registered (registering a hook around every forward would be a graph break under
    ``torch.compile``)."""

    def __init__(self):
        self.h: torch.Tensor | None = None

    def __call__(self, module, args, output):
        if self.h is None:
            return output
        if self.h.shape != (output.shape[0], output.shape[2]):
            raise ValueError(f"condition of shape {tuple(self.h.shape)} for embeddings of {tuple(output.shape)}")
        return torch.cat([self.h[:, None].to(output.dtype), output[:, 1:]], dim=1)


class DiffCSEEncoder(CSEModel):
    """The backbone, its training projector (``head``), and the discriminator (``discriminator``, a
    copy of the pretrained backbone) with its two-class head (``electra_head``)."""

    def __init__(self, backbone, tokenizer):
        super().__init__(backbone, tokenizer, pooler_type="cls_before_pooler", mlp_only_train=False)
        config = backbone.config
        self.head = projector(config.hidden_size, getattr(config, "initializer_range", 0.02))
        self.discriminator = copy.deepcopy(backbone)
        if getattr(self.discriminator, "pooler", None) is not None:
            self.discriminator.pooler = None
        self.discriminator.requires_grad_(True)
        embeddings = getattr(self.discriminator, "embeddings", None)
        if not isinstance(embeddings, nn.Module):
            raise CSEUsageError(
                f"DiffCSE's discriminator writes the sentence embedding into the embedding layer's output, and "
                f"{type(backbone).__name__} has no `embeddings` module",
                hint="use a BERT- or RoBERTa-like encoder",
            )
        self.electra_head = nn.Linear(config.hidden_size, 2)
        self._condition = _FirstPosition()
        embeddings.register_forward_hook(self._condition)

    @classmethod
    def from_encoder(cls, encoder: CSEModel) -> DiffCSEEncoder:
        return cls(encoder.backbone, encoder.tokenizer)

    def forward(self, input_ids, attention_mask, token_type_ids=None) -> dict[str, torch.Tensor]:
        """``{"embeddings": (batch, views, d)}``: each view's [CLS] through the projector, the batch's
        rows of all views normalised together."""
        cls = super().forward(input_ids, attention_mask, token_type_ids)["embeddings"]
        batch, views, hidden = cls.shape
        # in the weights' dtype (float32) under autocast too, as V-advCSE's BatchNorm head
        with torch.autocast(cls.device.type, enabled=False):
            cls = cls.to(self.head[0].weight.dtype)
            return {"embeddings": self.head(cls.reshape(batch * views, hidden)).view(batch, views, -1)}

    def discriminate(self, input_ids, attention_mask, token_type_ids, condition: torch.Tensor) -> torch.Tensor:
        """D's two-class logits ``(rows, length, 2)`` (class 1: replaced) of the edited ``(rows, length)``
        ``input_ids``, with ``condition`` ``(rows, d)`` in place of position 0's embedding."""
        self._condition.h = condition
        try:
            outputs = self.backbone_outputs(input_ids, attention_mask, token_type_ids, backbone=self.discriminator)
        finally:
            self._condition.h = None
        return self.electra_head(outputs.last_hidden_state)
