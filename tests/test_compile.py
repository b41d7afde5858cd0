"""torch.compile readiness on the CPU: each method's training step (forward and loss, the function
``--torch_compile`` compiles) traces as one graph, except V-advCSE's perturbation search, whose
``torch.autograd.grad`` dynamo cannot put in a graph; a run through the real Trainer never
recompiles across train -> evaluate -> train; a second process loads the compiled graphs from
``--compile_cache_dir`` instead of compiling them again.

Graph breaks are counted with ``torch._dynamo.explain`` (it traces, it compiles nothing); the
Trainer runs use the ``aot_eager`` backend (dynamo and AOTAutograd, no kernel generation) except
the cache test, which needs inductor's own caches."""

import importlib
import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch._dynamo

from cse import registry

from .conftest import REPO, SENTEVAL, WIKI_HEAD, small_run_argv, tiny_run

# V-advCSE's search takes grad_r F with torch.autograd.grad inside the training step. Dynamo does not
# trace it (AOTAutograd cannot put a backward inside the forward graph it differentiates), so the
# step breaks there once per ascent step; the break splits each enclosing frame (training_loss,
# step_terms, the part's terms, vadv_term, VirtualAdversarialLoss.forward and the search's
# functions), which explain counts as that many breaks. --shared_dropout adds two: replaying the
# dropout masks reads and restores the RNG state (torch.get_rng_state, torch.random.fork_rng), which
# dynamo does not trace. Every other break would be a regression.
AUTOGRAD_GRAD = ("torch.autograd.grad",)
RNG_REPLAY = ("`get_rng_state`", "_GeneratorContextManager")
# Composed with V-advCSE, the same break: SARCSE's encoder adds two enclosing frames to split (its
# forward and the base class's, which the perturbed one-view forward goes through).
# (the method, or a composition's parts; flags selecting a variant of its step; graph breaks; their causes)
CASES = [
    pytest.param(("vadvcse",), (), 10, AUTOGRAD_GRAD, id="vadvcse"),
    pytest.param(
        ("vadvcse",), ("--shared_dropout", "true"), 12, AUTOGRAD_GRAD + RNG_REPLAY, id="vadvcse-shared-dropout"
    ),
    pytest.param(("adcse",), ("--variant", "paper"), 0, (), id="adcse-paper"),
    pytest.param(("mixcse",), ("--variant", "paper"), 0, (), id="mixcse-paper"),
    pytest.param(("sgbert",), ("--loss_variant", "base"), 0, (), id="sgbert-sg"),
    # composed steps: no break beyond their parts' own
    pytest.param(("adcse", "mixcse"), (), 0, (), id="adcse+mixcse"),
    pytest.param(("adcse", "sarcse"), (), 0, (), id="adcse+sarcse"),
    pytest.param(("mixcse", "vadvcse"), (), 10, AUTOGRAD_GRAD, id="mixcse+vadvcse"),
    pytest.param(("sarcse", "vadvcse"), (), 12, AUTOGRAD_GRAD, id="sarcse+vadvcse"),
]
# and every other method's own step, which has no break
STEPS = [
    pytest.param((record.name,), (), 0, (), id=record.name)
    for record in registry.records()
    if record.name not in {case.id for case in CASES}
] + CASES


def run(names, backbones, out, *flags, max_steps=1):
    """The method ``names[0]``, or the composition of the parts ``names``, run small, with ``flags``."""
    script, family, method_flags = tiny_run(*names)
    argv = small_run_argv(backbones[family], out, max_steps, "--use_cpu", "true", *method_flags, *flags)
    return importlib.import_module(script).main(argv)


@pytest.mark.e2e
@pytest.mark.parametrize("names, flags, count, causes", STEPS)
def test_training_step_has_no_graph_break(names, flags, count, causes, backbones, tmp_path):
    trainer = run(names, backbones, tmp_path / "run", *flags, "--pad_to_max_length", "true")
    batch = next(iter(trainer.get_train_dataloader()))
    trainer.model.train()
    torch._dynamo.reset()
    explained = torch._dynamo.explain(trainer.training_loss)(trainer.model, batch)
    reasons = [reason.reason for reason in explained.break_reasons]
    assert explained.graph_break_count == count, reasons
    assert all(any(cause in reason for cause in causes) for reason in reasons), reasons


@pytest.mark.e2e
@pytest.mark.parametrize("names", [("sgbert",), ("adcse", "mixcse")], ids=lambda names: "+".join(names))
def test_no_recompile_across_train_evaluate_train(backbones, tmp_path, names):
    """4 steps with an STS-B dev evaluation (and a best-checkpoint save) after step 2: with static
    shapes the step is compiled once and reused after the evaluation, a method's own step and a
    composed one (AdCSE's adversaries in MixCSE's softmax, over AdCSE's momentum encoder)."""
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    flags = [
        "--torch_compile", "true", "--torch_compile_backend", "aot_eager", "--pad_to_max_length", "true",
        "--eval_strategy", "steps", "--eval_steps", "2", "--save_strategy", "best",
        "--load_best_model_at_end", "true",
    ]  # fmt: skip
    with torch._dynamo.config.patch(error_on_recompile=True):
        trainer = run(names, backbones, tmp_path / "run", *flags, max_steps=4)
    evaluations = [entry for entry in trainer.state.log_history if "eval_stsb_spearman" in entry]
    assert [entry["step"] for entry in evaluations] == [2, 4]
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 1
    assert not torch._dynamo.utils.counters["recompiles"]


@pytest.mark.e2e
def test_recompile_detector_sees_a_shape_change(backbones, tmp_path):
    """The control: without static shapes the second batch's length differs, which is a recompile."""
    torch._dynamo.reset()
    flags = ["--torch_compile", "true", "--torch_compile_backend", "aot_eager", "--max_seq_length", "64"]
    with torch._dynamo.config.patch(error_on_recompile=True), pytest.raises(Exception, match="Recompiling"):
        run(("simcse",), backbones, tmp_path / "run", *flags, max_steps=2)


# Runs the SimCSE step once under inductor in a process of its own and prints the cache counters.
CACHE_PROBE = textwrap.dedent(
    """
    import json, sys
    import torch._dynamo.utils
    import run_simcse
    run_simcse.main(sys.argv[1:])
    counters = torch._dynamo.utils.counters
    print("COUNTERS " + json.dumps({group: dict(counters[group]) for group in ("inductor", "aot_autograd")}))
    """
)


@pytest.mark.e2e
def test_second_process_loads_the_compiled_step_from_the_cache(backbones, tmp_path):
    cache = tmp_path / "compile-cache"
    argv = [
        "--model_name_or_path", backbones["bert"], "--train_file", WIKI_HEAD, "--senteval_data_dir", SENTEVAL,
        "--max_train_samples", "8", "--max_seq_length", "16", "--pad_to_max_length", "true",
        "--per_device_train_batch_size", "8", "--max_steps", "1", "--eval_strategy", "no", "--save_strategy", "no",
        "--load_best_model_at_end", "false", "--final_eval", "none", "--report_to", "none", "--disable_tqdm", "true",
        "--use_cpu", "true", "--torch_compile", "true", "--compile_cache_dir", str(cache),
    ]  # fmt: skip
    # Only the flag may point inductor at the cache: the machine's own variable is taken away.
    env = {k: v for k, v in os.environ.items() if k != "TORCHINDUCTOR_CACHE_DIR"}
    counters = []
    for run in ("first", "second"):
        process = subprocess.run(
            [sys.executable, "-c", CACHE_PROBE, *argv, "--output_dir", str(tmp_path / run)],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
        )
        assert process.returncode == 0, process.stderr[-3000:]
        line = next(line for line in process.stdout.splitlines() if line.startswith("COUNTERS "))
        counters.append(json.loads(line.removeprefix("COUNTERS ")))
    first, second = counters
    assert first["inductor"].get("fxgraph_cache_miss", 0) > 0 and not first["inductor"].get("fxgraph_cache_hit")
    assert any((cache / "fxgraph").iterdir())
    # the forward and backward graphs (two) come back from the FX graph cache: no kernel is generated again
    assert second["inductor"].get("fxgraph_cache_hit", 0) == 2 and not second["inductor"].get("fxgraph_cache_miss")


def test_compile_cache_dir_without_torch_compile_is_refused(tmp_path):
    from cse.arguments import CSETrainingArguments
    from cse.errors import CSEUsageError

    with pytest.raises(CSEUsageError, match="--torch_compile is off"):
        CSETrainingArguments(output_dir=str(tmp_path), use_cpu=True, compile_cache_dir=str(tmp_path / "cache"))
    assert not (tmp_path / "cache").exists()
