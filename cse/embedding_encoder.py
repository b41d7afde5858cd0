"""The encoder hook: what a part that replaces the sentence embedding (the ``embedding`` slot,
:data:`cse.parts.SLOTS`) implements, for training, evaluation and export alike.

Its :meth:`~cse.parts.Part.encoder` returns an :class:`EmbeddingEncoder`: a backbone (a Hugging Face
``AutoModel``) whose sentence embedding is a module of the part's own over the backbone's last layer,
instead of SimCSE's pooler. :class:`~cse.modeling.CSEModel` embeds every view through
:meth:`~cse.modeling.CSEModel.sentence_embedding`, which this class answers with
:meth:`EmbeddingEncoder.embed_states`; the rest of the run (the loss, the other parts' wrappers,
AdCSE's momentum encoder of the positives, the evaluation, the export) is unchanged. SARCSE's Z
(:class:`cse.autoencoding.SARCSEModel`) is one; docs/extending.md ("Replacing the embedding") builds
another outside the package.

A subclass implements, besides ``__init__(backbone, tokenizer, ...)`` (calling this one's):

===============================  ===========================================================
``pooler_name``                  the name its embedding is recorded by (``cse_config.json``,
                                 the result JSONs), instead of a pooler's
``embed_states``                 the embedding of a batch's rows from the backbone's last
                                 layer: training, evaluation, and the positives of a
                                 momentum encoder (which shares the module)
``embedding_size``               its width, where not the backbone's hidden size
``export_config``                what ``cse_config.json`` records to build it again (JSON)
``from_export``                  the encoder built from a backbone, a tokenizer and that record
===============================  ===========================================================

and may override :meth:`save_weights` / :meth:`load_weights` (default: its own parameters and
buffers, all but the backbones', in ``encoder_weights.safetensors``), :meth:`forward` (to give the
training forward's outputs that its part reads, SARCSE's reconstruction; the default gives
``{"embeddings": (batch, views, d)}`` through :meth:`embed_states`), and
:meth:`write_sentence_transformers_modules` (default: none, and the export loads with
:func:`cse.modeling.load_model` only; SARCSE writes its Z as a module with its code).

An export names the class in ``cse_config.json`` (``model_class``, ``module:Class``);
:func:`cse.modeling.load_model` imports it, a class outside this package only when the caller passes
``trust_remote_code=True``.
"""

from __future__ import annotations

import logging
import os
from typing import ClassVar

import torch
from safetensors.torch import load_file, save_file

from .errors import CSEUsageError
from .export import write_refusing_modules
from .modeling import CSEModel, model_class_path, read_cse_config

logger = logging.getLogger(__name__)

ENCODER_WEIGHTS_NAME = "encoder_weights.safetensors"
# the backbones' weights are the Hugging Face model's (and the momentum copy is training state only)
BACKBONE_MODULES = ("backbone", "momentum_backbone")


class EmbeddingEncoder(CSEModel):
    """A backbone whose sentence embedding is :meth:`embed_states` of its last layer (see the module
    docstring for what a subclass implements).

    Args:
        backbone, tokenizer: as :class:`~cse.modeling.CSEModel`'s (the backbone's pooling layer is
            unused and kept out of the optimizer).
    """

    pooler_name: ClassVar[str] = ""

    def __init__(self, backbone, tokenizer):
        super().__init__(backbone, tokenizer, pooler_type="cls_before_pooler")
        if not self.pooler_name:
            raise TypeError(f"{type(self).__name__} declares no pooler_name (the name its embedding is recorded by)")
        self.pooler_type = self.pooler_name

    # --- training and evaluation ------------------------------------------------------------------

    def embed_states(self, states: torch.Tensor, input_ids: torch.Tensor, attention_mask: torch.Tensor):
        """``(rows, d)`` sentence embeddings of the backbone's last-layer ``states`` ``(rows, length,
        hidden)`` of the ``(rows, length)`` inputs."""
        raise NotImplementedError

    def sentence_embedding(self, pooler_type, input_ids, attention_mask, token_type_ids=None, backbone=None):
        """:meth:`embed_states` of ``backbone``'s (default: this model's) last layer, whatever pooler
        is asked for: the embedding is this encoder's own."""
        states = self.backbone_outputs(input_ids, attention_mask, token_type_ids, backbone).last_hidden_state
        return self.embed_states(states, input_ids, attention_mask)

    # --- export and loading -----------------------------------------------------------------------

    def export_config(self) -> dict:
        """What ``cse_config.json`` records beside the class and the pooler name, from which
        :meth:`from_export` builds the encoder again (JSON values)."""
        return {}

    @classmethod
    def from_export(cls, backbone, tokenizer, config: dict) -> EmbeddingEncoder:
        """The encoder of ``backbone`` and ``tokenizer`` that an export's ``cse_config.json`` (``config``)
        records, before its weights are loaded (:meth:`load_weights`)."""
        raise NotImplementedError

    def cse_config(self) -> dict:
        return {"model_class": model_class_path(type(self)), "pooler": self.pooler_type, **self.export_config()}

    def own_state(self, state_dict: dict | None = None) -> dict:
        """The entries of this model's ``state_dict`` (default: the live one) outside the backbones."""
        state = self.state_dict() if state_dict is None else state_dict
        return {k: v for k, v in state.items() if k.split(".")[0] not in BACKBONE_MODULES}

    def save_weights(self, directory: str, state_dict: dict | None = None) -> None:
        """Write the weights of the embedding (all but the backbones') beside the exported backbone;
        ``state_dict`` as :meth:`~cse.modeling.CSEModel.save_pretrained`'s."""
        weights = {k: v.detach().contiguous().cpu() for k, v in self.own_state(state_dict).items()}
        save_file(weights, os.path.join(directory, ENCODER_WEIGHTS_NAME))

    def load_weights(self, directory: str) -> None:
        """Read what :meth:`save_weights` wrote (every entry of :meth:`own_state` is required)."""
        path = os.path.join(directory, ENCODER_WEIGHTS_NAME)
        if not os.path.isfile(path):
            raise CSEUsageError(
                f"{directory} lacks {ENCODER_WEIGHTS_NAME}, the weights of its {type(self).__name__} embedding",
                hint="copy the whole exported directory",
            )
        weights = load_file(path)
        missing = sorted(set(self.own_state()) - set(weights))
        if missing:
            raise CSEUsageError(f"{path} lacks {', '.join(missing)}", hint="copy the whole exported directory")
        self.load_state_dict(weights, strict=False)

    def write_export(self, directory: str, state_dict: dict | None = None) -> None:
        """The backbone as a plain Hugging Face model, then the embedding's weights (:meth:`save_weights`)."""
        super().write_export(directory, state_dict=state_dict)
        self.save_weights(directory, state_dict)

    def write_sentence_transformers_modules(self, directory: str, state_dict: dict | None = None) -> None:
        """By default sentence-transformers has no module that computes this embedding: a ``modules.json``
        that refuses to load (:func:`cse.export.write_refusing_modules`)."""
        logger.warning(
            "%s's embedding has no sentence-transformers modules: the export loads with cse.modeling.load_model "
            "only (SentenceTransformer refuses it)",
            type(self).__name__,
        )
        write_refusing_modules(directory)

    @classmethod
    def from_pretrained(cls, model_name_or_path: str, pooler_type: str | None = None, **backbone_kwargs):
        """The backbone and tokenizer of an export, the encoder its ``cse_config.json`` records
        (:meth:`from_export`) and its weights (:meth:`load_weights`)."""
        if pooler_type not in (None, cls.pooler_name):
            raise CSEUsageError(
                f"{model_name_or_path} is a {cls.__name__} model: its embedding is {cls.pooler_name!r}, "
                f"not pooler {pooler_type!r}",
                hint="leave the pooler out: the export records its embedding",
            )
        config = read_cse_config(model_name_or_path)
        encoder = CSEModel.from_pretrained(model_name_or_path, pooler_type="cls_before_pooler", **backbone_kwargs)
        model = cls.from_export(encoder.backbone, encoder.tokenizer, config)
        model.load_weights(model_name_or_path)
        return model
