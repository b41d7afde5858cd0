"""MixCSE: both loss forms against float64 hand computations (default and each Table 3 ablation),
the stop-gradient against a loss whose mixed negatives are constants, two CPU processes against one,
the largest-angle analysis, and ``run_mixcse.py`` end to end with each flag."""

import json
import math
import os
import re
import subprocess

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModel, AutoTokenizer

import run_mixcse
from cse.arguments import CSETrainingArguments, DataArguments, ModelArguments, parse_args
from cse.data import TwoViewCollator
from cse.evaluation import SentEvalSuite
from cse.losses.mixcse import MixCSELoss
from cse.methods.mixcse import MixCSE, MixCSEArguments
from cse.modeling import CSEModel
from cse.results import load_paper_results

from .conftest import DATA, REPO, SENTEVAL, WIKI_HEAD, fake_tools, preset_trainer, torchrun
from .mixcse_ddp_worker import CONFIGS

ABLATIONS = {"default": {}, "single": {"single": True}, "no_sg": {"stop_gradient": False}}


def embeddings(n=6, d=5, seed=3):
    """Two views with norms far from 1 (the released form mixes raw vectors, the paper unit ones)."""
    g = torch.Generator().manual_seed(seed)
    scale = torch.linspace(0.3, 4.0, n)[:, None]
    return torch.randn(n, d, generator=g) * scale, torch.randn(n, d, generator=g) * scale.flip(0)


# --- float64 hand computations, term by term -------------------------------------------------


def dot(a, b):
    return sum(x * y for x, y in zip(a, b))


def unit(a):
    norm = math.sqrt(dot(a, a))
    return [x / norm for x in a]


def cos(a, b):
    return dot(unit(a), unit(b))


def mixture(x, i, lam):
    """lambda x_i + (1 - lambda) x_{i+1 mod n}."""
    nxt = x[(i + 1) % len(x)]
    return [lam * a + (1 - lam) * b for a, b in zip(x[i], nxt)]


def cross_entropy(logits, label):
    return -logits[label] + math.log(sum(math.exp(v) for v in logits))


def hand_released(z1, z2, tau, lam, single):
    """The authors' N x 3N logits: [cos(z1_i, z2_k)], [cos(z1_i, m_k)] with (i, i-1) set to 0,
    [cos(w_i, z2_k)] with (i, i+1) set to 0; m, w mixtures of the raw vectors. Returns the loss and
    the mean mixed score (the blocks' diagonals)."""
    z1, z2 = z1.double().tolist(), z2.double().tolist()
    n = len(z1)
    m = [mixture(z2, k, lam) for k in range(n)]
    w = [mixture(z1, i, lam) for i in range(n)]
    total, mixed = 0.0, []
    for i in range(n):
        logits = [cos(z1[i], z2[k]) / tau for k in range(n)]
        logits += [0.0 if k == (i - 1) % n else cos(z1[i], m[k]) / tau for k in range(n)]
        mixed.append(cos(z1[i], m[i]) / tau)
        if not single:
            logits += [0.0 if k == (i + 1) % n else cos(w[i], z2[k]) / tau for k in range(n)]
            mixed.append(cos(w[i], z2[i]) / tau)
        total += cross_entropy(logits, i)
    return total / n, sum(mixed) / len(mixed)


def hand_paper(z1, z2, tau, lam, single):
    """L_mix as printed, on unit vectors, averaged over the 2N anchors h_i and h'_i; the mixed
    negative of h_i is unit(lambda h'_i + (1 - lambda) h'_{i+1}), that of h'_i the same of h."""
    h = [unit(v) for v in z1.double().tolist()]
    hp = [unit(v) for v in z2.double().tolist()]
    n = len(h)
    total, mixed = 0.0, []
    for i in range(n):
        score = dot(h[i], unit(mixture(hp, i, lam))) / tau
        total += cross_entropy([dot(h[i], hp[k]) / tau for k in range(n)] + [score], i)
        mixed.append(score)
        reverse = [dot(hp[i], h[k]) / tau for k in range(n)]
        if not single:
            score = dot(hp[i], unit(mixture(h, i, lam))) / tau
            reverse.append(score)
            mixed.append(score)
        total += cross_entropy(reverse, i)
    return total / (2 * n), sum(mixed) / len(mixed)


HAND = {"released": hand_released, "paper": hand_paper}


@pytest.mark.parametrize("ablation", list(ABLATIONS))
@pytest.mark.parametrize("form", ["released", "paper"])
@pytest.mark.parametrize("tau,lam", [(0.05, 0.2), (0.5, 0.35)])
def test_loss_and_scores_equal_float64_hand_computation(form, ablation, tau, lam):
    z1, z2 = embeddings()
    loss_fn = MixCSELoss(temperature=tau, mix_lambda=lam, form=form, **ABLATIONS[ablation])
    expected, mix_score = HAND[form](z1, z2, tau, lam, ablation == "single")
    assert loss_fn(z1, z2).item() == pytest.approx(expected, rel=1e-5)
    n = len(z1)
    cosines = [[cos(a, b) / tau for b in z2.double().tolist()] for a in z1.double().tolist()]
    terms, stats = loss_fn.terms(z1, z2)
    assert list(terms) == ["contrastive"] and terms["contrastive"].item() == pytest.approx(expected, rel=1e-5)
    assert stats["positive_score"].item() == pytest.approx(sum(cosines[i][i] for i in range(n)) / n, rel=1e-5)
    negative = sum(cosines[i][j] for i in range(n) for j in range(n) if i != j) / (n * (n - 1))
    assert stats["negative_score"].item() == pytest.approx(negative, rel=1e-5, abs=1e-5)
    assert stats["mix_score"].item() == pytest.approx(mix_score, rel=1e-5, abs=1e-5)


def test_forms_differ_and_a_batch_of_two_pairs_each_row_with_the_other():
    z1, z2 = embeddings()
    released, paper = MixCSELoss(form="released")(z1, z2), MixCSELoss(form="paper")(z1, z2)
    assert abs(released.item() - paper.item()) > 1e-2
    # N = 2: each sentence's "next row" is the other one, cyclically
    for form in ("released", "paper"):
        value = MixCSELoss(temperature=0.5, form=form)(z1[:2], z2[:2]).item()
        assert value == pytest.approx(HAND[form](z1[:2], z2[:2], 0.5, 0.2, False)[0], rel=1e-5)


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="mix_lambda"):
        MixCSELoss(mix_lambda=1.0)
    with pytest.raises(ValueError, match="mix_lambda"):
        MixCSELoss(mix_lambda=-0.1)
    with pytest.raises(ValueError, match="form"):
        MixCSELoss(form="eq2")
    with pytest.raises(ValueError, match="temperature"):
        MixCSELoss(temperature=0.0)
    with pytest.raises(ValueError, match="at least 2 sentences"):
        MixCSELoss()(torch.randn(1, 4), torch.randn(1, 4))
    with pytest.raises(ValueError, match="--variant"):
        MixCSEArguments(variant="eq2")
    for bad in (1.5, -0.2, float("nan")):
        with pytest.raises(ValueError, match="--mix_lambda"):
            MixCSEArguments(mix_lambda=bad)
    # model selection through the MLP: the released code's default, only where the MLP is training-only
    cls, avg = ModelArguments(pooler_type="cls"), ModelArguments(pooler_type="avg")
    assert MixCSEArguments().selection_pooler(cls) == "cls"
    assert MixCSEArguments(variant="paper").selection_pooler(cls) is None
    assert MixCSEArguments(select_with_mlp=False).selection_pooler(cls) is None
    assert MixCSEArguments(variant="paper", select_with_mlp=True).selection_pooler(cls) == "cls"
    assert MixCSEArguments().selection_pooler(avg) is None
    with pytest.raises(ValueError, match="--select_with_mlp needs"):
        MixCSEArguments(select_with_mlp=True).selection_pooler(avg)


# --- the stop-gradient -----------------------------------------------------------------------


def reference_loss(z1, z2, tau, lam, form, mixed_from):
    """Each form in float64 with explicit formulas; the mixed negatives are built by ``mixed_from``
    (x -> the rows to mix), which returns constants or live tensors."""

    def cosines(a, b):
        return (a @ b.T) / (a.norm(dim=1)[:, None] * b.norm(dim=1)[None, :]) / tau

    def mixed(x):
        y = mixed_from(x)
        return lam * y + (1 - lam) * torch.cat([y[1:], y[:1]])

    n = z1.shape[0]
    labels = torch.arange(n)
    s = cosines(z1, z2)
    if form == "released":
        keep2 = torch.ones(n, n, dtype=torch.float64)
        keep3 = torch.ones(n, n, dtype=torch.float64)
        for i in range(n):
            keep2[i, (i - 1) % n] = 0.0
            keep3[i, (i + 1) % n] = 0.0
        logits = torch.cat([s, cosines(z1, mixed(z2)) * keep2, cosines(mixed(z1), z2) * keep3], 1)
        return torch.nn.functional.cross_entropy(logits, labels)
    h, hp = z1 / z1.norm(dim=1, keepdim=True), z2 / z2.norm(dim=1, keepdim=True)
    to_h = torch.cat([s, (cosines(h, mixed(hp)).diagonal())[:, None]], 1)
    to_hp = torch.cat([s.T, (cosines(hp, mixed(h)).diagonal())[:, None]], 1)
    ce = torch.nn.functional.cross_entropy
    return (ce(to_h, labels) + ce(to_hp, labels)) / 2


def gradients(loss_fn, z1, z2):
    a, b = z1.clone().requires_grad_(True), z2.clone().requires_grad_(True)
    loss_fn(a, b).backward()
    return a.grad, b.grad


@pytest.mark.parametrize("form", ["released", "paper"])
def test_stop_gradient_blocks_exactly_the_mixed_negatives_path(form):
    z1, z2 = (z.double() for z in embeddings())
    tau, lam = 0.5, 0.2

    def constants(x):  # the mixture's inputs as fixed numbers, cut from z1, z2
        return x.detach().clone()

    def live(x):
        return x

    grad_sg = gradients(MixCSELoss(tau, lam, form=form), z1, z2)
    grad_const = gradients(lambda a, b: reference_loss(a, b, tau, lam, form, constants), z1, z2)
    grad_no_sg = gradients(MixCSELoss(tau, lam, form=form, stop_gradient=False), z1, z2)
    grad_live = gradients(lambda a, b: reference_loss(a, b, tau, lam, form, live), z1, z2)
    for ours, constant, no_sg, through in zip(grad_sg, grad_const, grad_no_sg, grad_live):
        # the losses are computed in float32
        torch.testing.assert_close(ours, constant, rtol=1e-4, atol=1e-6)
        torch.testing.assert_close(no_sg, through, rtol=1e-4, atol=1e-6)
        # without the stop-gradient, gradient reaches the embeddings through the mixtures too
        assert (no_sg - ours).abs().max() > 1e-3


# --- two processes against one -------------------------------------------------------------------


@pytest.mark.e2e
def test_two_processes_equal_one_process_on_the_concatenated_batch(tmp_path):
    """Rank 0 holds rows 0-3, rank 1 rows 4-7; "next row" runs over the gathered global batch (row 3
    mixes with row 4, row 7 with row 0), so every process computes the single-process loss."""
    z1, z2 = embeddings(n=8, d=6, seed=7)
    save_file({"anchors": z1, "positives": z2}, str(tmp_path / "batch.safetensors"))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = torchrun("mixcse_ddp_worker.py", 29611, str(tmp_path / "batch.safetensors"), str(tmp_path))
    proc = subprocess.run(cmd, env=env, timeout=300, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    ranks = [load_file(str(tmp_path / f"rank{r}.safetensors")) for r in range(2)]
    for name, kwargs in CONFIGS.items():
        loss_fn = MixCSELoss(temperature=0.1, **kwargs)
        a, b = z1.clone().requires_grad_(True), z2.clone().requires_grad_(True)
        terms, statistics = loss_fn.terms(a, b)
        loss = terms["contrastive"]
        loss.backward()
        for r, result in enumerate(ranks):
            torch.testing.assert_close(result[f"{name}.loss"][0], loss.detach(), rtol=1e-6, atol=1e-6)
            for stat, value in statistics.items():
                torch.testing.assert_close(result[f"{name}.{stat}"][0], value, rtol=1e-6, atol=1e-6)
            rows = slice(4 * r, 4 * r + 4)
            torch.testing.assert_close(result[f"{name}.anchors_grad"], a.grad[rows], rtol=1e-5, atol=1e-7)
            torch.testing.assert_close(result[f"{name}.positives_grad"], b.grad[rows], rtol=1e-5, atol=1e-7)
    # not vacuous: each half alone, mixing within itself, gives another loss
    half = MixCSELoss(temperature=0.1)(z1[:4], z2[:4])
    assert abs(half.item() - ranks[0]["released_default.loss"].item()) > 1e-3


# --- the largest angle from the evaluation's own embeddings -----------------------------------


def widest_angle(x):
    """The largest angle (degrees) over every pair of rows, in float64."""
    x = x.double().numpy()
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return np.degrees(np.arccos(np.clip(x @ x.T, -1.0, 1.0))).max()


def make_trainer(model_dir, tmp_path, train_dataset=None, selection_pooler=None, **args):
    tok = AutoTokenizer.from_pretrained(model_dir)
    part = MixCSE()
    part.selection = selection_pooler  # the model-selection pooler (None: the model's evaluation pooler)
    return preset_trainer(
        part,
        model=CSEModel.from_pretrained(model_dir, pooler_type="cls", mlp_only_train=True),
        args=CSETrainingArguments(
            output_dir=str(tmp_path),
            per_device_train_batch_size=4,
            use_cpu=True,
            report_to=[],
            load_best_model_at_end=False,
            **args,
        ),
        data_collator=TwoViewCollator(tok),
        processing_class=tok,
        train_dataset=train_dataset,
        loss=MixCSELoss(),
        senteval_data_dir=SENTEVAL,
    )


def test_a_last_batch_of_one_sentence_is_refused_before_training(tiny_bert, tmp_path):
    sentences = [{"input_ids": [101, 2000 + i, 102]} for i in range(9)]  # 4 + 4 + 1
    with pytest.raises(ValueError, match="last batch of one sentence"):
        make_trainer(tiny_bert, tmp_path, train_dataset=sentences)
    make_trainer(tiny_bert, tmp_path, train_dataset=sentences, dataloader_drop_last=True)
    make_trainer(tiny_bert, tmp_path, train_dataset=sentences[:8])


@pytest.mark.e2e
@pytest.mark.parametrize("selection_pooler", [None, "cls"])
def test_largest_angle_comes_from_the_stsb_dev_embeddings_of_the_one_encoding_pass(
    tiny_bert, tmp_path, selection_pooler
):
    tok = AutoTokenizer.from_pretrained(tiny_bert)
    trainer = make_trainer(tiny_bert, tmp_path, selection_pooler=selection_pooler)
    calls = []
    encode = trainer.encode
    trainer.encode = lambda sentences, **kwargs: calls.append(len(sentences)) or encode(sentences, **kwargs)
    metrics = trainer.evaluate()
    suite = trainer.eval_dataset
    assert calls == [len(suite)]  # STS-B dev and SICK-R trial, encoded once
    assert {"eval_stsb_spearman", "eval_sickr_spearman", "eval_avg_sts"} < set(metrics)
    # independently: the STS-B dev sentences (both columns, SICK-R trial left out) through the backbone
    stsb = suite.datasets["STSBenchmark"]["dev"]
    sentences = sorted(set(stsb.sentences1 + stsb.sentences2))
    assert len(sentences) < len(suite)
    with torch.no_grad():
        out = trainer.model.backbone.eval()(**tok(sentences, padding=True, return_tensors="pt"))
    before_mlp, with_mlp = widest_angle(out.last_hidden_state[:, 0]), widest_angle(out.pooler_output)
    # a random encoder's [CLS] crowd in a narrow cone, but the two poolers are told apart
    assert abs(before_mlp - with_mlp) > 0.05
    expected = with_mlp if selection_pooler == "cls" else before_mlp
    assert metrics["eval_stsb_largest_angle"] == pytest.approx(expected, abs=1e-4)
    # any other suite (the final evaluation) uses the exported pooler, [CLS] before the MLP
    final = trainer.senteval(SentEvalSuite("sts", "dev", SENTEVAL))
    assert final["analysis"]["stsb_largest_angle"] == pytest.approx(before_mlp, abs=1e-4)


# --- run_mixcse.py ----------------------------------------------------------------------------


@pytest.mark.e2e
@pytest.mark.parametrize(
    "flags",
    [[], ["--variant", "paper", "--single"], ["--no_stop_gradient", "--mix_lambda", "0.3"]],
    ids=["default", "paper_single", "no_stop_gradient_lambda"],
)
def test_run_mixcse_with_each_flag(tiny_bert, tmp_path, monkeypatch, flags):
    monkeypatch.setenv("CSE_DATA_DIR", DATA)
    out = str(tmp_path / "run")
    args = ["--model_name_or_path", tiny_bert, "--train_file", WIKI_HEAD, "--max_train_samples", "256"]
    args += ["--per_device_train_batch_size", "8", "--max_steps", "24", "--eval_steps", "24", "--logging_steps", "8"]
    args += ["--learning_rate", "1e-3", "--use_cpu", "true", "--disable_tqdm", "true", "--final_eval", "none"]
    trainer = run_mixcse.main([*args, "--output_dir", out, *flags])
    assert trainer.loss_fn.get_config_dict() == {
        "temperature": 0.05,
        "mix_lambda": 0.3 if "--mix_lambda" in flags else 0.2,
        "form": "paper" if "--variant" in flags else "released",
        "single": "--single" in flags,
        "stop_gradient": "--no_stop_gradient" not in flags,
        "gather_across_devices": True,
    }
    with open(os.path.join(out, "trainer_state.json")) as f:
        history = json.load(f)["log_history"]
    logged = [entry for entry in history if "loss" in entry]
    assert len(logged) == 3
    for entry in logged:
        assert all(math.isfinite(entry[k]) for k in ("positive_score", "negative_score", "mix_score"))
    evaluations = [entry for entry in history if "eval_stsb_spearman" in entry]
    assert len(evaluations) == 1 and 0.0 <= evaluations[0]["eval_stsb_largest_angle"] <= 180.0
    with open(os.path.join(out, "run_args.json")) as f:  # the method's settings guard resumption
        method = json.load(f)["method"]
    assert (method["single"], method["stop_gradient"]) == ("--single" in flags, "--no_stop_gradient" not in flags)
    with open(os.path.join(out, "cse_config.json")) as f:
        assert json.load(f)["pooler"] == "cls_before_pooler"
    # the export is a plain AutoModel embedding with [CLS] before the MLP (the trained head is its pooler) ...
    exported, tok = AutoModel.from_pretrained(out).eval(), AutoTokenizer.from_pretrained(out)

    def exported_embeddings(sentences, with_mlp):
        with torch.no_grad():
            outputs = [
                exported(**tok(sentences[i : i + 512], padding=True, return_tensors="pt"))
                for i in range(0, len(sentences), 512)
            ]
        return torch.cat([o.pooler_output if with_mlp else o.last_hidden_state[:, 0] for o in outputs]).numpy()

    probe = ["a man plays a guitar", "the weather is cold today"]
    torch.testing.assert_close(
        CSEModel.from_pretrained(out).encode(probe).numpy(), exported_embeddings(probe, False), rtol=1e-5, atol=1e-6
    )
    if not flags:  # ... and the released variant selected it on STS-B dev through that head
        report = SentEvalSuite("sts", "dev", SENTEVAL).run(lambda sentences: exported_embeddings(sentences, True))
        # Spearman of a random tiny model moves by ~1e-3 with the float rounding of another thread count;
        # selecting without the head would differ by several points
        assert 100 * evaluations[0]["eval_stsb_spearman"] == pytest.approx(report["scores"]["STS-B"], abs=0.02)


def test_shipped_configs_hold_the_papers_settings():
    for size, lr in (("base", 3e-5), ("large", 1e-5)):
        model_args, data_args, train_args, mixcse_args = parse_args(
            (ModelArguments, DataArguments, CSETrainingArguments, MixCSEArguments),
            [f"{REPO}/configs/mixcse_bert_{size}.yaml", "--output_dir", "o"],
        )
        # Implementation Details: bert-{base,large}-uncased, tau 0.05, lambda 0.2, lr 3e-5 / 1e-5, batch 64,
        # one epoch, early stopping on STS-B dev every 125 steps (SimCSE's protocol)
        assert model_args.model_name_or_path == f"bert-{size}-uncased"
        assert (model_args.pooler_type, model_args.mlp_only_train, model_args.temp) == ("cls", True, 0.05)
        assert (train_args.learning_rate, train_args.per_device_train_batch_size) == (lr, 64)
        assert (train_args.num_train_epochs, train_args.eval_steps, data_args.max_seq_length) == (1.0, 125, 32)
        assert train_args.metric_for_best_model == "stsb_spearman" and train_args.load_best_model_at_end
        assert (mixcse_args.variant, mixcse_args.mix_lambda) == ("released", 0.2)
        assert not mixcse_args.single and mixcse_args.stop_gradient


# --- the reproduction scripts, with stand-in tools --------------------------------------------


def run_script(tmp_path, script, *args):
    env, log = fake_tools(tmp_path)
    env = {**env, "OUTPUT_DIR": str(tmp_path / "out"), "NUM_GPUS": "2", "SEEDS": "1 2"}
    proc = subprocess.run(["bash", script, *args], cwd=REPO, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return [line.split() for line in log.read_text().splitlines()] if log.exists() else [], proc.stdout


@pytest.mark.e2e  # launches processes or sweeps that read the run scripts' parsers (torch)
def test_scripts_train_each_seed_once_and_print_mean_and_std_beside_the_paper_rows(tmp_path):
    runs, printed = run_script(tmp_path, "scripts/mixcse/table1_sts.sh", "--variant", "paper")
    # per size, one run per seed, on two processes of 32 (global batch 64), the extra flags passed on
    assert [(r[6], r[r.index("--seed") + 1]) for r in runs] == [
        ("configs/mixcse_bert_base.yaml", "1"),
        ("configs/mixcse_bert_base.yaml", "2"),
        ("configs/mixcse_bert_large.yaml", "1"),
        ("configs/mixcse_bert_large.yaml", "2"),
    ]
    assert all(r[5] == "run_mixcse.py" and r[-6:-3] == ["--variant", "paper", "--output_dir"] for r in runs)
    assert all(r[-2:] == ["--per_device_train_batch_size", "32"] for r in runs)
    # one cse.results call per row, over both seeds' JSONs
    calls = [line for line in printed.splitlines() if line.startswith("python -m cse.results")]
    assert [re.findall(r"--paper_row (\w+)", c) for c in calls] == [["mixcse_bert_base"], ["mixcse_bert_large"]]
    assert [c.count("sts_test_results.json") for c in calls] == [2, 2]
    # Table 2 evaluates the same runs (same flags): nothing is trained again
    runs2, printed = run_script(tmp_path, "scripts/mixcse/table2_transfer.sh", "--variant", "paper")
    assert runs2 == runs
    assert re.findall(r"--paper_row (\w+)", printed) == ["mixcse_bert_base_transfer", "mixcse_bert_large_transfer"]
    # Table 3: three ablations per size; the full model's runs are Table 1's when the flags agree
    runs3, printed = run_script(tmp_path / "t3", "scripts/mixcse/table3_ablations.sh")
    assert [[a for a in r if a in ("--single", "--no_stop_gradient")] for r in runs3] == (
        [[]] * 2 + [["--single"]] * 2 + [["--no_stop_gradient"]] * 2
    ) * 2
    rows = re.findall(r"--paper_row (\w+)", printed)
    models = ("mixcse", "mixcse_single", "mixcse_wo_sg")
    assert rows == [f"{m}_bert_{size}_avgs" for size in ("base", "large") for m in models]
    assert all(load_paper_results()[row]["scores"].keys() == {"STS Avg.", "Transfer Avg."} for row in rows)
    assert printed.count("sts_transfer_avg.json") == 2 * len(rows)
