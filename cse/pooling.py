"""Sentence poolers over a transformer's token states.

The names and semantics follow SimCSE's ``evaluation.py`` (the reference batcher every paper in this
family evaluates with), plus ``max``:

``cls``
    the [CLS] state passed through the backbone's pooling layer (linear + tanh). In this repository
    that layer *is* SimCSE's projection head (see :mod:`cse.modeling`), so for a trained model ``cls``
    means "[CLS] with the MLP".
``cls_before_pooler``
    the last layer's [CLS] state, no head.
``avg``
    mean of the last layer over real tokens.
``avg_first_last``
    mean over real tokens of (layer 1 + last layer) / 2. Layer 1 is the first *transformer* layer
    (``hidden_states[1]``), not the embedding output, exactly as SimCSE's evaluation does.
``avg_top2``
    mean over real tokens of (second-to-last + last layer) / 2.
``max``
    element-wise max over real tokens of the last layer.

Padding is masked in every pooler: padded positions never contribute to a mean or a max.
"""

from __future__ import annotations

import torch

POOLERS = ("cls", "cls_before_pooler", "avg", "avg_first_last", "avg_top2", "max")

# Poolers that read intermediate layers and so need ``output_hidden_states=True``.
NEEDS_HIDDEN_STATES = frozenset({"avg_first_last", "avg_top2"})

# What each pooler needs of the model, checked before a model is used (cse.modeling.check_fit):
# the backbone's pooling layer (``pooler_output``);
NEEDS_POOLING_LAYER = frozenset({"cls"})
# a first position that summarises the sentence: a special token the tokenizer puts first ([CLS],
# <s>), read by a bidirectional backbone (in a causal one it attends to itself alone);
READS_FIRST_POSITION = frozenset({"cls", "cls_before_pooler"})
# transformer layers (``hidden_states[1:]``): avg_top2's second-to-last must be one, not the embeddings.
MIN_LAYERS = {"avg_first_last": 1, "avg_top2": 2}


def check_pooler(pooler_type: str) -> str:
    if pooler_type not in POOLERS:
        raise ValueError(f"unknown pooler {pooler_type!r}; choose one of {', '.join(POOLERS)}")
    return pooler_type


def masked_mean(states: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    mask = attention_mask.unsqueeze(-1).to(states.dtype)
    return (states * mask).sum(1) / mask.sum(1).clamp_min(1.0)


def masked_max(states: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    padded = ~attention_mask.bool().unsqueeze(-1)
    return states.masked_fill(padded, torch.finfo(states.dtype).min).max(dim=1).values


def pool(pooler_type: str, attention_mask: torch.Tensor, outputs) -> torch.Tensor:
    """Pool a Hugging Face encoder output (``last_hidden_state``, optional ``hidden_states`` and
    ``pooler_output``) into one vector per sequence."""
    last = outputs.last_hidden_state
    if pooler_type == "cls":
        if getattr(outputs, "pooler_output", None) is None:
            raise ValueError(
                "pooler 'cls' needs a backbone with a pooling layer (BERT, RoBERTa, ...); "
                "this one has none: use 'cls_before_pooler'"
            )
        return outputs.pooler_output
    if pooler_type == "cls_before_pooler":
        return last[:, 0]
    if pooler_type == "avg":
        return masked_mean(last, attention_mask)
    if pooler_type == "max":
        return masked_max(last, attention_mask)
    hidden_states = outputs.hidden_states
    if hidden_states is None:
        raise ValueError(f"pooler {pooler_type!r} needs output_hidden_states=True")
    if pooler_type == "avg_first_last":
        return masked_mean((hidden_states[1] + hidden_states[-1]) / 2.0, attention_mask)
    if pooler_type == "avg_top2":
        return masked_mean((hidden_states[-2] + hidden_states[-1]) / 2.0, attention_mask)
    raise ValueError(f"unknown pooler {pooler_type!r}; choose one of {', '.join(POOLERS)}")
