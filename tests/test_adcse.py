"""AdCSE: the loss against float64 hand computations, the adversaries' ascent and q's descent, the
momentum encoder against Eq. 4's closed form, gradient accumulation, DDP, resumption, and
``run_adcse.py`` end to end with each Table 2 ablation."""

import json
import math
import os
import subprocess
import sys

import datasets
import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModel, AutoTokenizer, TrainerCallback, set_seed

from cse.arguments import CSETrainingArguments
from cse.data import TwoViewCollator
from cse.losses import InfoNCELoss
from cse.losses.adcse import AdversarialInfoNCELoss
from cse.methods.adcse import AdCSE, AdCSEArguments
from cse.modeling import CSEModel
from cse.run_names import PARTS_STATE_NAME

from .conftest import (
    DATA,
    QUIET_CPU,
    REPO,
    SENTENCES,
    SENTEVAL,
    WIKI_HEAD,
    MomentumWeights,
    preset_trainer,
    torchrun,
)

# --- the loss ---------------------------------------------------------------------------------


def hand_loss(h, hp, n, tau, form):
    """Eq. 5 (paper) or the released logits, term by term in float64; also the adversaries' mean
    share of the softmax."""
    h, hp, n = h.double().tolist(), hp.double().tolist(), n.double().tolist()

    def cos(a, b):
        dot = sum(x * y for x, y in zip(a, b))
        return dot / math.sqrt(sum(x * x for x in a)) / math.sqrt(sum(y * y for y in b))

    total = share = 0.0
    for i in range(len(h)):
        positive = math.exp(cos(h[i], hp[i]) / tau)
        adversaries = sum(math.exp(cos(h[i], nj) / tau) for nj in n)
        if form == "paper":
            denominator = positive + adversaries
        else:
            denominator = sum(math.exp(cos(h[i], hp[j]) / tau) for j in range(len(h))) + adversaries
        total += -math.log(positive / denominator)
        share += adversaries / denominator
    return total / len(h), share / len(h)


@pytest.mark.parametrize("form", ["released", "paper"])
@pytest.mark.parametrize("tau", [0.05, 0.2])
def test_loss_equals_float64_hand_computation(form, tau):
    g = torch.Generator().manual_seed(3)
    h, hp = torch.randn(6, 5, generator=g), torch.randn(6, 5, generator=g)
    loss = AdversarialInfoNCELoss(5, num_adversaries=4, temperature=tau, form=form)
    with torch.no_grad():
        loss.adversaries.copy_(torch.randn(4, 5, generator=g) * 3.0)  # raw norms != 1: normalised at use
    expected, share = hand_loss(h, hp, loss.adversaries.detach(), tau, form)
    assert loss(h, hp).item() == pytest.approx(expected, rel=1e-5)
    terms, statistics = loss.terms(h, hp)
    assert list(terms) == ["contrastive"] and terms["contrastive"].item() == pytest.approx(expected, rel=1e-5)
    assert statistics["adversary_share"].item() == pytest.approx(share, rel=1e-4)


def test_loss_forms_differ_and_bad_arguments_are_refused():
    h, hp = torch.randn(4, 3), torch.randn(4, 3)
    torch.manual_seed(0)
    released = AdversarialInfoNCELoss(3, 2, form="released")
    torch.manual_seed(0)
    paper = AdversarialInfoNCELoss(3, 2, form="paper")
    assert released(h, hp).item() > paper(h, hp).item()  # more terms in the denominator
    with pytest.raises(ValueError, match="num_adversaries"):
        AdversarialInfoNCELoss(3, 0)
    with pytest.raises(ValueError, match="form"):
        AdversarialInfoNCELoss(3, 2, form="eq5")
    with pytest.raises(ValueError, match="num_adversaries"):
        AdCSEArguments(num_adversaries=0)
    with pytest.raises(ValueError, match="momentum"):
        AdCSEArguments(momentum=1.5)
    assert AdCSEArguments().adversary_weight_decay == 1e-4
    assert AdCSEArguments(variant="paper").adversary_weight_decay == 0.0
    with pytest.raises(ValueError, match="num_adversaries set, but --no_adversaries"):
        AdCSEArguments(adversaries=False, num_adversaries=32)
    with pytest.raises(ValueError, match="momentum set, but --no_untied_dual_encoder"):
        AdCSEArguments(untied_dual_encoder=False, momentum=0.99)
    with pytest.raises(ValueError, match="adversary_weight_decay.*--no_adversaries"):
        AdCSEArguments(adversaries=False, adversary_weight_decay=0.0)
    # the released code's adversary temperature (mem_t) is its own; the paper has one tau
    assert (AdCSEArguments().adversary_temperature, AdCSEArguments(variant="paper").adversary_temperature) == (
        0.05,
        None,
    )


@pytest.mark.parametrize("form", ["released", "paper"])
def test_adversary_gradient_is_the_released_closed_form_at_the_adversary_temperature(form):
    """The released code's hand gradient of L w.r.t. raw n_k (normalised at use), at its temperature
    t: [ (1/N) sum_i p_ik h_i - mean_i(p_ik cos_ik) n_k/||n_k|| ] / (t ||n_k||), with h_i unit vectors,
    p_ik the softmax weight of adversary k for anchor i, cos_ik = h_i . n_k/||n_k||. The value and
    q's gradient stay those of L at tau."""
    g = torch.Generator().manual_seed(5)
    h0, hp0 = torch.randn(5, 4, generator=g, dtype=torch.float64), torch.randn(5, 4, generator=g, dtype=torch.float64)
    n0 = torch.randn(3, 4, generator=g, dtype=torch.float64) * 2.0
    tau, t = 0.2, 0.5
    loss = AdversarialInfoNCELoss(4, 3, temperature=tau, form=form, adversary_temperature=t)
    loss.double()
    with torch.no_grad():
        loss.adversaries.copy_(n0)
    h = h0.clone().requires_grad_(True)
    value = loss(h, hp0)
    value.backward()
    # closed form, by hand
    hu = h0 / h0.norm(dim=1, keepdim=True)
    nu = n0 / n0.norm(dim=1, keepdim=True)
    cos_adv = hu @ nu.T
    cos_pos = hu @ (hp0 / hp0.norm(dim=1, keepdim=True)).T
    positive_terms = cos_pos if form == "released" else cos_pos.diagonal()[:, None]
    p = torch.cat([positive_terms, cos_adv], 1).div(t).softmax(1)[:, -3:]
    closed = ((p.T @ hu) / 5 - (p * cos_adv).mean(0)[:, None] * nu) / (t * n0.norm(dim=1, keepdim=True))
    # (the logits are computed in float32 whatever the input dtype)
    torch.testing.assert_close(loss.adversaries.grad, closed, rtol=1e-5, atol=1e-7)
    # value and q's gradient: L at tau with the adversaries as constants
    reference = AdversarialInfoNCELoss(4, 3, temperature=tau, form=form).double()
    with torch.no_grad():
        reference.adversaries.copy_(n0)
    h_ref = h0.clone().requires_grad_(True)
    expected = reference(h_ref, hp0)
    expected.backward()
    assert value.item() == pytest.approx(expected.item(), rel=1e-6)
    torch.testing.assert_close(h.grad, h_ref.grad, rtol=1e-5, atol=1e-7)
    assert not torch.allclose(reference.adversaries.grad, closed)  # tau and t differ: not vacuous


# --- the trainer ------------------------------------------------------------------------------


def make_trainer(
    model_dir,
    out,
    *,
    variant="released",
    untied=True,
    adversaries=True,
    batch=8,
    max_steps=1,
    learning_rate=1e-3,
    adversary_learning_rate=3e-3,
    adversary_weight_decay=1e-4,
    momentum=0.995,
    sentences=SENTENCES[:8],
    seed=0,
    callbacks=None,
    backbone_kwargs=None,
    temperature=0.05,
    num_adversaries=64,
    **training,
):
    """run_adcse.py's wiring, on an in-memory corpus, with a constant learning rate."""
    tok = AutoTokenizer.from_pretrained(model_dir)
    dataset = datasets.Dataset.from_dict(dict(tok(sentences, truncation=True, max_length=32)))
    set_seed(seed)
    model = CSEModel.from_pretrained(model_dir, pooler_type="cls", mlp_only_train=True, **(backbone_kwargs or {}))
    if untied:
        model.attach_momentum_backbone(shared_head=variant == "released")
    model.reset_head()
    hidden = model.config.hidden_size
    loss = (
        AdversarialInfoNCELoss(hidden, num_adversaries, temperature, form=variant)
        if adversaries
        else InfoNCELoss(temperature)
    )
    args = dict(
        QUIET_CPU,
        output_dir=str(out),
        per_device_train_batch_size=batch,
        max_steps=max_steps,
        learning_rate=learning_rate,
        lr_scheduler_type="constant",
        seed=seed,
    )
    args.update(training)
    flags = AdCSEArguments(
        momentum=momentum,
        adversary_learning_rate=adversary_learning_rate,
        adversary_momentum=0.9,
        adversary_weight_decay=adversary_weight_decay,
    )
    return preset_trainer(
        AdCSE(flags),
        model=model,
        args=CSETrainingArguments(**args),
        train_dataset=dataset,
        data_collator=TwoViewCollator(tok),
        processing_class=tok,
        loss=loss,
        senteval_data_dir=SENTEVAL,
        callbacks=callbacks,
    )


def batch_loss(trainer):
    batch = trainer.data_collator([trainer.train_dataset[i] for i in range(len(trainer.train_dataset))])
    with torch.no_grad():
        views = trainer.model(**batch)["embeddings"]
        return trainer.loss_fn(views[:, 0], views[:, 1]).item()


@pytest.mark.parametrize("variant", ["released", "paper"])
def test_adversary_step_raises_and_encoder_step_lowers_the_loss(no_dropout_bert, tmp_path, variant):
    # tau = 1: at 0.05 random adversaries (cosine ~0) hold a share ~e^{-20} of the softmax, so their
    # gradient, and the change a step makes, would be below float32 resolution.
    common = dict(variant=variant, temperature=1.0)
    # Adversaries alone (q's learning rate 0): gradient ascent.
    trainer = make_trainer(no_dropout_bert, tmp_path / "a", learning_rate=0.0, adversary_learning_rate=1.0, **common)
    before = batch_loss(trainer)
    trainer.train()
    assert batch_loss(trainer) > before + 1e-4
    # Encoder q alone (adversaries' learning rate 0): gradient descent.
    # (small: Adam's first step moves every weight by the learning rate, whatever its gradient)
    trainer = make_trainer(no_dropout_bert, tmp_path / "q", adversary_learning_rate=0.0, learning_rate=1e-5, **common)
    before = batch_loss(trainer)
    trainer.train()
    assert batch_loss(trainer) < before - 1e-5


@pytest.mark.parametrize("variant", ["released", "paper"])
def test_momentum_encoder_follows_eq4_closed_form(tiny_bert, tmp_path, variant):
    m, k = 0.9, 5
    trainer = make_trainer(tiny_bert, tmp_path, variant=variant, momentum=m, max_steps=k, sentences=SENTENCES)
    record = MomentumWeights(trainer.model)
    trainer.add_callback(record)
    trainer.train()
    q, p = record.q, record.p
    assert set(p[0]) == {n for n in q[0] if not (variant == "released" and n.startswith("pooler."))}
    for name in p[0]:
        assert torch.equal(p[0][name], q[0][name]), name  # step 0: an exact copy
        assert not torch.equal(q[1][name], q[0][name]), name  # q moved, so the test is not vacuous
        # one step: theta_p = m theta_p + (1 - m) theta_q
        torch.testing.assert_close(p[1][name], m * p[0][name] + (1 - m) * q[1][name], rtol=0, atol=1e-7)
        # k steps: theta_p(k) = m^k theta_p(0) + (1 - m) sum_t m^(k-t) theta_q(t)
        closed = m**k * p[0][name] + (1 - m) * sum(m ** (k - t) * q[t][name] for t in range(1, k + 1))
        torch.testing.assert_close(p[k][name], closed, rtol=0, atol=1e-6)


def test_gradient_accumulation_equals_one_large_batch(no_dropout_bert, tmp_path):
    # Eq. 5 as printed has no in-batch term, so 2 x 8 sentences and 16 give the same mean loss.
    common = dict(variant="paper", sentences=SENTENCES, max_steps=2, momentum=0.9, temperature=1.0)
    large = make_trainer(no_dropout_bert, tmp_path / "large", batch=16, **common)
    small = make_trainer(no_dropout_bert, tmp_path / "small", batch=8, gradient_accumulation_steps=2, **common)
    initial = large.part("adcse").adversaries.detach().clone()
    for trainer in (large, small):
        trainer.train()
    assert not torch.allclose(large.part("adcse").adversaries, initial)
    torch.testing.assert_close(small.part("adcse").adversaries, large.part("adcse").adversaries, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(
        small.part("adcse").state_dict()["momentum_buffer"],
        large.part("adcse").state_dict()["momentum_buffer"],
        rtol=1e-4,
        atol=1e-5,
    )
    for (name, a), b in zip(
        large.model.momentum_backbone.named_parameters(), small.model.momentum_backbone.parameters()
    ):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6, msg=name)


def test_adversary_step_is_sgd_ascent_with_weight_decay_on_the_unscaled_gradient(tiny_bert, tmp_path):
    lr, wd, mu, scale = 0.5, 0.1, 0.9, 1024.0
    trainer = make_trainer(tiny_bert, tmp_path, adversary_learning_rate=lr, adversary_weight_decay=wd)
    n = trainer.part("adcse").adversaries.detach().double().clone()
    v = torch.zeros_like(n)
    for _ in range(2):
        g = torch.randn_like(trainer.part("adcse").adversaries)
        trainer.part("adcse").adversaries.grad = g * scale  # as an fp16 loss scale leaves it
        trainer.part("adcse")._step_loss_scale = scale
        trainer.part("adcse").after_step(trainer)
        # the released code: v <- mu v + (-g + wd n); n <- n - lr v  (ascent on L)
        v = mu * v + (-g.double() + wd * n)
        n = n - lr * v
        torch.testing.assert_close(trainer.part("adcse").adversaries.detach().double(), n, rtol=1e-5, atol=1e-6)
        assert trainer.part("adcse").adversaries.grad is None


def test_skipped_optimizer_step_moves_neither_adversaries_nor_p(tiny_bert, tmp_path, monkeypatch):
    # As after an fp16 overflow: the scaler skips q's step, so the adversaries and p must stay.
    trainer = make_trainer(tiny_bert, tmp_path, temperature=1.0, adversary_learning_rate=1.0, momentum=0.5)
    monkeypatch.setattr(type(trainer.accelerator), "optimizer_step_was_skipped", property(lambda self: True))
    n0 = trainer.part("adcse").adversaries.detach().clone()
    p0 = [t.detach().clone() for t in trainer.model.momentum_backbone.parameters()]
    trainer.train()
    assert torch.equal(trainer.part("adcse").adversaries, n0) and trainer.part("adcse").adversaries.grad is None
    assert all(torch.equal(a, b) for a, b in zip(trainer.model.momentum_backbone.parameters(), p0))


def test_p_and_adversaries_are_outside_the_encoder_optimizer(tiny_bert, tmp_path):
    trainer = make_trainer(tiny_bert, tmp_path)
    optimizer = trainer.create_optimizer()
    in_optimizer = {id(t) for group in optimizer.param_groups for t in group["params"]}
    assert id(trainer.part("adcse").adversaries) not in in_optimizer
    assert not any(id(t) in in_optimizer for t in trainer.model.momentum_backbone.parameters())
    assert all(id(t) in in_optimizer for t in trainer.model.backbone.parameters())


@pytest.mark.parametrize(
    "layout", [{}, {"variant": "paper"}, {"untied": False}], ids=["released", "paper", "no_untied_dual_encoder"]
)
def test_resume_restores_p_adversaries_and_their_optimizer(tiny_bert, tmp_path, layout):
    k = 3
    # tau = 1 and a large adversary step, so that the adversaries and their momentum move visibly.
    common = dict(sentences=SENTENCES, batch=4, max_steps=2 * k, save_strategy="steps", save_steps=k, temperature=1.0)
    common.update(adversary_learning_rate=1.0, **layout)

    class StopAt(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            control.should_training_stop = state.global_step == k

    straight = make_trainer(tiny_bert, tmp_path / "straight", **common)
    straight.train()
    make_trainer(tiny_bert, tmp_path / "cut", callbacks=[StopAt()], **common).train()
    checkpoint = tmp_path / "cut" / f"checkpoint-{k}"
    assert (checkpoint / PARTS_STATE_NAME).is_file()
    resumed = make_trainer(tiny_bert, tmp_path / "cut", **common)
    resumed.train(resume_from_checkpoint=str(checkpoint))

    a, b = straight.part("adcse").state_dict(), resumed.part("adcse").state_dict()
    for name in ("adversaries", "momentum_buffer"):
        torch.testing.assert_close(b[name], a[name], rtol=1e-5, atol=1e-6)
    for (name, x), y in zip(straight.model.state_dict().items(), resumed.model.state_dict().values()):
        torch.testing.assert_close(y, x, rtol=1e-5, atol=1e-6, msg=name)


def test_resume_refuses_what_would_not_restore_everything(tiny_bert, tmp_path):
    common = dict(sentences=SENTENCES, batch=4, max_steps=2, save_strategy="steps", save_steps=2)
    make_trainer(tiny_bert, tmp_path / "run", **common).train()
    checkpoint = str(tmp_path / "run" / "checkpoint-2")
    # another layout: p with its own head (paper) from a shared-head (released) checkpoint
    with pytest.raises(ValueError, match="saved by a different model.*momentum_backbone.pooler"):
        make_trainer(tiny_bert, tmp_path / "run", variant="paper", **common).train(resume_from_checkpoint=checkpoint)
    with pytest.raises(ValueError, match=r"holds \(64, 32\) adversaries, this run \(16, 32\)"):
        make_trainer(tiny_bert, tmp_path / "run", num_adversaries=16, **common).train(resume_from_checkpoint=checkpoint)
    with pytest.raises(ValueError, match="no checkpoint to resume from"):
        make_trainer(tiny_bert, tmp_path / "empty", **common).train(resume_from_checkpoint=True)
    # a checkpoint without the adversaries' state is refused, not silently restarted
    os.remove(os.path.join(checkpoint, PARTS_STATE_NAME))
    with pytest.raises(ValueError, match="does not hold the adversaries' state"):
        make_trainer(tiny_bert, tmp_path / "run", **common).train(resume_from_checkpoint=checkpoint)


@pytest.mark.e2e
@pytest.mark.parametrize("zero_stage", [None, 2], ids=["ddp", "deepspeed_zero2"])
def test_two_processes_equal_one_process_and_stay_identical(no_dropout_bert, tmp_path, zero_stage):
    """Two processes of 4 sentences (DDP, or DeepSpeed ZeRO-2 in fp32) and one of 8 see the same
    global batches (accelerate deals the seeded order out in turn); without dropout they must end with
    the same adversaries, SGD momentum and p, and the two processes with bit-identical ones."""
    flags = ["--model_name_or_path", no_dropout_bert, "--train_file", WIKI_HEAD, "--max_steps", "3"]
    flags += ["--learning_rate", "1e-3", "--momentum", "0.5", "--adversary_learning_rate", "1.0"]
    # tau = 1: at 0.05 random adversaries get a gradient ~e^-20 and would agree by not moving
    flags += ["--temp", "1.0", "--adversary_temperature", "1.0", "--eval_strategy", "no", "--save_strategy", "no"]
    flags += [
        "--load_best_model_at_end",
        "false",
        "--final_eval",
        "none",
        "--use_cpu",
        "true",
        "--disable_tqdm",
        "true",
    ]
    env = {**os.environ, "CSE_DATA_DIR": DATA, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    two_flags = ["--per_device_train_batch_size", "4"]
    if zero_stage is not None:
        env["DS_ACCELERATOR"] = "cpu"
        two_flags += ["--deepspeed", os.path.join(REPO, "configs", "accelerate", f"deepspeed_zero{zero_stage}.json")]
    two, one = tmp_path / "two", tmp_path / "one"
    for out, cmd in (
        (two, torchrun("adcse_ddp_worker.py", 29541 if zero_stage is None else 29710, str(two), *flags, *two_flags)),
        (one, [sys.executable, os.path.join(REPO, "tests", "adcse_ddp_worker.py"), str(one), *flags]),
    ):
        out.mkdir()
        cmd = cmd if out is two else [*cmd, "--per_device_train_batch_size", "8"]
        proc = subprocess.run(
            [*cmd, "--output_dir", str(out / "run")], env=env, capture_output=True, text=True, timeout=600, cwd=REPO
        )
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
        assert "8 sentences per step across %d process(es)" % (2 if out is two else 1) in proc.stdout + proc.stderr
        if out is two and zero_stage is not None:
            assert f"DeepSpeed ZeRO-{zero_stage}" in proc.stdout + proc.stderr
    ranks = [load_file(str(two / f"rank{r}.safetensors")) for r in range(2)]
    single = load_file(str(one / "rank0.safetensors"))
    assert set(ranks[0]) == set(ranks[1]) == set(single)
    for name in single:
        assert torch.equal(ranks[0][name], ranks[1][name]), name
        torch.testing.assert_close(ranks[0][name], single[name], rtol=1e-4, atol=1e-5, msg=name)
    assert single["momentum_buffer"].abs().max() > 1e-3  # the adversaries did move
    initial = CSEModel.from_pretrained(no_dropout_bert, pooler_type="cls").backbone.state_dict()
    moved = "momentum_backbone.encoder.layer.0.attention.self.query.weight"
    assert not torch.allclose(single[moved], initial[moved.removeprefix("momentum_backbone.")])


# --- run_adcse.py -----------------------------------------------------------------------------


def run_adcse(args):
    env = {**os.environ, "CSE_DATA_DIR": DATA, "OMP_NUM_THREADS": "2", "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.run(
        [sys.executable, os.path.join(REPO, "run_adcse.py"), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    return proc


@pytest.mark.e2e
@pytest.mark.parametrize(
    "flags",
    [
        [],
        ["--variant", "paper"],
        ["--no_adversaries"],
        ["--no_untied_dual_encoder"],
        ["--no_adversaries", "--no_untied_dual_encoder"],
    ],
    ids=["default", "paper", "no_adversaries", "no_untied_dual_encoder", "no_both"],
)
def test_run_adcse_with_each_ablation(tiny_bert, tmp_path, flags):
    out = str(tmp_path / "run")
    common = ["--model_name_or_path", tiny_bert, "--train_file", WIKI_HEAD, "--output_dir", out]
    common += ["--per_device_train_batch_size", "8", "--max_steps", "24", "--eval_steps", "12", "--logging_steps", "6"]
    common += ["--learning_rate", "1e-3", "--use_cpu", "true", "--disable_tqdm", "true", "--final_eval", "none"]
    proc = run_adcse(common + flags)
    log = proc.stdout + proc.stderr
    assert ("'num_adversaries': 64" in log) == ("--no_adversaries" not in flags)
    checkpoints = [d for d in os.listdir(out) if d.startswith("checkpoint-")]
    assert checkpoints
    for d in checkpoints:
        state = load_file(os.path.join(out, d, "model.safetensors"))
        assert any(key.startswith("momentum_backbone.") for key in state) == ("--no_untied_dual_encoder" not in flags)
        assert os.path.isfile(os.path.join(out, d, PARTS_STATE_NAME)) == ("--no_adversaries" not in flags)
    with open(os.path.join(out, "trainer_state.json")) as f:
        history = json.load(f)["log_history"]
    assert sum("eval_stsb_spearman" in entry for entry in history) == 2
    logged = [entry for entry in history if "loss" in entry]
    assert len(logged) == 4
    assert all(("adversary_share" in entry) == ("--no_adversaries" not in flags) for entry in logged)
    # The export is encoder q alone, a plain Hugging Face model evaluated on [CLS] before the head.
    with open(os.path.join(out, "cse_config.json")) as f:
        assert json.load(f)["pooler"] == "cls_before_pooler"
    with open(os.path.join(out, "run_args.json")) as f:  # the method's settings guard resumption too
        assert json.load(f)["method"]["untied_dual_encoder"] == ("--no_untied_dual_encoder" not in flags)
    exported = AutoModel.from_pretrained(out)
    assert not any("momentum" in key for key in exported.state_dict())
    sentences = ["a man plays a guitar", "the weather is cold today"]
    tok = AutoTokenizer.from_pretrained(out)
    with torch.no_grad():
        cls = exported(**tok(sentences, padding=True, return_tensors="pt")).last_hidden_state[:, 0]
    torch.testing.assert_close(CSEModel.from_pretrained(out).encode(sentences), cls, rtol=1e-5, atol=1e-6)
    # ... holding the weights of q at the best STS-B dev checkpoint
    with open(os.path.join(out, "trainer_state.json")) as f:
        best = load_file(os.path.join(json.load(f)["best_model_checkpoint"], "model.safetensors"))
    for key, value in exported.state_dict().items():
        if f"backbone.{key}" in best:
            assert torch.equal(value, best[f"backbone.{key}"]), key


def test_shipped_config_holds_the_papers_settings():
    from cse.arguments import DataArguments, ModelArguments, parse_args

    model_args, data_args, train_args, adcse_args = parse_args(
        (ModelArguments, DataArguments, CSETrainingArguments, AdCSEArguments),
        [f"{REPO}/configs/adcse_bert_base.yaml", "--output_dir", "o"],
    )
    # Sect. 4.1: bert-base-uncased, length 32, batch 64, lr 3e-5 / 3e-3, momentum 0.995 / 0.9, tau 0.05, M 64
    assert (model_args.model_name_or_path, model_args.pooler_type, model_args.mlp_only_train) == (
        "bert-base-uncased",
        "cls",
        True,
    )
    assert (data_args.max_seq_length, train_args.per_device_train_batch_size, train_args.learning_rate) == (
        32,
        64,
        3e-5,
    )
    assert (model_args.temp, train_args.eval_steps, train_args.num_train_epochs) == (0.05, 125, 1.0)
    assert (adcse_args.variant, adcse_args.num_adversaries, adcse_args.momentum) == ("released", 64, 0.995)
    assert (adcse_args.adversary_learning_rate, adcse_args.adversary_momentum) == (3e-3, 0.9)
    assert adcse_args.adversary_weight_decay == 1e-4 and adcse_args.adversaries and adcse_args.untied_dual_encoder
