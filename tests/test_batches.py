"""The training batches sliced from the corpus' token matrices (cse.batches.TokenRows) are the
batches the tokenizer's padding of the sentences' token lists gives (the collator's path before
them), bit for bit: values, dtypes, keys and shapes, for BERT's and RoBERTa's tokenizers, padded to
each batch's longest sentence or to --max_seq_length; through a DataLoader as the Trainer builds it."""

import os

import pytest
import torch
from torch.utils.data import DataLoader, RandomSampler
from transformers import AutoTokenizer

from cse.batches import TokenRows
from cse.data import TwoViewCollator, load_corpus, tokenize_corpus

from .conftest import TOKENIZERS, WIKI_HEAD


@pytest.fixture(scope="module", params=["bert-base-uncased", "roberta-base"])
def tokenised(request):
    tokenizer = AutoTokenizer.from_pretrained(os.path.join(TOKENIZERS, request.param))
    return tokenizer, tokenize_corpus(load_corpus(WIKI_HEAD, max_train_samples=2000), tokenizer, max_seq_length=32)


@pytest.mark.parametrize("max_length", [None, 32])
def test_sliced_batches_are_the_padded_batches_bit_for_bit(tokenised, max_length):
    tokenizer, data = tokenised
    rows = TokenRows(data, tokenizer, max_length)
    collate = TwoViewCollator(tokenizer, max_length=max_length)
    assert len(rows) == len(data)
    loaders = [
        DataLoader(
            source,
            batch_size=64,
            sampler=RandomSampler(source, generator=torch.Generator().manual_seed(1)),
            collate_fn=collate,
        )
        for source in (data, rows)
    ]
    batches = 0
    for expected, got in zip(*loaders):
        assert list(got) == list(expected)
        for key in expected:
            assert got[key].dtype == expected[key].dtype and torch.equal(got[key], expected[key]), key
        batches += 1
    assert batches == -(-len(data) // 64)  # the last, short batch too
    assert rows[7] == data[7]
    assert list(rows.token_ids()) == data["input_ids"]


def test_left_padding_is_refused(tokenised):
    tokenizer, data = tokenised
    tokenizer = tokenizer.__class__.from_pretrained(tokenizer.name_or_path, padding_side="left")
    with pytest.raises(ValueError, match="right-padded"):
        TokenRows(data, tokenizer)
