"""A part that remakes the views, outside the package: ``examples/word_repetition.py`` (ESimCSE's word
repetition). Its second views are its first with some real tokens written twice in place, never a
special token, at most max(2, floor(dup_rate n)) of them and within the length cap, their attention
masks exactly the tokens; copied to a directory outside the checkout, it trains there alone and with
MixCSE. (The file registers its part when imported: in this process only into a copy of the registry,
put back afterwards, as tests/test_extending.py does.)"""

import json
import os
import random
from collections import Counter

import pytest
from transformers import AutoTokenizer

from cse.data import TwoViewCollator

from .conftest import REPO, SENTENCES, TOKENIZERS, import_example, train_outside

EXAMPLE = os.path.join(REPO, "examples", "word_repetition.py")


@pytest.fixture
def example(monkeypatch):
    return import_example(monkeypatch, EXAMPLE)


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(os.path.join(TOKENIZERS, "bert-base-uncased"))


def part_for(example, tokenizer, dup_rate=0.32, max_length=None):
    part = example.WordRepetition(example.WordRepetitionArguments(dup_rate=dup_rate))
    part.special_ids, part.pad_id = frozenset(tokenizer.all_special_ids), tokenizer.pad_token_id
    part.max_length = max_length
    return part


def repeated_positions(original: list[int], view: list[int]) -> list[int] | None:
    """The positions of ``original`` written twice in ``view``, if ``view`` is ``original`` with some of
    its tokens written twice in place (each at most once more), else None."""
    positions, j = [], 0
    for i, token in enumerate(original):
        if j >= len(view) or view[j] != token:
            return None
        j += 1
        nxt = original[i + 1] if i + 1 < len(original) else None
        # a token written twice: the view holds it again where the original goes on with another
        if j < len(view) and view[j] == token and (nxt != token or view[j + 1 : j + 2] == [token]):
            positions.append(i)
            j += 1
    return positions if j == len(view) else None


def test_the_invariant_check_sees_what_is_not_a_repetition():
    assert repeated_positions([1, 5, 6, 2], [1, 5, 5, 6, 2]) == [1]
    assert repeated_positions([1, 5, 6, 2], [1, 5, 6, 2]) == []
    assert repeated_positions([1, 5, 6, 2], [1, 6, 5, 2]) is None  # reordered
    assert repeated_positions([1, 5, 6, 2], [1, 5, 5, 5, 6, 2]) is None  # written three times
    assert repeated_positions([1, 5, 6, 2], [1, 5, 6]) is None  # cut


def test_second_views_repeat_real_tokens_in_place_within_the_bound(example, tokenizer):
    part = part_for(example, tokenizer)
    features = [dict(tokenizer(sentence)) for sentence in SENTENCES]
    batch = TwoViewCollator(tokenizer)(features)
    random.seed(0)  # the example draws from Python's generator
    counts = Counter()
    for _ in range(50):
        out = part.views(batch)
        length = out["input_ids"].shape[-1]
        assert out["attention_mask"].shape == out["token_type_ids"].shape == (len(SENTENCES), 2, length)
        assert not out["token_type_ids"].any()
        for i, feature in enumerate(features):
            original = feature["input_ids"]
            first, second = (out["input_ids"][i, v][out["attention_mask"][i, v].bool()].tolist() for v in (0, 1))
            for v, tokens in enumerate((first, second)):
                # the mask covers the tokens and nothing else; padding after them
                row = out["attention_mask"][i, v]
                assert row[: len(tokens)].all() and not row[len(tokens) :].any()
                assert (out["input_ids"][i, v, len(tokens) :] == tokenizer.pad_token_id).all()
            assert first == original  # the first view is the sentence itself
            positions = repeated_positions(original, second)
            assert positions is not None, (original, second)
            real = [p for p, token in enumerate(original) if token not in tokenizer.all_special_ids]
            assert set(positions) <= set(real)  # [CLS] and [SEP] never repeat
            assert len(positions) <= max(2, int(0.32 * len(real)))
            counts[len(positions)] += 1
    # dup_len is drawn from 0 up to the bound: each count is seen (the short sentences' bound is 2)
    assert {0, 1, 2} <= set(counts)


def test_the_length_cap_is_kept_by_repeating_fewer(example, tokenizer):
    features = [dict(tokenizer(sentence)) for sentence in SENTENCES[:4]]
    longest = max(len(f["input_ids"]) for f in features)
    part = part_for(example, tokenizer, dup_rate=1.0, max_length=longest + 1)
    batch = TwoViewCollator(tokenizer)(features)
    random.seed(0)  # the example draws from Python's generator
    for _ in range(20):
        out = part.views(batch)
        assert out["input_ids"].shape[-1] <= longest + 1
        for i, feature in enumerate(features):
            second = out["input_ids"][i, 1][out["attention_mask"][i, 1].bool()].tolist()
            assert len(second) <= longest + 1 and repeated_positions(feature["input_ids"], second) is not None
    # a batch padded to the cap (static shapes) keeps its shape: nothing is repeated past it
    static = TwoViewCollator(tokenizer, max_length=longest)(features)
    part.max_length = longest
    assert part.views(static)["input_ids"].shape == static["input_ids"].shape


def test_the_rate_is_checked(example):
    with pytest.raises(ValueError, match=r"--dup_rate must lie in \[0, 1\]"):
        example.WordRepetitionArguments(dup_rate=1.5)


@pytest.mark.e2e
@pytest.mark.parametrize("parts", ["word_repetition", "mixcse,word_repetition"])
def test_the_part_trains_outside_the_checkout(parts, tiny_bert, tmp_path):
    flags = ["--parts", parts, "--dup_rate", "0.5", "--max_seq_length", "24"]
    out, logs = train_outside(EXAMPLE, tiny_bert, tmp_path, *flags)
    assert len(logs) == 2 and all(entry["loss"] > 0 for entry in logs)
    assert ("mix_score" in logs[0]) == ("mixcse" in parts)  # MixCSE's statistics beside the repeated views
    with open(out / "run_args.json", encoding="utf-8") as f:
        method = json.load(f)["method"]
    expected = {"dup_rate": 0.5}
    assert (method["word_repetition"] if "," in parts else method) == expected
    card = (out / "README.md").read_text(encoding="utf-8")
    assert "ESimCSE" in card and "author = {Wu, Xing and Gao, Chaochen" in card
