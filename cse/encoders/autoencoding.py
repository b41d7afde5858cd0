"""SARCSE's sentence encoder (Liu et al., arXiv 2402.15153): a backbone whose sentence embedding is
Z, the code of a TextCNN autoencoder (:mod:`cse.encoders.textcnn`) over its last layer's real tokens
(``<s>``, ``</s>`` and padding removed, Sect. 2.1), and whose training forward also gives the
reconstruction of those tokens for L_R and L_R+ (Eqs. 9-10, :mod:`cse.losses.reconstruction`).

It is an :class:`~cse.embedding_encoder.EmbeddingEncoder` (the encoder hook), the class a SARCSE
export names in ``cse_config.json``: :func:`cse.modeling.load_model` imports this module alone, not
the trainer nor the methods. The export also holds Z as a
sentence-transformers module (:mod:`cse.encoders.sarcse_embedding`), with its code.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields

import torch
from safetensors.torch import load_file, save_file

from ..embedding_encoder import EmbeddingEncoder
from ..export import write_module_code, write_modules
from ..modeling import flat_views, submodule_state, view_of
from ..run_names import CSE_CONFIG_NAME
from .sarcse_embedding import SARCSEEmbedding, content_tokens, save_embedding
from .textcnn import TextCNNAutoEncoder

AUTOENCODER_WEIGHTS_NAME = "sarcse_autoencoder.safetensors"


@dataclass
class ReconstructionBatch:
    """What a training forward gives the reconstruction loss: per encoded row (both views)."""

    target: torch.Tensor  # X, (rows, L, d)
    reconstruction: torch.Tensor  # X', (rows, L, d)
    token_ids: torch.Tensor  # (rows, L)
    mask: torch.Tensor  # (rows, L), 1 at real tokens


def special_token_ids(tokenizer) -> list[int]:
    """The ids never reconstructed: ``<s>``/``</s>`` ([CLS]/[SEP]) and padding."""
    ids = (tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.cls_token_id, tokenizer.sep_token_id)
    return sorted({i for i in (*ids, tokenizer.pad_token_id) if i is not None})


def interleaved(first: ReconstructionBatch, second: ReconstructionBatch) -> ReconstructionBatch:
    """Rows alternating ``first``'s and ``second``'s, sentence by sentence: the layout of a two-view
    training forward (view 0, view 1 of each sentence)."""
    return ReconstructionBatch(
        *(torch.stack([getattr(first, f.name), getattr(second, f.name)], dim=1).flatten(0, 1) for f in fields(first))
    )


class SARCSEModel(EmbeddingEncoder):
    """A backbone whose sentence embedding is Z, the autoencoder's code of its last layer's real tokens.

    The training forward of two views returns ``{"embeddings": Z of each view, "reconstruction":
    their ReconstructionBatch}`` (rows alternating view 0 and view 1 of each sentence); a forward of
    one view (V-advCSE's re-encoding of the perturbed anchors) reconstructs nothing. With a momentum
    backbone p (AdCSE's encoder of the positives, :meth:`CSEModel.attach_momentum_backbone`), the one
    autoencoder serves both encoders, as the released AdCSE shares its head:

    * Z = AE(X), X the real tokens of q's (the backbone's) last layer: the anchor.
    * Z+ = AE(X+), X+ those of p's: the positive, without gradient (p has none).
    * L_R's rows (view 0): X against Dec(Z), gradient to q and the autoencoder (to X too unless
      ``detach_target``).
    * L_R+'s rows (view 1): X+ (a constant) against Dec(AE(X+)), with gradient to the autoencoder
      (its encoder and decoder), so that gamma's term trains it as in SARCSE; it reaches neither q nor p.

    Args:
        backbone, tokenizer: as :class:`CSEModel`'s (the backbone's pooling layer is unused).
        autoencoder: the :class:`~cse.encoders.textcnn.TextCNNAutoEncoder`.
        detach_target: keep L_R's gradient off the target X (it still reaches the backbone through Z).
    """

    pooler_name = "textcnn"  # recorded in cse_config.json and result JSONs: Z, Eq. 4

    def __init__(self, backbone, tokenizer, autoencoder: TextCNNAutoEncoder, detach_target: bool = False):
        super().__init__(backbone, tokenizer)
        if autoencoder.hidden_size != backbone.config.hidden_size:
            raise ValueError(
                f"autoencoder built for states of {autoencoder.hidden_size}, "
                f"the backbone gives {backbone.config.hidden_size}"
            )
        self.autoencoder = autoencoder
        self.detach_target = detach_target
        self.register_buffer("special_ids", torch.tensor(special_token_ids(tokenizer)), persistent=False)

    @property
    def embedding_size(self) -> int:
        return self.autoencoder.embedding_size

    def content_tokens(self, states, input_ids, attention_mask):
        """:func:`cse.encoders.sarcse_embedding.content_tokens` of this tokenizer's special tokens."""
        return content_tokens(states, input_ids, attention_mask, self.special_ids)

    def autoencode(self, states, input_ids, attention_mask, reconstruct: bool = False):
        """``(Z, batch)``: the code of each row's real tokens among ``states`` (B, L, d) and, with
        ``reconstruct``, their :class:`ReconstructionBatch` (else None)."""
        tokens, token_ids, mask = self.content_tokens(states, input_ids, attention_mask)
        out = self.autoencoder(tokens, mask, reconstruct=reconstruct)
        if not reconstruct:
            return out.embedding, None
        target = tokens.detach() if self.detach_target else tokens
        return out.embedding, ReconstructionBatch(target, out.reconstruction, token_ids, mask)

    def encode_tokens(self, input_ids, attention_mask, token_type_ids=None, backbone=None, reconstruct=False):
        """:meth:`autoencode` of ``backbone``'s (default: this model's) last layer."""
        states = self.backbone_outputs(input_ids, attention_mask, token_type_ids, backbone).last_hidden_state
        return self.autoencode(states, input_ids, attention_mask, reconstruct)

    def embed_states(self, states, input_ids, attention_mask):
        """Z of each row's real tokens (Eq. 4)."""
        return self.autoencode(states, input_ids, attention_mask)[0]

    def forward(self, input_ids, attention_mask, token_type_ids=None) -> dict[str, torch.Tensor]:
        batch, views, _ = input_ids.shape
        if not (self.training and self.autoencoder.has_decoder and views == 2):
            return super().forward(input_ids, attention_mask, token_type_ids)
        if self.momentum_backbone is not None:
            return self._momentum_forward(input_ids, attention_mask, token_type_ids)
        embedding, reconstruction = self.encode_tokens(
            *flat_views(input_ids, attention_mask, token_type_ids), reconstruct=True
        )
        return {"embeddings": embedding.view(batch, views, -1), "reconstruction": reconstruction}

    def _momentum_forward(self, input_ids, attention_mask, token_type_ids=None) -> dict[str, torch.Tensor]:
        """Z from q, Z+ from p (no gradient), both views' reconstructions (see the class docstring)."""
        anchors, anchor_batch = self.encode_tokens(
            *view_of(0, input_ids, attention_mask, token_type_ids), reconstruct=True
        )
        ids, mask, types = view_of(1, input_ids, attention_mask, token_type_ids)
        with torch.no_grad():
            states = self.backbone_outputs(ids, mask, types, self.momentum_backbone).last_hidden_state
        # with the autoencoder's graph over p's tokens: L_R+ trains it
        positives, positive_batch = self.autoencode(states, ids, mask, reconstruct=True)
        return {
            "embeddings": torch.stack([anchors, positives.detach()], dim=1),
            "reconstruction": interleaved(anchor_batch, positive_batch),
        }

    def export_config(self) -> dict:
        return {"autoencoder": self.autoencoder.get_config_dict(), "detach_target": self.detach_target}

    @classmethod
    def from_export(cls, backbone, tokenizer, config: dict) -> SARCSEModel:
        if "autoencoder" not in config:
            raise FileNotFoundError(f"the export's {CSE_CONFIG_NAME} lacks the autoencoder's shape or weights")
        return cls(backbone, tokenizer, TextCNNAutoEncoder(**config["autoencoder"]), config["detach_target"])

    def save_weights(self, directory: str, state_dict: dict | None = None) -> None:
        """The autoencoder beside the backbone (``sarcse_autoencoder.safetensors``):
        :func:`cse.modeling.load_model` or :meth:`from_pretrained` load both and embed with Z, and so
        does ``SentenceTransformer(dir, trust_remote_code=True)``
        (:meth:`write_sentence_transformers_modules`)."""
        weights = {k: v.detach().contiguous().cpu() for k, v in self.autoencoder_state(state_dict).items()}
        save_file(weights, os.path.join(directory, AUTOENCODER_WEIGHTS_NAME))

    def load_weights(self, directory: str) -> None:
        weights = os.path.join(directory, AUTOENCODER_WEIGHTS_NAME)
        if not os.path.isfile(weights):
            raise FileNotFoundError(f"{directory} lacks the autoencoder's shape or weights ({weights})")
        self.autoencoder.load_state_dict(load_file(weights))

    def write_sentence_transformers_modules(self, directory: str, state_dict: dict | None = None) -> None:
        """The backbone's ``Transformer``, then Z: :class:`~cse.encoders.sarcse_embedding.SARCSEEmbedding`, its
        code (``sarcse_embedding.py``, ``textcnn.py``) copied beside the model (:mod:`cse.export`)."""
        folder = f"1_{SARCSEEmbedding.__name__}"
        config, state = self.autoencoder.get_config_dict(), self.autoencoder_state(state_dict)
        save_embedding(os.path.join(directory, folder), config, state, self.special_ids.tolist())
        module_type = write_module_code(directory, SARCSEEmbedding)
        write_modules(directory, self.backbone, self.tokenizer, [(folder, module_type)])

    def autoencoder_state(self, state_dict: dict | None = None) -> dict:
        """The autoencoder's weights: those in this model's ``state_dict`` if given, else the live ones."""
        return self.autoencoder.state_dict() if state_dict is None else submodule_state(state_dict, "autoencoder")
