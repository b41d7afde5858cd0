"""Composed runs (``run_cse.py --parts``, :mod:`cse.composition`): the parts' choice and flags are
checked before any work, a single part is its method's preset, a composition's loss is the sum of
its parts' equations (float64, by hand: tests/composition_reference.py). Every pair of parts, trained
or refused, is tests/test_part_pairs.py's, generated from the registry."""

import math
import os
import re
import subprocess
import sys
from dataclasses import dataclass

import pytest
import torch

from cse import citations, composition, registry
from cse.encoders.mlp_head import MLPHeadEncoder
from cse.errors import CSEUsageError
from cse.methods.mixcse import MixCSEArguments
from cse.methods.sarcse import SARCSEArguments, SARCSEModelArguments

from .composition_reference import adversary_gradient, mean_cross_entropy, sarcse_view, softmax_rows, token_weights
from .conftest import REPO, train_argv
from .vadvcse_reference import RecordingSearch, hand_objective


def argv(model_dir, out, *flags):
    """A two-step run of 12 wiki1m sentences in batches of 6 (``flags`` may override either)."""
    return train_argv(model_dir, out, "--max_train_samples", "12", "--per_device_train_batch_size", "6", *flags)


def parsed_parts(args):
    """The parts of the run that ``run_cse.py``'s parser makes of ``args``."""
    (run,) = composition.parse(args)
    return run.parts


def parsed_record(args):
    """The record and parts of the run that ``run_cse.py``'s parser makes of ``args``."""
    (run,) = composition.parse(args)
    return run.record, run.parts


def composed_trainer(model_dir, out, *flags):
    """The trainer ``run_cse.py`` builds for these flags (the corpus: 12 sentences of wiki1m)."""
    from transformers import set_seed

    from cse.build import build
    from cse.pipeline import build_trainer

    (run,) = composition.parse(argv(model_dir, out, *flags))
    set_seed(run.training_args.seed)
    model, loss = build(list(run.parts), run.model_args)
    return build_trainer(run, model, loss)


def test_docs_composition_is_generated_from_the_records():
    with open(os.path.join(REPO, "docs", "composition.md"), encoding="utf-8") as f:
        assert f.read() == composition.markdown(), "regenerate: python -m cse.listings"


@pytest.mark.parametrize(
    "parts,message",
    [
        ("mixcse,vadvcs", f"unknown part 'vadvcs' in --parts; the parts are {', '.join(registry.part_names())}"),
        ("simcse,mixcse", "unknown part 'simcse'"),
        ("mixcse,mixcse", "--parts names mixcse twice"),
        (
            "vadvcse,adcse",
            "--parts adcse,vadvcse is not defined: another encoder of the positives (AdCSE.s momentum encoder)",
        ),
        ("mixcse,sgbert", "--parts mixcse,sgbert is not defined: SG-BERT replaces the base itself"),
        ("", "--parts names no part"),
        # an empty item is a typo, never dropped
        ("mixcse,", "--parts 'mixcse,' has an empty item"),
        (",mixcse", "--parts ',mixcse' has an empty item"),
        ("mixcse,,vadvcse", "--parts 'mixcse,,vadvcse' has an empty item"),
        # a name two named parts share is spelled with its part
        ("adcse,mixcse --variant paper", "--variant is an argument of adcse and mixcse: name its part"),
        # a flag of a part not named: whose it is, not "unknown"
        ("mixcse --vadv_lambda 1", "--vadv_lambda is an argument of vadvcse, which --parts does not name"),
        ("mixcse,vadvcse --adcse_variant paper", "--adcse_variant is an argument of adcse, which"),
        # given twice: neither would say which it meant
        ("mixcse --parts vadvcse", "--parts given 2 times (mixcse, vadvcse)"),
        (
            "mixcse,vadvcse --mixcse_mix_lambda 0.2 --mix_lambda 0.3",
            "--mixcse_mix_lambda and --mix_lambda both set mixcse's mix_lambda",
        ),
    ],
)
def test_parts_that_cannot_run_are_refused_before_any_work(parts, message, tmp_path):
    names, *flags = parts.split(" ") if parts else [""]
    with pytest.raises(CSEUsageError, match=f"^{message}".replace("(", r"\(").replace(")", r"\)")):
        composition.parse(argv("unused", tmp_path / "out", "--parts", names, *flags))
    assert not (tmp_path / "out").exists()


def test_a_config_key_two_named_parts_share_is_refused_naming_the_file(tmp_path):
    """The MixCSE config's ``variant`` key in a run with AdCSE, whose flags have a ``variant`` too: the
    refusal names the file and its key, not a flag the command does not hold."""
    config = os.path.join(REPO, "configs", "mixcse_bert_base.yaml")
    message = f"{config}: the key variant is an argument of adcse and mixcse: name its part"
    with pytest.raises(CSEUsageError, match=re.escape(message)) as refused:
        composition.parse([config, "--parts", "mixcse,adcse", "--output_dir", str(tmp_path / "out")])
    assert refused.value.hint == "spell the key adcse_variant or mixcse_variant in a copy of the file"
    assert not (tmp_path / "out").exists()


def test_a_config_that_sets_a_part_flag_under_both_spellings_is_refused(tmp_path):
    """``mix_lambda`` and ``mixcse_mix_lambda`` in one file: neither key would say which value it meant."""
    config = tmp_path / "both.yaml"
    config.write_text("parts: mixcse,vadvcse\nmix_lambda: 0.3\nmixcse_mix_lambda: 0.4\n")
    message = f"{config}: the keys mix_lambda and mixcse_mix_lambda both set mixcse's mix_lambda"
    with pytest.raises(CSEUsageError, match=re.escape(message)):
        composition.parse([str(config), "--output_dir", str(tmp_path / "out")])
    assert not (tmp_path / "out").exists()
    # a flag overrides the file's key under either spelling, as any flag overrides its config file
    config.write_text("parts: mixcse,vadvcse\nmix_lambda: 0.3\n")
    parts = parsed_parts([str(config), "--output_dir", str(tmp_path / "out"), "--mixcse_mix_lambda", "0.2"])
    assert [part.args.mix_lambda for part in parts if part.name == "mixcse"] == [0.2]


def imported_modules(stderr: str) -> set[str]:
    """The modules ``python -X importtime`` reports loading."""
    return {line.rsplit("|", 1)[1].strip() for line in stderr.splitlines() if line.startswith("import time:")}


def test_help_without_parts_names_the_parts_before_importing_torch():
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "run_cse.py", "--help"], capture_output=True, text=True, cwd=REPO
    )
    assert proc.returncode == 0 and proc.stdout.startswith("usage: run_cse.py [CONFIG] --parts PART[,PART...]")
    assert f"docs/composition.md): {', '.join(registry.part_names())}." in proc.stdout
    assert "run_cse.py --parts mixcse --help" in proc.stdout
    modules = imported_modules(proc.stderr)
    assert "cse.parts_overview" in modules and not modules & {"torch", "transformers", "cse.registry"}
    from cse.parts_overview import PARTS

    assert list(PARTS) == registry.part_names()


@pytest.mark.e2e  # launches processes or sweeps that read the run scripts' parsers (torch)
def test_a_parts_help_puts_its_flags_first_in_both_spellings():
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "run_cse.py", "--parts", "mixcse", "--help"],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    assert lines[:2] == ["MixCSE's flags (--parts mixcse; docs/methods/mixcse.md):", "  --mixcse_variant, --variant"]
    assert lines[2].endswith("(default: released)")
    shared = lines.index("The shared flags (model, data, training):")
    assert all(not line.startswith("usage:") for line in lines[:shared])
    assert "--model_name_or_path" in proc.stdout[proc.stdout.index("The shared flags") :]
    assert "cse.pipeline" not in imported_modules(proc.stderr)  # the trainer is loaded to train, not to answer


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


def test_a_parts_flags_are_spelled_by_the_parts_named_alone(tiny_bert, tmp_path):
    """``--<part>_<name>`` in any composition; ``--<name>`` where no other named part has it, whatever
    else is registered; a name two named parts share, only with its part."""
    parts = ["--parts", "mixcse,vadvcse"]
    for spelled in ("--variant", "--mixcse_variant"):
        record, chosen = parsed_record(argv(tiny_bert, tmp_path, *parts, spelled, "paper", "--vadv_lambda", "0.5"))
        assert record.name == "mixcse+vadvcse" and [part.name for part in chosen] == ["mixcse", "vadvcse"]
        assert chosen[0].args == MixCSEArguments(variant="paper") and chosen[1].args.vadv_lambda == 0.5
    chosen = parsed_parts(argv(tiny_bert, tmp_path, *parts, "--vadvcse_vadv_lambda", "0.25"))
    assert chosen[1].args.vadv_lambda == 0.25
    for spelled in ("--no_mixcse_stop_gradient", "--no_stop_gradient"):
        chosen = parsed_parts(argv(tiny_bert, tmp_path, *parts, spelled))
        assert chosen[0].args.stop_gradient is False
    # two parts' names: each with its part
    chosen = parsed_parts(
        argv(tiny_bert, tmp_path, "--parts", "adcse,mixcse", "--adcse_variant", "released", "--mixcse_variant", "paper")
    )
    assert (chosen[0].args.variant, chosen[1].args.variant) == ("released", "paper")
    # the part's own checks still run, naming the part
    with pytest.raises(CSEUsageError, match="^mixcse: --mix_lambda must lie in"):
        composition.parse(argv(tiny_bert, tmp_path, *parts, "--mix_lambda", "1.5"))
    # settings that one of the other parts cannot take, before any work
    for other in ("mixcse", "sarcse"):
        with pytest.raises(CSEUsageError, match=r"^--parts \w+,\w+: --adcse_variant paper "):
            composition.parse(argv(tiny_bert, tmp_path, "--parts", f"{other},adcse", "--adcse_variant", "paper"))
    # a config file may name the parts, its keys spelled as the flags
    config = tmp_path / "c.yaml"
    config.write_text("parts: [vadvcse, mixcse]\nmixcse_variant: paper\nvadv_lambda: 0.5\n")
    record, chosen = parsed_record([str(config), *argv(tiny_bert, tmp_path)])
    assert record.name == "mixcse+vadvcse" and chosen[0].args.variant == "paper" and chosen[1].args.vadv_lambda == 0.5


def test_a_part_registered_later_renames_no_flag(tiny_bert, tmp_path, monkeypatch):
    """A part outside the package with a flag named like V-advCSE's ``norm`` changes nothing in a
    command that does not name it."""
    from cse.parts import Part

    @dataclass
    class NormFlags:
        norm: str = "l2"

    class Outside(Part):
        name, display_name, docs, Flags = "outside", "Outside", "docs/extending.md", NormFlags
        citation = citations.SIMCSE

    monkeypatch.setattr(registry, "_RECORDS", {record.name: record for record in registry.records()})
    registry.register(registry.MethodRecord(part=Outside))
    chosen = parsed_parts(argv(tiny_bert, tmp_path, "--parts", "mixcse,vadvcse", "--norm", "l2"))
    assert chosen[1].args.norm == "l2"
    with pytest.raises(CSEUsageError, match="--norm is an argument of outside and vadvcse: name its part"):
        composition.parse(argv(tiny_bert, tmp_path, "--parts", "outside,vadvcse", "--norm", "l2"))


def test_a_single_part_is_its_methods_preset(tmp_path):
    for alpha in ("--alpha", "--sarcse_alpha"):
        (run,) = composition.parse(["--parts", "sarcse", "--output_dir", str(tmp_path), alpha, "0.5"])
        model_args, training_args, record, parts = run.model_args, run.training_args, run.record, run.parts
        # run_sarcse.py's dataclasses and defaults (roberta-base, lr 1e-5), not the shared SimCSE ones
        assert record.name == "sarcse" and isinstance(model_args, SARCSEModelArguments)
        assert training_args.learning_rate == 1e-5 and parts[0].args == SARCSEArguments(alpha=0.5)


# SARCSE's Eq. 8 at a lambda at which the frequency weights of 12 wiki1m sentences vary
THETA, FREQ_LAMBDA = 0.1, 10.0
SARCSE_FLAGS = ("--textcnn_channels", "8", "--theta", str(THETA), "--freq_lambda", str(FREQ_LAMBDA))


def first_batch(trainer, size=6):
    return trainer.data_collator([trainer.train_dataset[i] for i in range(size)])


def move_momentum_encoder(model):
    """p apart from q (a step of Eq. 4 would do the same), so that which encoder gives which view shows."""
    with torch.no_grad():
        g = torch.Generator().manual_seed(1)
        for weight in model.momentum_backbone.parameters():
            weight.add_(0.05 * torch.randn(weight.shape, generator=g, dtype=weight.dtype))


def hand_reconstruction(trainer, backbones, inputs):
    """SARCSE's Z and L_R of each view v, encoded by ``backbones[v]`` (composition_reference.sarcse_view), f(w)
    counted on the trainer's training sentences; and the weights of the batch's real tokens."""
    tok = trainer.processing_class
    special = {tok.cls_token_id, tok.sep_token_id, tok.pad_token_id}
    weight = token_weights(trainer.train_dataset["input_ids"], special, THETA, FREQ_LAMBDA)
    model, ids, mask = trainer.model, inputs["input_ids"], inputs["attention_mask"]
    with torch.no_grad():
        views = [
            sarcse_view(backbone, model.autoencoder, ids[:, v], mask[:, v], special, weight)
            for v, backbone in enumerate(backbones)
        ]
    weights = {weight(int(w)) for w, real in zip(ids.flatten(), mask.flatten()) if real and int(w) not in special}
    return views, weights


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
    trainer.part("vadvcse").vadv_loss = RecordingSearch(**trainer.part("vadvcse").vadv_loss.get_config_dict())
    inputs = first_batch(trainer)
    loss, step = trainer.training_loss(model, inputs)
    assert set(step.terms) == {"contrastive", "vadv"}
    assert {"mix_score", "loss_vadv", "perturbation_norm"} <= set(step.statistics)
    views = step.outputs["embeddings"].detach()
    contrastive = mean_cross_entropy(softmax_rows(views[:, 0], views[:, 1], tau, "paper", mix))
    with torch.no_grad():
        vadv = hand_objective(model, inputs, trainer.part("vadvcse").vadv_loss.r, tau, lam) - hand_objective(
            model, inputs, trainer.part("vadvcse").vadv_loss.r, tau, 0.0
        )
    # MixCSELoss computes in float32 whatever the input dtype
    assert step.terms["contrastive"].item() == pytest.approx(contrastive.item(), rel=1e-6)
    assert step.terms["vadv"].item() == pytest.approx(vadv.item(), rel=1e-6)
    assert loss.item() == pytest.approx((contrastive + vadv).item(), rel=1e-6)
    assert vadv.item() > 1e-4 * contrastive.item()  # not vacuous


@pytest.mark.parametrize("variant", ["paper", "released"])
def test_adcse_with_mixcse_is_one_softmax_of_ps_positives_mixed_negatives_and_adversaries(
    variant, no_dropout_bert, tmp_path
):
    """One softmax per row (AdCSE's Eq. 5 in its released form, MixCSE's L_mix or its released code):
    h_i from q, the positives h_i+ from momentum encoder p (Eq. 3, through q's head as the released
    AdCSE shares it), MixCSE's mixed negatives behind a stop-gradient, and the M adversaries
    cos(row's anchor, n_j)/tau. The adversaries' gradient is that of the same loss at their own
    temperature (Eq. 7 ascends it). float64."""
    tau, t, mix, m = 0.5, 0.7, 0.3, 4
    trainer = composed_trainer(
        no_dropout_bert,
        tmp_path,
        *("--parts", "adcse,mixcse", "--mixcse_variant", variant, "--mix_lambda", str(mix), "--temp", str(tau)),
        *("--num_adversaries", str(m), "--adversary_temperature", str(t)),
    )
    model = trainer.model.double().train()
    move_momentum_encoder(model)
    inputs = first_batch(trainer)
    loss, step = trainer.training_loss(model, inputs)
    views = step.outputs["embeddings"]
    views.retain_grad()
    loss.backward()
    assert set(step.terms) == {"contrastive"} and {"mix_score", "adversary_share"} <= set(step.statistics)

    def embedding(backbone, view):
        """SimCSE's linear + tanh head on ``backbone``'s [CLS]: q's head, for p's [CLS] too."""
        ids, mask = inputs["input_ids"][:, view], inputs["attention_mask"][:, view]
        cls = backbone(input_ids=ids, attention_mask=mask).last_hidden_state[:, 0]
        return torch.tanh(model.backbone.pooler.dense(cls))

    with torch.no_grad():
        h, h_plus = embedding(model.backbone, 0), embedding(model.momentum_backbone, 1)
        h_plus_of_q = embedding(model.backbone, 1)
    adversaries = trainer.part("adcse").adversaries.detach().double()
    anchors = h.clone().requires_grad_(True)
    expected = mean_cross_entropy(softmax_rows(anchors, h_plus, tau, variant, mix, adversaries))
    assert loss.item() == pytest.approx(expected.item(), rel=1e-6)  # the logits are float32
    # the adversaries get the loss's gradient at their temperature t; the anchors' passes no mixture (SG)
    hand = adversary_gradient(softmax_rows(h, h_plus, t, variant, mix, adversaries), adversaries, t)
    assert (trainer.part("adcse").adversaries.grad.double() - hand).norm() <= 1e-6 * hand.norm()
    (hand_anchors,) = torch.autograd.grad(expected, anchors)
    assert (views.grad[:, 0] - hand_anchors).norm() <= 1e-6 * hand_anchors.norm()
    # not vacuous: the adversaries hold a share; the positives from q, no mixtures, or the gradient
    # through the mixtures would each give other values
    assert step.statistics["adversary_share"].item() > 0.05 and hand.norm() > 1e-3
    for other in (
        softmax_rows(h, h_plus_of_q, tau, variant, mix, adversaries),
        softmax_rows(h, h_plus, tau, None, mix, adversaries),
    ):
        assert abs(mean_cross_entropy(other).item() - expected.item()) > 1e-3 * expected.item()
    anchors = h.clone().requires_grad_(True)
    without_sg = mean_cross_entropy(softmax_rows(anchors, h_plus, tau, variant, mix, adversaries, stop_gradient=False))
    (through_mixtures,) = torch.autograd.grad(without_sg, anchors)
    assert (through_mixtures - hand_anchors).norm() > 1e-3 * hand_anchors.norm()


def test_adcse_with_sarcse_is_eq12_over_eq5_z_from_q_and_z_plus_from_p(no_dropout_roberta, tmp_path):
    """L = alpha L_adcse + beta L_R + gamma L_R+ (SARCSE's Eq. 12 over AdCSE's Eq. 5, released form):
    Z from q and Z+ from momentum encoder p, both through the one autoencoder; L_R reconstructs q's
    tokens, L_R+ p's (Eqs. 8-10). float64."""
    alpha, beta, gamma, tau = 0.5, 0.3, 0.7, 0.5
    trainer = composed_trainer(
        no_dropout_roberta,
        tmp_path,
        *("--parts", "adcse,sarcse", *SARCSE_FLAGS, "--temp", str(tau), "--num_adversaries", "4"),
        *("--alpha", str(alpha), "--beta", str(beta), "--gamma", str(gamma)),
    )
    trainer.part("sarcse").count_token_frequencies(trainer)
    model = trainer.model.double().train()
    move_momentum_encoder(model)
    inputs = first_batch(trainer)
    loss, step = trainer.training_loss(model, inputs)
    assert set(step.terms) == {"contrastive", "reconstruction", "reconstruction_positive"}
    [(z, l_r), (z_plus, l_r_plus)], weights = hand_reconstruction(
        trainer, (model.backbone, model.momentum_backbone), inputs
    )
    l_adcse = mean_cross_entropy(
        softmax_rows(z, z_plus, tau, adversaries=trainer.part("adcse").adversaries.detach().double())
    )
    assert step.terms["contrastive"].item() == pytest.approx(alpha * l_adcse.item(), rel=1e-6)
    assert step.terms["reconstruction"].item() == pytest.approx(beta * l_r.item(), rel=1e-6)
    assert step.terms["reconstruction_positive"].item() == pytest.approx(gamma * l_r_plus.item(), rel=1e-6)
    expected = alpha * l_adcse + beta * l_r + gamma * l_r_plus
    assert loss.item() == pytest.approx(expected.item(), rel=1e-6)
    # not vacuous: the adversaries hold a share, the tokens' weights differ, and view 1 through q
    # would give other positives and another L_R+
    assert step.statistics["adversary_share"].item() > 0.01 and len(weights) > 2
    assert min(beta * l_r, gamma * l_r_plus) > 1e-3 * loss.item()
    [_, (z_plus_of_q, l_r_plus_of_q)], _ = hand_reconstruction(trainer, (model.backbone, model.backbone), inputs)
    assert (z_plus - z_plus_of_q).abs().max() > 1e-3 and abs(l_r_plus - l_r_plus_of_q) > 1e-4 * l_r_plus


def test_sarcse_with_vadvcse_is_eq12_over_eq10(no_dropout_roberta, tmp_path):
    """L = alpha (L_cont + lambda L_vadv) + beta L_R + gamma L_R+ (SARCSE's Eq. 12 over V-advCSE's
    Eq. 10), all on Z; L_R and L_R+ of the two-view forward, not of the perturbed one. float64."""
    from cse.methods.vadvcse import perturbed_word_embeddings

    alpha, beta, gamma, lam, tau = 0.5, 0.3, 0.7, 2.0, 0.5
    trainer = composed_trainer(
        no_dropout_roberta,
        tmp_path,
        *("--parts", "sarcse,vadvcse", *SARCSE_FLAGS, "--temp", str(tau)),
        *("--alpha", str(alpha), "--beta", str(beta), "--gamma", str(gamma), "--vadv_lambda", str(lam)),
        *("--epsilon", "0.5", "--step_size", "0.5"),
    )
    trainer.part("sarcse").count_token_frequencies(trainer)
    model = trainer.model.double().train()
    trainer.part("vadvcse").vadv_loss = RecordingSearch(**trainer.part("vadvcse").vadv_loss.get_config_dict())
    inputs = first_batch(trainer)
    loss, step = trainer.training_loss(model, inputs)
    assert set(step.terms) == {"contrastive", "vadv", "reconstruction", "reconstruction_positive"}
    r = trainer.part("vadvcse").vadv_loss.r
    [(z, l_r), (z_plus, l_r_plus)], weights = hand_reconstruction(trainer, (model.backbone, model.backbone), inputs)
    with torch.no_grad():
        with perturbed_word_embeddings(model.backbone, r):
            perturbed = model(**{k: v[:, :1] for k, v in inputs.items()})
        assert "reconstruction" not in perturbed  # the one-view forward reconstructs nothing
        perturbed = perturbed["embeddings"][:, 0]
    unit = lambda x: x / x.norm(dim=-1, keepdim=True)  # noqa: E731
    n = len(z)
    clean = [[torch.dot(unit(z[i]), unit(z_plus[j])).item() / tau for j in range(n)] for i in range(n)]
    noisy = [[torch.dot(unit(perturbed[i]), unit(z_plus[j])).item() / tau for j in range(n)] for i in range(n)]
    l_cont = mean_cross_entropy(softmax_rows(z, z_plus, tau)).item()
    js = 0.0
    for a, b in zip(clean, noisy):
        p = [math.exp(x) / sum(math.exp(y) for y in a) for x in a]
        q = [math.exp(x) / sum(math.exp(y) for y in b) for x in b]
        m = [(pi + qi) / 2 for pi, qi in zip(p, q)]
        js += 0.5 * sum(pi * math.log(pi / mi) for pi, mi in zip(p, m))
        js += 0.5 * sum(qi * math.log(qi / mi) for qi, mi in zip(q, m))
    js /= n
    expected = alpha * (l_cont + lam * js) + beta * l_r.item() + gamma * l_r_plus.item()
    assert step.terms["vadv"].item() == pytest.approx(alpha * lam * js, rel=1e-6)
    assert step.terms["reconstruction"].item() == pytest.approx(beta * l_r.item(), rel=1e-6)
    assert step.terms["reconstruction_positive"].item() == pytest.approx(gamma * l_r_plus.item(), rel=1e-6)
    assert loss.item() == pytest.approx(expected, rel=1e-6)  # the losses round to float32
    # not vacuous (without dropout the two views, and so L_R and L_R+, are alike)
    assert js > 1e-6 and len(weights) > 2 and beta * l_r.item() > 1e-3 * loss.item()


@pytest.mark.parametrize("record", registry.records(), ids=lambda record: record.name)
def test_every_run_scripts_help_prints(record, capsys):
    """``run_<method>.py --help`` prints every flag's help, a percentage in one included."""
    with pytest.raises(SystemExit) as done:
        composition.parse(["--help"], preset=record)
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert "--output_dir" in out and "--learning_rate" in out
