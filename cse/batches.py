"""The tokenised training corpus as matrices, and its batches sliced from them.

:class:`TokenRows` turns the tokenised corpus (a ``datasets.Dataset`` of token-id lists, one row a
sentence) once into one padded matrix per column, each sentence's length beside it. The data
loader's sampler picks a batch's sentences as before; :meth:`TokenRows.__getitems__` then slices
their rows out of the matrices, cut to the batch's longest sentence (or padded to ``max_length``),
one numpy slice per column, into int64 tensors: the batch :class:`cse.data.TwoViewCollator` would have made by
padding the sentences' lists with the tokenizer (right padding with the tokenizer's pad values),
bit for bit, without Python work per sentence per step.

A part whose views of a sentence depend on that sentence alone adds them to the tokenised corpus once,
as more columns (:meth:`cse.parts.Part.corpus`: ESimCSE's repeated view, drawn per sentence;
PromptBERT's and CoT-BERT's templated views, :class:`cse.template_views.TemplateViews`), which
are sliced with the others: a column's name ends with the column it is a view of (``input_ids``,
``attention_mask``, ``token_type_ids``), which gives its dtype and padding. A part that remakes a
batch's views in Python at each step (:meth:`cse.parts.Part.views`: the word repetition of
``examples/word_repetition.py``, whose draws follow Python's generator from batch to batch) reads each
view's tokens out of it (:func:`view_tokens`) and puts the new views back into tensors
(:func:`padded_views`), each with one copy between torch and Python for the whole batch.
"""

from __future__ import annotations

import functools
from itertools import chain

import datasets
import numpy as np
import torch
from datasets.fingerprint import Hasher
from torch.utils.data import Dataset

# the narrowest dtype each column's values fit in, kept in memory (token ids: below 2^31 for any vocabulary)
STORED_DTYPES = {"input_ids": np.int32, "token_type_ids": np.int8, "attention_mask": np.int8}
# the tokenised sentence's own columns (the collator repeats them into views)
SENTENCE_COLUMNS = tuple(STORED_DTYPES)


def with_view_columns(
    tokenized: datasets.Dataset,
    make,
    prefixes: list[str],
    settings: list,
    num_proc: int | None = None,
    load_from_cache_file: bool = True,
    remove: list[str] = (),
    desc: str | None = None,
) -> datasets.Dataset:
    """``tokenized`` with the view columns ``make`` gives (a batched ``datasets.map`` function):
    ``{prefix}input_ids`` and ``{prefix}attention_mask`` for each of ``prefixes``, stored as
    :class:`TokenRows` keeps them (int32 ids, int8 masks, not Python's 64-bit integers); ``remove``: the
    columns they replace. Cached by ``datasets`` under the corpus' fingerprint and ``settings`` (what
    the views depend on, the code that makes them among it): a second run with the same settings reads
    them back, other settings write another cache file. ``num_proc`` processes make them."""
    features = tokenized.features.copy()
    for name in remove:
        del features[name]
    for prefix in prefixes:
        features[prefix + "input_ids"] = datasets.List(datasets.Value("int32"))
        features[prefix + "attention_mask"] = datasets.List(datasets.Value("int8"))
    return tokenized.map(
        make,
        batched=True,
        features=features,
        remove_columns=list(remove),
        num_proc=num_proc,
        load_from_cache_file=load_from_cache_file,
        new_fingerprint=Hasher.hash([tokenized._fingerprint, *settings]),
        desc=desc,
    )


def column_kind(name: str) -> str | None:
    """The column that ``name`` holds a view of (``repeated_input_ids``: ``input_ids``), None for another."""
    return next((kind for kind in STORED_DTYPES if name.endswith(kind)), None)


class TokenRows(Dataset):
    """The rows of a tokenised corpus as padded matrices (the module docstring). ``tokenizer``: the
    pad values (``pad_token_id`` for ``input_ids``, ``pad_token_type_id``, 0 for the attention mask)
    and the padding side, which must be the right. ``max_length``: every batch padded to it
    (``--pad_to_max_length``), else to its longest sentence; a batch is as long as its longest row of
    any column (a part's view may be longer than the sentence: ESimCSE's repetition)."""

    def __init__(self, tokenized: datasets.Dataset, tokenizer, max_length: int | None = None):
        if tokenizer.padding_side != "right":
            raise ValueError(
                f"batches are sliced from right-padded rows; the tokenizer pads on the {tokenizer.padding_side}"
            )
        self.max_length = max_length
        self.pad_values = {"input_ids": tokenizer.pad_token_id, "token_type_ids": tokenizer.pad_token_type_id}
        table = tokenized.with_format("arrow")[:]
        columns = {name: table.column(name).combine_chunks() for name in tokenized.column_names}
        # each row's length, per column
        self.column_lengths = {
            name: column.value_lengths().to_numpy(zero_copy_only=False).astype(np.int64)
            for name, column in columns.items()
        }
        # each row's longest column: a batch's length
        self.lengths = functools.reduce(np.maximum, self.column_lengths.values(), np.zeros(len(tokenized), np.int64))
        width = max(int(self.lengths.max(initial=0)), max_length or 0)
        # numpy arrays, not tensors: a batch's rows are sliced out several times faster (a few µs a column)
        self.columns: dict[str, np.ndarray] = {}
        for name, column in columns.items():
            lengths = self.column_lengths[name]
            values = column.flatten().to_numpy(zero_copy_only=False)
            rows = np.repeat(np.arange(len(lengths)), lengths)
            positions = np.arange(len(values)) - np.repeat(np.cumsum(lengths) - lengths, lengths)
            kind = column_kind(name)
            matrix = np.full(
                (len(lengths), width), self.pad_values.get(kind, 0), dtype=STORED_DTYPES.get(kind, np.int64)
            )
            matrix[rows, positions] = values
            self.columns[name] = matrix

    def __len__(self) -> int:
        return len(self.lengths)

    def __getitem__(self, index: int | str) -> dict[str, list[int]] | list[list[int]]:
        """One sentence's token lists, unpadded (as the tokenised corpus holds it); or, given a column's
        name, that column's lists for every sentence, as a ``datasets.Dataset`` gives them (a part
        reads the corpus so, e.g. SARCSE's token frequencies)."""
        if isinstance(index, str):
            return list(self.column_rows(index))
        return {
            name: matrix[index, : int(self.column_lengths[name][index])].tolist()
            for name, matrix in self.columns.items()
        }

    def __getitems__(self, indices: list[int]) -> dict[str, torch.Tensor]:
        """The batch of these sentences: int64 tensors ``(len(indices), length)``, ``length`` the
        longest row's (of any column), at least ``max_length``, padding right."""
        rows = np.asarray(indices, dtype=np.int64)
        length = max(self.max_length or 0, int(self.lengths[rows].max()))
        return {
            name: torch.from_numpy(matrix.take(rows, axis=0)[:, :length].astype(np.int64))
            for name, matrix in self.columns.items()
        }

    def token_ids(self):
        """Each sentence's token ids, a list, in corpus order."""
        return self.column_rows("input_ids")

    def column_rows(self, name: str):
        """Each sentence's list of the column ``name``, unpadded, in corpus order (one at a time)."""
        for row, length in zip(self.columns[name], self.column_lengths[name].tolist()):
            yield row[:length].tolist()


def view_tokens(batch: dict[str, torch.Tensor], view: int) -> list[list[int]]:
    """Each sentence's tokens in view ``view`` of a ``(batch, views, length)`` batch, without padding."""
    mask = batch["attention_mask"][:, view].bool()
    # two copies out of torch for the whole batch, not one per sentence
    flat, ends = batch["input_ids"][:, view][mask].tolist(), mask.sum(1).cumsum(0).tolist()
    return [flat[start:end] for start, end in zip([0, *ends], ends)]


def padded_views(
    batch: dict[str, torch.Tensor], views: list[list[list[int]]], pad_id: int, width: int
) -> dict[str, torch.Tensor]:
    """The batch of ``views[i]``, sentence i's views (token lists), each padded right with ``pad_id`` to
    the longest view, at least ``width``; attention masks exactly the tokens, token types zero (where
    ``batch`` has them); the dtypes ``batch``'s."""
    ids, mask = batch["input_ids"], batch["attention_mask"]
    lengths = torch.tensor([[len(view) for view in sentence] for sentence in views])
    out_mask = torch.arange(max(width, int(lengths.max()))) < lengths[..., None]
    out_ids = torch.full(out_mask.shape, pad_id, dtype=ids.dtype)
    # the tokens in the mask's row-major order, sentence by sentence, view by view: one copy into torch
    out_ids[out_mask] = torch.tensor(list(chain.from_iterable(chain.from_iterable(views))), dtype=ids.dtype)
    out = {"input_ids": out_ids, "attention_mask": out_mask.to(mask.dtype)}
    if "token_type_ids" in batch:
        out["token_type_ids"] = torch.zeros_like(out_ids)
    return out
