"""PromptBERT: the templates' token ids on the real tokenizers, the truncation that keeps the template,
the template bias's position ids and forward against an explicit forward, the denoising, the MLP and
InfoNCE against float64 hand computations, the gradient through the bias, the evaluation's input and
embedding, its flags and combinations, and ``run_promptbert.py`` end to end: trained, exported and
loaded three ways to one embedding, killed and resumed bit-identically, and with MixCSE."""

import json
import math
import os
from types import SimpleNamespace

import pytest
import torch
from transformers import AutoModel, AutoTokenizer

import run_cse
import run_promptbert
from cse.arguments import parse_args
from cse.data import tokenize_lines
from cse.encoders.prompt import DENOISED_POOLER, RAW_POOLER, PromptEncoder, position_start
from cse.losses import InfoNCELoss
from cse.methods.cotbert import TEMPLATES as COT_TEMPLATES
from cse.methods.cotbert import CoTBERT, CoTBERTArguments
from cse.methods.promptbert import TEMPLATES, PromptBERT, PromptBERTArguments
from cse.modeling import load_model
from cse.parts import why_not
from cse.prompts import TemplateTokens, last_mask_states, template_input, template_text, wrapped_views
from cse.registry import get

from .conftest import (
    REPO,
    TOKENIZERS,
    WIKI_HEAD,
    assert_bit_identical,
    batches_digest,
    common_args,
    in_process,
    recorded_batches,
    sliced_batches,
    small_run_argv,
    worker,
)

SENTENCE = "A man is playing a guitar"
with open(WIKI_HEAD, encoding="utf-8") as _f:
    SENTENCES_OF_WIKI = [next(_f).strip() for _ in range(12)]  # some long enough to be cut at 24 tokens


@pytest.fixture(scope="module", params=["bert", "roberta"])
def family(request):
    return request.param


def tokenizer_of(family):
    return AutoTokenizer.from_pretrained(
        os.path.join(TOKENIZERS, "bert-base-uncased" if family == "bert" else "roberta-base")
    )


# --- the templates' token ids (released train.py l.673-699 on the real tokenizers) ------------------

IDS = {
    "bert": (
        [101, 2023, 6251, 1997, 1000, 1037, 2158, 2003, 2652, 1037, 2858, 1000, 2965, 103, 1012, 102],
        [101, 2023, 6251, 1024, 1000, 1037, 2158, 2003, 2652, 1037, 2858, 1000, 2965, 103, 1012, 102],
        [101, 2023, 6251, 1997, 1000, 1000, 2965, 103, 1012, 102],
    ),
    "roberta": (
        [0, 713, 3645, 4832, 128, 250, 313, 16, 816, 10, 8669, 128, 839, 50264, 4, 2],
        [0, 133, 3645, 4832, 128, 250, 313, 16, 816, 10, 8669, 128, 839, 50264, 4, 2],
        [0, 713, 3645, 4832, 128, 128, 839, 50264, 4, 2],
    ),
}


def test_the_templates_token_ids_are_the_released_codes(family):
    tokenizer = tokenizer_of(family)
    first, second = (TemplateTokens.of(tokenizer, t) for t in TEMPLATES[family])
    sentence = tokenizer.encode(SENTENCE, add_special_tokens=False)
    view0, view1, empty = IDS[family]
    assert [*first.prefix, *sentence, *first.suffix] == view0 and [*second.prefix, *sentence, *second.suffix] == view1
    assert first.empty == empty and len(first) == len(second) == 10
    # [CLS] and 4 prefix tokens before the sentence in all four; the [MASK] third from the end
    assert len(first.prefix) == len(second.prefix) == 5
    assert first.mask_index == second.mask_index == 7 and empty[7] == tokenizer.mask_token_id


def test_a_long_sentence_is_cut_and_the_template_kept(tokenizer):
    """A 40-word sentence through the corpus's cut (max_seq_length 34: 32 sub-words with [CLS] and
    [SEP]) and the views hook: 32 + 10 tokens, the [MASK] at 4 + 32 + 3."""
    words = " ".join(f"w{i}" if i % 2 else "word" for i in range(40))
    sentence = tokenizer.encode(words, add_special_tokens=False)
    assert len(sentence) > 40
    corpus = tokenize_lines(tokenizer, [words, SENTENCE], 34)
    (views,) = sliced_batches(built_part(tokenizer), tokenizer, corpus, [[0, 1]])
    assert views["input_ids"].shape == (2, 2, 42)
    first = views["input_ids"][0, 0].tolist()
    assert first[5:37] == sentence[:32] and first[37:] == [1000, 2965, 103, 1012, 102]
    assert first.index(103) == 4 + 32 + 3 and views["attention_mask"][0].sum(-1).tolist() == [42, 42]
    # the short sentence: its own tokens, padded after its template
    assert views["input_ids"][1, 1, :16].tolist() == IDS["bert"][1] and views["attention_mask"][1, 1].sum() == 16
    # the evaluation's cut keeps the template too
    tokens = TemplateTokens.of(tokenizer, TEMPLATES["bert"][0])
    assert tokens.fit(first, 20) == [*first[:15], *first[-5:]]


def one_by_one(batch, templates, special, pad_id):
    """The views sentence by sentence in Python (the reference): each view's tokens without padding,
    the special token at either end dropped, inside its template; padded right to the longest row, at
    least the batch's length less 2 plus the longest template."""
    ids, mask = batch["input_ids"].tolist(), batch["attention_mask"].tolist()
    rows = []
    for sentence, masks in zip(ids, mask):
        rows.append([])
        for template, view, kept in zip(templates, sentence, masks):
            tokens = [token for token, m in zip(view, kept) if m]
            start = 1 if tokens and tokens[0] in special else 0
            end = len(tokens) - 1 if len(tokens) > start and tokens[-1] in special else len(tokens)
            rows[-1].append([*template.prefix, *tokens[start:end], *template.suffix])
    width = max(len(ids[0][0]) - 2 + max(map(len, templates)), max(len(r) for row in rows for r in row))
    return (
        [[r + [pad_id] * (width - len(r)) for r in row] for row in rows],
        [[[1] * len(r) + [0] * (width - len(r)) for r in row] for row in rows],
    )


@pytest.mark.parametrize("family", ["bert", "roberta"])
def test_the_views_are_those_made_sentence_by_sentence(family):
    """300 random right-padded batches (empty and one-token rows, special tokens at the ends and
    inside): the views made a batch at once (PromptBERT's two templates, CoT-BERT's three) equal the
    reference made one sentence at a time, with the batch's dtypes."""
    tok = tokenizer_of(family)
    special = sorted(set(tok.all_special_ids))
    generator = torch.Generator().manual_seed(0)
    for trial in range(300):
        masks = 2 if trial % 2 else 1
        templates = [TemplateTokens.of(tok, t, masks) for t in (COT_TEMPLATES if masks == 2 else TEMPLATES)[family]]
        views, b, length = len(templates), *torch.randint(1, 40, (2,), generator=generator).tolist()
        ids = torch.randint(1000, 2000, (b, views, length), generator=generator)
        special_at = torch.rand(ids.shape, generator=generator) < 0.15
        drawn = torch.randint(len(special), (int(special_at.sum()),), generator=generator)
        ids[special_at] = torch.tensor(special)[drawn]
        lengths = torch.randint(0, length + 1, (b, views, 1), generator=generator)
        mask = (torch.arange(length) < lengths).to(torch.int8 if trial % 3 else torch.int64)
        ids[mask == 0] = tok.pad_token_id
        batch = {"input_ids": ids, "attention_mask": mask}
        if trial % 4 == 0:
            batch["token_type_ids"] = torch.zeros_like(ids)
        got = wrapped_views(batch, templates, torch.tensor(special), tok.pad_token_id)
        want_ids, want_mask = one_by_one(batch, templates, set(special), tok.pad_token_id)
        assert got["input_ids"].tolist() == want_ids and got["attention_mask"].tolist() == want_mask
        assert got["input_ids"].dtype == ids.dtype and got["attention_mask"].dtype == mask.dtype
        assert ("token_type_ids" in got) == ("token_type_ids" in batch)
        if "token_type_ids" in got:
            assert not got["token_type_ids"].any() and got["token_type_ids"].shape == got["input_ids"].shape


def test_a_literal_mask_token_in_a_sentence_stays_and_the_templates_is_read(tokenizer):
    corpus = tokenize_lines(tokenizer, ["[MASK] said he [MASK]"], 34)
    (views,) = sliced_batches(built_part(tokenizer), tokenizer, corpus, [[0]])
    ids = views["input_ids"][0, 0]
    assert ids.tolist() == [101, 2023, 6251, 1997, 1000, 103, 2056, 2002, 103, 1000, 2965, 103, 1012, 102]
    states = torch.arange(14, dtype=torch.float64).view(1, 14, 1)
    assert last_mask_states(states, ids[None], 103).item() == 11  # the template's, after the sentence


@pytest.mark.parametrize("pad_to_max_length", [False, True])
@pytest.mark.parametrize("method", ["promptbert", "cotbert"])
def test_batches_hold_each_sentence_inside_each_template_made_once_per_corpus(
    family, method, pad_to_max_length, tmp_path
):
    """The whole data path (the corpus' columns, the sliced rows, the collator, the views hook) against
    each sentence wrapped by hand: view v its tokens between template v's prefix and suffix, every
    view padded to the batch's longest (at least --max_seq_length less two special tokens plus the
    longest template when padding to it), the masks exactly the tokens, token types zero, the columns
    taken out; a second build reads the columns back from the cache, other templates write another."""
    import datasets

    from cse.batches import TokenRows
    from cse.data import TwoViewCollator

    tok = tokenizer_of(family)
    masks = 1 if method == "promptbert" else 2
    texts = (TEMPLATES if method == "promptbert" else COT_TEMPLATES)[family]
    templates = [TemplateTokens.of(tok, t, masks) for t in texts]
    part = PromptBERT(PromptBERTArguments()) if method == "promptbert" else CoTBERT(CoTBERTArguments())
    part.keep_templates(SimpleNamespace(tokens=templates, tokenizer=tok))
    length = 24 if pad_to_max_length else None
    data_args = SimpleNamespace(
        max_seq_length=24, pad_to_max_length=pad_to_max_length, preprocessing_num_workers=None, overwrite_cache=False
    )
    path = tmp_path / "corpus.jsonl"
    lines = [*SENTENCES_OF_WIKI, "[MASK] stays [MASK]", "x"]
    path.write_text("".join(json.dumps({"text": line}) + "\n" for line in lines))
    corpus = datasets.load_dataset("json", data_files=str(path), split="train", cache_dir=str(tmp_path / "cache"))
    tokenized = corpus.map(lambda r: tok(r["text"], truncation=True, max_length=24), remove_columns=["text"])
    with_views = part.corpus(tokenized, tok, data_args, None)
    # the views in place of the sentence's own columns
    kinds = ("input_ids", "attention_mask")
    assert with_views.column_names == [f"template{v}_{kind}" for v in range(len(templates)) for kind in kinds]
    written = [os.stat(f["filename"]).st_mtime_ns for f in with_views.cache_files]
    again = part.corpus(tokenized, tok, data_args, None)
    assert again.cache_files == with_views.cache_files
    assert [os.stat(f["filename"]).st_mtime_ns for f in again.cache_files] == written
    rows = TokenRows(with_views, tok, length)
    collate = TwoViewCollator(tok, max_length=length, views=[part.views])
    pad = tok.pad_token_id
    for indices in ([0, 1, 2], [3, 4, 5, 6, 7], [len(lines) - 1], list(range(len(rows)))):
        batch = collate(rows.__getitems__(indices))
        # the tokenizer puts a special token at either end of every sentence
        views = [[[*t.prefix, *tokenized[i]["input_ids"][1:-1], *t.suffix] for t in templates] for i in indices]
        width = max([24 - 2 + max(map(len, templates))] * pad_to_max_length + [len(v) for row in views for v in row])
        assert sorted(batch) == sorted(tokenized.column_names)  # the view columns taken out
        assert batch["input_ids"].tolist() == [[v + [pad] * (width - len(v)) for v in row] for row in views]
        assert batch["attention_mask"].tolist() == [
            [[1] * len(v) + [0] * (width - len(v)) for v in row] for row in views
        ]
        assert batch["input_ids"].dtype == batch["attention_mask"].dtype == torch.int64
        assert "token_type_ids" not in batch or not batch["token_type_ids"].any()
    # other templates: other views, into another cache file
    other = type(part)(type(part.args)())
    other.keep_templates(SimpleNamespace(tokens=templates[::-1], tokenizer=tok))
    reversed_views = other.corpus(tokenized, tok, data_args, None)
    assert reversed_views.cache_files != with_views.cache_files
    assert reversed_views["template0_input_ids"] == with_views[f"template{len(templates) - 1}_input_ids"]
    with pytest.raises(RuntimeError, match="corpus"):
        part.views(TwoViewCollator(tok)([dict(tok(s)) for s in SENTENCES_OF_WIKI[:2]]))


@pytest.fixture(scope="module")
def tokenizer():
    return tokenizer_of("bert")


def built_part(tokenizer, **flags):
    part = PromptBERT(PromptBERTArguments(**flags))
    templates = [TemplateTokens.of(tokenizer, t) for t in TEMPLATES["bert"]]
    part.keep_templates(SimpleNamespace(tokens=templates, tokenizer=tokenizer))
    return part


# --- the template bias: position ids and forward (models.py get_delta, l.78-108) ---------------------


def test_the_bias_rows_position_ids_are_the_templates_around_k_sentence_tokens(tokenizer):
    tokens = TemplateTokens.of(tokenizer, TEMPLATES["bert"][0])
    ids = tokens.bias_position_ids(7)
    assert ids[0].tolist() == list(range(10)) and ids[6].tolist() == [0, 1, 2, 3, 4, 11, 12, 13, 14, 15]
    for k in range(7):
        around = list(range(5)) + list(range(5 + k, 10 + k))  # the template's tokens in a k-token input
        assert ids[k].tolist() == around == [p for p in range(10 + k) if not 5 <= p < 5 + k]
    assert tokens.bias_position_ids(2, start=2)[1].tolist() == [2, 3, 4, 5, 6, 8, 9, 10, 11, 12]


@pytest.fixture(scope="module")
def float64_bert(no_dropout_bert):
    """The tiny BERT without dropout in float64, read by a PromptEncoder of the released templates."""
    backbone = AutoModel.from_pretrained(no_dropout_bert).double()
    tokenizer = AutoTokenizer.from_pretrained(no_dropout_bert)
    torch.manual_seed(0)
    return PromptEncoder(backbone, tokenizer, TEMPLATES["bert"]).double()


def mask_state(backbone, ids, positions=None):
    """The [MASK] (id 103) state of one explicit forward of ``ids``."""
    out = backbone(input_ids=torch.tensor([ids]), position_ids=positions, return_dict=True).last_hidden_state[0]
    return out[ids.index(103)]


def test_the_bias_is_the_empty_templates_mask_state_at_the_sentences_positions(float64_bert):
    encoder = float64_bert
    tokens = encoder.tokens[0]
    lengths = torch.tensor([16, 12, 10])  # sentences of 6, 2 and 0 tokens
    bias = encoder.template_bias(0, lengths, longest=16)
    for row, k in enumerate((6, 2, 0)):
        positions = torch.tensor([[0, 1, 2, 3, 4, *range(5 + k, 10 + k)]])
        expected = mask_state(encoder.backbone, tokens.empty, positions)
        assert torch.allclose(bias[row], expected, rtol=0, atol=1e-12)
    # not the state at the unshifted positions (what a bias without the position rule would be)
    assert not torch.allclose(bias[0], mask_state(encoder.backbone, tokens.empty), atol=1e-6)


def test_the_training_embedding_is_mlp_of_h_less_the_views_own_bias(float64_bert, tokenizer):
    """Two sentences of 6 and 2 tokens: for each view v, z = tanh(W (h - b_v(k)) + c), h the [MASK]
    state of the view's input and b_v(k) template v's at the sentence's length, each computed by an
    explicit forward (as "A man is playing a guitar": attention length 16, k = 16 - 10 = 6)."""
    encoder = float64_bert
    part = built_part(tokenizer)
    (batch,) = sliced_batches(part, tokenizer, tokenizer([SENTENCE, "a dog"]), [[0, 1]])
    encoder.train()
    z = encoder(**batch)["embeddings"]
    W, c = encoder.mlp[0].weight, encoder.mlp[0].bias
    for i, k in enumerate((6, 2)):
        for v in (0, 1):
            tokens = encoder.tokens[v]
            ids = batch["input_ids"][i, v][batch["attention_mask"][i, v].bool()].tolist()
            assert len(ids) - len(tokens) == k
            h = mask_state(encoder.backbone, ids)
            positions = torch.tensor([[0, 1, 2, 3, 4, *range(5 + k, 10 + k)]])
            b = mask_state(encoder.backbone, tokens.empty, positions)
            assert torch.allclose(z[i, v], torch.tanh(W @ (h - b) + c), rtol=0, atol=1e-12), (i, v)
    # evaluation: the raw [MASK] state, no bias, no MLP
    encoder.eval()
    raw = encoder(**batch)["embeddings"]
    assert torch.allclose(raw[0, 0], mask_state(encoder.backbone, batch["input_ids"][0, 0].tolist()), atol=1e-12)


# --- denoise, MLP, InfoNCE: the float64 figures --------------------------------------------------

H = [[2.0, 1.0], [1.0, 3.0]]
H_POS = [[1.0, 2.0], [0.0, 2.0]]
BIAS = {0: {3: [1.0, 1.0], 5: [0.5, -1.0]}, 1: {3: [0.0, 1.0], 5: [1.0, 0.0]}}  # template -> k -> b(k)
W_MLP, B_MLP = [[1.0, 0.5], [-0.5, 1.0]], [0.1, -0.2]


def cos(a, b):
    return sum(x * y for x, y in zip(a, b)) / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


def hand_infonce(z, z_pos, tau=0.05):
    rows = []
    for i, anchor in enumerate(z):
        logits = [cos(anchor, p) / tau for p in z_pos]
        rows.append(-(logits[i] - math.log(sum(math.exp(x) for x in logits))))
    return sum(rows) / len(rows)


def test_the_hand_figures():
    u = [[a - b for a, b in zip(H[i], BIAS[0][k])] for i, k in enumerate((3, 5))]
    u_pos = [[a - b for a, b in zip(H_POS[i], BIAS[1][k])] for i, k in enumerate((3, 5))]
    assert (u, u_pos) == ([[1, 0], [0.5, 4]], [[1, 1], [-1, 2]])
    assert cos(u[1], u_pos[0]) / 0.05 == pytest.approx(15.787044347526523, rel=1e-15)
    assert hand_infonce(u, u_pos) == pytest.approx(0.17734024935875947, rel=1e-14)
    mlp = [[math.tanh(sum(w * x for w, x in zip(row, vec)) + b) for row, b in zip(W_MLP, B_MLP)] for vec in u + u_pos]
    assert mlp[0] == pytest.approx([0.8004990217606297, -0.6043677771171634], rel=1e-15)
    assert hand_infonce(mlp[:2], mlp[2:]) == pytest.approx(1.1273046658441581, rel=1e-14)


@pytest.mark.parametrize("with_mlp, expected", [(False, 0.17734024935875947), (True, 1.1273046658441581)])
def test_denoising_then_the_mlp_then_infonce_give_the_hand_figures(float64_bert, with_mlp, expected):
    """The encoder's forward with its backbone's [MASK] states set to h, h+ and its biases to the table
    above (sentences of 3 and 5 tokens in both views): each view less its own template's bias at its own
    length, before the MLP, then InfoNCE at tau 0.05."""
    encoder = float64_bert
    lengths = [13, 15]  # 3 and 5 sentence tokens inside templates of 10
    ids = torch.zeros(2, 2, 15, dtype=torch.long)
    mask = torch.zeros(2, 2, 15, dtype=torch.long)
    for i, n in enumerate(lengths):
        ids[i, :, n - 3] = 103  # each view's [MASK], third from its end
        mask[i, :, :n] = 1
    states = torch.zeros(4, 15, 2, dtype=torch.float64)
    for i, n in enumerate(lengths):
        states[2 * i, n - 3], states[2 * i + 1, n - 3] = torch.tensor(H[i]), torch.tensor(H_POS[i])
    mlp = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Tanh()).double()
    with torch.no_grad():
        mlp[0].weight.copy_(torch.tensor(W_MLP)), mlp[0].bias.copy_(torch.tensor(B_MLP))

    def bias(template, row_lengths, longest):
        size = len(encoder.tokens[template])
        return torch.tensor([BIAS[template][int(n) - size] for n in row_lengths], dtype=torch.float64)

    saved = encoder.mlp
    try:
        encoder.backbone_outputs = lambda *args, **kwargs: SimpleNamespace(last_hidden_state=states)
        encoder.template_bias = bias
        encoder.mlp = mlp if with_mlp else None
        encoder.train()
        z = encoder(ids, mask)["embeddings"]
    finally:
        del encoder.backbone_outputs, encoder.template_bias
        encoder.mlp = saved
    loss = InfoNCELoss(temperature=0.05)(z[:, 0], z[:, 1])
    # InfoNCE's cosines are float32's (cse.losses.infonce): the logits' 16 carry about 1e-6 of rounding
    assert float(loss.detach()) == pytest.approx(expected, abs=2e-6)


def test_the_gradient_reaches_the_encoder_through_the_bias(no_dropout_bert, tokenizer):
    """The released bias forward runs with gradient: the encoder's gradient differs from the same loss
    with the bias a constant (--bias_gradient false), and without denoising there is none to take."""
    part = built_part(tokenizer)
    (batch,) = sliced_batches(part, tokenizer, tokenizer([SENTENCE, "a dog runs"]), [[0, 1]])
    grads = {}
    for through in (True, False):
        torch.manual_seed(0)
        encoder = PromptEncoder(
            AutoModel.from_pretrained(no_dropout_bert), tokenizer, TEMPLATES["bert"], bias_gradient=through
        ).train()
        z = encoder(**batch)["embeddings"]
        InfoNCELoss(temperature=0.05)(z[:, 0], z[:, 1]).backward()
        grads[through] = encoder.backbone.embeddings.word_embeddings.weight.grad.clone()
    differ = (grads[True] - grads[False]).abs().max()
    assert differ > 1e-6 * grads[True].abs().max()


# --- the evaluation (released evaluation.py l.187-233) -------------------------------------------------


def test_the_evaluation_input_is_template_1_with_a_period_and_its_embedding_the_raw_mask_state(float64_bert):
    text = template_text(TEMPLATES["bert"][0], "[MASK]")
    assert template_input(text, "a man plays") == 'This sentence of "a man plays." means[MASK].'
    assert template_input(text, "is it?") == 'This sentence of "is it?" means[MASK].'
    assert template_input(text, 'he said "no"') == 'This sentence of "he said "no"" means[MASK].'
    roberta = template_text(TEMPLATES["roberta"][0], "<mask>")
    assert template_input(roberta, "a man plays") == "This sentence : ' a man plays. ' means<mask>."
    encoder = float64_bert
    encoded = encoder.tokenize_sentences(["a man plays", "is it?"])
    assert encoded["input_ids"][0] == [101, 2023, 6251, 1997, 1000, 1037, 2158, 3248, 1012, 1000, 2965, 103, 1012, 102]
    vectors = encoder.encode(["a man plays", "is it?"]).double()
    for row, ids in enumerate(encoded["input_ids"]):
        assert torch.allclose(vectors[row], mask_state(encoder.backbone, ids), atol=1e-6)
    # the denoised reading (the model selection's, and --test_embedding denoised): less template 1's bias
    denoised = encoder.encode(["a man plays"], pooler_type=DENOISED_POOLER).double()
    k = len(encoded["input_ids"][0]) - 10
    b = mask_state(encoder.backbone, encoder.tokens[0].empty, torch.tensor([[0, 1, 2, 3, 4, *range(5 + k, 10 + k)]]))
    assert torch.allclose(denoised[0], vectors[0] - b, atol=1e-6)


def test_the_papers_bias_positions_are_robertas_own_from_2(no_dropout_roberta, no_dropout_bert):
    """--bias_positions model (--variant paper): RoBERTa's sentence forward numbers its tokens from
    padding_idx + 1 = 2, and so does the bias forward; the released ids start at 0 (BERT's own)."""
    roberta = AutoModel.from_pretrained(no_dropout_roberta).double()
    assert position_start(roberta) == 2 and position_start(AutoModel.from_pretrained(no_dropout_bert)) == 0
    tokenizer = AutoTokenizer.from_pretrained(no_dropout_roberta)
    encoder = PromptEncoder(roberta, tokenizer, TEMPLATES["roberta"], bias_start=2, test_embedding="denoised")
    encoder.double().eval()
    assert encoder.eval_pooler == DENOISED_POOLER
    ids = encoder.tokenize_sentences(["a man plays"])["input_ids"][0]
    k = len(ids) - 10
    out = roberta(input_ids=torch.tensor([ids]), return_dict=True).last_hidden_state[0]
    h = out[ids.index(tokenizer.mask_token_id)]  # RoBERTa's own ids: 2, 3, ...
    positions = torch.tensor([[2, 3, 4, 5, 6, *range(7 + k, 12 + k)]])
    empty = encoder.tokens[0].empty
    b = roberta(input_ids=torch.tensor([empty]), position_ids=positions, return_dict=True).last_hidden_state[0, 7]
    assert torch.allclose(encoder.encode(["a man plays"])[0].double(), h - b, atol=1e-6)


def test_the_mask_state_is_the_last_mask_token_of_each_row():
    states = torch.arange(2 * 4 * 1, dtype=torch.float64).view(2, 4, 1)
    ids = torch.tensor([[103, 5, 103, 0], [1, 2, 103, 0]])
    assert last_mask_states(states, ids, 103).flatten().tolist() == [2.0, 6.0]


# --- flags, configurations, combinations --------------------------------------------------------------


def test_the_variant_sets_the_two_readings_and_each_flag_overrides_it():
    released, paper = PromptBERTArguments(), PromptBERTArguments(variant="paper")
    assert (released.bias_positions, released.test_embedding) == ("released", "raw")
    assert (paper.bias_positions, paper.test_embedding) == ("model", "denoised")
    assert PromptBERTArguments(variant="paper", test_embedding="raw").test_embedding == "raw"
    part = PromptBERT(released)
    assert part.selection_pooler() == DENOISED_POOLER
    assert PromptBERT(PromptBERTArguments(selection_embedding="raw")).selection_pooler() == RAW_POOLER
    with pytest.raises(ValueError, match="comes before"):
        PromptBERTArguments(template="*cls*_*mask*_is_*sent_0*.*sep+*")
    with pytest.raises(ValueError, match="holds a space"):
        PromptBERTArguments(template='*cls* This "*sent_0*" means*mask*.*sep+*')


@pytest.mark.parametrize("config, model", [("bert", "bert-base-uncased"), ("roberta", "roberta-base")])
def test_the_configs_hold_the_released_settings(config, model):
    """run.sh "unsup-bert" and "unsup-roberta": batch 256, lr 1e-5, one epoch, the sentence cut to 32
    sub-words, tau 0.05, STS-B dev every 125 steps, fp16."""
    path = os.path.join(REPO, f"configs/promptbert_{config}_base.yaml")
    model_args, data, training, flags = parse_args(get("promptbert").argument_types, [path])
    assert model_args.model_name_or_path == model
    assert (training.per_device_train_batch_size, training.learning_rate, training.num_train_epochs) == (256, 1e-5, 1)
    assert (training.eval_steps, training.fp16, data.max_seq_length - 2) == (125, True, 32)
    assert (model_args.temp, flags.variant, flags.denoise, flags.bias_gradient) == (0.05, "released", True, True)


def test_promptbert_combines_with_mixcse_and_refuses_the_parts_of_its_slots():
    part = {name: get(name).part for name in ("adcse", "esimcse", "mixcse", "sarcse", "sgbert", "vadvcse")}
    assert why_not(PromptBERT, part["mixcse"]) is None
    assert "AdCSE's momentum encoder p" in why_not(PromptBERT, part["adcse"])
    assert "training batch" in why_not(PromptBERT, part["esimcse"]) or "ESimCSE" in why_not(PromptBERT, part["esimcse"])
    assert why_not(PromptBERT, part["sarcse"]) is not None and why_not(PromptBERT, part["sgbert"]) is not None
    assert "vadvcse needs" in why_not(PromptBERT, part["vadvcse"])  # its perturbation is one vector per token
    assert PromptBERT().capture_problem() is None


# --- end to end ----------------------------------------------------------------------------------------


@pytest.mark.e2e
def test_a_trained_runs_embedding_is_the_same_from_the_trainer_load_model_and_sentence_transformers(
    tiny_roberta, tmp_path
):
    from sentence_transformers import SentenceTransformer

    sentences = ["A man is playing a guitar", "Is it raining?", "He said 'yes'", "x " * 80]
    argv = small_run_argv(tiny_roberta, tmp_path / "out", 3, "--use_cpu", "true", "--logging_steps", "1")
    trainer = run_promptbert.main(argv)
    assert trainer.state.log_history[0]["loss"] > 0
    trained = trainer.model.encode(sentences)
    loaded = load_model(str(tmp_path / "out"))
    assert type(loaded) is PromptEncoder and loaded.bias_start == 0
    assert torch.allclose(loaded.encode(sentences), trained, atol=1e-5)
    st = SentenceTransformer(str(tmp_path / "out"), trust_remote_code=True, device="cpu")
    assert torch.allclose(torch.tensor(st.encode(sentences)), trained, atol=1e-5)
    with pytest.raises(ValueError, match="prompt_modules.PromptTransformer"):
        SentenceTransformer(str(tmp_path / "out"), device="cpu")
    # the remote code beside the model: the module sentence-transformers loads and the one it imports (torch
    # only), no training code
    assert sorted(f for f in os.listdir(tmp_path / "out") if f.endswith(".py")) == ["prompt_modules.py", "prompts.py"]


@pytest.mark.e2e
def test_killed_after_a_step_the_same_command_resumes_bit_identical(tiny_bert, tmp_path, monkeypatch):
    flags = ["--max_seq_length", "16"]
    in_process("run_promptbert.py", [*common_args(tiny_bert, tmp_path / "straight", 4, 2), *flags], monkeypatch)
    argv = [*common_args(tiny_bert, tmp_path / "killed", 4, 2), *flags]
    worker("run_promptbert.py", argv, "3:step")
    in_process("run_promptbert.py", argv, monkeypatch)
    assert_bit_identical(str(tmp_path / "killed"), str(tmp_path / "straight"))


@pytest.mark.e2e
def test_promptbert_with_mixcse_trains_mixcses_softmax_over_the_mask_embeddings(tiny_bert, tmp_path):
    argv = small_run_argv(tiny_bert, tmp_path / "out", 2, "--use_cpu", "true", "--logging_steps", "1")
    trainer = run_cse.main(["--parts", "mixcse,promptbert", *argv])
    assert type(trainer.loss_fn).__name__ == "MixCSELoss" and type(trainer.model) is PromptEncoder
    assert all("mix_score" in entry for entry in trainer.state.log_history if "loss" in entry)


# sha256 (first 16 hex digits) of the five training batches of `small_run_argv(..., 5, --pad_to_max_length P
# --max_seq_length L [templates])` of run_promptbert / run_cotbert, each batch's attention_mask, input_ids and
# token_type_ids in turn (name, shape, int64 bytes), recorded at 06c1164, when each batch was wrapped in its
# templates in the data loader
CUSTOM = {
    "run_promptbert": ['*cls*_A_"*sent_0*"_is*mask*.*sep+*', '*cls*_Words_"*sent_0*"_say_*mask*_here.*sep+*'],
    "run_cotbert": ['*cls*_A_"*sent_0*"_is*mask*,_so*mask*.*sep+*'],
}
RECORDED_BATCHES = {
    ("run_promptbert", "bert", "false", "48", False): "b225e2720ff3843f",
    ("run_promptbert", "roberta", "true", "48", True): "7e102562384d2bbf",
    ("run_cotbert", "bert", "true", "48", True): "5aece740da5e3e3d",
    ("run_cotbert", "roberta", "false", "48", False): "4551ef57b8314114",
    ("run_cotbert", "bert", "false", "16", True): "1e8bd171b1857db3",
}


@pytest.mark.e2e
def test_a_runs_batches_are_those_recorded_when_each_batch_was_wrapped_in_its_templates(
    backbones, tmp_path, monkeypatch
):
    import importlib

    seen = recorded_batches(monkeypatch)
    for (script, family, pad, length, custom), expected in RECORDED_BATCHES.items():
        seen.clear()
        flags = ["--pad_to_max_length", pad, "--max_seq_length", length]
        if custom:
            names = ("--template", "--positive_template")
            quote = "'" if family == "roberta" else '"'
            flags += [x for name, t in zip(names, CUSTOM[script]) for x in (name, t.replace('"', quote))]
        out = tmp_path / "-".join([script, family, *flags[:4], str(custom)])
        importlib.import_module(script).main(small_run_argv(backbones[family], out, 5, *flags))
        assert sorted(seen[0]) == ["attention_mask", "input_ids", "token_type_ids"][: 3 if family == "bert" else 2]
        assert (len(seen), batches_digest(seen)) == (5, expected), (script, family, pad, length, custom)
