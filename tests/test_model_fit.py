"""A model, its tokenizer and its poolers that do not fit together are refused when the model is
loaded, before any corpus is read or anything is written (:func:`cse.modeling.fit_problem`): the
tokenizer's ids need rows in the input embeddings, the tokenizer must pad with the padding id the
configuration declares, and each pooler's declared needs (:mod:`cse.pooling`) must be met. The models
are real, randomly initialised Hugging Face models saved with the real tokenizers of ``../shared``."""

import os

import pytest
import torch
from tokenizers import processors
from transformers import AutoTokenizer, BertConfig, BertModel, GPT2Config, GPT2Model, RobertaConfig, RobertaModel

import run_simcse
from cse.modeling import fit_problem
from cse.pooling import MIN_LAYERS, NEEDS_POOLING_LAYER, POOLERS, READS_FIRST_POSITION

from .conftest import TOKENIZERS, assert_nothing_written, refusal, train_argv

BERT_TOKENIZER = os.path.join(TOKENIZERS, "bert-base-uncased")
ROBERTA_TOKENIZER = os.path.join(TOKENIZERS, "roberta-base")
SMALL = dict(num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, hidden_size=32)


def bert(vocab_size, layers=2):
    torch.manual_seed(0)
    return BertModel(
        BertConfig(vocab_size=vocab_size, max_position_embeddings=64, **{**SMALL, "num_hidden_layers": layers})
    )


def gpt2(vocab_size):
    torch.manual_seed(0)
    config = GPT2Config(n_embd=32, n_layer=2, n_head=2, n_positions=64, vocab_size=vocab_size)
    config.bos_token_id = config.eos_token_id = None  # GPT-2's 50256 lies outside a BERT vocabulary
    return GPT2Model(config)


def saved(path, model, tokenizer_dir):
    model.save_pretrained(path)
    AutoTokenizer.from_pretrained(tokenizer_dir).save_pretrained(path)
    return str(path)


@pytest.fixture(scope="module")
def bert_tokenizer():
    return AutoTokenizer.from_pretrained(BERT_TOKENIZER)


@pytest.fixture(scope="module")
def roberta_tokenizer():
    return AutoTokenizer.from_pretrained(ROBERTA_TOKENIZER)


def refused_before_work(capsys, model_dir, out, *flags):
    lines = refusal(capsys, run_simcse.main, train_argv(model_dir, out, *flags))
    assert len(lines) == 2, lines
    assert_nothing_written(out)
    assert not os.path.exists(out)
    return lines


def test_a_gpt2_backbone_is_refused_for_the_poolers_that_read_its_pooling_layer_or_first_position(
    capsys, bert_tokenizer, tmp_path
):
    """A GPT-2 model (with the BERT tokenizer) and the default pooler ``cls``: refused in one line
    naming the missing pooling layer, before the corpus is read, where it failed with a traceback;
    ``cls_before_pooler``, which a causal backbone would feed its first token alone, too. ``avg``
    and ``max`` fit."""
    model_dir = saved(tmp_path / "gpt2", gpt2(len(bert_tokenizer)), BERT_TOKENIZER)
    assert refused_before_work(capsys, model_dir, tmp_path / "out") == [
        f"error: {model_dir}: pooler 'cls' reads the backbone's pooling layer (SimCSE's head on [CLS]), and "
        "GPT2Model has none",
        "  hint: pass --pooler_type avg or max",
    ]
    error, hint = refused_before_work(capsys, model_dir, tmp_path / "out", "--pooler_type", "cls_before_pooler")
    assert error.startswith(f"error: {model_dir}: pooler 'cls_before_pooler' reads the first position, and ")
    assert (
        "GPT2Model's attention is causal" in error
        and hint == "  hint: pass --pooler_type avg or max, which read every position"
    )
    for pooler in ("avg", "max", "avg_first_last", "avg_top2"):
        assert fit_problem(gpt2(len(bert_tokenizer)), bert_tokenizer, [pooler]) is None, pooler


def test_a_model_whose_vocabulary_is_smaller_than_its_tokenizer_s_is_refused_before_work(
    capsys, bert_tokenizer, tmp_path
):
    """A BERT model of 1,000 embedding rows with the 30,522-token BERT tokenizer failed mid-training
    (an IndexError, run_args.json written); refused before any work now. A vocabulary larger than the
    tokenizer's (unused rows) fits."""
    model_dir = saved(tmp_path / "small", bert(1000), BERT_TOKENIZER)
    assert refused_before_work(capsys, model_dir, tmp_path / "out") == [
        f"error: {model_dir}: the tokenizer has 30,522 tokens and the model's input embeddings 1,000 rows: ids 1,000 "
        "and above would index past them in training",
        "  hint: pass the tokenizer the model was trained with (--tokenizer_name, or the model's own), or one of at "
        "most 1,000 tokens",
    ]
    assert fit_problem(bert(len(bert_tokenizer) - 1), bert_tokenizer, ["cls"])[0].startswith("the tokenizer has 30,522")
    assert fit_problem(bert(len(bert_tokenizer)), bert_tokenizer, ["cls"]) is None
    assert fit_problem(bert(40000), bert_tokenizer, ["cls"]) is None


def test_another_family_s_tokenizer_is_refused_whichever_way_round(capsys, tiny_bert, tiny_roberta, tmp_path):
    """RoBERTa's tokenizer (50,265 tokens) on a BERT model (30,522 rows): past the embeddings. BERT's
    tokenizer on a RoBERTa model fits its rows, but pads with id 0 where RoBERTa declares 1 (and derives
    its positions from it): not its tokenizer."""
    error, _ = refused_before_work(capsys, tiny_bert, tmp_path / "out", "--tokenizer_name", ROBERTA_TOKENIZER)
    assert error == (
        f"error: {tiny_bert} with the tokenizer {ROBERTA_TOKENIZER}: the tokenizer has 50,265 tokens and the model's "
        "input embeddings 30,522 rows: ids 30,522 and above would index past them in training"
    )
    error, hint = refused_before_work(capsys, tiny_roberta, tmp_path / "out", "--tokenizer_name", BERT_TOKENIZER)
    assert error == (
        f"error: {tiny_roberta} with the tokenizer {BERT_TOKENIZER}: the tokenizer pads with id 0 ([PAD]) and the "
        "model's configuration declares padding id 1: not the tokenizer the model was trained with"
    )
    assert hint == "  hint: pass the tokenizer the model was trained with (--tokenizer_name, or the model's own)"


def test_a_tokenizer_without_a_padding_token_is_refused(bert_tokenizer):
    tokenizer = AutoTokenizer.from_pretrained(BERT_TOKENIZER)
    tokenizer.pad_token = None
    what, hint = fit_problem(gpt2(len(tokenizer)), tokenizer, ["avg"])
    assert what.startswith("the tokenizer (BertTokenizer) has no padding token") and "pad_token" in hint


def test_each_pooler_s_declared_needs_are_checked(bert_tokenizer, roberta_tokenizer):
    """Every pooler, on models that lack each need it declares, and on one that has them all."""
    roberta = RobertaModel(RobertaConfig(vocab_size=len(roberta_tokenizer), pad_token_id=1, **SMALL))
    no_first = AutoTokenizer.from_pretrained(ROBERTA_TOKENIZER)
    no_first.backend_tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    assert no_first("a")["input_ids"] == [102]  # no <s>
    one_layer = bert(len(bert_tokenizer), layers=1)
    causal = gpt2(len(bert_tokenizer))
    without_pooling_layer = BertModel(BertConfig(vocab_size=len(bert_tokenizer), **SMALL), add_pooling_layer=False)
    for pooler in POOLERS:
        assert fit_problem(bert(len(bert_tokenizer)), bert_tokenizer, [pooler]) is None
        assert fit_problem(roberta, roberta_tokenizer, [pooler]) is None
        said = {
            "pooling layer": fit_problem(without_pooling_layer, bert_tokenizer, [pooler]),
            "causal": fit_problem(causal, bert_tokenizer, [pooler]) if pooler != "cls" else None,
            "first token": fit_problem(roberta, no_first, [pooler]),
            "layers": fit_problem(one_layer, bert_tokenizer, [pooler]),
        }
        assert (said["pooling layer"] is not None) == (pooler in NEEDS_POOLING_LAYER), pooler
        assert (said["causal"] is not None) == (pooler in READS_FIRST_POSITION - NEEDS_POOLING_LAYER), pooler
        assert (said["first token"] is not None) == (pooler in READS_FIRST_POSITION), pooler
        assert (said["layers"] is not None) == (MIN_LAYERS.get(pooler, 0) > 1), pooler
    assert "puts no special token ([CLS], <s>) there" in fit_problem(roberta, no_first, ["cls_before_pooler"])[0]
    # the evaluation pooler is checked with the training one: cls trains, cls_before_pooler evaluates
    assert "causal" in fit_problem(causal, bert_tokenizer, ["avg", "cls_before_pooler"])[0]
