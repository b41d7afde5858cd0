"""V-advCSE: the divergences against float64 hand computations, the projection and the ascent, the
gradient of L = L_cont + lambda * L_vadv against a hand computation with r held fixed, bf16
autocast, two processes against one, resumption, and ``run_vadvcse.py`` end to end."""

import copy
import json
import math
import os
import subprocess

import datasets
import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file
from torch import nn
from transformers import AutoModel, AutoTokenizer, TrainerCallback

import run_vadvcse
from cse.arguments import CSETrainingArguments
from cse.data import TwoViewCollator
from cse.encoders.mlp_head import Float32BatchNorm1d, MLPHeadEncoder
from cse.losses import InfoNCELoss
from cse.losses.vadvcse import (
    VirtualAdversarialLoss,
    VirtualAdversarialSearch,
    ascent_direction,
    divergence,
    project,
    virtual_adversarial_loss,
)
from cse.methods.vadvcse import (
    VAdvCSE,
    VAdvCSEArguments,
    perturbed_word_embeddings,
    replaying_rng,
)
from cse.modeling import CSEModel
from cse.results import load_paper_results

from .conftest import DATA, REPO, SENTENCES, SENTEVAL, WIKI_HEAD, launches, preset_trainer, torchrun
from .vadvcse_reference import (
    DDP_STEP_SIZES,
    RecordingSearch,
    batch_of,
    grads,
    hand_objective,
    objective_and_gradients,
    vadvcse_loss,
)

# --- the divergences (Eqs. 11-14) ---------------------------------------------------------------


def hand_divergence(name, p_logits, q_logits):
    """Per row, explicit loops in float64."""
    out = []
    for a, b in zip(np.asarray(p_logits, np.float64), np.asarray(q_logits, np.float64)):
        p = [math.exp(x) for x in a]
        p = [x / sum(p) for x in p]
        q = [math.exp(x) for x in b]
        q = [x / sum(q) for x in q]
        kl = lambda u, v: sum(ui * math.log(ui / vi) for ui, vi in zip(u, v))  # noqa: E731
        if name == "kl":
            out.append(kl(p, q))
        elif name == "symmetric_kl":
            out.append(0.5 * (kl(p, q) + kl(q, p)))
        else:
            m = [(pi + qi) / 2 for pi, qi in zip(p, q)]
            out.append(0.5 * kl(p, m) + 0.5 * kl(q, m))
    return out


@pytest.mark.parametrize("name", ["kl", "symmetric_kl", "js"])
def test_divergences_equal_float64_hand_computation(name):
    g = torch.Generator().manual_seed(0)
    p, q = torch.randn(5, 7, generator=g) * 3, torch.randn(5, 7, generator=g) * 3
    values = divergence(name, p, q)
    assert values.dtype == torch.float64
    np.testing.assert_allclose(values.numpy(), hand_divergence(name, p, q), rtol=1e-10)
    assert (values > 0).all()
    assert divergence(name, p, p).abs().max() < 1e-15  # 0 for identical distributions (to rounding)
    if name != "kl":  # the symmetric ones
        torch.testing.assert_close(divergence(name, q, p), values)
    if name == "js":
        assert (values <= math.log(2)).all()
    # a shift of the logits is the same distribution
    assert divergence(name, p, p + 4.0).abs().max() < 1e-12


def test_divergence_resolves_perturbations_below_float32_resolution():
    g = torch.Generator().manual_seed(1)
    p = torch.randn(4, 6, generator=g) * 3
    q = p + 1e-4 * torch.randn(4, 6, generator=g)  # float32 logits, as the model gives them
    expected = hand_divergence("kl", p, q)  # ~1e-9
    np.testing.assert_allclose(divergence("kl", p, q).numpy(), expected, rtol=1e-4)
    # the same formula on float32 log-probabilities is off by far more than the value itself
    lp, lq = p.log_softmax(-1), q.log_softmax(-1)
    in_float32 = (lp.exp() * (lp - lq)).sum(-1).double().numpy()
    assert np.abs(in_float32 - expected).max() > 0.1 * max(expected)


# --- projection and ascent direction ---------------------------------------------------------------


@pytest.mark.parametrize("norm", ["l2", "linf"])
def test_projection_keeps_r_in_the_ball_and_leaves_points_inside_alone(norm):
    g = torch.Generator().manual_seed(2)
    r = torch.randn(4, 3, 5, generator=g)
    r[0] *= 1e-3  # inside the ball already
    eps = 0.5
    projected = project(r, eps, norm)
    sizes = projected.flatten(1).norm(dim=1) if norm == "l2" else projected.flatten(1).abs().amax(dim=1)
    assert (sizes <= eps * (1 + 1e-6)).all()
    assert torch.equal(projected[0], r[0])
    if norm == "l2":  # the nearest point of the ball: r scaled onto its surface
        for i in range(1, 4):
            expected = r[i] * eps / math.sqrt(float((r[i].double() ** 2).sum()))
            torch.testing.assert_close(projected[i], expected.float())
    else:
        assert torch.equal(projected, r.clamp(-eps, eps))
    direction = ascent_direction(r, norm)
    if norm == "l2":
        torch.testing.assert_close(direction.flatten(1).norm(dim=1), torch.ones(4))
    else:
        assert torch.equal(direction, r.sign())
    assert torch.equal(ascent_direction(torch.zeros(2, 3), norm), torch.zeros(2, 3))


# --- the search on a model ---------------------------------------------------------------------


def anchor_closure(encoder, inputs, candidates, tau=0.05):
    anchors = {k: v[:, :1] for k, v in inputs.items()}

    def perturbed_logits(r):
        with perturbed_word_embeddings(encoder.backbone, r):
            h = encoder(**anchors)["embeddings"][:, 0]
        return torch.nn.functional.normalize(h, dim=-1) @ torch.nn.functional.normalize(candidates, dim=-1).T / tau

    return perturbed_logits


@pytest.mark.parametrize("norm,epsilon,step", [("l2", 0.5, 0.5), ("linf", 2e-2, 2e-2)], ids=["l2", "linf"])
@pytest.mark.parametrize("name", ["kl", "symmetric_kl", "js"])
def test_ascent_raises_the_divergence_within_the_ball_and_leaves_no_parameter_gradient(
    no_dropout_bert, name, norm, epsilon, step
):
    torch.manual_seed(0)
    encoder = MLPHeadEncoder.from_encoder(
        CSEModel.from_pretrained(no_dropout_bert, pooler_type="cls", mlp_only_train=True)
    )
    inputs = batch_of(no_dropout_bert)
    mask = inputs["attention_mask"][:, 0]
    closure = anchor_closure(encoder, inputs, encoder(**inputs)["embeddings"][:, 1].detach())
    clean = closure(torch.zeros(*mask.shape, 32))  # r = 0: the clean prediction (dropout off)
    noise = torch.randn(*mask.shape, 32)
    sigma = epsilon / 100
    start = divergence(name, clean, closure(sigma * noise * mask[..., None])).mean()
    search = VirtualAdversarialSearch(divergence=name, norm=norm, sigma=sigma, epsilon=epsilon, step_size=step)
    r, loss = virtual_adversarial_loss(clean, closure, noise, mask, search)
    assert loss.item() > start.item() > 0
    assert all(p.grad is None for p in encoder.parameters())  # the search took gradients of r only
    sizes = r.flatten(1).norm(dim=1) if norm == "l2" else r.flatten(1).abs().amax(dim=1)
    assert (sizes <= epsilon * (1 + 1e-6)).all() and (sizes > epsilon / 2).all()
    assert torch.equal(r[mask == 0], torch.zeros_like(r[mask == 0]))  # padding is not perturbed


# --- L = L_cont + lambda * L_vadv, by hand ----------------------------------------------------------


def test_gradient_of_the_objective_equals_hand_computation_with_r_fixed(no_dropout_bert):
    tau, lam = 0.05, 0.5
    torch.manual_seed(0)
    # float64 weights: the logits are float32 whatever the model (cse.losses.cosine_logits), and a
    # float32 model would add its own rounding, amplified 1/tau-fold
    encoder = MLPHeadEncoder.from_encoder(
        CSEModel.from_pretrained(no_dropout_bert, pooler_type="cls", mlp_only_train=True)
    ).double()
    reference = copy.deepcopy(encoder)
    inputs = batch_of(no_dropout_bert)
    search = RecordingSearch("js", "linf", sigma=1e-3, epsilon=5e-2, step_size=5e-2)
    loss, _, stats = vadvcse_loss(encoder, encoder, inputs, InfoNCELoss(tau), search, lam)
    assert not search.clean_logits.requires_grad  # theta_hat: the clean prediction is a constant
    loss.backward()
    ours = grads(encoder)
    assert set(ours) == {n for n, p in encoder.named_parameters() if p.requires_grad}
    assert not any(n.startswith("backbone.pooler.") for n in ours)  # the unused pooling layer is frozen

    def hand_grads(**kwargs):
        reference.zero_grad(set_to_none=True)
        value = hand_objective(reference, inputs, search.r, tau, **kwargs)
        value.backward()
        return value.item(), grads(reference)

    value, expected = hand_grads(lam=lam)
    assert loss.item() == pytest.approx(value, rel=1e-5)
    assert stats["loss_vadv"].item() > 1e-3  # the adversarial term is not negligible here
    scale = max(g.abs().max().item() for g in expected.values())
    for name, g in expected.items():
        torch.testing.assert_close(ours[name], g, rtol=1e-4, atol=1e-5 * scale, msg=name)
    # not vacuous: without the adversarial term, or with a gradient through the clean prediction,
    # the gradients differ
    for kwargs in ({"lam": 0.0}, {"lam": lam, "detach_clean": False}):
        _, other = hand_grads(**kwargs)
        assert max((other[n] - expected[n]).abs().max().item() for n in expected) > 1e-2 * scale


def test_bf16_autocast(no_dropout_bert):
    torch.manual_seed(0)
    encoder = MLPHeadEncoder.from_encoder(
        CSEModel.from_pretrained(no_dropout_bert, pooler_type="cls", mlp_only_train=True)
    )
    inputs = batch_of(no_dropout_bert)
    search = RecordingSearch("js", "linf", sigma=1e-3, epsilon=1e-2, step_size=1e-2)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss, views, stats = vadvcse_loss(encoder, encoder, inputs, InfoNCELoss(0.05), search, 1.0)
    # the head runs in float32 under autocast (tests/test_speed.py: in bf16 it moved the loss curve)
    assert views.dtype == torch.float32 and search.clean_logits.dtype == torch.float32
    assert search.r.dtype == torch.float32
    mask = inputs["attention_mask"][:, 0].bool()
    # every coordinate moved by eta along a non-zero gradient sign: bf16 left no zero gradient
    assert (search.r[mask].abs() > 1e-2 - 5e-3).all() and (search.r.abs() <= 1e-2).all()
    assert torch.isfinite(loss) and stats["loss_vadv"].item() > 0
    loss.backward()
    assert all(torch.isfinite(g).all() and g.abs().max() > 0 for g in grads(encoder).values())


def test_shared_dropout_makes_the_divergence_measure_r_alone(tiny_bert):
    """Dropout on: with each forward's own masks F > 0 even at r = 0; with shared masks F is 0 at
    r = 0 and the ascent raises it above its random start, as with dropout off; the perturbed
    forwards leave the RNG stream alone (the number of steps K does not shift later draws)."""
    encoder = MLPHeadEncoder.from_encoder(CSEModel.from_pretrained(tiny_bert, pooler_type="cls", mlp_only_train=True))
    encoder.train()  # from_pretrained leaves the backbone in eval mode, dropout off
    inputs = batch_of(tiny_bert)
    noise = torch.randn(*inputs["input_ids"][:, 0].shape, 32, generator=torch.Generator().manual_seed(6))

    def l_vadv(shared, **options):
        torch.manual_seed(0)
        search = RecordingSearch("js", "linf", **options)
        _, _, stats = vadvcse_loss(
            encoder, encoder, inputs, InfoNCELoss(0.05), search, 1.0, noise=noise, shared_dropout=shared
        )
        assert not search.clean_logits.requires_grad
        return stats["loss_vadv"].item(), torch.get_rng_state()

    at_zero = dict(sigma=0.0, step_size=0.0)  # r = 0 throughout
    assert l_vadv(False, **at_zero)[0] > 1e-4  # two dropout samples disagree
    assert l_vadv(True, **at_zero)[0] < 1e-15
    ball = dict(sigma=1e-3, epsilon=2e-2)
    start, rng = l_vadv(True, step_size=0.0, **ball)
    ascended, rng_k3 = l_vadv(True, step_size=2e-2, num_steps=3, **ball)
    assert ascended > start > 0
    assert torch.equal(rng, rng_k3)
    with pytest.raises(ValueError, match="not mps"):
        replaying_rng(torch.device("mps"))


# --- combined with another method's trainer -------------------------------------------------------


def test_combined_with_mixcse_keeps_both_methods_terms_and_statistics(no_dropout_bert, tmp_path):
    """The parts of both: MixCSE's loss is the contrastive term, V-advCSE adds lambda L_vadv, and the log
    holds both methods' statistics (Fig. 4(a)'s scores by hand in float64, L_vadv, ||r||) and both
    terms (the loss is their sum)."""
    from cse.losses.mixcse import MixCSELoss
    from cse.methods.mixcse import MixCSE
    from cse.methods.vadvcse import VAdvCSE
    from cse.trainer import CSETrainer

    tau, lam = 0.05, 0.5
    vadvcse = VAdvCSE(VAdvCSEArguments(vadv_lambda=lam))
    vadvcse.vadv_loss = RecordingSearch("js", "linf", sigma=1e-3, epsilon=5e-2, step_size=5e-2)
    tok = AutoTokenizer.from_pretrained(no_dropout_bert)
    args = CSETrainingArguments(
        str(tmp_path), per_device_train_batch_size=6, use_cpu=True, report_to=[], log_term_gradients=True
    )
    trainer = CSETrainer(
        model=CSEModel.from_pretrained(no_dropout_bert, pooler_type="cls", mlp_only_train=True),
        args=args,
        data_collator=TwoViewCollator(tok),
        processing_class=tok,
        loss=MixCSELoss(temperature=tau),
        senteval_data_dir=SENTEVAL,
        parts=[MixCSE(), vadvcse],
    )
    trainer.state.logging_steps = 1  # the step logs: the terms are separated and their gradients measured
    trainer.model.train()
    batch = batch_of(no_dropout_bert)
    loss = trainer.compute_loss(trainer.model, batch)
    logged = {name: values[-1].item() for name, values in trainer._recorded.items()}
    mixcse = {"positive_score", "negative_score", "mix_score"}
    vadv = {"loss_contrastive", "loss_vadv", "perturbation_norm"}
    terms = {f"term{part}_{name}" for name in ("contrastive", "vadv") for part in ("", "_grad_norm", "_share")}
    assert set(logged) == mixcse | vadv | terms
    with torch.no_grad():
        views = trainer.model(**batch)["embeddings"].double()
    unit = views / views.norm(dim=-1, keepdim=True)
    cosines = unit[:, 0] @ unit[:, 1].T / tau
    n = len(cosines)
    assert logged["positive_score"] == pytest.approx(cosines.diagonal().mean().item(), rel=1e-5)
    negative = (cosines.sum() - cosines.diagonal().sum()) / (n * (n - 1))
    assert logged["negative_score"] == pytest.approx(negative.item(), rel=1e-5, abs=1e-5)
    assert logged["term_contrastive"] == logged["loss_contrastive"]
    assert logged["term_contrastive"] == pytest.approx(MixCSELoss(tau)(views[:, 0], views[:, 1]).item(), rel=1e-5)
    assert logged["term_vadv"] == pytest.approx(lam * logged["loss_vadv"], rel=1e-6) and logged["loss_vadv"] > 0
    assert loss.item() == pytest.approx(logged["term_contrastive"] + logged["term_vadv"], rel=1e-6)
    assert torch.all(trainer.part("vadvcse").vadv_loss.r.abs() <= 5e-2 + 1e-9) and logged["perturbation_norm"] > 0


# --- two processes ---------------------------------------------------------------------------------


@pytest.mark.e2e
@pytest.mark.parametrize("ascent", list(DDP_STEP_SIZES))
def test_two_processes_equal_one_process(no_dropout_bert, tmp_path, ascent):
    """The search's gradient comes back summed over the processes and is divided by their number: the
    normalised step does not see that scale, the raw step (``--no_normalize_gradient``) does."""
    tok = AutoTokenizer.from_pretrained(no_dropout_bert)
    encoded = tok(SENTENCES[:8], padding="max_length", max_length=12, return_tensors="pt")
    batch = {k: torch.stack([v, v], dim=1).contiguous() for k, v in encoded.items()}
    batch["noise"] = torch.randn(8, 12, 32, generator=torch.Generator().manual_seed(4))
    save_file(batch, str(tmp_path / "batch.safetensors"))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    batch_file = str(tmp_path / "batch.safetensors")
    cmd = torchrun("vadvcse_ddp_worker.py", 29631, no_dropout_bert, batch_file, str(tmp_path), ascent)
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-5000:]
    ranks = [load_file(str(tmp_path / f"rank{r}.safetensors")) for r in range(2)]
    single = objective_and_gradients(no_dropout_bert, batch, ascent=ascent)
    torch.testing.assert_close(torch.cat([ranks[0]["r"], ranks[1]["r"]]), single["r"], rtol=1e-4, atol=1e-6)
    for name in single:
        if name == "r":
            continue
        assert torch.equal(ranks[0][name], ranks[1][name]), name
        torch.testing.assert_close(ranks[0][name], single[name], rtol=1e-4, atol=1e-6, msg=name)


# --- arguments and run_vadvcse.py -------------------------------------------------------------------


def test_arguments_refuse_contradictions_and_bad_values():
    assert VAdvCSEArguments().search_options() == VirtualAdversarialLoss().get_config_dict()
    with pytest.raises(ValueError, match="--norm, --epsilon set, but --vadv_lambda 0"):
        VAdvCSEArguments(vadv_lambda=0.0, epsilon=1e-3, norm="l2")
    with pytest.raises(ValueError, match="--shared_dropout set, but --vadv_lambda 0"):
        VAdvCSEArguments(vadv_lambda=0.0, shared_dropout=True)
    VAdvCSEArguments(vadv_lambda=0.0, head="linear_tanh")  # SimCSE, Table 4's last row
    for bad in ({"vadv_lambda": -1.0}, {"divergence": "hellinger"}, {"norm": "l1"}, {"head": "bn"}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            VAdvCSEArguments(**bad)
    for bad in ({"epsilon": 0.0}, {"sigma": -1.0}, {"num_steps": 0}):
        with pytest.raises(ValueError):
            VAdvCSEArguments(**bad)


def test_mlp_head_needs_the_cls_pooler_in_training_only(tiny_bert):
    with pytest.raises(ValueError, match="MLP head follows"):
        MLPHeadEncoder.from_encoder(CSEModel.from_pretrained(tiny_bert, pooler_type="avg"))
    encoder = MLPHeadEncoder.from_encoder(CSEModel.from_pretrained(tiny_bert, pooler_type="cls", mlp_only_train=True))
    assert [type(m).__name__ for m in encoder.head] == ["Linear", "Float32BatchNorm1d", "ReLU", "Linear"]
    assert encoder.eval_pooler == "cls_before_pooler"
    assert not any(p.requires_grad for p in encoder.backbone.pooler.parameters())


@pytest.mark.e2e
@pytest.mark.parametrize(
    "family,flags",
    [
        ("bert", []),
        ("roberta", ["--divergence", "kl", "--norm", "l2", "--head", "mlp", "--epsilon", "1e-2"]),
        ("bert", ["--divergence", "symmetric_kl", "--head", "linear_tanh", "--bf16", "true", "--num_steps", "2"]),
        ("bert", ["--shared_dropout", "true", "--norm", "l2", "--epsilon", "1e-2"]),
    ],
    ids=["bert-js-linf-mlp_bn", "roberta-kl-l2-mlp", "bert-symmetric_kl-linear_tanh-bf16", "bert-shared_dropout"],
)
def test_run_vadvcse(tiny_bert, tiny_roberta, tmp_path, monkeypatch, family, flags):
    # in process: a subprocess would spend most of this test importing torch and transformers again
    monkeypatch.setenv("CSE_DATA_DIR", DATA)
    model_dir = tiny_bert if family == "bert" else tiny_roberta
    out = str(tmp_path / "run")
    common = ["--model_name_or_path", model_dir, "--train_file", WIKI_HEAD, "--output_dir", out]
    common += ["--per_device_train_batch_size", "8", "--max_steps", "24", "--eval_steps", "24", "--logging_steps", "12"]
    common += ["--learning_rate", "1e-3", "--use_cpu", "true", "--disable_tqdm", "true", "--final_eval", "none"]
    common += ["--max_train_samples", "256"]
    trainer = run_vadvcse.main(common + flags)
    with open(os.path.join(out, "trainer_state.json")) as f:
        history = json.load(f)["log_history"]
    assert sum("eval_stsb_spearman" in entry for entry in history) == 1
    logged = [entry for entry in history if "loss" in entry]
    assert len(logged) == 2
    for entry in logged:
        assert entry["loss_vadv"] > 0 and entry["perturbation_norm"] > 0
        # L = L_cont + lambda * L_vadv, lambda = 1e-6 (averaged over the logging window alike)
        assert entry["loss"] == pytest.approx(entry["loss_contrastive"] + 1e-6 * entry["loss_vadv"], rel=1e-3)
    options = trainer.part("vadvcse").vadv_loss.get_config_dict()
    assert options["divergence"] == (flags[flags.index("--divergence") + 1] if "--divergence" in flags else "js")
    assert options["norm"] == ("l2" if "l2" in flags else "linf") and trainer.part("vadvcse").args.vadv_lambda == 1e-6
    with open(os.path.join(out, "run_args.json")) as f:  # the method's settings guard resumption
        assert json.load(f)["method"]["head"] == (flags[flags.index("--head") + 1] if "--head" in flags else "mlp_bn")
    checkpoint = [d for d in os.listdir(out) if d.startswith("checkpoint-")][0]
    state = load_file(os.path.join(out, checkpoint, "model.safetensors"))
    has_bn = "--head" not in flags
    assert ("head.1.running_mean" in state) == has_bn  # the BN head and its statistics are checkpointed
    # The export: the encoder alone, a plain Hugging Face model evaluated on [CLS] before any head.
    with open(os.path.join(out, "cse_config.json")) as f:
        assert json.load(f)["pooler"] == "cls_before_pooler"
    exported = AutoModel.from_pretrained(out)
    sentences = ["a man plays a guitar", "the weather is cold today"]
    tok = AutoTokenizer.from_pretrained(out)
    with torch.no_grad():
        cls = exported(**tok(sentences, padding=True, return_tensors="pt")).last_hidden_state[:, 0]
    torch.testing.assert_close(CSEModel.from_pretrained(out).encode(sentences), cls, rtol=1e-5, atol=1e-6)


def test_batchnorm_head_refuses_one_sentence_batches(tiny_bert, tmp_path, monkeypatch):
    """The perturbed forward normalises a process's anchors alone: a batch of one would fail there."""
    tok = AutoTokenizer.from_pretrained(tiny_bert)

    def trainer(n, batch, head="mlp_bn", **args):
        model = CSEModel.from_pretrained(tiny_bert, pooler_type="cls", mlp_only_train=True)
        model = MLPHeadEncoder.from_encoder(model, batch_norm=head == "mlp_bn")
        part = VAdvCSE()
        part.vadv_loss = VirtualAdversarialLoss()
        return preset_trainer(
            part,
            model=model,
            args=CSETrainingArguments(
                output_dir=str(tmp_path), per_device_train_batch_size=batch, use_cpu=True, report_to=[], **args
            ),
            train_dataset=datasets.Dataset.from_dict(dict(tok(SENTENCES[:n]))),
            processing_class=tok,
            loss=InfoNCELoss(0.05),
            senteval_data_dir=SENTEVAL,
        )

    with pytest.raises(ValueError, match="last batch of one sentence"):
        trainer(9, 4)
    trainer(9, 4, dataloader_drop_last=True)
    trainer(9, 4, max_steps=2)  # stops before the last batch
    trainer(9, 4, head="mlp")  # no BatchNorm
    # one sentence per process: CSETrainer's check of the global batch passes at two processes
    monkeypatch.setattr(CSETrainingArguments, "world_size", property(lambda self: 2))
    with pytest.raises(ValueError, match="at least 2 sentences per device"):
        trainer(9, 1)


def rows_of(prefix):
    return [row for row in load_paper_results() if row.startswith(prefix)]


def test_table_scripts_pass_each_runs_settings(tmp_path):
    runs, printed = launches(tmp_path / "t4", "scripts/vadvcse/table4_batchnorm.sh")
    assert [(run[run.index("--head") + 1], "--vadv_lambda 0" in " ".join(run)) for run in runs] == [
        ("mlp_bn", False),
        ("linear_tanh", False),
        ("mlp_bn", True),
        ("linear_tanh", True),
    ]
    assert all(f"--paper_row {row}" in printed for row in rows_of("vadvcse_table4_"))
    runs, printed = launches(tmp_path / "t5", "scripts/vadvcse/table5_divergence.sh")
    assert [run[run.index("--divergence") + 1] for run in runs] == ["kl", "symmetric_kl", "js"]
    assert all(f"--paper_row {row}" in printed for row in rows_of("vadvcse_table5_"))
    runs, printed = launches(tmp_path / "t6", "scripts/vadvcse/table6_lambda.sh")
    lambdas = [run[run.index("--vadv_lambda") + 1] for run in runs]
    assert lambdas == ["0", "1e-6", "5e-6", "1e-5", "5e-5", "1e-4", "5e-4", "1e-3"]
    named = [f"vadvcse_table6_lambda_{lam.replace('-', 'm')}" for lam in lambdas]
    assert named == rows_of("vadvcse_table6_") and all(f"--paper_row {row}" in printed for row in named)
    runs, printed = launches(tmp_path / "t3", "scripts/vadvcse/table3_anli.sh")
    # each model's ANLI fine-tuning as soon as its training has ended
    assert [run[4] for run in runs] == ["run_vadvcse.py", "anli_eval.py", "run_simcse.py", "anli_eval.py"]
    assert "--paper_row vadvcse_anli_bert_base" in printed


@pytest.mark.parametrize("family", ["bert", "roberta"])
def test_shipped_configs_hold_the_papers_settings(family):
    from cse.arguments import DataArguments, ModelArguments, parse_args

    model_args, data_args, train_args, vadv_args = parse_args(
        (ModelArguments, DataArguments, CSETrainingArguments, VAdvCSEArguments),
        [f"{REPO}/configs/vadvcse_{family}_base.yaml", "--output_dir", "o"],
    )
    # unsupervised SimCSE's settings (SimCSE, Appendix A): BERT 64 / 3e-5, RoBERTa 512 / 1e-5
    expected = {"bert": ("bert-base-uncased", 64, 3e-5), "roberta": ("roberta-base", 512, 1e-5)}[family]
    assert (model_args.model_name_or_path, train_args.per_device_train_batch_size, train_args.learning_rate) == expected
    assert (model_args.pooler_type, model_args.mlp_only_train, model_args.temp, data_args.max_seq_length) == (
        "cls",
        True,
        0.05,
        32,
    )
    # Tables 4-6 and SMART's sigma, epsilon, eta
    assert (vadv_args.vadv_lambda, vadv_args.divergence, vadv_args.head, vadv_args.num_steps) == (
        1e-6,
        "js",
        "mlp_bn",
        1,
    )
    assert (vadv_args.norm, vadv_args.sigma, vadv_args.epsilon, vadv_args.step_size) == ("linf", 1e-5, 1e-5, 1e-3)


@pytest.mark.e2e
def test_resume_equals_an_uninterrupted_run(tiny_bert, tmp_path):
    """k steps, a checkpoint, k more from it: the model (BN statistics included) of 2k uninterrupted
    steps, so the checkpoint holds all of V-advCSE's state and r's draws resume where they stopped."""
    k = 2
    tok = AutoTokenizer.from_pretrained(tiny_bert)
    dataset = datasets.Dataset.from_dict(dict(tok(SENTENCES, truncation=True, max_length=32)))

    class StopAt(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            control.should_training_stop = state.global_step == k

    def trainer(out, callbacks=None):
        torch.manual_seed(0)
        model = MLPHeadEncoder.from_encoder(CSEModel.from_pretrained(tiny_bert, pooler_type="cls", mlp_only_train=True))
        args = CSETrainingArguments(
            output_dir=str(out),
            per_device_train_batch_size=4,
            max_steps=2 * k,
            learning_rate=1e-3,
            eval_strategy="no",
            save_strategy="steps",
            save_steps=k,
            load_best_model_at_end=False,
            use_cpu=True,
            report_to=[],
            disable_tqdm=True,
            seed=0,
        )
        part = VAdvCSE(VAdvCSEArguments(vadv_lambda=1.0))
        part.vadv_loss = VirtualAdversarialLoss(epsilon=1e-2, step_size=1e-2)
        return preset_trainer(
            part,
            model=model,
            args=args,
            train_dataset=dataset,
            data_collator=TwoViewCollator(tok),
            processing_class=tok,
            loss=InfoNCELoss(0.05),
            senteval_data_dir=SENTEVAL,
            callbacks=callbacks,
        )

    straight = trainer(tmp_path / "straight")
    straight.train()
    trainer(tmp_path / "cut", callbacks=[StopAt()]).train()
    resumed = trainer(tmp_path / "cut")
    resumed.train(resume_from_checkpoint=str(tmp_path / "cut" / f"checkpoint-{k}"))
    for (name, a), b in zip(straight.model.state_dict().items(), resumed.model.state_dict().values()):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6, msg=name)
    initial = trainer(tmp_path / "fresh").model.state_dict()["head.1.running_mean"]
    assert not torch.allclose(straight.model.state_dict()["head.1.running_mean"], initial)  # BN statistics moved


@pytest.mark.parametrize("normalize", [True, False], ids=["normalized", "raw"])
@pytest.mark.parametrize("norm", ["l2", "linf"])
def test_one_ascent_step_equals_its_closed_form(norm, normalize):
    """With perturbed logits = clean + r, example i's F_i = KL(p_i || q_i) has gradient q_i - p_i in
    r_i: Algorithm 1's step "for all x", eta g_i for each example (not eta g_i / n, the gradient of
    the batch mean), written out in float64."""
    g = torch.Generator().manual_seed(5)
    clean = torch.randn(3, 4, generator=g, dtype=torch.float64)
    noise = torch.randn(3, 4, generator=g, dtype=torch.float64)
    sigma, eps, eta = 0.3, 0.5, 0.4
    r, loss = virtual_adversarial_loss(
        clean,
        lambda r: clean + r,
        noise,
        search=VirtualAdversarialSearch(
            divergence="kl", norm=norm, sigma=sigma, epsilon=eps, step_size=eta, normalize_gradient=normalize
        ),
    )
    c, r0 = clean.numpy(), sigma * noise.numpy()
    softmax = lambda x: np.exp(x) / np.exp(x).sum(1, keepdims=True)  # noqa: E731
    grad = softmax(c + r0) - softmax(c)
    if normalize:
        step = grad / np.linalg.norm(grad, axis=1, keepdims=True) if norm == "l2" else np.sign(grad)
    else:
        step = grad
    r1 = r0 + eta * step
    if norm == "l2":
        r1 = r1 * np.minimum(1.0, eps / np.linalg.norm(r1, axis=1, keepdims=True))
    else:
        r1 = np.clip(r1, -eps, eps)
    np.testing.assert_allclose(r.numpy(), r1, rtol=1e-10)
    p, q = softmax(c), softmax(c + r1)
    assert loss.item() == pytest.approx(float(np.mean((p * np.log(p / q)).sum(1))), rel=1e-10)


def test_float32_batch_norm_is_batch_norm_and_takes_16_bit_weights():
    torch.manual_seed(0)
    ours, reference = Float32BatchNorm1d(8), nn.BatchNorm1d(8)
    with torch.no_grad():
        ours.weight.normal_(), ours.bias.normal_()
    reference.load_state_dict(ours.state_dict())
    x = torch.randn(5, 8)
    for training in (True, True, False):
        ours.train(training), reference.train(training)
        assert torch.equal(ours(x), reference(x))
    for name, value in reference.state_dict().items():
        assert torch.equal(ours.state_dict()[name], value), name
    # DeepSpeed bf16: 16-bit weights, float32 running statistics; the result is float32 BN, rounded
    ours.weight.data, ours.bias.data = ours.weight.bfloat16(), ours.bias.bfloat16()
    reference.weight.data, reference.bias.data = ours.weight.float(), ours.bias.float()
    ours.train(), reference.train()
    x = x.bfloat16()
    assert torch.equal(ours(x), reference(x.float()).bfloat16())
    torch.testing.assert_close(ours.running_mean, reference.running_mean, rtol=0, atol=0)
