"""A backbone whose sentence embedding is the last hidden state at a prompt template's mask token
(:mod:`cse.prompts`), with template denoising: PromptBERT's encoder (Jiang et al., EMNLP 2022).

The training forward takes the two views as the part builds them (view v inside template v: the
template tokens around the sentence's own tokens, :meth:`cse.prompts.TemplateTokens.wrap`) and
gives, for each view,

    h      = the last hidden state at the view's mask token
    b(k)   = the same at the mask token of the view's template with no sentence, its position ids
             those the template's tokens have around a sentence of k tokens (the prefix's unshifted,
             the suffix's shifted by k: ``TemplateTokens.bias_position_ids``), k = the view's length
             less the template's
    u      = h - b(k)          (template denoising; with ``denoise``)
    z      = tanh(W u + c)     (the training MLP; with ``mlp``)

(released models.py ``cl_forward`` l.110-191, ``get_delta`` l.78-108). The bias forward is one
batch of the empty template at every shift up to the batch's longest sentence, run as the model runs
(dropout in training), its gradient reaching the encoder with ``bias_gradient``, as the released
code's does.

The embedding forward (evaluation, export) reads sentences as text: each inside the first template
as one string, a period appended (:func:`cse.prompts.template_input`; :meth:`tokenize_sentences`),
its embedding the raw mask state (``test_embedding="raw"``, what the released evaluation computes),
or that state less the first template's bias (``"denoised"``, the paper's "denoised sentence
representation"). The model selection may read either (``DENOISED_POOLER``: the part's
``selection_pooler``)."""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import ClassVar

import torch
from torch import nn

from ..embedding_encoder import EmbeddingEncoder
from ..export import write_module_code, write_modules
from ..modeling import flat_views
from ..prompts import TemplateTokens, last_mask_states, template_input, template_text

logger = logging.getLogger(__name__)

RAW_POOLER = "mask"  # the raw state at the template's mask token
DENOISED_POOLER = "mask_denoised"  # that state less the template's bias
TEST_EMBEDDINGS = {"raw": RAW_POOLER, "denoised": DENOISED_POOLER}


def position_start(backbone) -> int:
    """The position id the backbone gives a sentence's first token when none are passed: RoBERTa's
    ``padding_idx + 1`` (its embeddings count positions after the padding index), else 0."""
    padding = getattr(backbone.embeddings, "padding_idx", None)
    return 0 if padding is None else padding + 1


class PromptEncoder(EmbeddingEncoder):
    """The backbone, read at a template's mask token (the module docstring).

    Args:
        backbone, tokenizer: as :class:`~cse.modeling.CSEModel`'s (the backbone's pooling layer is unused).
        templates: the templates of view 0 and view 1 (:mod:`cse.prompts` syntax); the first is the
            evaluation's. One template serves both views.
        denoise: subtract each view's template bias in training.
        bias_start: the first position id of the bias forward (0: the released code's explicit ids;
            :func:`position_start`: the ids the sentence's own forward has).
        bias_gradient: let the loss's gradient reach the encoder through the bias (else a constant).
        mlp: the training MLP (dense + tanh) after the denoising; never at evaluation.
        test_embedding: ``"raw"`` or ``"denoised"``, the embedding forward's (:data:`TEST_EMBEDDINGS`).
    """

    pooler_name = RAW_POOLER
    max_templates: ClassVar[int] = 2  # view 0's and view 1's (CoT-BERT's encoder: three)
    views_named: ClassVar[str] = "one or two templates (view 0's and view 1's)"
    masks: ClassVar[int] = 1  # mask tokens per template, the embedding read at the last (CoT-BERT's: two)

    def __init__(
        self,
        backbone,
        tokenizer,
        templates: Sequence[str],
        denoise: bool = True,
        bias_start: int = 0,
        bias_gradient: bool = True,
        mlp: bool = True,
        test_embedding: str = "raw",
    ):
        super().__init__(backbone, tokenizer)
        if not 1 <= len(templates) <= self.max_templates:
            raise ValueError(f"{self.views_named}, got {len(templates)}")
        if test_embedding not in TEST_EMBEDDINGS:
            raise ValueError(f"test_embedding must be one of {', '.join(TEST_EMBEDDINGS)}, got {test_embedding!r}")
        self.templates = tuple(templates)
        self.tokens = [TemplateTokens.of(tokenizer, template, self.masks) for template in self.templates]
        for i, tokens in enumerate(self.tokens):
            # the template bias's input, on the model's device: made once, not copied from the host each step
            self.register_buffer(f"template_ids_{i}", torch.tensor(tokens.empty), persistent=False)
        self.text = template_text(self.templates[0], tokenizer.mask_token)
        self.denoise, self.bias_start, self.bias_gradient = denoise, bias_start, bias_gradient
        self.test_embedding = test_embedding
        self.pooler_type = TEST_EMBEDDINGS[test_embedding]
        hidden = backbone.config.hidden_size
        self.mlp = nn.Sequential(nn.Linear(hidden, hidden), nn.Tanh()) if mlp else None
        if self.mlp is not None:
            # as the released MLPLayer is initialised (BertPreTrainedModel._init_weights)
            nn.init.normal_(self.mlp[0].weight, std=getattr(backbone.config, "initializer_range", 0.02))
            nn.init.zeros_(self.mlp[0].bias)

    def input_length(self, sentence_length: int) -> int:
        """The sentence without its two special tokens inside the longest template."""
        return sentence_length - 2 + max(map(len, self.tokens))

    def view_template(self, view: int) -> int:
        """The index in :attr:`tokens` of ``view``'s template (the last one for every view beyond)."""
        return min(view, len(self.tokens) - 1)

    # --- the template bias ------------------------------------------------------------------------

    def template_bias(self, template: int, lengths: torch.Tensor, longest: int) -> torch.Tensor:
        """``(rows, d)``: b(k) of each row whose input (template number ``template`` of :attr:`tokens`
        around k sentence tokens) has ``lengths`` tokens, from one forward of the empty template at shifts
        0 .. ``longest`` - len(template) (``longest``: the padded input length, so that the bias batch's
        shape is the batch's). The template by its index, which torch.compile traces as a constant."""
        tokens = self.tokens[template]
        shifts = longest - len(tokens) + 1
        ids = getattr(self, f"template_ids_{template}").expand(shifts, -1)
        positions = tokens.bias_position_ids(shifts, self.bias_start, ids.device)
        with torch.set_grad_enabled(torch.is_grad_enabled() and self.bias_gradient):
            states = self.backbone(input_ids=ids, position_ids=positions, return_dict=True).last_hidden_state
        return states[:, tokens.mask_index].index_select(0, lengths - len(tokens))

    # --- training and evaluation ------------------------------------------------------------------

    def forward(self, input_ids, attention_mask, token_type_ids=None) -> dict[str, torch.Tensor]:
        batch, views, length = input_ids.shape
        ids, mask, types = flat_views(input_ids, attention_mask, token_type_ids)
        states = self.backbone_outputs(ids, mask, types).last_hidden_state
        h = last_mask_states(states, ids, self.tokens[0].mask_id).view(batch, views, -1)
        if self.training and self.denoise:
            lengths = attention_mask.sum(-1)
            biases = [self.template_bias(self.view_template(v), lengths[:, v], length) for v in range(views)]
            h = torch.stack([h[:, v] - bias for v, bias in enumerate(biases)], dim=1)
        if self.training and self.mlp is not None:
            h = self.mlp(h)
        return {"embeddings": h}

    def embed_states(self, states, input_ids, attention_mask):
        """The raw state at each row's (last) mask token."""
        return last_mask_states(states, input_ids, self.tokens[0].mask_id)

    def sentence_embedding(self, pooler_type, input_ids, attention_mask, token_type_ids=None, backbone=None):
        """The raw mask state, or with ``pooler_type`` :data:`DENOISED_POOLER` that state less the
        first template's bias (the rows: inputs of the first template)."""
        h = super().sentence_embedding(pooler_type, input_ids, attention_mask, token_type_ids, backbone)
        if pooler_type != DENOISED_POOLER:
            return h
        return h - self.template_bias(0, attention_mask.sum(-1), input_ids.shape[-1])

    def tokenize_sentences(self, sentences: Sequence[str], max_length: int | None = None) -> dict:
        """Each sentence inside the first template as one string, a period appended where it ends in none
        of ``. ? " '`` (:func:`cse.prompts.template_input`); with ``max_length``, the sentence's end cut
        to fit, never the template (:meth:`cse.prompts.TemplateTokens.fit`)."""
        texts = [template_input(self.text, sentence) for sentence in sentences]
        encoded = dict(self.tokenizer(texts, padding=False))
        if max_length is not None:
            encoded["input_ids"] = [self.tokens[0].fit(ids, max_length) for ids in encoded["input_ids"]]
            for key in set(encoded) - {"input_ids"}:
                encoded[key] = [values[: len(ids)] for values, ids in zip(encoded[key], encoded["input_ids"])]
        return encoded

    # --- export and loading -----------------------------------------------------------------------

    def export_config(self) -> dict:
        return {
            "templates": list(self.templates),
            "denoise": self.denoise,
            "bias_start": self.bias_start,
            "bias_gradient": self.bias_gradient,
            "mlp": self.mlp is not None,
            "test_embedding": self.test_embedding,
        }

    @classmethod
    def from_export(cls, backbone, tokenizer, config: dict) -> PromptEncoder:
        return cls(
            backbone,
            tokenizer,
            config["templates"],
            denoise=config["denoise"],
            bias_start=config["bias_start"],
            bias_gradient=config["bias_gradient"],
            mlp=config["mlp"],
            test_embedding=config["test_embedding"],
        )

    def write_sentence_transformers_modules(self, directory: str, state_dict: dict | None = None) -> None:
        """The raw embedding's modules: the backbone's ``Transformer`` that puts each sentence in the
        template (:class:`cse.prompt_modules.PromptTransformer`), then the mask token's state
        (:class:`cse.prompt_modules.MaskPooling`); their code is copied beside the model. The denoised
        embedding needs a forward of the template that no module after the ``Transformer`` can run: none."""
        if self.test_embedding != "raw":
            super().write_sentence_transformers_modules(directory, state_dict)
            return
        from ..prompt_modules import MaskPooling, PromptTransformer, save_prompt_config

        save_prompt_config(directory, self.text)
        folder = f"1_{MaskPooling.__name__}"
        MaskPooling(self.tokens[0].mask_id, self.backbone.config.hidden_size).save(os.path.join(directory, folder))
        modules = [(folder, write_module_code(directory, MaskPooling))]
        write_modules(
            directory, self.backbone, self.tokenizer, modules, first=write_module_code(directory, PromptTransformer)
        )
