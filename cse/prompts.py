"""Prompt templates around a sentence, and the embedding read at the template's mask token.

A template is written in the syntax of PromptBERT's released code (Jiang et al., EMNLP 2022;
kongds/Prompt-BERT, run.sh l.80-81 and 98-99, parsed as train.py l.617-641 and evaluation.py
l.196-205 parse it), without spaces:

============  ==========================================================
``*cls*``     the tokenizer's first special token ([CLS], ``<s>``)
``*sent_0*``  the sentence
``*mask*``    the tokenizer's mask token, whose last hidden state is the embedding
``*sep+*``    the tokenizer's last special token ([SEP], ``</s>``)
``_``         a space
============  ==========================================================

so that ``*cls*_This_sentence_of_"*sent_0*"_means*mask*.*sep+*`` is ``This sentence of "[X]" means
[MASK].`` around the sentence [X]. A template is used in two forms:

* **tokens** (:class:`TemplateTokens`, training): the prefix before the sentence and the suffix after
  it tokenised apart, ``prefix = encode(prefix text)[:-1]`` ([CLS] and the prefix) and ``suffix =
  encode(suffix text)[1:]`` (the suffix and [SEP]), and each input ``prefix + sentence + suffix`` with
  the sentence's own sub-word tokens (released train.py l.673-699; a whole batch at once:
  :func:`wrapped_views`), made once for the whole corpus, as the released code makes them in
  preprocessing (:class:`cse.template_views.TemplateViews`: columns of the tokenised corpus that the
  batches are sliced from). The prefix text is stripped of spaces at both ends, as the released
  code strips RoBERTa's (l.626-628): a byte-level tokenizer would otherwise read a leading space as
  part of the first word (BERT's ignores it). Only the sentence is ever truncated (by the tokenizer,
  to ``--max_seq_length`` with its special tokens, before it is wrapped): the template and its mask
  token are kept whole.
* **text** (:func:`template_input`, evaluation): the sentence inserted into the template's text and
  tokenised as one string, a period appended where the sentence ends in none of ``. ? " '`` (the
  released evaluation.py's batcher, l.196-205, which produced the published test numbers).

The template's mask token must come after the sentence (both of PromptBERT's templates, and CoT-BERT's,
put it there), so that the embedding is read at the *last* mask token of each row
(:func:`last_mask_states`): a literal mask token inside a sentence comes before it and is never read.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

import torch

SENTENCE = "*sent_0*"
MASK = "*mask*"
SPECIAL = ("*cls*", "*sep+*")  # the tokenizer adds its own special tokens around each piece
# the sentence endings after which the evaluation appends no period (released evaluation.py l.203)
FINAL_PUNCTUATION = ".?\"'"


def template_problem(template: str, masks: int = 1) -> str | None:
    """Why ``template`` is not a template of the syntax above with ``masks`` mask tokens (CoT-BERT's
    have two, the embedding read at the last), or None."""
    if " " in template:
        return "it holds a space (write spaces as _, as the released run.sh does)"
    if template.count(SENTENCE) != 1:
        return f"it must hold {SENTENCE}, where the sentence goes, exactly once"
    if template.count(MASK) != masks:
        times = "once" if masks == 1 else f"{masks} times (the last one's state is the embedding)"
        return f"it must hold {MASK}, whose state is the embedding, exactly {times}"
    if template.index(MASK) < template.index(SENTENCE):
        return f"its {MASK} comes before {SENTENCE}: the embedding is read at the last mask token of each input"
    return None


def template_text(template: str, mask_token: str) -> str:
    """The template as text: special tokens left out (the tokenizer adds them), ``*mask*`` the mask
    token, ``_`` a space; ``*sent_0*`` stays where the sentence goes."""
    before, after = template.split(SENTENCE)
    pieces = []
    for piece in (before, after):
        for special in SPECIAL:
            piece = piece.replace(special, "")
        pieces.append(piece.replace(MASK, mask_token).replace("_", " "))
    return SENTENCE.join(pieces)


def with_period(sentence: str) -> str:
    """The sentence as the evaluation inserts it: a period appended unless it ends in ``. ? " '``."""
    return sentence + "." if sentence and sentence[-1] not in FINAL_PUNCTUATION else sentence


def template_input(text: str, sentence: str, period: bool = True) -> str:
    """The evaluation's input string: ``sentence`` (with :func:`with_period` where ``period``) inserted
    into ``text`` (:func:`template_text`), stripped of spaces at both ends."""
    return text.replace(SENTENCE, with_period(sentence) if period else sentence).strip()


@dataclass(frozen=True)
class TemplateTokens:
    """A template's token ids around a sentence: ``prefix`` (the first special token and the words
    before the sentence), ``suffix`` (the words after it, the mask token among them, and the last special
    token). ``prefix + suffix`` is the template with no sentence (PromptBERT's template bias input)."""

    prefix: tuple[int, ...]
    suffix: tuple[int, ...]
    mask_id: int

    @classmethod
    def of(cls, tokenizer, template: str, masks: int = 1) -> TemplateTokens:
        """The template's ids; ``masks``: how many mask tokens it holds (:func:`template_problem`)."""
        problem = template_problem(template, masks)
        if problem is not None:
            raise ValueError(f"template {template!r}: {problem}")
        before, after = template_text(template, tokenizer.mask_token).split(SENTENCE)
        prefix = tokenizer.encode(before.strip())[:-1]
        suffix = tokenizer.encode(after)[1:]
        if suffix.count(tokenizer.mask_token_id) != masks:
            count = "one mask token" if masks == 1 else f"{masks} mask tokens"
            raise ValueError(f"template {template!r}: its text after the sentence does not tokenise to {count}")
        return cls(tuple(prefix), tuple(suffix), tokenizer.mask_token_id)

    @property
    def empty(self) -> list[int]:
        """The template with no sentence."""
        return [*self.prefix, *self.suffix]

    def __len__(self) -> int:
        return len(self.prefix) + len(self.suffix)

    @property
    def mask_index(self) -> int:
        """The (last) mask token's position in the template with no sentence."""
        return len(self) - 1 - self.suffix[::-1].index(self.mask_id)

    def fit(self, ids: Sequence[int], max_length: int) -> list[int]:
        """``ids`` (a whole input of this template, the sentence inside) cut to ``max_length`` tokens by
        cutting the sentence's end: the prefix and suffix stay whole."""
        if len(ids) <= max_length:
            return list(ids)
        if max_length < len(self):
            raise ValueError(f"max_length {max_length} leaves no room for the template's {len(self)} tokens")
        keep = max_length - len(self.suffix)
        return [*ids[:keep], *ids[len(ids) - len(self.suffix) :]]

    def bias_position_ids(self, shifts: int, start: int = 0, device=None) -> torch.Tensor:
        """``(shifts, len(self))`` position ids of the template with no sentence, row k as if a
        sentence of k tokens stood between prefix and suffix: ``start + j`` for the prefix's j,
        ``start + j + k`` after it (released models.py ``get_delta``, l.96-98); made on ``device``
        (no copy from the host)."""
        columns = torch.arange(len(self), device=device)
        shift = torch.arange(shifts, device=device)[:, None] * (columns >= len(self.prefix))
        return columns + shift + start


def last_mask_states(states: torch.Tensor, input_ids: torch.Tensor, mask_id: int) -> torch.Tensor:
    """``(rows, d)``: each row's last-layer state at its last ``mask_id`` token, from ``(rows, length, d)``
    states (a gather: no boolean indexing, no read of a value on the host)."""
    positions = torch.arange(input_ids.shape[-1], device=input_ids.device)
    last = torch.where(input_ids == mask_id, positions, -1).amax(dim=-1)
    return states.gather(1, last[:, None, None].expand(-1, 1, states.shape[-1])).squeeze(1)


@functools.lru_cache(maxsize=16)
def template_words(
    templates: tuple[TemplateTokens, ...], pad_id: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The constants :func:`wrapped_views` gathers with, made once per set of templates: ``(views,
    longest + 1)`` each template's words (prefix then suffix), padded with ``pad_id`` to the longest and
    one more ``pad_id`` (the padding column); ``(views, 1)`` the prefixes' and the templates' lengths."""
    longest = max(len(t) for t in templates)
    words = torch.tensor([[*t.empty, *[pad_id] * (longest + 1 - len(t))] for t in templates])
    prefix = torch.tensor([len(t.prefix) for t in templates])[:, None]
    sizes = torch.tensor([len(t) for t in templates])[:, None]
    return words, prefix, sizes


def wrapped_views(
    batch: dict[str, torch.Tensor], templates: Sequence[TemplateTokens], special_ids: torch.Tensor, pad_id: int
) -> dict[str, torch.Tensor]:
    """A ``(batch, views, length)`` batch (right-padded) with each sentence's view v inside
    ``templates[v]``: ``prefix + sentence + suffix``, the sentence being view v's tokens without the
    special token (one of ``special_ids``) the tokenizer put at either end (a special token inside the
    sentence, a literal [MASK], stays). Every row is padded right with ``pad_id`` to the longest, at
    least the batch's length less its two special tokens plus the longest template (so that a batch
    of static shapes keeps a static shape); attention masks exactly the tokens, token types zero (where
    ``batch`` has them), the dtypes ``batch``'s. One gather for the whole batch, no Python per sentence."""
    ids, mask = batch["input_ids"], batch["attention_mask"]
    length = ids.shape[-1]
    words, prefix, sizes = template_words(tuple(templates), pad_id)
    longest = words.shape[-1] - 1
    lengths = mask.sum(-1, keepdim=True)  # (batch, views, 1): right padding, each row's tokens its first `lengths`
    first = (torch.isin(ids[..., :1], special_ids) & (lengths > 0)).long()
    last = ids.gather(-1, (lengths - 1).clamp_(min=0))
    n = lengths - first - (torch.isin(last, special_ids) & (lengths > first)).long()  # the sentence's tokens
    rows = n + sizes
    j = torch.arange(max(length - 2 + longest, int(rows.max())))
    # one gather from [the view's tokens | its template's words | padding]: the sentence's token
    # j - prefix after the first special token, the template's word j before the sentence and j - n after
    # it, padding from the row's end
    source = torch.cat([ids, words.to(ids.dtype).expand(ids.shape[0], -1, -1)], -1)
    in_sentence, beyond = j - prefix, j + length
    index = torch.where(in_sentence < n, in_sentence + first, beyond - n)
    index = torch.where(in_sentence < 0, beyond, index)
    valid = j < rows
    out_ids = source.gather(-1, torch.where(valid, index, length + longest))
    out = {"input_ids": out_ids, "attention_mask": valid.to(mask.dtype)}
    if "token_type_ids" in batch:
        out["token_type_ids"] = torch.zeros_like(out_ids)
    return out
