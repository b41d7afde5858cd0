"""DiffCSE: the replaced-token detection against float64 hand computations (the labels and inputs of the
discriminator, the loss in its three reductions, the masking's probabilities, the generator's decoding),
the conditioning of the discriminator on h in place of [CLS], the BatchNorm projector over both views'
rows; its refusals; ``run_diffcse.py`` on a tiny model with a tiny random generator, killed and resumed,
with MixCSE, and its export read back by ``load_model`` and sentence-transformers."""

import math
import os

import pytest
import torch
from transformers import AutoTokenizer, BertConfig, BertForMaskedLM, BertModel

import run_diffcse
from cse.arguments import parse_args
from cse.encoders.diffcse import DiffCSEEncoder
from cse.encoders.mlp_head import Float32BatchNorm1d
from cse.losses.diffcse import edited_inputs, mask_tokens, rtd_loss
from cse.methods.diffcse import DiffCSE, DiffCSEArguments
from cse.parts import why_not
from cse.registry import get

from .conftest import REPO, SENTENCES, TOKENIZERS, assert_nothing_written, common_args, refusal, small_run_argv

BERT_SPECIAL = [0, 100, 101, 102, 103]  # [PAD], [UNK], [CLS], [SEP], [MASK] of bert-base-uncased

# --- the labels and the loss: float64 hand computations (docs/methods/diffcse.md, "The loss") ---------

IDS = torch.tensor([[101, 2023, 2003, 102, 0], [101, 7592, 102, 0, 0]])
ATTENTION = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 0, 0]])
GENERATED = torch.tensor([[2023, 2023, 2154, 102, 1012], [2009, 7592, 1012, 1012, 1012]])
LOGITS = torch.tensor(
    [
        [(2, -1), (0.5, 0), (-1, 1.5), (1, 0), (0.3, 0.2)],
        [(1.5, -0.5), (0, 0), (-0.2, 0.8), (0.4, 0.1), (0.1, 0)],
    ],
    dtype=torch.float64,
)
LABELS = [[0, 0, 1, 0, 0], [0, 0, 1, 0, 0]]


def hand_nll(logits, label):
    """-log softmax(logits)[label] of one position's two logits."""
    return -(logits[label] - math.log(math.exp(logits[0]) + math.exp(logits[1])))


HAND_NLL = [[hand_nll(LOGITS[r, t].tolist(), LABELS[r][t]) for t in range(5)] for r in range(2)]


def test_hand_values_are_the_specs():
    """The per-position values worked out beside the released code's (models.py:260-273)."""
    assert HAND_NLL[0] == pytest.approx([0.0485873516, 0.4740769842, 0.0788897343, 0.3132616875, 0.6443966601])
    assert HAND_NLL[1] == pytest.approx([0.1269280110, 0.6931471806, 0.3132616875, 0.5543552445, 0.6443966601])


def test_labels_compare_with_the_original_at_every_position():
    """Position 0 forced to [CLS]; row 0 pos 1 masked and restored -> 0; row 1 pos 2, [SEP] turned into '.'
    at an unmasked position -> 1 (released); padding id 0, label 0."""
    edited, replaced = edited_inputs(IDS, GENERATED, ATTENTION, cls_id=101)
    assert replaced.tolist() == LABELS
    assert edited.tolist() == [[101, 2023, 2154, 102, 0], [101, 7592, 1012, 0, 0]]


def test_the_papers_edit_takes_the_generator_at_the_masked_positions_only():
    selected = torch.tensor([[0, 1, 0, 0, 0], [0, 1, 0, 0, 0]], dtype=torch.bool)
    edited, replaced = edited_inputs(IDS, GENERATED, ATTENTION, cls_id=101, selected=selected)
    assert edited.tolist() == [[101, 2023, 2003, 102, 0], [101, 7592, 102, 0, 0]]
    assert replaced.tolist() == [[0] * 5, [0] * 5]  # both restored the original token


@pytest.mark.parametrize(
    "reduction, hand",
    [
        ("padded_mean", sum(map(sum, HAND_NLL)) / 10),  # released: every position of the padded batch
        ("token_mean", sum(sum(HAND_NLL[r][: int(ATTENTION[r].sum())]) for r in range(2)) / 7),
        ("sum", sum(sum(HAND_NLL[r][: int(ATTENTION[r].sum())]) for r in range(2))),  # the paper's L_RTD
    ],
)
def test_rtd_loss_is_the_hand_cross_entropy_to_1e12(reduction, hand):
    loss = rtd_loss(LOGITS, torch.tensor(LABELS), ATTENTION, reduction)
    assert loss.dtype == torch.float64
    assert abs(loss.item() - hand) < 1e-12
    spec = {"padded_mean": 0.3891301201, "token_mean": 0.2925932338, "sum": 2.0481526367}[reduction]
    assert loss.item() == pytest.approx(spec, abs=1e-10)


# --- the masking ------------------------------------------------------------------------------------


def test_masking_is_80_10_10_of_the_selected_and_never_a_special_token():
    """At ratio 0.30 over 40,000 ordinary tokens: [MASK] 0.24, a random id 0.03 (of which 5 in 30522 land on
    the original), kept 0.03; special tokens never selected (4 standard errors at most)."""
    torch.manual_seed(0)
    ordinary = torch.randint(1000, 30000, (400, 100))
    ids = torch.cat([ordinary, torch.tensor(BERT_SPECIAL).repeat(400, 4)], 1)
    masked, selected = mask_tokens(ids, torch.tensor(BERT_SPECIAL), 103, 30522, 0.30, "bert")
    assert not selected[:, 100:].any() and torch.equal(masked[:, 100:], ids[:, 100:])
    sel, m, o = selected[:, :100], masked[:, :100], ids[:, :100]
    n = o.numel()
    to_mask = ((m == 103) & sel).sum().item() / n
    random = ((m != 103) & (m != o) & sel).sum().item() / n
    kept = ((m == o) & sel).sum().item() / n
    for value, p in ((to_mask, 0.24), (random, 0.03), (kept, 0.03), (sel.sum().item() / n, 0.30)):
        assert abs(value - p) < 4 * math.sqrt(p * (1 - p) / n), (value, p)
    assert torch.equal(m[~sel], o[~sel])


def test_the_papers_masking_masks_every_selected_token():
    torch.manual_seed(1)
    ids = torch.randint(1000, 30000, (50, 40))
    masked, selected = mask_tokens(ids, torch.tensor(BERT_SPECIAL), 103, 30522, 0.5, "mask")
    assert torch.equal(masked == 103, selected) and 0.4 < selected.float().mean() < 0.6


# --- the generator's decoding -----------------------------------------------------------------------


class FixedLogits(torch.nn.Module):
    """A stand-in generator whose logits are the same at every position."""

    config = type("Config", (), {"model_type": "fixed", "_attn_implementation": "eager"})  # its 2D mask kept

    def __init__(self, logits):
        super().__init__()
        self.row = torch.tensor(logits)

    def forward(self, input_ids, attention_mask):
        return type("Out", (), {"logits": self.row.expand(*input_ids.shape, -1)})


def part_with(**flags):
    part = DiffCSE(DiffCSEArguments(**flags))
    part.generator = FixedLogits([0.0, math.log(3.0), 1.0, -20.0])
    return part


def test_argmax_decoding_takes_the_largest_logit():
    ids = torch.zeros(3, 5, dtype=torch.long)
    assert (part_with().generate(ids, torch.ones_like(ids)) == 1).all()


def test_sampled_decoding_draws_from_the_generators_softmax():
    """softmax(0, log 3, 1, -20) = (1, 3, e, ~0) / (4 + e), within 4 standard errors over 60,000 draws."""
    torch.manual_seed(2)
    ids = torch.zeros(300, 200, dtype=torch.long)
    drawn = part_with(variant="paper").generate(ids, torch.ones_like(ids))
    n = drawn.numel()
    for token, weight in ((0, 1.0), (1, 3.0), (2, math.e)):
        p = weight / (4.0 + math.e)
        assert abs((drawn == token).sum().item() / n - p) < 4 * math.sqrt(p * (1 - p) / n)
    assert (drawn == 3).sum() < 5


def test_the_variant_sets_the_five_readings_and_each_flag_overrides_it():
    released, paper = DiffCSEArguments(), DiffCSEArguments(variant="paper")
    names = ("generator_decoding", "generator_positions", "masking_rule", "rtd_reduction", "generator_dropout")
    assert [getattr(released, n) for n in names] == ["argmax", "every", "bert", "padded_mean", True]
    assert [getattr(paper, n) for n in names] == ["sample", "masked", "mask", "sum", False]
    assert DiffCSEArguments(variant="paper", rtd_reduction="padded_mean").rtd_reduction == "padded_mean"
    assert (released.lambda_weight, released.masking_ratio) == (0.005, 0.30)


# --- the encoder: the projector and the conditional discriminator -------------------------------------


def test_the_last_batchnorm_is_affine_free_and_biased():
    """Rows (1,2), (3,0), (5,4), (7,2): columns normalised with the biased variance, eps 1e-5."""
    norm = Float32BatchNorm1d(2, affine=False).double().train()
    out = norm(torch.tensor([[1.0, 2.0], [3.0, 0.0], [5.0, 4.0], [7.0, 2.0]], dtype=torch.float64))
    hand0 = [(x - 4.0) / math.sqrt(5.0 + 1e-5) for x in (1, 3, 5, 7)]
    hand1 = [(x - 2.0) / math.sqrt(2.0 + 1e-5) for x in (2, 0, 4, 2)]
    torch.testing.assert_close(out[:, 0], torch.tensor(hand0, dtype=torch.float64), rtol=0, atol=1e-12)
    torch.testing.assert_close(out[:, 1], torch.tensor(hand1, dtype=torch.float64), rtol=0, atol=1e-12)
    assert hand0[0] == pytest.approx(-1.3416394449) and hand1[1] == pytest.approx(-1.4142100269)


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(os.path.join(TOKENIZERS, "bert-base-uncased"))


def toy_encoder(tokenizer, layers=1):
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=len(tokenizer), hidden_size=8, num_hidden_layers=layers, num_attention_heads=2,
        intermediate_size=16, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
    )  # fmt: skip
    return DiffCSEEncoder(BertModel(config), tokenizer)


def test_the_projector_normalises_both_views_rows_together(tokenizer):
    encoder = toy_encoder(tokenizer).train()
    batch = tokenizer(SENTENCES[:6], padding=True, return_tensors="pt")  # view 1: other sentences
    ids = batch["input_ids"].view(2, 3, -1).transpose(0, 1)  # (3 sentences, 2 views, length)
    mask = batch["attention_mask"].view(2, 3, -1).transpose(0, 1)
    seen = {}
    encoder.head[4].register_forward_pre_hook(lambda m, args: seen.update(x=args[0].detach().double()))
    h = encoder(ids, mask)["embeddings"].detach().double()
    x = seen["x"]  # the last BatchNorm's input, (6 rows, d): sentence-major, as the views' reshape gives
    assert x.shape == (6, 8)
    hand = (x - x.mean(0)) / (x.var(0, unbiased=False) + 1e-5).sqrt()
    torch.testing.assert_close(h.reshape(6, -1), hand, rtol=0, atol=1e-5)
    view0 = x[0::2]
    per_view = (view0 - view0.mean(0)) / (view0.var(0, unbiased=False) + 1e-5).sqrt()
    assert (h[:, 0] - per_view).abs().max() > 1e-2  # not per view


def test_the_discriminator_reads_h_in_place_of_cls_and_passes_its_gradient(tokenizer):
    """Layer 0's input at position 0 is h exactly (no LayerNorm, no position embedding); positions >= 1 are
    the usual embeddings; dL/dh is non-zero. D is a copy of the pretrained backbone without the pooler."""
    encoder = toy_encoder(tokenizer)
    disc = encoder.discriminator
    assert disc.pooler is None and disc is not encoder.backbone
    for name, t in disc.state_dict().items():
        torch.testing.assert_close(t, encoder.backbone.state_dict()[name], rtol=0, atol=0)
    batch = tokenizer(SENTENCES[:2], padding=True, return_tensors="pt")
    ids, mask = batch["input_ids"], batch["attention_mask"]
    h = torch.randn(2, 8, requires_grad=True)
    seen = {}
    hook = disc.encoder.layer[0].register_forward_pre_hook(lambda m, args: seen.update(x=args[0].detach()))
    logits = encoder.discriminate(ids, mask, None, h)
    hook.remove()
    assert logits.shape == (*ids.shape, 2)
    assert torch.equal(seen["x"][:, 0], h.detach())
    plain = disc.embeddings(input_ids=ids)
    torch.testing.assert_close(seen["x"][:, 1:], plain[:, 1:], rtol=0, atol=0)
    (grad,) = torch.autograd.grad(logits[..., 1].sum(), h)
    assert grad.abs().sum() > 0
    assert encoder.embed(ids, mask).shape == (2, 8)  # the hook is off outside discriminate


# --- refusals and compositions -------------------------------------------------------------------------


def tiny_generator(path, family_tokenizer="bert-base-uncased"):
    """A tiny random masked language model of the tokenizer's vocabulary, saved as a HF directory."""
    tok = AutoTokenizer.from_pretrained(os.path.join(TOKENIZERS, family_tokenizer))
    torch.manual_seed(3)
    config = BertConfig(
        vocab_size=len(tok), hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32
    )
    BertForMaskedLM(config).save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)


@pytest.fixture(scope="module")
def generator(tmp_path_factory):
    return tiny_generator(tmp_path_factory.mktemp("generator"))


@pytest.mark.parametrize(
    "flags, said",
    [
        (["--masking_ratio", "0"], "--masking_ratio must lie in (0, 1], got 0"),
        (["--lambda_weight", "-1"], "--lambda_weight must be >= 0, got -1"),
        (["--rtd_reduction", "max"], "--rtd_reduction"),
        (["--mlp_only_train", "false"], "DiffCSE's embedding is [CLS] through its BatchNorm projector"),
        (["--generator_name_or_path", "./no/such/generator"], "model directory not found: ./no/such/generator"),
        (["--generator_name_or_path", "ROBERTA"], "a vocabulary of 50265 ids, the backbone"),
    ],
)
def test_bad_flags_are_refused_before_any_work(flags, said, tiny_bert, tiny_roberta, capsys, tmp_path):
    out = tmp_path / "out"
    flags = [tiny_roberta if f == "ROBERTA" else f for f in flags]
    lines = refusal(capsys, run_diffcse.main, ["--model_name_or_path", tiny_bert, "--output_dir", str(out), *flags])
    assert said in lines[0] and len(lines) == 2, lines
    assert_nothing_written(out)


def test_it_combines_with_mixcse_and_vadvcse_and_says_why_not_with_the_others():
    assert why_not(DiffCSE, get("mixcse").part) is None and why_not(DiffCSE, get("vadvcse").part) is None
    assert "AdCSE's momentum encoder p" in why_not(DiffCSE, get("adcse").part)
    for other in ("esimcse", "sarcse", "sgbert", "promptbert", "cotbert"):
        assert why_not(DiffCSE, get(other).part), other


@pytest.mark.parametrize(
    "config, lr, ratio, generator",
    [
        ("configs/diffcse_bert_base.yaml", 7e-6, 0.30, "distilbert-base-uncased"),
        ("configs/diffcse_roberta_base.yaml", 1e-5, 0.20, "distilroberta-base"),
    ],
)
def test_the_configs_hold_the_released_settings(config, lr, ratio, generator):
    """run_diffcse.sh (BERT) and Table A.1 (RoBERTa): batch 64, two epochs, max length 32, tau 0.05, [CLS] with
    the projector in training only, lambda 0.005, STS-B dev every 125 steps, fp16."""
    model, data, training, flags = parse_args(get("diffcse").argument_types, [os.path.join(REPO, config)])
    assert (training.per_device_train_batch_size, training.learning_rate, training.num_train_epochs) == (64, lr, 2)
    assert (training.eval_steps, training.fp16, data.max_seq_length) == (125, True, 32)
    assert (model.temp, model.pooler_type, model.mlp_only_train) == (0.05, "cls", True)
    assert (flags.variant, flags.lambda_weight, flags.masking_ratio) == ("released", 0.005, ratio)
    assert flags.generator_name_or_path == generator


# --- runs ----------------------------------------------------------------------------------------------


def test_a_generator_offline_and_not_cached_is_refused_naming_its_flag(tiny_bert, capsys, tmp_path, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    out = tmp_path / "out"
    argv = [
        "--model_name_or_path",
        tiny_bert,
        "--output_dir",
        str(out),
        "--generator_name_or_path",
        "owner/no-such-mlm",
    ]
    error, hint = refusal(capsys, run_diffcse.main, argv)
    assert "owner/no-such-mlm is not a local directory nor in the Hugging Face cache" in error
    assert "--generator_name_or_path ./my-model" in hint and "--model_name_or_path" not in hint
    assert_nothing_written(out)


@pytest.mark.e2e
def test_a_generator_without_a_masked_lm_head_is_named_in_a_warning(tiny_bert, tmp_path, caplog):
    """The default generator, the backbone itself, saved as an encoder (no masked-LM head): it loads with a
    random head, which the run says rather than training on random edits unannounced."""
    with caplog.at_level("WARNING", logger="cse.methods.diffcse"):
        run_diffcse.main(small_run_argv(tiny_bert, tmp_path / "out", 1, "--use_cpu", "true"))
    assert f"DiffCSE's generator {tiny_bert} has no trained masked-LM head" in caplog.text


@pytest.mark.e2e
def test_trains_alone_with_a_frozen_generator_and_its_export_embeds_as_the_trainer(tiny_bert, generator, tmp_path):
    """Two steps: G's weights bitwise unchanged, D's and its head's changed; rtd logged; the export (the
    backbone alone) read by load_model and by sentence-transformers embeds as the trained model's [CLS]."""
    import json

    from safetensors.torch import load_file
    from sentence_transformers import SentenceTransformer

    from cse.modeling import load_model

    before = {k: v.clone() for k, v in BertForMaskedLM.from_pretrained(generator).state_dict().items()}
    flags = ["--use_cpu", "true", "--logging_steps", "1", "--generator_name_or_path", generator]
    trainer = run_diffcse.main(small_run_argv(tiny_bert, tmp_path / "out", 2, *flags))
    part = trainer.part("diffcse")
    after = part.generator.state_dict()
    assert all(torch.equal(after[k], v) for k, v in before.items())
    logs = [entry for entry in trainer.state.log_history if "loss" in entry]
    assert len(logs) == 2 and all(math.isfinite(e["loss"]) and e["loss_rtd"] > 0 for e in logs)
    start = DiffCSEEncoder.from_encoder(type(trainer.model).__mro__[1].from_pretrained(tiny_bert, "cls"))
    model = trainer.model
    assert not torch.equal(model.electra_head.weight, start.electra_head.weight)
    assert not torch.equal(model.discriminator.encoder.layer[0].output.dense.weight,
                           start.discriminator.encoder.layer[0].output.dense.weight)  # fmt: skip
    exported = load_file(str(tmp_path / "out" / "model.safetensors"))
    assert not any("discriminator" in k or "electra" in k or "head." in k for k in exported)
    args = json.loads((tmp_path / "out" / "run_args.json").read_text())
    assert generator in json.dumps(args) and generator in (tmp_path / "out" / "README.md").read_text()
    ours = trainer.model.encode(SENTENCES, batch_size=3)
    loaded = load_model(str(tmp_path / "out")).encode(SENTENCES, batch_size=2)
    torch.testing.assert_close(loaded, ours, rtol=0, atol=1e-5)
    theirs = SentenceTransformer(str(tmp_path / "out"), device="cpu").encode(SENTENCES)
    torch.testing.assert_close(torch.tensor(theirs), ours, rtol=0, atol=1e-5)


@pytest.mark.e2e
def test_killed_and_resumed_bit_identical(tiny_bert, generator, tmp_path, monkeypatch):
    """SIGKILLed after step 5 (checkpoint-4 complete), the same command resumes to the uninterrupted run's
    weights: D, its head and the projector from the checkpoint, G reloaded, the masks from the saved RNG."""
    from .conftest import assert_bit_identical, in_process, worker

    extra = ["--generator_name_or_path", generator]
    in_process("run_diffcse.py", common_args(tiny_bert, tmp_path / "straight", 6, 2) + extra, monkeypatch)
    argv = common_args(tiny_bert, tmp_path / "killed", 6, 2) + extra
    worker("run_diffcse.py", argv, "5:step")
    in_process("run_diffcse.py", argv, monkeypatch)
    assert_bit_identical(str(tmp_path / "killed"), str(tmp_path / "straight"))


@pytest.mark.e2e
def test_two_processes_keep_one_discriminator(tiny_bert, generator, tmp_path):
    """Under DDP (two CPU processes, gloo) the discriminator's forward runs outside the wrapped model's, and
    its gradients are still averaged: after three steps every weight is the same on both ranks, the
    discriminator's moved from the pretrained ones; only the projector's BatchNorm running statistics, each
    process's own batch's (never read: evaluation skips the projector), differ."""
    import subprocess

    from safetensors.torch import load_file

    from .conftest import torchrun

    argv = small_run_argv(tiny_bert, tmp_path / "out", 3, "--use_cpu", "true", "--learning_rate", "1e-3")
    argv += ["--per_device_train_batch_size", "4", "--generator_name_or_path", generator]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        torchrun("diffcse_ddp_worker.py", 29651, str(tmp_path / "rank"), *argv),
        env=env, timeout=300, capture_output=True, text=True,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    ranks = [load_file(str(tmp_path / f"rank{r}.safetensors")) for r in range(2)]
    differ = sorted(name for name in ranks[0] if not torch.equal(ranks[0][name], ranks[1][name]))
    assert differ == ["head.1.running_mean", "head.1.running_var", "head.4.running_mean", "head.4.running_var"]
    pretrained = load_file(os.path.join(tiny_bert, "model.safetensors"))
    name = "encoder.layer.0.output.dense.weight"
    assert not torch.equal(ranks[0][f"discriminator.{name}"], pretrained[name])


@pytest.mark.e2e
def test_with_mixcse_adds_rtd_to_the_mixed_softmax(tiny_bert, generator, tmp_path):
    import run_cse

    argv = small_run_argv(tiny_bert, tmp_path / "out", 2, "--use_cpu", "true", "--logging_steps", "1")
    trainer = run_cse.main(["--parts", "diffcse,mixcse", "--generator_name_or_path", generator, *argv])
    assert type(trainer.loss_fn).__name__ == "MixCSELoss"
    logs = [entry for entry in trainer.state.log_history if "loss" in entry]
    assert all("mix_score" in entry and "loss_rtd" in entry for entry in logs)


def test_a_composition_with_esimcse_is_refused_before_any_work(capsys, tmp_path):
    import run_cse

    out = tmp_path / "out"
    lines = refusal(capsys, run_cse.main, ["--parts", "diffcse,esimcse", "--output_dir", str(out)])
    assert "diffcse" in lines[0] and "esimcse" in lines[0]
    assert_nothing_written(out)
