"""CoT-BERT's encoder (Zhang, Chang and Li, ICANN 2024): PromptBERT's prompt encoder
(:class:`cse.encoders.prompt.PromptEncoder`) with three templates of two mask tokens each, the
embedding read at the **last** mask token (Sect. 3.1, "the output vector corresponding to the final
[MASK] token"; released models.py l.191-197), and the template denoising of Sect. 3.3.

The training forward takes the three views as the part builds them (view v, the sentence inside
template v: anchor, positive, hard negative) and gives, for each view,

    h      = the last hidden state at the view's last mask token
    b(n)   = the same for the view's template whose sentence slot holds n attended [PAD] tokens, n the
             sentence's token count (the view's attention sum less the template's length)
    r      = h - b(n)               (with ``denoise="pad"``, the released code's and the paper's)
    z      = tanh(W r + c)          (SimCSE's training MLP; with ``mlp``)

(released models.py ``get_delta`` l.36-107, its subtraction l.203-220, the MLP l.235-239). The noise
rows ``prefix + [PAD] * k + suffix`` are attended over the template and the k [PAD]s, masked after,
and take the backbone's own position ids, as the released code builds them; the released code runs
``80 - len(template) + 1`` such rows for each template on each step, this encoder the rows up to the
batch's longest sentence (the other rows' values are never read, and each row's own value does not
depend on the others'). They run as the model runs (dropout in training), their gradient reaching the
encoder with ``bias_gradient`` (the released ``delta_freeze`` is False). ``denoise="position"`` is
PromptBERT's denoising (the empty template at the position ids a sentence would give it; the paper's
Table 6 "position denoise", not in the release); ``"none"`` subtracts nothing.

The evaluation and the export are PromptBERT's: the sentence inside the first (anchor) template as one
string with a period appended where it ends in none of ``. ? " '``, the raw state at the last mask
token, no denoising, no MLP (released evaluation.py l.222-228).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import torch

from ..prompts import TemplateTokens, last_mask_states
from .prompt import PromptEncoder

DENOISINGS = ("pad", "position", "none")
# what cse_config.json records to build the encoder again: its constructor's arguments
EXPORTED = ("templates", "denoise", "bias_gradient", "mlp", "bias_start")


def pad_noise_rows(template: torch.Tensor, prefix: int, rows: int, pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(input_ids, attention_mask)``, ``(rows, len(template) + rows - 1)``, of the noise rows of a template
    (its ids with no sentence, ``template``, of which the first ``prefix`` are the prefix): row k is ``prefix
    + [PAD] * k + suffix``, attended over those, then ``rows - 1 - k`` masked [PAD]s (released models.py
    l.54-62). Under BERT's position ids row k's suffix sits where a sentence of k tokens puts it (RoBERTa
    gives [PAD]s its padding position, and the suffix the empty template's positions, as in the release).
    Made with device operations from ``template`` alone: nothing is copied from the host."""
    length = template.shape[0]
    position = torch.arange(length + rows - 1, device=template.device)[None]
    k = torch.arange(rows, device=template.device)[:, None]
    in_suffix = (position >= prefix + k) & (position < length + k)
    source = torch.where(position < prefix, position, position - k).clamp(0, length - 1)
    ids = template[source].masked_fill(~(in_suffix | (position < prefix)), pad_id)
    return ids, (position < length + k).long()


class CoTBERTEncoder(PromptEncoder):
    """The backbone, read at the last mask token of CoT-BERT's templates (the module docstring).

    Args:
        backbone, tokenizer: as :class:`~cse.encoders.prompt.PromptEncoder`'s.
        templates: the anchor's (also the evaluation's), the positive's and the hard negative's
            (:mod:`cse.prompts` syntax, two ``*mask*`` each).
        denoise: ``"pad"`` ([PAD] denoising, Sect. 3.3), ``"position"`` (PromptBERT's) or ``"none"``.
        bias_gradient: let the loss's gradient reach the encoder through the noise (else a constant).
        mlp: the training MLP (dense + tanh) after the denoising; never at evaluation.
    """

    max_templates: ClassVar[int] = 3
    masks: ClassVar[int] = 2
    views_named: ClassVar[str] = "one to three templates (the anchor's, the positive's and the negative's)"

    def __init__(
        self,
        backbone,
        tokenizer,
        templates: Sequence[str],
        denoise: str = "pad",
        bias_gradient: bool = True,
        mlp: bool = True,
        bias_start: int = 0,
    ):
        if denoise not in DENOISINGS:
            raise ValueError(f"denoise must be one of {', '.join(DENOISINGS)}, got {denoise!r}")
        super().__init__(
            backbone,
            tokenizer,
            templates,
            denoise=denoise != "none",
            bias_start=bias_start,
            bias_gradient=bias_gradient,
            mlp=mlp,
            test_embedding="raw",
        )
        self.denoising = denoise
        # read once: a tokenizer's property inside the forward breaks a compiled graph
        self.pad_id = tokenizer.pad_token_id

    def template_bias(self, tokens: TemplateTokens, lengths: torch.Tensor, longest: int) -> torch.Tensor:
        """``(rows, d)``: b(n) of each row of ``lengths`` tokens (n = length - len(template)), from one
        forward of the noise rows n = 0 .. ``longest`` - len(template) (:func:`pad_noise_rows`);
        PromptBERT's bias with ``denoise="position"``."""
        if self.denoising == "position":
            return super().template_bias(tokens, lengths, longest)
        # PromptEncoder's buffer of the template's ids (on the model's device, where the rows are made), found by
        # identity, which torch.compile traces (a list's index() of a dataclass it does not)
        view = next(v for v, view_tokens in enumerate(self.tokens) if view_tokens is tokens)
        template = getattr(self, f"template_ids_{view}")
        rows = longest - len(tokens) + 1
        ids, mask = pad_noise_rows(template, len(tokens.prefix), rows, self.pad_id)
        with torch.set_grad_enabled(torch.is_grad_enabled() and self.bias_gradient):
            states = self.backbone_outputs(ids, mask).last_hidden_state
            noise = last_mask_states(states, ids, tokens.mask_id)
        return noise.index_select(0, lengths - len(tokens))

    def export_config(self) -> dict:
        """PromptEncoder's record with CoT-BERT's denoising in place of its flag (its evaluation is the raw state)."""
        config = {**super().export_config(), "denoise": self.denoising}
        return {key: config[key] for key in EXPORTED}

    @classmethod
    def from_export(cls, backbone, tokenizer, config: dict) -> CoTBERTEncoder:
        return cls(backbone, tokenizer, **{key: config[key] for key in EXPORTED})
