"""CoT-BERT: the extended InfoNCE (Eq. 2-3) against float64 hand computations; the templates' token
rows of the real tokenizers, the last [MASK] pooled, the [PAD] noise rows and their index, each
template's own noise subtracted, the gradient through the noise; its refusals; ``run_cotbert.py`` on a
tiny model, killed and resumed, and its export read back by ``load_model`` and sentence-transformers."""

import math
import os
from types import SimpleNamespace

import pytest
import torch
from transformers import AutoModel, AutoTokenizer

import run_cotbert
from cse.arguments import parse_args
from cse.data import tokenize_lines
from cse.encoders.cotbert import CoTBERTEncoder, pad_noise_rows
from cse.losses.cotbert import CoTBERTLoss
from cse.methods.cotbert import TEMPLATES, CoTBERT, CoTBERTArguments
from cse.parts import why_not
from cse.prompts import TemplateTokens
from cse.registry import get

from .conftest import (
    REPO,
    SENTENCES,
    TOKENIZERS,
    assert_nothing_written,
    common_args,
    refusal,
    sliced_batches,
    small_run_argv,
)

# --- the loss: float64 hand computations (docs/methods/cotbert.md, "The loss") ---------------------

R = [[1.0, 0.0], [0.0, 1.0]]
R_POS = [[0.8, 0.6], [0.6, 0.8]]
R_NEG = [[1.0, 1.0], [-1.0, 1.0]]
TAU = 0.05
# each row's loss and their mean, worked by hand: the blocks / tau are A = [[16, 12], [12, 16]],
# B = 10 sqrt(2) [[1, -1], [1, 1]], C = [[14 sqrt(2), -2 sqrt(2)], [14 sqrt(2), 2 sqrt(2)]]
HAND_ROWS = [3.8249470704, 3.8283453061]
HAND_MEAN = 3.8266461882
HAND_WITHOUT_PAIRS = 0.2230572996  # Table 4's ablation: no a_i+j- block
HAND_INFONCE = 0.0181499279  # the A block alone: SimCSE's / PromptBERT's InfoNCE


def cos(a, b):
    return sum(x * y for x, y in zip(a, b)) / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


def hand_row(i, r, pos, neg, tau, pair_negatives=True):
    """-log( a_ii+ / sum_j (a_ij+ + a_ij- + a_i+j-) ), term by term (Eq. 3), j over the whole batch."""
    terms = [math.exp(cos(r[i], pos[j]) / tau) for j in range(len(r))]
    terms += [math.exp(cos(r[i], neg[j]) / tau) for j in range(len(r))]
    if pair_negatives:
        terms += [math.exp(cos(pos[i], neg[j]) / tau) for j in range(len(r))]
    return -math.log(math.exp(cos(r[i], pos[i]) / tau) / sum(terms))


def as_tensors(*rows):
    return [torch.tensor(r, dtype=torch.float64) for r in rows]


def test_hand_rows_are_eq3():
    """The hand values above are Eq. 3's, row by row."""
    for i, expected in enumerate(HAND_ROWS):
        assert hand_row(i, R, R_POS, R_NEG, TAU) == pytest.approx(expected, abs=1e-9)


def test_loss_matches_hand_computation():
    """In float32 (the cosine logits' precision, as InfoNCE's) the loss is the hand mean."""
    loss = CoTBERTLoss(temperature=TAU)(*as_tensors(R, R_POS, R_NEG))
    assert float(loss) == pytest.approx(HAND_MEAN, abs=1e-5)


def test_loss_float64_to_1e12(monkeypatch):
    """With the cosine computed in float64 the loss is the hand value to 1e-12."""
    from cse.losses import cotbert

    def cosine64(anchors, candidates, temperature):
        a = torch.nn.functional.normalize(anchors, dim=-1)
        c = torch.nn.functional.normalize(candidates, dim=-1)
        return a @ c.T / temperature

    monkeypatch.setattr(cotbert, "cosine_logits", cosine64)
    r, pos, neg = as_tensors(R, R_POS, R_NEG)
    exact = sum(hand_row(i, R, R_POS, R_NEG, TAU) for i in range(2)) / 2
    assert float(CoTBERTLoss(temperature=TAU)(r, pos, neg)) == pytest.approx(exact, abs=1e-12)
    assert exact == pytest.approx(HAND_MEAN, abs=1e-9)
    without = sum(hand_row(i, R, R_POS, R_NEG, TAU, pair_negatives=False) for i in range(2)) / 2
    assert without == pytest.approx(HAND_WITHOUT_PAIRS, abs=1e-9)
    assert float(CoTBERTLoss(temperature=TAU, pair_negatives=False)(r, pos, neg)) == pytest.approx(without, abs=1e-12)
    # the blocks hold j = i: the columns 2 + i and 4 + i are sim(r_i, r-_i) and sim(r+_i, r-_i)
    logits = cotbert.extended_logits(r, pos, neg, TAU, True)
    for i in range(2):
        assert float(logits[i, 2 + i]) == pytest.approx(cos(R[i], R_NEG[i]) / TAU, abs=1e-12)
        assert float(logits[i, 4 + i]) == pytest.approx(cos(R_POS[i], R_NEG[i]) / TAU, abs=1e-12)
    assert float(logits[0, 4]) == pytest.approx(14 * math.sqrt(2), abs=1e-12)
    assert float(logits[1, 5]) == pytest.approx(2 * math.sqrt(2), abs=1e-12)


def test_infonce_block_alone():
    """The A block alone is SimCSE's InfoNCE (the hand value of the spec), the base the two blocks extend."""
    rows = [math.exp(cos(R[i], R_POS[i]) / TAU) / sum(math.exp(cos(R[i], p) / TAU) for p in R_POS) for i in range(2)]
    infonce = -sum(map(math.log, rows)) / 2
    assert infonce == pytest.approx(HAND_INFONCE, abs=1e-9)


def test_groups_are_separate_losses():
    """``group_size`` 2 of a batch of 4: the mean of the two halves' own losses (DataParallel's two replicas)."""
    torch.manual_seed(0)
    r, pos, neg = torch.randn(3, 4, 8, dtype=torch.float64).unbind(0)
    halves = [CoTBERTLoss(gather_across_devices=False)(r[s], pos[s], neg[s]) for s in (slice(0, 2), slice(2, 4))]
    grouped = CoTBERTLoss(group_size=2, gather_across_devices=False)(r, pos, neg)
    assert float(grouped) == pytest.approx(float(sum(halves) / 2), abs=1e-6)
    whole = CoTBERTLoss(gather_across_devices=False)(r, pos, neg)
    assert float(whole) != pytest.approx(float(grouped), abs=1e-3)
    assert float(CoTBERTLoss(group_size=4)(r, pos, neg)) == pytest.approx(float(whole), abs=1e-6)


@pytest.mark.parametrize("settings", [{"temperature": 0.0}, {"group_size": 0}])
def test_loss_refuses_undefined_settings(settings):
    with pytest.raises(ValueError, match="must be"):
        CoTBERTLoss(**settings)


# --- the templates: token rows of the real tokenizers (docs/methods/cotbert.md, "Templates") -------

BERT_PREFIX = {"anchor": [101, 1996, 6251, 1997, 1000], "positive": [101, 1996, 6251, 1024, 1000]}
BERT_SUFFIX = [1000, 2965, 103, 1010, 2061, 2009, 2064, 2022, 22539, 2004, 103, 1012, 102]
BERT_NEGATIVE_SUFFIX = [1000, 2515, 2025, 2812, 103, 1010, 2061, 2009, 3685, 2022, 22539, 2004, 103, 1012, 102]


def tokenizer(family):
    return AutoTokenizer.from_pretrained(
        os.path.join(TOKENIZERS, f"{family}-base" + ("-uncased" if family == "bert" else ""))
    )


def templates(family):
    tok = tokenizer(family)
    return tok, [TemplateTokens.of(tok, t, masks=2) for t in TEMPLATES[family]]


def test_bert_template_rows_are_the_released_ones():
    """bs = encode(prefix)[:-1], es = encode(suffix)[1:] of the released train.py's three templates."""
    _, (anchor, positive, negative) = templates("bert")
    assert list(anchor.prefix) == BERT_PREFIX["anchor"] and list(anchor.suffix) == BERT_SUFFIX
    assert list(positive.prefix) == BERT_PREFIX["positive"] and list(positive.suffix) == BERT_SUFFIX
    assert list(negative.prefix) == BERT_PREFIX["positive"] and list(negative.suffix) == BERT_NEGATIVE_SUFFIX
    assert [len(t) for t in (anchor, positive, negative)] == [18, 18, 20]


def test_roberta_template_rows():
    """RoBERTa's single quotes with spaces; its <mask> and </s> each after a separate space token."""
    tok, (anchor, positive, negative) = templates("roberta")
    assert [len(t) for t in (anchor, positive, negative)] == [21, 21, 23]
    # "<s>The sentence of '" and "' does not mean <mask> , so it cannot be summarized as <mask> . </s>": 1437 is
    # the lone space (Ġ) before each <mask> (50264) and before </s>
    assert list(anchor.prefix) == [0, 133, 3645, 9, 128] and list(negative.prefix) == [0, 133, 3645, 4832, 128]
    assert list(negative.suffix[:14]) == [128, 473, 45, 1266, 1437, 50264, 2156, 98, 24, 1395, 28, 38152, 25, 1437]
    assert list(negative.suffix[14:]) == [50264, 479, 1437, 2]
    assert all(t.suffix.count(tok.mask_token_id) == 2 for t in (anchor, positive, negative))


def wrapped(template, sentence):
    return [*template.prefix, *sentence, *template.suffix]


def test_the_sentence_is_cut_never_the_template():
    """A 40-word sentence through the corpus's cut (max_seq_length 34) and the views hook: 32 of its
    sub-words inside each template, whose prefix and suffix stay whole."""
    tok, (anchor, positive, negative) = templates("bert")
    words = " ".join(f"w{i}" if i % 2 else "word" for i in range(40))
    corpus = tokenize_lines(tok, [words], 34)
    part = CoTBERT(CoTBERTArguments())
    part.keep_templates(SimpleNamespace(tokens=[anchor, positive, negative], tokenizer=tok))
    (views,) = sliced_batches(part, tok, corpus, [[0]])
    sentence = tok.encode(words, add_special_tokens=False)[:32]
    assert views["input_ids"].shape == (1, 3, 20 + 32)
    assert views["input_ids"][0, 0, :50].tolist() == wrapped(anchor, sentence)
    assert views["input_ids"][0, 2].tolist() == wrapped(negative, sentence)
    assert views["attention_mask"][0].sum(-1).tolist() == [50, 50, 52]


# --- the encoder: pooling, noise rows, subtraction (docs/methods/cotbert.md, "Denoising") ----------


def no_dropout_encoder(model_dir, family):
    tok = AutoTokenizer.from_pretrained(model_dir)
    return CoTBERTEncoder(AutoModel.from_pretrained(model_dir), tok, TEMPLATES[family], mlp=False)


@pytest.fixture(scope="module")
def encoder(no_dropout_bert):
    return no_dropout_encoder(no_dropout_bert, "bert")


def views_of(encoder, rows):
    """The part's three views of the tokenised sentences ``rows``, the batch a run makes of them."""
    part = CoTBERT(CoTBERTArguments())
    part.keep_templates(encoder)
    (batch,) = sliced_batches(part, encoder.tokenizer, rows, [range(len(rows["input_ids"]))])
    return batch


def states(encoder, ids, mask=None):
    ids = torch.tensor([ids])
    mask = torch.ones_like(ids) if mask is None else torch.tensor([mask])
    with torch.no_grad():
        return encoder.backbone(input_ids=ids, attention_mask=mask).last_hidden_state[0]


def test_the_last_mask_is_pooled(encoder):
    """The 25-token anchor row of "A man is playing a guitar." has its [MASK]s at 14 and 22: the
    embedding is the state at 22."""
    sentence = encoder.tokenizer.encode("A man is playing a guitar.", add_special_tokens=False)
    row = wrapped(encoder.tokens[0], sentence)
    assert len(row) == 25 and [i for i, t in enumerate(row) if t == 103] == [14, 22]
    encoder.eval()
    with torch.no_grad():
        got = encoder.embed(torch.tensor([row]), torch.ones(1, 25, dtype=torch.long))[0]
    h = states(encoder, row)
    assert torch.equal(got, h[22]) and not torch.allclose(got, h[14])
    assert encoder.tokens[0].mask_index == 15  # the empty template's last [MASK]


@pytest.mark.parametrize("n", [0, 1, 32])
def test_noise_row_n_holds_n_attended_pads_where_the_sentence_goes(n):
    _, (anchor, _, negative) = templates("bert")
    ids, mask = (x.tolist() for x in pad_noise_rows(torch.tensor(anchor.empty), len(anchor.prefix), 33, 0))
    assert len(ids) == 33 and all(len(row) == 18 + 32 for row in ids)
    row, row_mask = ids[n], mask[n]
    assert row[:5] == BERT_PREFIX["anchor"] and row[5 : 5 + n] == [0] * n and row[5 + n : 18 + n] == BERT_SUFFIX
    assert sum(row_mask) == 18 + n and row_mask[: 18 + n] == [1] * (18 + n)
    assert [i for i, t in enumerate(row) if t == 103] == [7 + n, 15 + n]
    if n == 0:
        assert row[:18] == anchor.empty
    ids, mask = (x.tolist() for x in pad_noise_rows(torch.tensor(negative.empty), len(negative.prefix), 33, 0))
    assert sum(mask[n]) == 20 + n and [i for i, t in enumerate(ids[n]) if t == 103] == [9 + n, 17 + n]


@pytest.mark.parametrize("family", ["bert", "roberta"])
def test_each_view_has_its_own_templates_noise_subtracted(family, no_dropout_backbones):
    """Training forward (no dropout, no MLP): view v's embedding is its last-[MASK] state less the
    state at the last [MASK] of template v with n attended [PAD]s, n the sentence's tokens (the view's
    attention sum less the template's length: BERT's 18, 18, 20; RoBERTa's 21, 21, 23)."""
    encoder = no_dropout_encoder(no_dropout_backbones[family], family)
    tok = encoder.tokenizer
    mask_id, pad_id = tok.mask_token_id, tok.pad_token_id
    batch = views_of(encoder, tok(["a cat sat on the mat", "rain"]))
    assert batch["input_ids"].shape[:2] == (2, 3)
    encoder.train()
    with torch.no_grad():
        got = encoder(**batch)["embeddings"]
    for i, sentence in enumerate(["a cat sat on the mat", "rain"]):
        words = tok.encode(sentence, add_special_tokens=False)
        n = len(words)
        for v, template in enumerate(encoder.tokens):
            row = wrapped(template, words)
            assert batch["attention_mask"][i, v].sum() == len(template) + n
            assert batch["input_ids"][i, v, : len(row)].tolist() == row
            h = states(encoder, row)[len(row) - 1 - row[::-1].index(mask_id)]
            noise_row = [*template.prefix, *[pad_id] * n, *template.suffix]
            b = states(encoder, noise_row)[len(noise_row) - 1 - noise_row[::-1].index(mask_id)]
            torch.testing.assert_close(got[i, v], h - b, rtol=0, atol=1e-5)


def test_the_gradient_reaches_the_encoder_through_the_noise(no_dropout_bert):
    """The released form (noise not detached) and the detached one give different gradients."""
    tok = AutoTokenizer.from_pretrained(no_dropout_bert)
    grads = []
    for bias_gradient in (True, False):
        torch.manual_seed(0)
        enc = CoTBERTEncoder(
            AutoModel.from_pretrained(no_dropout_bert), tok, TEMPLATES["bert"], bias_gradient=bias_gradient
        )
        batch = views_of(enc, tok(SENTENCES[:4]))
        enc.train()
        z = enc(**batch)["embeddings"]
        CoTBERTLoss(gather_across_devices=False)(z[:, 0], z[:, 1], z[:, 2]).backward()
        grads.append(enc.backbone.embeddings.word_embeddings.weight.grad.clone())
    assert not torch.allclose(grads[0], grads[1])


# --- flags and parts ---------------------------------------------------------------------------------


def test_a_template_without_two_masks_is_refused():
    with pytest.raises(ValueError, match="exactly 2 times"):
        CoTBERTArguments(template='*cls*_This_sentence_of_"*sent_0*"_means*mask*.*sep+*')


ONE_MASK = '*cls*_This_sentence_of_"*sent_0*"_means*mask*.*sep+*'


@pytest.mark.parametrize(
    "flags, said",
    [
        (["--loss_group_size", "-1"], "--loss_group_size must be a whole number >= 0, got -1"),
        (["--denoise", "prompt"], "--denoise"),
        (["--negative_template", ONE_MASK], "--negative_template"),
        (["--pooler_type", "avg"], "CoT-BERT's sentence embedding is the [MASK] state of its template"),
    ],
)
def test_bad_flags_are_refused_before_any_work(flags, said, tiny_bert, capsys, tmp_path):
    out = tmp_path / "out"
    lines = refusal(capsys, run_cotbert.main, ["--model_name_or_path", tiny_bert, "--output_dir", str(out), *flags])
    assert said in lines[0] and len(lines) == 2
    assert_nothing_written(out)


def test_a_composition_with_mixcse_is_refused_naming_the_slot(capsys, tmp_path):
    import run_cse

    out = tmp_path / "out"
    lines = refusal(capsys, run_cse.main, ["--parts", "cotbert,mixcse", "--output_dir", str(out)])
    assert "cotbert" in lines[0] and "mixcse" in lines[0] and "softmax" in lines[0]
    assert_nothing_written(out)


@pytest.mark.parametrize("config", ["configs/cotbert_bert_base.yaml", "configs/cotbert_roberta_base.yaml"])
def test_configs_hold_the_released_settings(config):
    """code-for-BERT/train.py l.488-514 (RoBERTa's the same but for the model): batch 2 x 128, lr 1e-5, one
    epoch, 32 sub-words, tau 0.05, STS-B dev every 125 steps, drop last, seed 0, fp16."""
    model, data, training, flags = parse_args(get("cotbert").argument_types, [os.path.join(REPO, config)])
    assert (training.per_device_train_batch_size, training.learning_rate, training.num_train_epochs) == (256, 1e-5, 1)
    assert (training.eval_steps, training.seed, training.fp16, training.dataloader_drop_last) == (125, 0, True, True)
    assert (data.max_seq_length, model.temp) == (34, 0.05)
    assert (flags.denoise, flags.bias_gradient, flags.mlp, flags.pair_negatives) == ("pad", True, True, True)
    assert flags.loss_group_size == 128 and flags.template is None


@pytest.mark.parametrize("other", ["mixcse", "esimcse", "sarcse", "adcse", "vadvcse", "sgbert", "promptbert"])
def test_it_combines_with_no_part_of_the_package_and_says_why(other):
    assert why_not(CoTBERT, get(other).part)


# --- runs ----------------------------------------------------------------------------------------------


@pytest.mark.e2e
@pytest.mark.parametrize("family", ["bert", "roberta"])
def test_trains_alone_and_its_export_embeds_as_the_trainer(family, tiny_bert, tiny_roberta, tmp_path):
    """Two steps on a tiny model; the export, read by load_model and by sentence-transformers, embeds as
    the trained model (anchor template, last [MASK], no denoising)."""
    from sentence_transformers import SentenceTransformer

    from cse.modeling import load_model

    model = tiny_bert if family == "bert" else tiny_roberta
    trainer = run_cotbert.main(small_run_argv(model, tmp_path / "out", 2, "--use_cpu", "true", "--logging_steps", "1"))
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert len(losses) == 2 and all(math.isfinite(x) for x in losses)
    ours = trainer.model.encode(SENTENCES, batch_size=3)
    loaded = load_model(str(tmp_path / "out")).encode(SENTENCES, batch_size=2)
    torch.testing.assert_close(loaded, ours, rtol=0, atol=1e-5)
    theirs = SentenceTransformer(str(tmp_path / "out"), device="cpu", trust_remote_code=True).encode(SENTENCES)
    torch.testing.assert_close(torch.tensor(theirs), ours, rtol=0, atol=1e-5)


@pytest.mark.e2e
def test_killed_and_resumed_bit_identical(tiny_bert, tmp_path, monkeypatch):
    """SIGKILLed after step 5 (checkpoint-4 complete), the same command resumes to the uninterrupted run's weights."""
    from .conftest import assert_bit_identical, in_process, worker

    in_process("run_cotbert.py", common_args(tiny_bert, tmp_path / "straight", 6, 2), monkeypatch)
    argv = common_args(tiny_bert, tmp_path / "killed", 6, 2)
    worker("run_cotbert.py", argv, "5:step")
    in_process("run_cotbert.py", argv, monkeypatch)
    assert_bit_identical(str(tmp_path / "killed"), str(tmp_path / "straight"))
