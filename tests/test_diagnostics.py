"""Per-term loss diagnostics: term gradients and shares against closed forms and float64 hand
computations, the readings the papers leave open (sum = mean x d, x N exactly), no extra operator on
the steps that do not log, the run scripts' logs and run_args.json, resume refusing the other reading,
and ``python -m cse.diagnostics`` for every method."""

import dataclasses
import json
import math
import os

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import run_sarcse
import run_vadvcse
from cse import diagnostics, registry
from cse.arguments import CSETrainingArguments
from cse.encoders.mlp_head import MLPHeadEncoder
from cse.losses import InfoNCELoss
from cse.losses.reconstruction import SelfAdaptiveReconstructionLoss
from cse.losses.vadvcse import VirtualAdversarialSearch, virtual_adversarial_loss
from cse.methods.vadvcse import VAdvCSEArguments
from cse.modeling import CSEModel
from cse.resume import find_checkpoint
from cse.trainer import term_gradients

from .conftest import DATA, WIKI_HEAD, fake_checkpoint, make_sarcse_trainer, method_run, tiny_run
from .conftest import small_sarcse_args as small_args
from .vadvcse_reference import RecordingSearch, batch_of, hand_objective, vadvcse_terms


def hand_norms_and_shares(terms: dict, parameters) -> tuple[list[float], list[float]]:
    """||g_t|| by a separate autograd.grad of each term, summed in Python floats, and ||g_t|| / sum."""
    norms = []
    for value in terms.values():
        grads = torch.autograd.grad(value, parameters, retain_graph=True, allow_unused=True)
        norms.append(math.sqrt(sum(float((g.double() ** 2).sum()) for g in grads if g is not None)))
    return norms, [n / sum(norms) for n in norms]


def test_term_gradients_equal_their_closed_forms():
    """t1 = a ||w||^2 has gradient 2 a w, t2 = b c.w + 0 v has b c (and none on v): float64, exact."""
    g = torch.Generator().manual_seed(0)
    w = torch.randn(5, dtype=torch.float64, generator=g, requires_grad=True)
    v = torch.randn(3, dtype=torch.float64, generator=g, requires_grad=True)
    c = torch.randn(5, dtype=torch.float64, generator=g)
    a, b = 0.7, -2.5
    terms = {"first": a * w.pow(2).sum(), "second": b * (c * w).sum()}
    stats = term_gradients(terms, [w, v])
    n1, n2 = 2 * abs(a) * w.detach().norm().item(), abs(b) * c.norm().item()
    assert stats["term_grad_norm_first"].item() == pytest.approx(n1, rel=1e-14)
    assert stats["term_grad_norm_second"].item() == pytest.approx(n2, rel=1e-14)
    assert stats["term_share_first"].item() == pytest.approx(n1 / (n1 + n2), rel=1e-14)
    assert stats["term_share_second"].item() == pytest.approx(n2 / (n1 + n2), rel=1e-14)
    assert stats["term_second"].item() == terms["second"].item()
    # the graph is kept for the loss's own backward
    sum(terms.values()).backward()
    torch.testing.assert_close(w.grad, 2 * a * w.detach() + b * c, rtol=1e-14, atol=0)


def test_vadvcse_shares_equal_float64_hand_computation(no_dropout_bert):  # noqa: F811
    """L_cont and lambda L_vadv of the method's own code, each term's encoder gradient against Eq. 10
    written out in float64 with the search's r held fixed (tests/test_vadvcse.py's hand objective)."""
    tau, lam = 0.05, 0.5
    torch.manual_seed(0)
    encoder = MLPHeadEncoder.from_encoder(
        CSEModel.from_pretrained(no_dropout_bert, pooler_type="cls", mlp_only_train=True)
    ).double()
    inputs = batch_of(no_dropout_bert)
    search = RecordingSearch("js", "linf", sigma=1e-3, epsilon=5e-2, step_size=5e-2)
    terms, _, _ = vadvcse_terms(encoder, encoder, inputs, InfoNCELoss(tau), search, lam)
    parameters = [p for p in encoder.backbone.parameters() if p.requires_grad]
    stats = term_gradients(terms, parameters)
    cont = hand_objective(encoder, inputs, search.r, tau, lam=0.0)
    hand = {"contrastive": cont, "vadv": hand_objective(encoder, inputs, search.r, tau, lam=lam) - cont}
    norms, shares = hand_norms_and_shares(hand, parameters)
    for name, norm, share in zip(hand, norms, shares):
        # the method's logits are float32 (cse.losses.cosine_logits), amplified 1/tau-fold
        assert stats[f"term_{name}"].item() == pytest.approx(hand[name].item(), rel=1e-4)
        assert stats[f"term_grad_norm_{name}"].item() == pytest.approx(norm, rel=1e-3)
        assert stats[f"term_share_{name}"].item() == pytest.approx(share, rel=1e-3)
    assert 1e-4 < shares[1] < 0.9  # neither term negligible here: the test tells them apart


def test_sarcse_shares_equal_float64_hand_computation(tiny_roberta, tmp_path):
    """alpha L_I, beta L_R, gamma L_R+ through the trainer's own loss, at a logging step, against
    Eqs. 9-12 written out in float64 (every real token weighs 1: --plain_mse)."""
    args = small_args(alpha=0.5, beta=0.3, gamma=0.7, plain_mse=True)
    trainer = make_sarcse_trainer(tiny_roberta, tmp_path, args, log_term_gradients=True, logging_steps=1)
    trainer.model.double().train()
    trainer.state.logging_steps = 1
    batch = trainer.data_collator([trainer.train_dataset[i] for i in range(4)])
    torch.manual_seed(3)
    trainer.compute_loss(trainer.model, batch)
    logged = {name: values[-1].item() for name, values in trainer._recorded.items()}
    torch.manual_seed(3)  # the same dropout masks
    outputs = trainer.model(**batch)
    views, recon = outputs["embeddings"], outputs["reconstruction"]
    z = views.double()
    unit = z / z.pow(2).sum(-1, keepdim=True).sqrt()
    logits = unit[:, 0] @ unit[:, 1].T / 0.05
    l_i = -(logits.diagonal() - logits.exp().sum(1).log()).mean()
    squared = (recon.target - recon.reconstruction).pow(2).mean(-1)
    special = torch.isin(recon.token_ids, trainer.model.special_ids)
    real = (recon.mask.bool() & ~special).double()
    per_row = (squared * real).sum(1) / real.sum(1)
    hand = {"contrastive": 0.5 * l_i, "reconstruction": 0.3 * per_row[0::2].mean()}
    hand["reconstruction_positive"] = 0.7 * per_row[1::2].mean()
    parameters = [p for p in trainer.model.backbone.parameters() if p.requires_grad]
    norms, shares = hand_norms_and_shares(hand, parameters)
    assert set(logged) >= {f"term_share_{name}" for name in hand}
    for name, norm, share in zip(hand, norms, shares):
        assert logged[f"term_{name}"] == pytest.approx(hand[name].item(), rel=1e-5)
        assert logged[f"term_grad_norm_{name}"] == pytest.approx(norm, rel=1e-4)
        assert logged[f"term_share_{name}"] == pytest.approx(share, rel=1e-4)
    assert min(shares) > 1e-3


def test_sum_readings_are_the_mean_readings_times_d_and_n_exactly():
    """float64, d and N powers of two, so that the mean's division is exact: sum = mean x d (SARCSE's
    MSE over the hidden dimensions) and sum = mean x N (V-advCSE's F over the anchors), and the
    search finds the same r under both."""
    g = torch.Generator().manual_seed(0)
    special = [0, 1, 2]
    ids = torch.tensor([[0, 3, 4, 2], [0, 5, 2, 1]])
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]])
    x, x_rec = (torch.randn(2, 4, 8, generator=g, dtype=torch.float64) for _ in range(2))
    losses = {r: SelfAdaptiveReconstructionLoss(6, special, self_adaptive=False, reduction=r) for r in ("mean", "sum")}
    mean, summed = (losses[r](x, x_rec, ids, mask) for r in ("mean", "sum"))
    assert torch.equal(summed, mean * 8) and mean.abs().min() > 0

    clean = torch.randn(4, 6, generator=g, dtype=torch.float64)
    noise = torch.randn(4, 6, generator=g, dtype=torch.float64)
    results = {
        reduction: virtual_adversarial_loss(
            clean,
            lambda r: clean + r,
            noise,
            search=VirtualAdversarialSearch(sigma=0.1, epsilon=0.5, step_size=0.3, reduction=reduction),
        )
        for reduction in ("mean", "sum")
    }
    (r_mean, mean), (r_sum, summed) = results["mean"], results["sum"]
    assert torch.equal(r_mean, r_sum) and torch.equal(summed, mean * 4) and mean > 0
    with pytest.raises(ValueError, match="--vadv_reduction must be one of"):
        VAdvCSEArguments(vadv_reduction="max")
    with pytest.raises(ValueError, match="--vadv_reduction set, but --vadv_lambda 0"):
        VAdvCSEArguments(vadv_lambda=0.0, vadv_reduction="sum")


class OperatorCount(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += 1
        return func(*args, **(kwargs or {}))


def test_no_extra_operator_on_steps_that_do_not_log(tiny_roberta, tmp_path):
    """The same training step (loss and backward), counted operator by operator, with the flag off
    and on, at a step that does not log (step 2 of logging_steps 3) and at one that does (step 3)."""
    counts = {}
    for flag_on in (False, True):
        trainer = make_sarcse_trainer(
            tiny_roberta, tmp_path / str(flag_on), log_term_gradients=flag_on, logging_steps=3
        )
        trainer.part("sarcse").count_token_frequencies(trainer)
        trainer.model.train()
        trainer.state.logging_steps = 3
        batch = trainer.data_collator([trainer.train_dataset[i] for i in range(4)])
        for step in (1, 2):  # global_step before the step: the steps numbered 2 and 3
            trainer.state.global_step = step
            torch.manual_seed(0)
            with OperatorCount() as counter:
                trainer.compute_loss(trainer.model, batch).backward()
            counts[flag_on, step + 1] = counter.count
    assert counts[True, 2] == counts[False, 2]  # no cost where nothing is logged
    assert counts[True, 3] > counts[False, 3] == counts[False, 2]  # where it logs, the term gradients run


def tiny_run_argv(model_dir, out):
    return [
        "--model_name_or_path", model_dir, "--train_file", WIKI_HEAD, "--output_dir", str(out),
        "--per_device_train_batch_size", "8", "--max_steps", "2", "--logging_steps", "1",
        "--max_train_samples", "64", "--max_seq_length", "16", "--learning_rate", "1e-3", "--use_cpu", "true",
        "--disable_tqdm", "true", "--eval_strategy", "no", "--save_strategy", "no",
        "--load_best_model_at_end", "false", "--final_eval", "none", "--report_to", "none",
        "--log_term_gradients", "true",
    ]  # fmt: skip


@pytest.mark.e2e
@pytest.mark.parametrize(
    "script,family,flags,terms,method_setting",
    [
        (run_vadvcse, "bert", ["--vadv_reduction", "sum"], ["contrastive", "vadv"], ("vadv_reduction", "sum")),
        (
            run_sarcse,
            "roberta",
            ["--textcnn_channels", "8", "--cnn_channels", "2", "--reconstruction_reduction", "sum"],
            ["contrastive", "reconstruction", "reconstruction_positive"],
            ("reconstruction_reduction", "sum"),
        ),
    ],
    ids=["vadvcse", "sarcse"],
)
def test_run_scripts_log_every_term_at_each_logging_step(
    request, tmp_path, monkeypatch, script, family, flags, terms, method_setting
):
    monkeypatch.setenv("CSE_DATA_DIR", DATA)
    model_dir = request.getfixturevalue(f"tiny_{family}")
    out = tmp_path / "run"
    script.main(tiny_run_argv(model_dir, out) + flags)
    with open(out / "trainer_state.json") as f:
        logged = [entry for entry in json.load(f)["log_history"] if "loss" in entry]
    assert len(logged) == 2  # every step logs: the logged loss is that step's, as are the terms
    for entry in logged:
        shares = [entry[f"term_share_{name}"] for name in terms]
        assert all(entry[f"term_grad_norm_{name}"] > 0 for name in terms)
        assert sum(shares) == pytest.approx(1.0, rel=1e-6)
        # the terms sum to the loss
        assert sum(entry[f"term_{name}"] for name in terms) == pytest.approx(entry["loss"], rel=1e-4)
    with open(out / "run_args.json") as f:
        assert json.load(f)["method"][method_setting[0]] == method_setting[1]


@pytest.mark.parametrize(
    "method_type,name,other",
    [(VAdvCSEArguments, "vadv_reduction", "sum"), (VAdvCSEArguments, "normalize_gradient", False)],
)
def test_resume_refuses_a_run_with_the_other_reading(tmp_path, method_type, name, other):
    out = tmp_path / "run"
    training = CSETrainingArguments(str(out), use_cpu=True, report_to=[])
    find_checkpoint(method_run(training, "vadvcse", method_type()))  # writes run_args.json
    fake_checkpoint(out / "checkpoint-2", 2)
    with pytest.raises(ValueError, match=f"method.{name}"):
        find_checkpoint(method_run(training, "vadvcse", method_type(**{name: other})))


def test_resume_refuses_the_other_reconstruction_reduction(tmp_path):
    from cse.methods.sarcse import SARCSEArguments

    out = tmp_path / "run"
    training = CSETrainingArguments(str(out), use_cpu=True, report_to=[])
    find_checkpoint(method_run(training, "sarcse", SARCSEArguments()))
    fake_checkpoint(out / "checkpoint-2", 2)
    with pytest.raises(ValueError, match="method.reconstruction_reduction: 'mean' -> 'sum'"):
        find_checkpoint(method_run(training, "sarcse", SARCSEArguments(reconstruction_reduction="sum")))


@pytest.mark.parametrize("method", registry.variant_names())
def test_diagnostics_cli_runs_every_method(request, tmp_path, method):
    """Every method and variant, run small: the table, its JSON, and shares that sum to 1 (each
    method's terms and weights are checked by hand above and in its own tests)."""
    record, _ = registry.variant(method)
    _, family, small = tiny_run(record.name)
    model_dir = request.getfixturevalue(f"tiny_{family}")
    path = tmp_path / "out.json"
    argv = ["--method", method, "--model_name_or_path", model_dir, "--train_file", WIKI_HEAD, "--use_cpu", "true"]
    argv += ["--max_train_samples", "32", "--max_seq_length", "16", "--num_batches", "2", "--batch_size", "4"]
    report = diagnostics.main(argv + small + ["--output_json", str(path)])
    with open(path) as f:
        saved = json.load(f)
    assert saved["terms"] == report["terms"] and saved["environment"]["precision"] == "fp32"
    assert len(saved["per_batch"]) == 2
    assert "contrastive" in report["terms"] and report["method"] == method
    assert sum(row["share"] for row in report["terms"].values()) == pytest.approx(1.0, rel=1e-6)
    for row in report["terms"].values():
        if row["raw"] is not None:
            assert row["weighted"] == pytest.approx(row["raw"] * row["weight"], rel=1e-12)
    if method == "vadvcse":
        assert report["vadv"]["independent"] > report["vadv"]["shared"] > 0
        assert report["vadv"]["perturbation_norm"] > 0
    assert not os.path.exists("trainer_output")


def test_diagnostics_of_a_composition_divide_out_each_parts_weight(tiny_roberta, tmp_path):
    """``--parts sarcse,vadvcse``: Eq. 12's alpha scales InfoNCE and V-advCSE's lambda L_vadv alike
    (weights alpha and alpha lambda), beta and gamma weigh L_R and L_R+; the raw values are the
    weighted ones over those products, and V-advCSE's F readings come with the composition."""
    alpha, beta, gamma, lam = 0.5, 0.3, 0.7, 4.0
    argv = ["--parts", "sarcse,vadvcse", "--model_name_or_path", tiny_roberta, "--train_file", WIKI_HEAD]
    argv += ["--use_cpu", "true", "--max_train_samples", "32", "--max_seq_length", "16", "--num_batches", "1"]
    argv += ["--batch_size", "4", "--textcnn_channels", "8", "--cnn_channels", "2", "--alpha", str(alpha)]
    argv += ["--beta", str(beta), "--gamma", str(gamma), "--vadv_lambda", str(lam)]
    report = diagnostics.main(argv)
    weights = {name: row["weight"] for name, row in report["terms"].items()}
    expected = {"contrastive": alpha, "vadv": alpha * lam, "reconstruction": beta, "reconstruction_positive": gamma}
    assert weights == pytest.approx(expected, rel=1e-12)
    for name, row in report["terms"].items():
        assert row["raw"] * expected[name] == pytest.approx(row["weighted"], rel=1e-12)
    assert report["method"] == "sarcse+vadvcse" and set(report["vadv"]) >= {"independent", "shared"}


@pytest.mark.parametrize("argv", [[], ["--method", "simcse", "--parts", "mixcse"]], ids=["neither", "both"])
def test_diagnostics_need_a_method_or_a_composition(argv, capsys):
    from cse.errors import run_cli

    with pytest.raises(SystemExit) as stop:
        run_cli(diagnostics.main, argv)
    assert stop.value.code == 2 and capsys.readouterr().err.startswith("error: ")


def test_diagnostics_help_lists_every_flag_it_takes(capsys):
    """``--help`` names this command's own flags, each with its help, and says whose the others are."""
    with pytest.raises(SystemExit) as stop:
        diagnostics.main(["--help"])
    assert stop.value.code == 0
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps lines at the terminal's width
    for flag in ("--method", "--parts", "--num_batches", "--batch_size", "--output_json"):
        assert f"{flag} " in text
    for field in dataclasses.fields(diagnostics.DiagnosticsArguments):
        assert field.metadata["help"] in text
    assert "Training batches to average over. Default: 1." in text and "Sentences per batch. Default: 32." in text
    assert "Every other flag is the method's run script's (python run_<method>.py --help)" in text
    assert "with --parts run_cse.py's" in text
