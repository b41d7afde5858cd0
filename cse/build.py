"""The model and loss of a run, built from its parts (:mod:`cse.parts`) in one way, whether the run
is a method's preset (its one part, or SimCSE's base with none) or a composition of several:

1. **the encoder**: the part that replaces the sentence embedding builds it (SARCSE's Z), else the
   pretrained backbone with SimCSE's pooler;
2. **its wrappers**, parts in order: V-advCSE's training head, AdCSE's momentum encoder of the
   positives; then SimCSE's fresh head on [CLS] where the training forward goes through it: the
   poolers that read the backbone's pooling layer (:data:`cse.pooling.NEEDS_POOLING_LAYER`). Any
   other pooler leaves that layer unused and frozen, and an encoder that replaces the embedding
   initialises its own modules (:mod:`cse.embedding_encoder`);
3. **the loss**: InfoNCE, replaced by the part that replaces the softmax (MixCSE's mixed
   negatives), then extended by the parts that add to it (AdCSE's adversaries).
"""

from __future__ import annotations

from .losses import InfoNCELoss
from .modeling import load_encoder
from .parts import Part, replaced_by_others
from .pooling import NEEDS_POOLING_LAYER


def build(parts: list[Part], model_args):
    """``(model, loss)`` of the parts (in the run's order; ``[]``: SimCSE) on the model arguments."""
    encoders = [model for part in parts if (model := part.encoder(model_args)) is not None]
    model = encoders[0] if encoders else load_encoder(model_args)
    for part in parts:
        model = part.wrap(model, replaced_by_others(parts, part))
    if model.pooler_type in NEEDS_POOLING_LAYER:
        model.reset_head()
    loss = InfoNCELoss(temperature=model_args.temp)
    # the part that replaces the softmax first, then those that extend whatever softmax there is
    for part in sorted(parts, key=lambda part: "softmax" not in part.replaces):
        loss = part.loss(loss, model, replaced_by_others(parts, part))
    return model, loss
