"""SG-BERT: each loss variant against float64 hand computations (with and without the projection head),
token pooling with padding, the frozen BERT_F and embedding layer after training, L_reg by hand,
resumption, the STS-B corpus, and ``run_sgbert.py`` end to end with each loss variant."""

import dataclasses
import json
import math
import os
import re
import subprocess

import datasets
import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModel, AutoTokenizer, TrainerCallback, set_seed

import run_sgbert
from cse import composition, stsb_corpus
from cse.arguments import CSETrainingArguments, ModelArguments, parse_args
from cse.data import TwoViewCollator
from cse.encoders.self_guided import SelfGuidedEncoder
from cse.losses.sgbert import ProjectionHead, SelfGuidedLoss
from cse.methods.sgbert import (
    SGBERT,
    SGBERTArguments,
    SGDataArguments,
    SGModelArguments,
    SGTrainingArguments,
)
from cse.modeling import CSEModel
from cse.results import load_paper_results
from cse.stsb_corpus import stsb_sentences

from .conftest import DATA, QUIET_CPU, REPO, SENTEVAL, launches, preset_trainer, torchrun

SENTENCES = [
    "a plane is taking off",
    "a man is playing a flute",
    "three men are playing chess",
    "a woman is slicing an onion",
    "the lake froze over in january",
    "kids built a fort of pillows",
    "the bakery sells bread at dawn",
    "a storm knocked out the power",
]

# --- the losses -------------------------------------------------------------------------------


def hand_head(x, head):
    """f(x) = GELU(W2 GELU(W1 x + b1) + b2), GELU exact (erf), in float64, one vector at a time."""
    if head is None:
        return [float(v) for v in x]
    first, second = head[0], head[2]
    w1, b1, w2, b2 = (t.detach().double().tolist() for t in (first.weight, first.bias, second.weight, second.bias))
    gelu = lambda v: 0.5 * v * (1.0 + math.erf(v / math.sqrt(2.0)))  # noqa: E731
    hidden = [gelu(sum(w * v for w, v in zip(row, x)) + b) for row, b in zip(w1, b1)]
    return [gelu(sum(w * v for w, v in zip(row, hidden)) + b) for row, b in zip(w2, b2)]


def hand_loss(c, views, variant, tau, head):
    """The paper's equations term by term: c (b, d), views (b, K, d) as nested lists."""
    c = [hand_head(x, head) for x in c]
    h = [[hand_head(x, head) for x in row] for row in views]
    b = len(c)

    def phi(u, v):
        cos = sum(x * y for x, y in zip(u, v)) / math.sqrt(sum(x * x for x in u) * sum(y * y for y in v))
        return math.exp(cos / tau)

    if variant == "opt3":
        num_layers = len(h[0])
        total = 0.0
        for i in range(b):
            negatives = sum(phi(c[i], h[m][n]) for m in range(b) if m != i for n in range(num_layers))
            for k in range(num_layers):
                positive = phi(c[i], h[i][k])
                total += -math.log(positive / (positive + negatives))
        return total / (b * num_layers)
    h = [row[0] for row in h]
    if variant == "base":
        x = c + h
        match = lambda m: m + b if m < b else m - b  # noqa: E731
        total = 0.0
        for m in range(2 * b):
            z = sum(phi(x[m], x[n]) for n in range(2 * b) if n != m)
            total += -math.log(phi(x[m], x[match(m)]) / z)
        return total / (2 * b)
    total = 0.0
    for i in range(b):
        z = sum(phi(c[i], h[j]) for j in range(b))
        if variant == "opt1":
            z += sum(phi(c[i], c[j]) for j in range(b) if j != i)
        total += -math.log(phi(c[i], h[i]) / z)
    return total / b


@pytest.mark.parametrize("with_head", [True, False], ids=["head", "no_head"])
@pytest.mark.parametrize("tau", [0.01, 0.5])
@pytest.mark.parametrize("variant", ["base", "opt1", "opt2", "opt3"])
def test_losses_equal_float64_hand_computation(variant, tau, with_head):
    g = torch.Generator().manual_seed(7)
    b, num_layers, d = 4, 3, 5
    c = torch.randn(b, d, generator=g)
    views = torch.randn(b, num_layers if variant == "opt3" else 1, d, generator=g)
    head = None
    if with_head:
        head = ProjectionHead(d, width=6)
        with torch.no_grad():  # larger than the N(0, 0.02) start, so that the head is far from linear
            for p in head.parameters():
                p.copy_(torch.randn(p.shape, generator=g))
    project = (lambda x: x) if head is None else head
    loss = SelfGuidedLoss(variant, temperature=tau, reg_lambda=0.1)
    distance = torch.tensor(0.7)
    with torch.no_grad():
        value = loss(project(c), project(views), distance).item()
    expected = hand_loss(c.tolist(), views.tolist(), variant, tau, head) + 0.1 * 0.7
    assert value == pytest.approx(expected, rel=1e-5, abs=1e-4)


def test_loss_variants_differ_and_bad_input_is_refused(tmp_path):
    g = torch.Generator().manual_seed(1)
    c, h = torch.randn(4, 3, generator=g), torch.randn(4, 1, 3, generator=g)
    zero = torch.tensor(0.0)
    values = {v: SelfGuidedLoss(v, temperature=0.5)(c, h, zero).item() for v in ("base", "opt1", "opt2")}
    assert values["opt1"] > values["opt2"]  # the opt1 normaliser adds the c_j terms to opt2's
    assert len(set(values.values())) == 3
    with pytest.raises(ValueError, match="one sampled view"):
        SelfGuidedLoss("opt2")(c, torch.randn(4, 2, 3), zero)
    with pytest.raises(ValueError, match="loss variant"):
        SelfGuidedLoss("opt4")
    with pytest.raises(ValueError, match="temperature"):
        SelfGuidedLoss(temperature=0.0)
    with pytest.raises(ValueError, match="sampler set, but --loss_variant opt3"):
        SGBERTArguments(sampler="uniform_per_batch")
    with pytest.raises(ValueError, match="projection_size set, but --no_projection_head"):
        SGBERTArguments(projection_head=False, projection_size=768)
    with pytest.raises(ValueError, match="distinct layers"):
        SGBERTArguments(layers=[1, 1])
    with pytest.raises(ValueError, match="loss_variant"):
        SGBERTArguments(loss_variant="sg")
    with pytest.raises(ValueError, match="early_stopping_patience"):
        SGBERTArguments(early_stopping_patience=-1)
    config = [f"{REPO}/configs/sgbert_bert_base.yaml", "--output_dir", "unused"]
    with pytest.raises(ValueError, match="early_stopping_patience needs evaluations"):
        run_sgbert.main([*config, "--eval_strategy", "no", "--load_best_model_at_end", "false"])
    with pytest.raises(ValueError, match="pooler_type must be cls_before_pooler"):
        run_sgbert.main(["--output_dir", "unused", "--pooler_type", "avg"])
    with pytest.raises(ValueError, match="mlp_only_train needs --pooler_type cls"):
        run_sgbert.main(["--output_dir", "unused", "--mlp_only_train", "true"])
    no_metric = tmp_path / "no_metric.yaml"
    no_metric.write_text("metric_for_best_model: null\nload_best_model_at_end: false\n")
    with pytest.raises(ValueError, match="early_stopping_patience needs --metric_for_best_model"):
        run_sgbert.main([str(no_metric), "--output_dir", "unused"])
    with pytest.raises(ValueError, match="reg_lambda must not be negative"):
        SelfGuidedLoss(reg_lambda=-0.1)
    with pytest.raises(SystemExit) as help_exit:  # every help text formats (argparse expands % in them)
        run_sgbert.main(["--help"])
    assert help_exit.value.code == 0


# --- the encoder ------------------------------------------------------------------------------


def make_encoder(model_dir, **kwargs):
    encoder = CSEModel.from_pretrained(model_dir, pooler_type="cls_before_pooler")
    return SelfGuidedEncoder(encoder.backbone, encoder.tokenizer, **kwargs)


@pytest.mark.parametrize("pooling", ["max", "mean", "cls"])
def test_token_pooling_ignores_padding(tiny_bert, pooling):
    model = make_encoder(tiny_bert, token_pooling=pooling, layers=[0, 2])
    g = torch.Generator().manual_seed(0)
    states = [torch.randn(2, 4, 3, generator=g) for _ in range(3)]
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])
    for layer in states:
        layer[mask == 0] = 1e30  # a huge padded value would win any max and swamp any mean
    views = model.layer_views(states, mask)
    assert views.shape == (2, 2, 3)
    for i, length in enumerate((3, 2)):
        for j, k in enumerate((0, 2)):
            real = states[k][i, :length].double()
            expected = {"max": real.max(0).values, "mean": real.mean(0), "cls": real[0]}[pooling]
            torch.testing.assert_close(views[i, j].double(), expected, rtol=1e-6, atol=1e-6)
    # and through BERT_F itself: a sentence's views do not depend on the padding a batch gives it
    model.train()  # BERT_F stays in eval mode, so its views are deterministic
    assert not model.fixed_backbone.training and model.backbone.training
    tok = model.tokenizer
    pair = ["a short one", "a much longer sentence with many more tokens in it"]
    batch = tok(pair, padding=True, return_tensors="pt")
    alone = tok(["a short one"], return_tensors="pt")
    with torch.no_grad():
        padded = model.fixed_backbone(**batch, output_hidden_states=True).hidden_states
        single = model.fixed_backbone(**alone, output_hidden_states=True).hidden_states
    torch.testing.assert_close(
        model.layer_views(padded, batch["attention_mask"])[:1], model.layer_views(single, alone["attention_mask"])
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("family", ["tiny_bert", "tiny_roberta"])
def test_the_training_forward_is_the_papers_pipeline(request, family, dtype):
    """From raw hidden states, by hand: c_i is BERT_T's last-layer [CLS] (no pooling layer), h_{i,k} the
    max over the real tokens of BERT_F's layer k (k = 0..l), f is applied to both, and L_reg is
    BERT_T's squared distance from BERT_F (RoBERTa too: Table 11). In float64 the whole loss, L_reg
    included, is checked to the float32 rounding of the logits alone."""
    model_dir = request.getfixturevalue(family)
    model = make_encoder(model_dir, projection_size=8).to(dtype)
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():  # move BERT_T away from BERT_F, so that mixing the two up would show
        for p in model.backbone.encoder.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=g))
    model.eval()  # BERT_T without dropout, so that its plain forward below gives the same c_i
    batch = model.tokenizer(SENTENCES[:4], padding=True, return_tensors="pt")
    with torch.no_grad():
        out = model(**{key: torch.stack([value, value], 1) for key, value in batch.items()})
        tuned = model.backbone(**batch).last_hidden_state
        fixed = AutoModel.from_pretrained(model_dir).to(dtype).eval()(**batch, output_hidden_states=True).hidden_states
    lengths = batch["attention_mask"].sum(1).tolist()
    c = [tuned[i, 0].double().tolist() for i in range(4)]
    views = [
        [[max(float(layer[i, t, j]) for t in range(lengths[i])) for j in range(layer.shape[2])] for layer in fixed]
        for i in range(4)
    ]
    assert len(fixed) == 3  # the embedding layer and both transformer layers
    start = AutoModel.from_pretrained(model_dir).state_dict()
    distance = sum(((v.double() - start[n].double()) ** 2).sum().item() for n, v in model.backbone.state_dict().items())
    expected = hand_loss(c, views, "opt3", 0.05, model.projection_head) + 0.1 * distance
    loss = SelfGuidedLoss("opt3", temperature=0.05, reg_lambda=0.1)
    value = loss(out["embeddings"], out["views"], out["parameter_distance"]).item()
    float64 = dtype == torch.float64
    assert value == pytest.approx(expected, rel=1e-5 if float64 else 1e-4)
    assert out["parameter_distance"].dtype == dtype
    assert out["parameter_distance"].item() == pytest.approx(distance, rel=1e-12 if float64 else 1e-5) and distance > 0


def test_sampler_draws_one_layer_per_sentence_or_per_batch(tiny_bert):
    views = torch.arange(64 * 3, dtype=torch.float32).view(64, 3, 1).expand(64, 3, 2)
    set_seed(0)
    model = make_encoder(tiny_bert, sample_views=True)
    picked = model.sample(views)
    assert picked.shape == (64, 1, 2)
    layers = (picked[:, 0, 0] - torch.arange(64) * 3).long()  # the layer each sentence got
    assert set(layers.tolist()) == {0, 1, 2}  # uniform over the three layers (0: embeddings)
    model.sampler = "uniform_per_batch"
    layers = (model.sample(views)[:, 0, 0] - torch.arange(64) * 3).long()
    assert len(set(layers.tolist())) == 1
    with pytest.raises(ValueError, match=r"layers \[3\] do not exist"):
        make_encoder(tiny_bert, layers=[0, 3])


# --- training ---------------------------------------------------------------------------------


def make_trainer(model_dir, out, *, variant="opt3", max_steps=3, batch=4, callbacks=None, seed=0, **training):
    tok = AutoTokenizer.from_pretrained(model_dir)
    dataset = datasets.Dataset.from_dict(dict(tok(SENTENCES, truncation=True, max_length=32)))
    set_seed(seed)
    loss = SelfGuidedLoss(variant, temperature=0.05, reg_lambda=0.1)
    model = make_encoder(model_dir, projection_size=16, sample_views=not loss.uses_all_views)
    args = {**QUIET_CPU, "learning_rate": 1e-3, "adam_beta2": 0.9, "seed": seed, **training}
    args = CSETrainingArguments(str(out), per_device_train_batch_size=batch, max_steps=max_steps, **args)
    part = SGBERT()
    part.objective = loss  # the part's objective is the loss: the trainer has no pairwise one
    return preset_trainer(
        part,
        model=model,
        args=args,
        data_collator=TwoViewCollator(tok),
        train_dataset=dataset,
        processing_class=tok,
        loss=None,
        senteval_data_dir=SENTEVAL,
        callbacks=callbacks,
    )


@pytest.mark.parametrize("variant", ["base", "opt3"])
def test_bert_f_and_the_embedding_layer_stay_fixed_and_l_reg_is_the_squared_distance(tiny_bert, tmp_path, variant):
    trainer = make_trainer(tiny_bert, tmp_path, variant=variant)
    model = trainer.model
    start = AutoModel.from_pretrained(tiny_bert).state_dict()
    trainer.train()
    optimized = {id(p) for group in trainer.optimizer.param_groups for p in group["params"]}
    assert not any(id(p) in optimized for p in model.fixed_backbone.parameters())
    assert not any(id(p) in optimized for p in model.backbone.embeddings.parameters())
    assert all(id(p) in optimized for p in model.projection_head.parameters())
    for name, value in model.fixed_backbone.state_dict().items():
        assert torch.equal(value, start[name]), name
    tuned = model.backbone.state_dict()
    for name in tuned:
        if name.startswith(("embeddings.", "pooler.")):
            assert torch.equal(tuned[name], start[name]), name
    moved = "encoder.layer.0.attention.self.query.weight"
    assert not torch.equal(tuned[moved], start[moved])
    # L_reg over every parameter of BERT, in float64
    expected = sum(((tuned[n].double() - start[n].double()) ** 2).sum().item() for n in start)
    assert model.parameter_distance().item() == pytest.approx(expected, rel=1e-5)
    assert expected > 0


def test_a_batch_of_one_sentence_is_refused(tiny_bert, tmp_path):
    with pytest.raises(ValueError, match="global batch is 1 sentence"):
        make_trainer(tiny_bert, tmp_path, batch=1)


@pytest.mark.e2e
def test_resume_equals_an_uninterrupted_run_bert_f_included(tiny_bert, tmp_path):
    k = 2
    # L_base draws each sentence's view: the sampler's random state must come back too
    common = dict(variant="base", max_steps=2 * k, save_strategy="steps", save_steps=k)

    class StopAt(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            control.should_training_stop = state.global_step == k

    straight = make_trainer(tiny_bert, tmp_path / "straight", **common)
    straight.train()
    make_trainer(tiny_bert, tmp_path / "cut", callbacks=[StopAt()], **common).train()
    checkpoint = tmp_path / "cut" / f"checkpoint-{k}"
    assert any(key.startswith("fixed_backbone.") for key in load_file(str(checkpoint / "model.safetensors")))
    resumed = make_trainer(tiny_bert, tmp_path / "cut", **common)
    with torch.no_grad():  # BERT_F must come back from the checkpoint, not from how this run built it
        for p in resumed.model.fixed_backbone.parameters():
            p.add_(1.0)
    resumed.train(resume_from_checkpoint=str(checkpoint))
    start = AutoModel.from_pretrained(tiny_bert).state_dict()
    for name, value in resumed.model.fixed_backbone.state_dict().items():
        assert torch.equal(value, start[name]), name
    for (name, x), y in zip(straight.model.state_dict().items(), resumed.model.state_dict().values()):
        torch.testing.assert_close(y, x, rtol=1e-5, atol=1e-6, msg=name)
    # a checkpoint of another layout (here: without the head's weights) is refused
    bare = make_trainer(tiny_bert, tmp_path / "cut", **common)
    bare.model.projection_head = None
    with pytest.raises(ValueError, match="saved by a different model.*projection_head"):
        bare.train(resume_from_checkpoint=str(tmp_path / "cut" / f"checkpoint-{2 * k}"))
    with pytest.raises(ValueError, match="no checkpoint to resume from"):
        make_trainer(tiny_bert, tmp_path / "empty", **common).train(resume_from_checkpoint=True)


# --- corpus, configs, paper rows, run_sgbert.py ----------------------------------------------


def test_stsb_corpus_is_every_sentence_of_train_dev_and_test(tmp_path):
    out = tmp_path / "stsb.txt"
    stsb_corpus.main([str(out), "--senteval_data_dir", SENTEVAL])  # the documented command
    sentences = out.read_text(encoding="utf-8").splitlines()
    assert sentences == stsb_sentences(SENTEVAL)
    assert len(sentences) == 2 * (5749 + 1500 + 1379)
    base = os.path.join(SENTEVAL, "STS", "STSBenchmark")
    with open(os.path.join(base, "sts-train.csv"), encoding="utf-8") as f:
        first = f.readline().rstrip("\n").split("\t")
    with open(os.path.join(base, "sts-test.csv"), encoding="utf-8") as f:
        last = f.readlines()[-1].rstrip("\n").split("\t")
    assert sentences[:2] == [first[5], first[6]]
    assert sentences[-2:] == [" ".join(last[5].split()), " ".join(last[6].split())]


def test_table_8_is_the_default_without_a_config_and_the_shipped_config_repeats_it():
    types = (SGModelArguments, SGDataArguments, SGTrainingArguments, SGBERTArguments)
    bare = parse_args(types, ["--output_dir", "o"])
    shipped = parse_args(types, [f"{REPO}/configs/sgbert_bert_base.yaml", "--output_dir", "o"])
    for ours, theirs in zip(bare, shipped):
        assert dataclasses.asdict(ours) == dataclasses.asdict(theirs), type(ours).__name__
    model_args, data_args, train_args, sg_args = bare
    assert (model_args.pooler_type, model_args.temp, model_args.mlp_only_train) == ("cls_before_pooler", 0.01, False)
    assert (train_args.per_device_train_batch_size, train_args.learning_rate, train_args.num_train_epochs) == (
        16,
        5e-5,
        1.0,
    )
    assert (train_args.adam_beta1, train_args.adam_beta2, train_args.eval_steps, train_args.seed) == (0.9, 0.9, 50, 1)
    assert (train_args.weight_decay, train_args.warmup_steps, train_args.fp16) == (0.0, 0.1, False)  # released code
    assert (sg_args.loss_variant, sg_args.reg_lambda, sg_args.token_pooling, sg_args.projection_size) == (
        "opt3",
        0.1,
        "max",
        4096,
    )
    assert sg_args.early_stopping_patience == 10 and sg_args.layers is None and data_args.train_file is None
    assert data_args.max_seq_length == 128
    assert train_args.restore_callback_states_from_checkpoint  # early stopping's count survives a resume
    # the other methods keep SimCSE's defaults
    simcse = parse_args((ModelArguments, CSETrainingArguments), ["--output_dir", "o"])
    assert (simcse[0].pooler_type, simcse[0].temp, simcse[1].per_device_train_batch_size) == ("cls", 0.05, 64)
    rows = load_paper_results()
    assert rows["sgbert_bert_base_sg_opt"]["scores"]["STS-B"] == 77.23
    assert rows["sgbert_bert_base_sg_opt"]["scores"]["STS12"] == 66.84
    assert rows["sgbert_table5_no_projection_head"]["scores"] == {"Avg.": 72.78}


@pytest.mark.e2e
@pytest.mark.parametrize(
    "flags",
    [
        ["--loss_variant", "base"],
        ["--loss_variant", "opt1", "--sampler", "uniform_per_batch"],
        ["--loss_variant", "opt2", "--token_pooling", "mean", "--layers", "1", "2"],
        ["--loss_variant", "opt3", "--no_projection_head", "--fixed_encoder_dropout", "true"],
    ],
    ids=["base", "opt1", "opt2", "opt3"],
)
def test_run_sgbert_with_each_loss_variant(tiny_bert, tmp_path, monkeypatch, flags):
    out = str(tmp_path / "run")
    args = ["--model_name_or_path", tiny_bert, "--output_dir", out]
    args += ["--max_train_samples", "192", "--per_device_train_batch_size", "8", "--max_steps", "24"]
    args += ["--eval_steps", "12", "--logging_steps", "6", "--learning_rate", "1e-3", "--use_cpu", "true"]
    args += ["--disable_tqdm", "true", "--final_eval", "none", "--early_stopping_patience", "5"]
    if "--no_projection_head" not in flags:
        args += ["--projection_size", "64"]
    monkeypatch.setenv("CSE_DATA_DIR", DATA)
    # with the shipped config, and (opt2, opt3) without one: the defaults are Table 8's
    config = [f"{REPO}/configs/sgbert_bert_base.yaml"] if flags[1] in ("base", "opt1") else []
    run_sgbert.main([*config, *args, *flags])
    # no --train_file: the paper's corpus, every STS-B sentence, built in the output directory
    with open(os.path.join(out, "stsb_sentences.txt"), encoding="utf-8") as f:
        assert sum(1 for _ in f) == 17256
    with open(os.path.join(out, "trainer_state.json")) as f:
        state = json.load(f)
    history = state["log_history"]
    assert sum("eval_stsb_spearman" in entry for entry in history) == 2
    losses = [entry for entry in history if "loss" in entry]
    assert len(losses) == 4 and all(entry["parameter_distance"] > 0 for entry in losses)
    assert "EarlyStoppingCallback" in state["stateful_callbacks"]
    checkpoint = load_file(os.path.join(state["best_model_checkpoint"], "model.safetensors"))
    assert any(k.startswith("fixed_backbone.") for k in checkpoint)
    assert any(k.startswith("projection_head.") for k in checkpoint) == ("--no_projection_head" not in flags)
    # the export is BERT_T alone, a plain model whose embedding is its last-layer [CLS]
    with open(os.path.join(out, "cse_config.json")) as f:
        assert json.load(f)["pooler"] == "cls_before_pooler"
    exported = AutoModel.from_pretrained(out)
    for key, value in exported.state_dict().items():
        assert torch.equal(value, checkpoint[f"backbone.{key}"]), key
    with open(os.path.join(out, "run_args.json")) as f:
        assert json.load(f)["method"]["loss_variant"] == flags[1]


@pytest.mark.e2e
def test_parts_sgbert_is_run_sgbert(tiny_bert, tmp_path, monkeypatch):
    """``run_cse.py --parts sgbert`` is SG-BERT's preset: without a corpus named, it trains on every
    STS-B sentence, written to OUTPUT_DIR/stsb_sentences.txt, and stops after --early_stopping_patience
    evaluations without improvement, logging what run_sgbert.py logs. At learning rate 1e-12 (0 is
    refused) no float32 weight moves far enough to change the dev ranking, so the score never improves:
    with an evaluation every 2 steps and patience 1, both stop at step 4 of 20."""
    monkeypatch.setenv("CSE_DATA_DIR", DATA)
    flags = ["--model_name_or_path", tiny_bert, "--projection_size", "16", "--max_train_samples", "160"]
    flags += ["--per_device_train_batch_size", "8", "--max_steps", "20", "--eval_steps", "2"]
    flags += ["--logging_steps", "1", "--learning_rate", "1e-12", "--early_stopping_patience", "1", "--use_cpu", "true"]
    flags += ["--disable_tqdm", "true", "--final_eval", "none", "--report_to", "none"]
    logs = {}
    for name, main, extra in (("script", run_sgbert.main, []), ("parts", composition.main, ["--parts", "sgbert"])):
        out = tmp_path / name
        main([*extra, *flags, "--output_dir", str(out)])
        with open(out / "stsb_sentences.txt", encoding="utf-8") as f:
            assert sum(1 for _ in f) == 17256  # STS-B's train, dev and test sentences
        with open(out / "run_args.json", encoding="utf-8") as f:
            assert json.load(f)["data"]["train_file"] == str(out / "stsb_sentences.txt")
        with open(out / "trainer_state.json", encoding="utf-8") as f:
            state = json.load(f)
        assert state["global_step"] == 4 and state["max_steps"] == 20
        assert sum("eval_stsb_spearman" in entry for entry in state["log_history"]) == 2
        assert "EarlyStoppingCallback" in state["stateful_callbacks"]
        logs[name] = [{k: v for k, v in entry.items() if "runtime" not in k and "per_second" not in k}
                      for entry in state["log_history"]]  # fmt: skip
    assert logs["parts"] == logs["script"]


@pytest.mark.e2e
def test_two_processes_train_as_one_on_the_global_batch(no_dropout_bert, tmp_path, monkeypatch):
    """Under DDP c_i and the views are gathered (b is the global batch) and gradients are averaged: the
    command line in two processes of 4 sentences trains BERT_T as one process of 8 does (no dropout;
    opt3, which draws no view)."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(SENTENCES * 4) + "\n")
    args = ["--model_name_or_path", no_dropout_bert, "--train_file", str(corpus), "--max_steps", "3", "--temp", "0.05"]
    args += ["--learning_rate", "1e-3", "--projection_size", "16", "--max_seq_length", "32", "--use_cpu", "true"]
    args += ["--eval_strategy", "no", "--save_strategy", "no", "--load_best_model_at_end", "false"]
    args += ["--early_stopping_patience", "0", "--final_eval", "none", "--disable_tqdm", "true", "--report_to", "none"]
    monkeypatch.setenv("CSE_DATA_DIR", DATA)  # STS-B dev is loaded, though never evaluated here
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    two, one = str(tmp_path / "two"), str(tmp_path / "one")
    # torchrun joins its script to tests/; an absolute path replaces that
    command = torchrun(os.path.join(REPO, "run_sgbert.py"), 29621, *args, "--per_device_train_batch_size", "4")
    proc = subprocess.run(
        [*command, "--output_dir", two], env=env, capture_output=True, text=True, timeout=600, cwd=REPO
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    assert "8 sentences per step across 2 process(es)" in proc.stdout + proc.stderr
    run_sgbert.main([*args, "--per_device_train_batch_size", "8", "--output_dir", one])
    start = AutoModel.from_pretrained(no_dropout_bert).state_dict()
    single, ddp = AutoModel.from_pretrained(one).state_dict(), AutoModel.from_pretrained(two).state_dict()
    moved = "encoder.layer.1.output.dense.weight"
    assert not torch.allclose(single[moved], start[moved])
    for name, value in single.items():
        torch.testing.assert_close(ddp[name], value, rtol=1e-4, atol=1e-5, msg=name)


def test_scripts_train_eight_seeds_per_row_and_print_each_beside_its_paper_row(tmp_path):
    rows = load_paper_results()
    runs, printed = launches(tmp_path / "t5", "scripts/sgbert/table5_ablations.sh")
    assert len(runs) == 9 * 8
    seeds = [run[run.index("--seed") + 1] for run in runs]
    assert seeds == ["1", "2", "3", "4", "1234", "2345", "3456", "7890"] * 9
    assert all(run[4:6] == ["run_sgbert.py", "configs/sgbert_bert_base.yaml"] and run[-1] == "16" for run in runs)
    settings = [" ".join(run[run.index("--seed") + 2 : run.index("--output_dir")]) for run in runs[::8]]
    assert settings == [
        "--loss_variant opt3",
        "--loss_variant opt2",
        "--loss_variant opt1",
        "--loss_variant base",
        "--temp 0.1",
        "--temp 0.001",
        "--reg_lambda 0.0",
        "--reg_lambda 1.0",
        "--no_projection_head",
    ]
    compared = re.findall(r"python -m cse.results ((?:\S+\.json )+)--paper_row (\w+)", printed)
    assert [len(jsons.split()) for jsons, _ in compared] == [8] * 9
    assert all(row in rows and rows[row]["table"] == "Table 5" for _, row in compared)
    # the other scripts: every paper row they name exists (the row is sgbert_seeds' second argument)
    for script in ("table1_main.sh", "table11_roberta.sh", "fig4_nli_domain.sh"):
        with open(os.path.join(REPO, "scripts", "sgbert", script), encoding="utf-8") as f:
            named = re.findall(r"sgbert_seeds \S+ (\w+)", f.read())
        assert named and all(row in rows for row in named), script
    env = {**os.environ, "NLI_FILE": str(tmp_path / "missing.txt")}
    script = ["bash", "scripts/sgbert/fig4_nli_domain.sh"]
    proc = subprocess.run(script, cwd=REPO, env=env, capture_output=True, text=True)
    assert proc.returncode == 2 and "set NLI_FILE" in proc.stderr
