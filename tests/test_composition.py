"""Composed runs (``run_cse.py --parts``, :mod:`cse.composition`): the parts' choice and flags are
checked before any work, a single part is its method's preset, and a composition's loss is the sum of
its parts' equations (float64, by hand)."""

import math
import os
import subprocess
import sys

import pytest
import torch

from cse import composition
from cse.errors import CSEUsageError
from cse.methods.mixcse import MixCSEArguments
from cse.methods.sarcse import SARCSEArguments, SARCSEModelArguments
from cse.methods.vadvcse import MLPHeadEncoder

from .conftest import REPO, SENTEVAL, WIKI_HEAD
from .vadvcse_reference import RecordingSearch, hand_objective


def argv(model_dir, out, *flags):
    return [
        "--model_name_or_path",
        model_dir,
        "--output_dir",
        str(out),
        "--train_file",
        WIKI_HEAD,
        "--max_train_samples",
        "12",
        "--per_device_train_batch_size",
        "6",
        "--senteval_data_dir",
        SENTEVAL,
        "--use_cpu",
        "true",
        "--report_to",
        "none",
        *flags,
    ]


def composed_trainer(model_dir, out, *flags):
    """The trainer ``run_cse.py`` builds for these flags (the corpus: 12 sentences of wiki1m)."""
    from transformers import set_seed

    from cse.pipeline import build_trainer

    model_args, data_args, training_args, record, arguments = composition.parse(argv(model_dir, out, *flags))
    set_seed(training_args.seed)
    model, loss, trainer_class, kwargs = record.pieces(model_args, arguments)
    return build_trainer(model_args, data_args, training_args, model, loss, trainer_class, **kwargs)


def test_docs_composition_is_generated_from_the_records():
    with open(os.path.join(REPO, "docs", "composition.md"), encoding="utf-8") as f:
        assert f.read() == composition.markdown(), "regenerate: python -m cse.composition > docs/composition.md"


@pytest.mark.parametrize(
    "parts,message",
    [
        ("mixcse,vadvcs", "unknown part 'vadvcs' in --parts; the parts are sarcse, vadvcse, adcse, mixcse, sgbert"),
        ("simcse,mixcse", "unknown part 'simcse'"),
        ("mixcse,mixcse", "--parts names mixcse twice"),
        ("vadvcse,adcse", "--parts vadvcse,adcse is not defined: AdCSE's momentum encoder would need"),
        ("mixcse,sgbert", "--parts mixcse,sgbert is not defined: SG-BERT replaces the base itself"),
        ("", "--parts names no part"),
    ],
)
def test_parts_that_cannot_run_are_refused_before_any_work(parts, message, tmp_path):
    with pytest.raises(CSEUsageError, match=f"^{message}".replace("(", r"\(").replace(")", r"\)")):
        composition.parse(argv("unused", tmp_path / "out", "--parts", parts))
    assert not (tmp_path / "out").exists()


def test_a_refusal_is_one_line_with_exit_2_and_writes_nothing(tmp_path):
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "run_cse.py", "--parts", "mixcse,adcs", "--output_dir", str(out)],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert lines[0].startswith("error: unknown part 'adcs' in --parts") and lines[1].strip().startswith("hint: ")
    assert len(lines) == 2 and not out.exists()


def test_shared_argument_names_are_namespaced_by_part(tiny_bert, tmp_path):
    parts = ["--parts", "mixcse,vadvcse"]
    with pytest.raises(CSEUsageError, match="unknown argument.*--variant"):
        composition.parse(argv(tiny_bert, tmp_path, *parts, "--variant", "paper"))
    *_, record, arguments = composition.parse(
        argv(tiny_bert, tmp_path, *parts, "--mixcse_variant", "paper", "--vadv_lambda", "0.5")
    )
    assert record.name == "vadvcse+mixcse" and arguments.parts == ["vadvcse", "mixcse"]
    assert arguments.mixcse == MixCSEArguments(variant="paper") and arguments.vadvcse.vadv_lambda == 0.5
    # the part's own checks still run, naming the part
    with pytest.raises(CSEUsageError, match="^mixcse: --mix_lambda must lie in"):
        composition.parse(argv(tiny_bert, tmp_path, *parts, "--mix_lambda", "1.5"))
    # settings that one of the other parts cannot take, before any work
    for other in ("mixcse", "sarcse"):
        with pytest.raises(CSEUsageError, match=r"^--parts \w+,\w+: --adcse_variant paper "):
            composition.parse(argv(tiny_bert, tmp_path, "--parts", f"{other},adcse", "--adcse_variant", "paper"))
    # a config file may name the parts
    config = tmp_path / "c.yaml"
    config.write_text("parts: [mixcse, vadvcse]\nmixcse_variant: paper\n")
    *_, record, arguments = composition.parse([str(config), *argv(tiny_bert, tmp_path)])
    assert arguments.parts == ["vadvcse", "mixcse"] and arguments.mixcse.variant == "paper"


def test_a_single_part_is_its_methods_preset(tmp_path):
    model_args, _, training_args, record, arguments = composition.parse(
        ["--parts", "sarcse", "--output_dir", str(tmp_path), "--alpha", "0.5"]
    )
    # run_sarcse.py's dataclasses and defaults (roberta-base, lr 1e-5), not the shared SimCSE ones
    assert record.name == "sarcse" and isinstance(model_args, SARCSEModelArguments)
    assert training_args.learning_rate == 1e-5 and arguments == SARCSEArguments(alpha=0.5)


def hand_mixcse_paper(anchors, positives, tau, lam):
    """MixCSE's L_mix as printed (both anchors), explicit loops in float64."""
    unit = lambda x: x / x.norm()  # noqa: E731
    n, total = len(anchors), 0.0
    for a, b in ((anchors, positives), (positives, anchors)):  # rows anchored at h_i, then at h'_i
        for i in range(n):
            h = unit(a[i])
            mixed = unit(lam * unit(b[i]) + (1 - lam) * unit(b[(i + 1) % n]))
            scores = [torch.dot(h, unit(b[k])) / tau for k in range(n)] + [torch.dot(h, mixed) / tau]
            total -= scores[i] - torch.logsumexp(torch.stack(scores), 0)
    return total / (2 * n)


def test_mixcse_with_vadvcse_is_both_papers_equations(no_dropout_bert, tmp_path):
    """L = L_mix (MixCSE, paper form) + lambda L_vadv (V-advCSE Eq. 10), V-advCSE's prediction over
    the batch's positives without the mixed column; float64, r the search's."""
    lam, tau, mix = 0.7, 0.5, 0.3
    trainer = composed_trainer(
        no_dropout_bert,
        tmp_path,
        *("--parts", "mixcse,vadvcse", "--mixcse_variant", "paper", "--mix_lambda", str(mix)),
        *("--vadv_lambda", str(lam), "--temp", str(tau), "--epsilon", "0.5", "--step_size", "0.5"),
    )
    model = trainer.model.double().train()
    assert isinstance(model, MLPHeadEncoder)
    trainer.vadv_loss = RecordingSearch(**trainer.vadv_loss.get_config_dict())
    inputs = trainer.data_collator([trainer.train_dataset[i] for i in range(6)])
    loss, step = trainer.training_loss(model, inputs)
    assert set(step.terms) == {"contrastive", "vadv"}
    assert {"mix_score", "loss_vadv", "perturbation_norm"} <= set(step.statistics)
    views = step.outputs["embeddings"].detach()
    contrastive = hand_mixcse_paper(views[:, 0], views[:, 1], tau, mix)
    with torch.no_grad():
        vadv = hand_objective(model, inputs, trainer.vadv_loss.r, tau, lam) - hand_objective(
            model, inputs, trainer.vadv_loss.r, tau, 0.0
        )
    # MixCSELoss computes in float32 whatever the input dtype
    assert step.terms["contrastive"].item() == pytest.approx(contrastive.item(), rel=1e-6)
    assert step.terms["vadv"].item() == pytest.approx(vadv.item(), rel=1e-6)
    assert loss.item() == pytest.approx((contrastive + vadv).item(), rel=1e-6)
    assert vadv.item() > 1e-4 * contrastive.item()  # not vacuous


@pytest.mark.e2e
def test_a_composed_run_records_its_parts_cites_every_paper_and_logs_each_terms_share(tiny_bert, tmp_path, monkeypatch):
    import json

    from cse import citations
    from cse.citations import bibtex_field

    monkeypatch.setenv("CSE_DATA_DIR", os.path.dirname(SENTEVAL))
    out = tmp_path / "run"
    flags = ["--max_steps", "2", "--logging_steps", "1", "--log_term_gradients", "true", "--final_eval", "none"]
    flags += ["--eval_strategy", "no", "--load_best_model_at_end", "false", "--save_strategy", "steps"]
    flags += ["--save_steps", "2", "--fp16", "false"]
    run = lambda parts: composition.main(argv(tiny_bert, out, "--parts", parts, *flags))  # noqa: E731
    trainer = run("mixcse,vadvcse")
    logged = trainer.state.log_history[0]
    shares = logged["term_share_contrastive"] + logged["term_share_vadv"]
    assert shares == pytest.approx(1.0) and {"mix_score", "loss_vadv"} <= set(logged)
    with open(out / "run_args.json", encoding="utf-8") as f:
        method = json.load(f)["method"]
    assert method["parts"] == ["vadvcse", "mixcse"] and method["mixcse"]["variant"] == "released"
    card = (out / "README.md").read_text(encoding="utf-8")
    assert "# V-advCSE + MixCSE sentence encoder" in card and "`vadvcse`, `mixcse`" in card
    for entry in (citations.VADVCSE, citations.MIXCSE, citations.SIMCSE):
        assert entry in card and bibtex_field(entry, "title") in card
    # stopped before its finished marker, the directory resumes only with the same parts (SARCSE's
    # would call the checkpoint incomplete, lacking its token counts: the settings are compared first)
    os.remove(out / "cse_config.json")
    with pytest.raises(CSEUsageError, match=r"other settings \(method\.parts: \['vadvcse', 'mixcse'\] -> \['sarcse'"):
        run("sarcse,mixcse")


def test_sarcse_with_vadvcse_is_eq12_over_eq10(tmp_path):
    """L = alpha (L_cont + lambda L_vadv) + beta L_R + gamma L_R+ (SARCSE's Eq. 12 over V-advCSE's
    Eq. 10), all on Z; L_R and L_R+ of the two-view forward, not of the perturbed one. float64."""
    from cse.methods.vadvcse import perturbed_word_embeddings

    from .conftest import tiny_model_dir

    model_dir = tiny_model_dir(tmp_path / "roberta", "roberta", dropout=0.0)
    alpha, beta, gamma, lam, tau = 0.5, 0.3, 0.7, 2.0, 0.5
    trainer = composed_trainer(
        model_dir,
        tmp_path / "out",
        *("--parts", "sarcse,vadvcse", "--textcnn_channels", "8", "--temp", str(tau)),
        *("--alpha", str(alpha), "--beta", str(beta), "--gamma", str(gamma), "--vadv_lambda", str(lam)),
        *("--epsilon", "0.5", "--step_size", "0.5"),
    )
    trainer.count_token_frequencies()
    model = trainer.model.double().train()
    trainer.vadv_loss = RecordingSearch(**trainer.vadv_loss.get_config_dict())
    inputs = trainer.data_collator([trainer.train_dataset[i] for i in range(6)])
    loss, step = trainer.training_loss(model, inputs)
    assert set(step.terms) == {"contrastive", "vadv", "reconstruction", "reconstruction_positive"}
    r = trainer.vadv_loss.r
    with torch.no_grad():
        views = model(**inputs)  # no dropout: the training step's Z and Z+
        recon = model.pop_reconstruction()
        per_row = trainer.reconstruction_loss(recon.target, recon.reconstruction, recon.token_ids, recon.mask)
        with perturbed_word_embeddings(model.backbone, r):
            perturbed = model(**{k: v[:, :1] for k, v in inputs.items()})[:, 0]
        assert model.pop_reconstruction() is None  # the one-view forward keeps none
    unit = lambda x: x / x.norm(dim=-1, keepdim=True)  # noqa: E731
    n = len(views)
    clean = [[torch.dot(unit(views[i, 0]), unit(views[j, 1])).item() / tau for j in range(n)] for i in range(n)]
    noisy = [[torch.dot(unit(perturbed[i]), unit(views[j, 1])).item() / tau for j in range(n)] for i in range(n)]
    l_cont = sum(-(row[i] - math.log(sum(math.exp(x) for x in row))) for i, row in enumerate(clean)) / n
    js = 0.0
    for a, b in zip(clean, noisy):
        p = [math.exp(x) / sum(math.exp(y) for y in a) for x in a]
        q = [math.exp(x) / sum(math.exp(y) for y in b) for x in b]
        m = [(pi + qi) / 2 for pi, qi in zip(p, q)]
        js += 0.5 * sum(pi * math.log(pi / mi) for pi, mi in zip(p, m))
        js += 0.5 * sum(qi * math.log(qi / mi) for qi, mi in zip(q, m))
    js /= n
    # rows alternate view 0 and view 1 of each sentence
    expected = alpha * (l_cont + lam * js) + beta * per_row[0::2].mean().item() + gamma * per_row[1::2].mean().item()
    assert step.terms["vadv"].item() == pytest.approx(alpha * lam * js, rel=1e-6)
    assert loss.item() == pytest.approx(expected, rel=1e-6)  # the losses round to float32
    assert js > 1e-6 and len(per_row) == 2 * n  # both views reconstructed (without dropout they are alike)
