#!/usr/bin/env python
"""Self-attentive pooling (Lin et al., ICLR 2017) as a part of ``run_cse.py``'s compositions, defined
outside the ``cse`` package in this one file: a part that replaces the sentence embedding (the
``embedding`` slot) through the encoder hook, :class:`cse.embedding_encoder.EmbeddingEncoder`
(docs/extending.md, "Replacing the embedding", walks through it).

The sentence embedding is a weighted sum of the backbone's last-layer token states h_t instead of
SimCSE's [CLS]:

    a = softmax_t( w_2 tanh(W_1 h_t) ),    m = sum_t a_t h_t

the paper's Eq. 5 with one attention hop (r = 1, so its penalty on AA^T - I is zero and left out),
W_1 of d_a x d and w_2 of 1 x d_a, without biases, over the real tokens (padding gets no weight). It
trains with every part's loss, is evaluated as any encoder, and its export holds the backbone, W_1
and w_2; ``cse.modeling.load_model(dir, trust_remote_code=True)`` loads it again where this file's
directory is on the path (the class is outside the ``cse`` package).

    python self_attentive.py --parts self_attentive --model_name_or_path bert-base-uncased --output_dir result/sa
    python self_attentive.py --parts mixcse,self_attentive ...    # MixCSE's negatives of the attentive embedding
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from cse import composition
from cse.embedding_encoder import EmbeddingEncoder
from cse.errors import run_cli
from cse.modeling import load_encoder
from cse.parts import Part
from cse.registry import MethodRecord, register

CITATION = """@inproceedings{lin2017structured,
  title = {A Structured Self-attentive Sentence Embedding},
  author = {Lin, Zhouhan and Feng, Minwei and dos Santos, C{\\'\\i}cero Nogueira and Yu, Mo and Xiang, Bing and Zhou, Bowen and Bengio, Yoshua},
  booktitle = {5th International Conference on Learning Representations (ICLR 2017)},
  year = {2017},
}"""  # noqa: E501 (BibTeX reads one field a line)


@dataclass
class SelfAttentiveArguments:
    attention_size: int = field(default=350, metadata={"help": "d_a, the width of W_1 (the paper's 350)."})


class SelfAttentiveEncoder(EmbeddingEncoder):
    """The backbone, and m = sum_t a_t h_t of its last layer (the module docstring's equation)."""

    pooler_name = "self_attentive"  # what cse_config.json and the result JSONs record as the pooler

    def __init__(self, backbone, tokenizer, attention_size: int):
        super().__init__(backbone, tokenizer)
        hidden = backbone.config.hidden_size
        self.attention = nn.Sequential(
            nn.Linear(hidden, attention_size, bias=False), nn.Tanh(), nn.Linear(attention_size, 1, bias=False)
        )

    def embed_states(self, states, input_ids, attention_mask):
        scores = self.attention(states).squeeze(-1).float()  # the softmax in float32 under autocast too
        scores = scores.masked_fill(~attention_mask.bool(), float("-inf"))
        weights = torch.softmax(scores, dim=-1).to(states.dtype)
        return torch.einsum("rl,rld->rd", weights, states)

    def export_config(self) -> dict:
        return {"attention_size": self.attention[0].out_features}

    @classmethod
    def from_export(cls, backbone, tokenizer, config: dict) -> SelfAttentiveEncoder:
        return cls(backbone, tokenizer, config["attention_size"])


class SelfAttentive(Part):
    name = "self_attentive"
    display_name = "Self-attentive pooling"
    citation = CITATION
    docs = "docs/extending.md"
    equation = (
        "the embedding is m = sum_t a_t h_t over the backbone's last-layer token states, a = softmax_t(w_2 "
        "tanh(W_1 h_t)) (Lin et al. 2017, Eq. 5, one hop)"
    )
    Flags = SelfAttentiveArguments
    replaces = frozenset({"embedding"})

    def encoder(self, model_args) -> SelfAttentiveEncoder:
        # the pretrained backbone and tokenizer, checked as for a pooler that reads every position
        encoder = load_encoder(model_args, pooler_type="avg", mlp_only_train=False)
        return SelfAttentiveEncoder(encoder.backbone, encoder.tokenizer, self.args.attention_size)


RECORD = register(MethodRecord(part=SelfAttentive))

if __name__ == "__main__":
    run_cli(composition.main)
