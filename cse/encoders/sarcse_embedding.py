"""SARCSE's sentence embedding Z (Liu et al., arXiv 2402.15153, Eq. 4) from a backbone's last layer:
the states of the real tokens (``<s>``, ``</s>`` and padding removed, Sect. 2.1) through the
encoder of the TextCNN autoencoder (:mod:`cse.encoders.textcnn`, Eqs. 3-4).

:func:`content_tokens` is the selection :class:`cse.encoders.autoencoding.SARCSEModel` embeds and
reconstructs. :class:`SARCSEEmbedding` is the same Z as a sentence-transformers module, the one after
the ``Transformer`` in a SARCSE export's ``modules.json``: this file and ``textcnn.py``, which import
only torch and safetensors, are copied beside the exported model, and sentence-transformers imports
them from there when loaded with ``trust_remote_code=True`` (without it, it refuses to load the
export). Its folder (``1_SARCSEEmbedding``) holds the encoder's shape, the ids of the tokens left
out and the encoder's weights: the decoder (Eqs. 5-7) only trains.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from .textcnn import TextCNNAutoEncoder

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"


def content_tokens(states, input_ids, attention_mask, special_ids):
    """The real tokens of each row, moved to the front in their order: states (B, L, d), ids and mask
    (B, L), L the input's length; ``special_ids`` the ids left out besides padding. (Cropping to the
    longest row's count of real tokens would change no embedding and no reconstructed token, the
    autoencoder masking what lies beyond each row's count, but that count is data that the host
    would wait for the GPU to read.)"""
    mask = attention_mask.bool() & ~torch.isin(input_ids, special_ids)
    order = torch.sort((~mask).to(torch.int8), dim=1, stable=True).indices
    states = states.gather(1, order[..., None].expand(-1, -1, states.shape[-1]))
    return states, input_ids.gather(1, order), mask.gather(1, order)


def save_embedding(directory: str, autoencoder_config: dict, autoencoder_state: dict, special_ids: Sequence[int]):
    """Write :class:`SARCSEEmbedding`'s folder: the encoder part of an autoencoder of
    ``autoencoder_config`` (:meth:`TextCNNAutoEncoder.get_config_dict`) whose weights are
    ``autoencoder_state``, and the ids left out of its input."""
    os.makedirs(directory, exist_ok=True)
    config = {"autoencoder": {**autoencoder_config, "decoder": False}, "special_token_ids": list(special_ids)}
    with open(os.path.join(directory, CONFIG_NAME), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2)
    encoder = TextCNNAutoEncoder.ENCODER_MODULES
    weights = {k: v.detach().cpu().contiguous() for k, v in autoencoder_state.items() if k.split(".")[0] in encoder}
    save_file(weights, os.path.join(directory, WEIGHTS_NAME))


class SARCSEEmbedding(nn.Module):
    """sentence-transformers' module of Z: the features' ``token_embeddings`` (the backbone's last
    layer), ``input_ids`` and ``attention_mask`` -> ``sentence_embedding``, Z of each sentence's real
    tokens, as :meth:`cse.encoders.autoencoding.SARCSEModel.embed` computes it.

    Args:
        autoencoder: the :class:`~cse.encoders.textcnn.TextCNNAutoEncoder` (its encoder is used).
        special_ids: the ids of the tokens left out besides padding (``<s>``, ``</s>``).
    """

    def __init__(self, autoencoder: TextCNNAutoEncoder, special_ids: Sequence[int]):
        super().__init__()
        self.autoencoder = autoencoder
        self.register_buffer("special_ids", torch.tensor(list(special_ids), dtype=torch.long), persistent=False)

    def forward(self, features: dict) -> dict:
        tokens, _, mask = content_tokens(
            features["token_embeddings"], features["input_ids"], features["attention_mask"], self.special_ids
        )
        features["sentence_embedding"] = self.autoencoder(tokens, mask, reconstruct=False).embedding
        return features

    def get_sentence_embedding_dimension(self) -> int:
        return self.autoencoder.embedding_size

    def save(self, output_path: str, safe_serialization: bool = True) -> None:
        # always safetensors: sentence-transformers passes safe_serialization to every module's save
        save_embedding(
            output_path, self.autoencoder.get_config_dict(), self.autoencoder.state_dict(), self.special_ids.tolist()
        )

    @staticmethod
    def load(input_path: str) -> SARCSEEmbedding:
        with open(os.path.join(input_path, CONFIG_NAME), encoding="utf-8") as f:
            config = json.load(f)
        autoencoder = TextCNNAutoEncoder(**config["autoencoder"])
        autoencoder.load_state_dict(load_file(os.path.join(input_path, WEIGHTS_NAME)))
        return SARCSEEmbedding(autoencoder, config["special_token_ids"])
