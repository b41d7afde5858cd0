"""Word repetition (ESimCSE, Wu et al., COLING 2022): a sentence's positive view with some of its
(sub-word) tokens written twice in place, ``a b c`` -> ``a b b c``, so that the two views of a
positive pair differ in length and not in meaning.

The rules for how many tokens are repeated (:func:`repetition_choices`) are shared by ESimCSE's part
(:mod:`cse.methods.esimcse`), whose draws are seeded per sentence and so made once per corpus
(:class:`SeededRepetition`), and the part outside the package in ``examples/word_repetition.py``,
which remakes each batch (:class:`RepeatedViews`, :func:`with_second_views`). The draws are Python's
``random`` calls, as the released code's: ``randrange`` for the count, ``sample`` for the positions.
"""

from __future__ import annotations

import hashlib
import random
import struct
from dataclasses import dataclass

import torch

from .batches import padded_views, view_tokens, with_view_columns

# How many tokens the positive repeats:
# - "released": the authors' code (ESimCSE/train.py, --dup_type bpe), which produced the published
#   runs: dup_len = random.randrange(min(10, int(dup_rate * L))), L the token count with [CLS] and
#   [SEP]; no repetition where int(dup_rate * L) = 0. Upper bound exclusive, at most 9 tokens.
# - "paper": the paper's formula, dup_len ~ U{0, ..., max(2, int(dup_rate * n))}, n the real tokens
#   (whether the paper's n counts the special tokens is not said).
RULES = ("released", "paper")
RELEASED_CAP = 10  # the released code's min(10, .), an exclusive bound: at most 9 repeated tokens
REPEATED = "repeated_"  # the corpus' columns of the repeated view: repeated_input_ids, repeated_attention_mask


def repetition_choices(rule: str, dup_rate: float, length: int, real: int) -> int:
    """The number k of equally likely repetition counts 0, ..., k - 1 for a sentence of ``length``
    tokens of which ``real`` are not special tokens (the count is then cut to what fits)."""
    if rule == "released":
        # int(), as the released code computes it (the same float product, truncated)
        return max(1, min(RELEASED_CAP, int(dup_rate * length)))
    if rule == "paper":
        return max(2, int(dup_rate * real)) + 1
    raise ValueError(f"rule must be one of {', '.join(RULES)}, got {rule!r}")


def repeated(tokens: list[int], repeat: set[int]) -> list[int]:
    """``tokens`` with the tokens at the positions ``repeat`` written twice in place."""
    out = list(tokens)
    # from the last position back, so that each insertion leaves the earlier positions where they were (a
    # few list insertions, not a Python step per token: this runs for every sentence of every batch)
    for i in sorted(repeat, reverse=True):
        out.insert(i, tokens[i])
    return out


def sentence_generator(seed: int, tokens: list[int]) -> random.Random:
    """A generator seeded by ``seed`` and the sentence's tokens: each sentence gets one repetition per
    seed, whatever the batch it comes in, the order batches are collated in (a data loader fetches
    ahead) or where a run resumed, as the released code's one repetition per sentence in preprocessing."""
    digest = hashlib.blake2b(struct.pack(f"<{len(tokens) + 1}q", seed, *tokens), digest_size=8).digest()
    return random.Random(int.from_bytes(digest, "little"))


def repeat_some(tokens: list[int], real: list[int], choices: int, room: int | None, rng) -> list[int]:
    """``tokens`` with a count drawn uniformly from 0, ..., ``choices`` - 1 (``rng.randrange``) of the
    positions ``real`` (``rng.sample``, without replacement) written twice; the count is cut to the real
    tokens and to ``room`` more tokens (None: no cap). ``rng``: a ``random.Random``, or the ``random``
    module itself (Python's generator, which the Trainer seeds and a checkpoint restores)."""
    count = rng.randrange(choices)
    count = min(count, len(real), len(real) if room is None else max(0, room))
    return repeated(tokens, set(rng.sample(real, count)))


@dataclass(frozen=True)
class SeededRepetition:
    """Each sentence's repeated view as ESimCSE draws it: a count by ``rule`` (:func:`repetition_choices`)
    of its tokens other than ``special_ids``, written twice, the draws from a generator seeded by
    ``seed`` and the sentence (:func:`sentence_generator`); the view kept within ``max_length`` tokens
    (None: no cap). The same sentence gets the same view in every batch, epoch and resumed run, so the
    views are drawn once for the whole corpus (:meth:`corpus`), as the released code draws them once
    in preprocessing, and no Python runs per sentence at each step."""

    seed: int
    rule: str
    dup_rate: float
    max_length: int | None
    special_ids: frozenset[int]

    def __call__(self, tokens: list[int]) -> list[int]:
        """``tokens`` (one sentence, special tokens included, no padding) with some written twice."""
        real = [i for i, token in enumerate(tokens) if token not in self.special_ids]
        choices = repetition_choices(self.rule, self.dup_rate, len(tokens), len(real))
        room = None if self.max_length is None else self.max_length - len(tokens)
        return repeat_some(tokens, real, choices, room, sentence_generator(self.seed, tokens))

    def columns(self, rows: dict[str, list]) -> dict[str, list]:
        """The repeated view of each of ``rows["input_ids"]``: ``repeated_input_ids`` and its
        ``repeated_attention_mask`` (a ``datasets.map`` function, batched)."""
        ids = [self(tokens) for tokens in rows["input_ids"]]
        return {REPEATED + "input_ids": ids, REPEATED + "attention_mask": [[1] * len(view) for view in ids]}

    def corpus(self, tokenized, num_proc: int | None = None, load_from_cache_file: bool = True):
        """``tokenized`` (a ``datasets.Dataset`` with ``input_ids``) with :meth:`columns`, cached by
        ``datasets`` under the corpus' fingerprint, these settings and the code that draws them (a
        second run with the same seed reads them back; a release that draws otherwise draws again)."""
        code = [SeededRepetition.__call__, repetition_choices, repeat_some, repeated, sentence_generator]
        code += [with_view_columns]  # how the columns are stored
        settings = [self.seed, self.rule, self.dup_rate, self.max_length, sorted(self.special_ids), *code]
        return with_view_columns(
            tokenized, self.columns, [REPEATED], settings, num_proc, load_from_cache_file, desc="Word repetition"
        )


def first_views(batch: dict[str, torch.Tensor]) -> list[list[int]]:
    """Each sentence's first view, its tokens without padding."""
    return view_tokens(batch, 0)


def with_second_views(
    batch: dict[str, torch.Tensor], first: list[list[int]], second: list[list[int]], pad_id: int
) -> dict[str, torch.Tensor]:
    """The batch of each sentence's first view ``first[i]`` (:func:`first_views` of ``batch``) and its
    second view ``second[i]``; every view padded (right, ``pad_id``) to the longest, at least the
    batch's own length, so that a batch of static shapes keeps its shape; attention masks exactly the
    tokens, token types zero (:func:`cse.batches.padded_views`)."""
    return padded_views(batch, list(zip(first, second)), pad_id, batch["input_ids"].shape[-1])


class RepeatedViews:
    """The hooks of a part whose views repeat tokens of each sentence's view 1, drawn anew for each
    batch (``examples/word_repetition.py``: Python's generator, which the Trainer seeds; mixed in before
    :class:`cse.parts.Part`): it reads ``--max_seq_length`` (``prepare_run``) and the tokenizer's
    special tokens and padding (``wrap``), and remakes each batch with view 1 as :meth:`repeat` gives it
    (``views``). A subclass says how many tokens and which (:meth:`repeat`)."""

    max_length: int | None = None  # the run's --max_seq_length (prepare_run)
    special_ids: frozenset[int] = frozenset()  # never repeated: [CLS], [SEP], padding (wrap)
    pad_id: int = 0

    def prepare_run(self, data_args, training_args) -> list:
        self.max_length = data_args.max_seq_length
        return []

    def wrap(self, model, replaced):
        tokenizer = model.tokenizer
        self.special_ids = frozenset(tokenizer.all_special_ids)
        self.pad_id = tokenizer.pad_token_id
        return model

    def views(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """View 1 of each sentence with some of its tokens repeated (:meth:`repeat`); view 0 the
        sentence itself; every view padded to the new length (at least the batch's own, so that a
        batch of static shapes keeps its shape)."""
        first = first_views(batch)
        return with_second_views(batch, first, [self.repeat(tokens) for tokens in first], self.pad_id)

    def repeat(self, tokens: list[int]) -> list[int]:
        """``tokens`` (one sentence, special tokens included, no padding) with some written twice."""
        raise NotImplementedError
