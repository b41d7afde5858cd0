"""PromptBERT's and CoT-BERT's training views made once for the whole corpus: each sentence inside
each template (:func:`cse.prompts.wrapped_views`), as the released code wraps each sentence once in
preprocessing, into columns of the tokenised corpus (:class:`TemplateViews`) that the batches are sliced
from (:class:`cse.batches.TokenRows`). Training-data code: the export copies :mod:`cse.prompts` beside
a model, not this module."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from .batches import SENTENCE_COLUMNS, with_view_columns
from .prompts import TemplateTokens, template_words, wrapped_views


# the corpus' columns of view v: template0_input_ids, template0_attention_mask, template1_input_ids, ...
def template_column(view: int, kind: str) -> str:
    """The name of the corpus' column of ``kind`` (``input_ids``, ``attention_mask``) of view ``view``."""
    return f"template{view}_{kind}"


@dataclass(frozen=True)
class TemplateViews:
    """Each sentence inside each of ``templates``, view v inside ``templates[v]``
    (:func:`wrapped_views`), made once for the whole corpus (:meth:`corpus`), as the released code wraps
    each sentence once in preprocessing; a training batch then stacks its rows of those columns
    (:meth:`views`), with no work per sentence at each step. The views replace the sentence's own
    columns in the corpus (the model reads the views alone). ``special_ids``, ``pad_id``: the
    tokenizer's; ``token_types``: whether its batches hold token type ids (zero in every view);
    ``width``: the width a batch of static shapes keeps, ``--max_seq_length`` less the two special
    tokens plus the longest template (:meth:`static_width`), 0 where batches are as long as their
    longest row."""

    templates: tuple[TemplateTokens, ...]
    special_ids: tuple[int, ...]
    pad_id: int
    token_types: bool = False
    width: int = 0

    @staticmethod
    def static_width(templates: Sequence[TemplateTokens], max_length: int | None) -> int:
        """The width of every batch where the sentences are padded to ``max_length`` (None: none): the
        width :func:`wrapped_views` gives a batch of that length."""
        return 0 if max_length is None else max_length - 2 + max(map(len, templates))

    def columns(self, rows: dict[str, list]) -> dict[str, list]:
        """Each of ``rows["input_ids"]`` (with its ``attention_mask``) inside each template: the columns
        :func:`template_column` of every view, each row its own tokens, unpadded (a ``datasets.map``
        function, batched)."""
        sentences, masks = rows["input_ids"], rows["attention_mask"]
        length = max(map(len, sentences), default=0)
        views = len(self.templates)
        # the collated batch of these sentences (right padding), each repeated in every view
        batch = {
            "input_ids": torch.tensor([[row + [self.pad_id] * (length - len(row))] * views for row in sentences]),
            "attention_mask": torch.tensor([[row + [0] * (length - len(row))] * views for row in masks]),
        }
        out = wrapped_views(batch, self.templates, torch.tensor(self.special_ids), self.pad_id)
        sizes = out["attention_mask"].sum(-1).tolist()
        ids = out["input_ids"].tolist()
        columns = {}
        for v in range(views):
            kept = [row[v][: size[v]] for row, size in zip(ids, sizes)]
            columns[template_column(v, "input_ids")] = kept
            columns[template_column(v, "attention_mask")] = [[1] * len(row) for row in kept]
        return columns

    def corpus(self, tokenized, num_proc: int | None = None, load_from_cache_file: bool = True):
        """``tokenized`` (a ``datasets.Dataset`` with ``input_ids`` and ``attention_mask``) with
        :meth:`columns` in place of the sentence's own columns, cached by ``datasets`` under the corpus'
        fingerprint, the templates, the tokenizer's ids and the code that wraps (a second run reads them
        back)."""
        code = [TemplateViews.corpus, TemplateViews.columns, wrapped_views, template_words]
        code += [with_view_columns]  # how the columns are stored
        settings = [[(t.prefix, t.suffix, t.mask_id) for t in self.templates], self.special_ids, self.pad_id, *code]
        return with_view_columns(
            tokenized,
            self.columns,
            [template_column(v, "") for v in range(len(self.templates))],
            settings,
            num_proc,
            load_from_cache_file,
            remove=[name for name in tokenized.column_names if name in SENTENCE_COLUMNS],
            desc="Templates",
        )

    def views(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The batch of each sentence's views, read from the corpus' columns (:meth:`corpus`), which it
        leaves out: ``(batch, views, length)``, every row padded right to the batch's length (its longest
        row of any column: the longest view, unless another part's column is longer), at least
        :attr:`width`; attention masks exactly the tokens, token types zero (:attr:`token_types`). The
        batch :func:`wrapped_views` makes of the sentences, bit for bit."""
        if template_column(0, "input_ids") not in batch:
            raise RuntimeError("the template views are read from the corpus' columns (TemplateViews.corpus)")
        views = range(len(self.templates))
        ids = torch.stack([batch.pop(template_column(v, "input_ids")) for v in views], 1)
        mask = torch.stack([batch.pop(template_column(v, "attention_mask")) for v in views], 1)
        # the batch is sliced to its longest row of any column (the views' longest: each is the sentence
        # less its two special tokens and plus a template); padded to the static width where one is set
        if ids.shape[-1] < self.width:
            ids = torch.nn.functional.pad(ids, (0, self.width - ids.shape[-1]), value=self.pad_id)
            mask = torch.nn.functional.pad(mask, (0, self.width - mask.shape[-1]))
        batch.update(input_ids=ids, attention_mask=mask)
        if self.token_types:
            batch["token_type_ids"] = torch.zeros_like(ids)
        return batch
