#!/usr/bin/env python
"""ESimCSE's word repetition (Wu et al., COLING 2022) as a part of ``run_cse.py``'s compositions,
defined outside the ``cse`` package in this one file: a part that remakes the training batch's views
(its ``views`` hook; docs/extending.md walks through it).

SimCSE's two views of a sentence differ by their dropout masks alone, and so have the same length:
the encoder can tell positives apart by length. ESimCSE's positive repeats some of the sentence's
words, which changes its length and not its meaning. For a sentence of n real tokens (its special
tokens and padding left out), the second view repeats

    dup_len ~ Uniform{0, ..., max(2, floor(dup_rate * n))}

of its tokens, each chosen without replacement and written twice in place (``a b c`` -> ``a b b c``);
the first view is the sentence itself. The repeated view is kept within the run's
``--max_seq_length``: fewer tokens are repeated where more would not fit (nothing is cut). The rule
and the batch's remaking are the package's (:mod:`cse.repetition`). ESimCSE itself, with its
momentum-contrast queue and the released code's repetition rule, is the package's ``esimcse`` part
(``run_esimcse.py``, docs/methods/esimcse.md); this file shows a views hook alone, outside the package.

    python word_repetition.py --parts word_repetition --model_name_or_path bert-base-uncased --output_dir result/wr
    python word_repetition.py --parts mixcse,word_repetition ...    # MixCSE's negatives on the repeated views
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from cse import composition
from cse.errors import run_cli
from cse.losses.esimcse import CITATION
from cse.parts import Part
from cse.registry import MethodRecord, register
from cse.repetition import RepeatedViews, repeat_some, repetition_choices


@dataclass
class WordRepetitionArguments:
    dup_rate: float = field(
        default=0.32, metadata={"help": "The share of a sentence's tokens its positive may repeat (ESimCSE's best)."}
    )

    def __post_init__(self):
        if not 0.0 <= self.dup_rate <= 1.0:
            raise ValueError(f"--dup_rate must lie in [0, 1], got {self.dup_rate}")


class WordRepetition(RepeatedViews, Part):
    """The part: the second view of each sentence repeats some of its tokens (:meth:`views`)."""

    name = "word_repetition"
    display_name = "ESimCSE word repetition"
    citation = CITATION
    docs = "docs/extending.md"
    equation = (
        "the positive view repeats dup_len ~ U{0..max(2, floor(dup_rate n))} of the sentence's n real tokens in place, "
        "so that its length no longer tells it apart (Wu et al. 2022)"
    )
    Flags = WordRepetitionArguments
    replaces = frozenset({"views"})

    def repeat(self, tokens: list[int]) -> list[int]:
        """The tokens with dup_len of the real ones repeated, within the length cap; draws from
        Python's generator, which the Trainer seeds and restores on resume."""
        real = [i for i, token in enumerate(tokens) if token not in self.special_ids]
        choices = repetition_choices("paper", self.args.dup_rate, len(tokens), len(real))
        room = None if self.max_length is None else self.max_length - len(tokens)
        return repeat_some(tokens, real, choices, room, random)


RECORD = register(MethodRecord(part=WordRepetition))

if __name__ == "__main__":
    run_cli(composition.main)
