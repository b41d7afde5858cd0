"""Word repetition (ESimCSE, Wu et al., COLING 2022): a sentence's positive view with some of its
(sub-word) tokens written twice in place, ``a b c`` -> ``a b b c``, so that the two views of a
positive pair differ in length and not in meaning.

The rules for how many tokens are repeated (:func:`repetition_choices`) and the remaking of a
``(batch, 2, length)`` batch with new second views (:func:`with_second_views`) are shared by
ESimCSE's part (:mod:`cse.methods.esimcse`) and the part outside the package in
``examples/word_repetition.py``. The draws are Python's ``random`` calls, as the released code's:
``randrange`` for the count, ``sample`` for the positions, from the generator a part gives.
"""

from __future__ import annotations

import hashlib
import random
import struct

import torch

from .batches import padded_views, view_tokens

# How many tokens the positive repeats:
# - "released": the authors' code (ESimCSE/train.py, --dup_type bpe), which produced the published
#   runs: dup_len = random.randrange(min(10, int(dup_rate * L))), L the token count with [CLS] and
#   [SEP]; no repetition where int(dup_rate * L) = 0. Upper bound exclusive, at most 9 tokens.
# - "paper": the paper's formula, dup_len ~ U{0, ..., max(2, int(dup_rate * n))}, n the real tokens
#   (whether the paper's n counts the special tokens is not said).
RULES = ("released", "paper")
RELEASED_CAP = 10  # the released code's min(10, .), an exclusive bound: at most 9 repeated tokens


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
    """The hooks of a part whose views repeat tokens of each sentence's view 1 (mixed in before
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
