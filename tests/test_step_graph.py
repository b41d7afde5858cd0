"""The whole training step as one function (cse.step_graph), which ``--cuda_graphs`` captures on a GPU.

On the CPU no graph is captured, but the function is the same: run eagerly at every step it trains
every method and combination exactly as the Trainer's own step does (the same parameters and logged
values, bit for bit: its gradients zeroed in place instead of set to None, its learning rates in
float64 tensors that the scheduler fills, its clipping, optimizer step and the parts' after-step
updates inside it); under torch.compile (inductor, CPU; random numbers drawn as eager draws them)
within float32 rounding, since inductor fuses and reorders the arithmetic: each weight tensor within
1e-4 of its norm (per element would not do: AdamW scales a gradient of rounding size to a full step),
plus 1e-6 for the attention key biases, whose gradient is zero but for rounding. The learning rates
in tensors are the float schedule; batches padded to the graph lengths embed as dynamic padding does;
what cannot be captured is refused, or runs eagerly with the reason said.

The captured step itself is checked on a GPU by the tests named ``cuda`` (``pytest -k cuda``).
"""

import importlib
import logging
import re

import pytest
import torch
from transformers import get_linear_schedule_with_warmup

import cse.pipeline
from cse import registry
from cse.arguments import CSETrainingArguments
from cse.data import TwoViewCollator, graph_lengths
from cse.errors import CSEUsageError
from cse.modeling import CSEModel
from cse.step_graph import TensorLearningRate

from .conftest import SENTENCES, SENTEVAL, WIKI_HEAD, refusal, small_run_argv, tiny_run

# every composition that trains, by its parts
COMPOSITIONS = [
    ("adcse", "mixcse"),
    ("mixcse", "vadvcse"),
    ("adcse", "sarcse"),
    ("mixcse", "sarcse"),
    ("sarcse", "vadvcse"),
    ("adcse", "mixcse", "sarcse"),
    ("mixcse", "sarcse", "vadvcse"),
]
RUNS = [(record.name,) for record in registry.records()] + COMPOSITIONS


def train(names, backbones, out, monkeypatch, *flags, whole_step=None, steps=3):
    """The method or composition ``names``, run small for ``steps`` steps, each a log line; with
    ``whole_step``, every step is the whole step run that way. Its weights (the parts' own tensors
    included) and log."""
    script, family, method_flags = tiny_run(*names)
    build_trainer = cse.pipeline.build_trainer

    def built(*args, **kwargs):
        trainer = build_trainer(*args, **kwargs)
        trainer.whole_step = whole_step
        return trainer

    monkeypatch.setattr(cse.pipeline, "build_trainer", built)
    argv = small_run_argv(
        backbones[family], out, steps, "--pad_to_max_length", "true", "--learning_rate", "1e-3",
        "--logging_steps", "1", "--use_cpu", "true", *method_flags, *flags,
    )  # fmt: skip
    trainer = importlib.import_module(script).main(argv)
    monkeypatch.setattr(cse.pipeline, "build_trainer", build_trainer)
    weights = {name: t.detach().clone() for name, t in trainer.model.state_dict().items()}
    for part in trainer.parts:
        weights.update({f"{part.name}.{i}": t.detach().clone() for i, t in enumerate(part.parameters())})
    logs = [
        {k: v for k, v in entry.items() if "runtime" not in k and "per_second" not in k}
        for entry in trainer.state.log_history
    ]
    return trainer, weights, logs


@pytest.mark.e2e
@pytest.mark.parametrize("names", RUNS, ids="+".join)
def test_the_whole_step_trains_exactly_as_the_trainers_step(names, backbones, tmp_path, monkeypatch):
    _, expected, expected_logs = train(names, backbones, tmp_path / "trainer", monkeypatch)
    trainer, weights, logs = train(names, backbones, tmp_path / "whole", monkeypatch, whole_step="eager")
    assert trainer.whole_step_ran and trainer.step_graphs.graphs == {}  # every step the function, no graph
    assert isinstance(trainer.lr_scheduler, TensorLearningRate)
    assert weights.keys() == expected.keys()
    differ = [name for name in expected if not torch.equal(weights[name], expected[name])]
    assert not differ, differ
    assert logs == expected_logs  # losses, gradient norms, learning rates, the parts' statistics


COMPILED = ["simcse", "adcse+mixcse"]  # every run in the long form (CSE_LONG_TESTS=1)
# Runs that torch.compile trains otherwise than eager beyond rounding, and why: their embedding is the
# [MASK] state less the same template's state with the sentence left out, two forwards whose dropout
# draws inductor may order otherwise than eager (they are independent of each other); and without
# dropout the difference of the two states, on the tiny random backbone where the sentence moves the
# [MASK] state little, is a cancellation that magnifies float32's rounding (AdamW's steps differ by up
# to 3e-3 of a weight's norm after 3 steps). Their eager whole step is the Trainer's bit for bit (above).
NOT_WITHIN_ROUNDING = {"promptbert", "cotbert"}


@pytest.mark.e2e
@pytest.mark.parametrize(
    "names",
    [
        pytest.param(names, id="+".join(names), marks=() if "+".join(names) in COMPILED else pytest.mark.slow)
        for names in RUNS
    ],
)
def test_the_compiled_whole_step_trains_as_the_trainers_step_within_rounding(names, backbones, tmp_path, monkeypatch):
    if NOT_WITHIN_ROUNDING & set(names):
        pytest.skip("the denoised [MASK] state's cancellation: see NOT_WITHIN_ROUNDING")
    torch._dynamo.reset()
    _, expected, expected_logs = train(names, backbones, tmp_path / "trainer", monkeypatch)
    compiled = ("--torch_compile", "true", "--torch_compile_backend", "inductor")
    # inductor draws dropout's random numbers its own way unless told to draw them as eager does
    with torch._inductor.config.patch(fallback_random=True):
        _, weights, logs = train(names, backbones, tmp_path / "whole", monkeypatch, *compiled, whole_step="eager")
    for name, value in expected.items():
        difference, size = (weights[name] - value).double().norm(), value.double().norm()
        assert difference <= 1e-4 * size + 1e-6, (name, difference.item(), size.item())
    for entry, expected_entry in zip(logs, expected_logs):
        for key, value in expected_entry.items():
            assert entry[key] == pytest.approx(value, rel=1e-4, abs=1e-6), key


def test_tensor_learning_rates_are_the_float_schedule():
    """Warm-up and linear decay over 20 steps: each group's lr tensor holds the float schedule's value,
    exactly (float64); the scheduler's own view (get_last_lr, state_dict) is floats, as without it."""

    def optimizer():
        g = torch.Generator().manual_seed(0)
        weights = [torch.nn.Parameter(torch.randn(3, generator=g)), torch.nn.Parameter(torch.randn(2, generator=g))]
        return torch.optim.AdamW([{"params": weights[:1]}, {"params": weights[1:], "lr": 5e-4}], lr=3e-5, fused=True)

    plain, tensors = optimizer(), optimizer()
    expected = get_linear_schedule_with_warmup(plain, 4, 20)
    scheduler = TensorLearningRate(get_linear_schedule_with_warmup(tensors, 4, 20), tensors, torch.device("cpu"))
    assert all(group["lr"].dtype == torch.float64 for group in tensors.param_groups)
    for _ in range(20):
        plain.step()
        tensors.step()
        expected.step()
        scheduler.step()
        assert [group["lr"].item() for group in tensors.param_groups] == [g["lr"] for g in plain.param_groups]
        assert scheduler.get_last_lr() == expected.get_last_lr()
        assert all(type(lr) is float for lr in scheduler.get_last_lr())  # the Trainer's log reads no tensor
    assert scheduler.state_dict() == expected.state_dict()
    for a, b in zip(plain.param_groups, tensors.param_groups):  # the optimizer's steps alike
        for p, q in zip(a["params"], b["params"]):
            assert torch.equal(p, q)


@pytest.mark.parametrize("pooler", ["cls", "cls_before_pooler", "avg", "max"])
def test_graph_lengths_pad_without_changing_an_embedding(pooler, no_dropout_bert):
    model = CSEModel.from_pretrained(no_dropout_bert, pooler_type=pooler).eval()
    features = [dict(model.tokenizer(s)) for s in SENTENCES[:5]]
    dynamic = TwoViewCollator(model.tokenizer)(features)
    padded = TwoViewCollator(model.tokenizer, lengths=[16, 12])(features)
    length = dynamic["input_ids"].shape[-1]
    assert length < 12 and padded["input_ids"].shape[-1] == 12
    assert not padded["attention_mask"][..., length:].any()
    assert (padded["input_ids"][..., length:] == model.tokenizer.pad_token_id).all()
    with torch.no_grad():
        expected, got = model(**dynamic)["embeddings"], model(**padded)["embeddings"]
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)


def test_graph_lengths_default_to_three_and_end_at_max_seq_length():
    assert graph_lengths(32) == [16, 24, 32] and graph_lengths(128) == [64, 96, 128]
    assert graph_lengths(30) == [16, 24, 30]
    assert graph_lengths(32, [32, 16]) == [16, 32]
    with pytest.raises(CSEUsageError, match="leave no length for sentences of up to --max_seq_length 32"):
        graph_lengths(32, [16, 24])
    with pytest.raises(CSEUsageError, match="pad batches beyond --max_seq_length 32, which no sentence exceeds"):
        graph_lengths(32, [16, 32, 512])


@pytest.mark.parametrize(
    "flags, message",
    [
        (
            ["--cuda_graphs", "true", "--fp16", "true", "--torch_compile_mode", "reduce-overhead"],
            "--cuda_graphs captures the training step on a CUDA device, and this run is on cpu",
        ),
        (["--cuda_graph_lengths", "16", "32"], "--cuda_graph_lengths set, but --cuda_graphs is off"),
        (["--cuda_graphs", "true", "--cuda_graph_lengths", "16", "16"], "must be distinct positive lengths"),
    ],
)
def test_what_cannot_be_captured_is_refused_before_any_work(flags, message, capsys, tmp_path):
    """On a machine without a GPU the device is the refusal, before any other setting's (the Trainer's
    own warning about reduce-overhead included): one error line and its hint, nothing written."""
    import run_simcse

    out = tmp_path / "out"
    lines = refusal(capsys, run_simcse.main, ["--output_dir", str(out), "--use_cpu", "true", *flags])
    assert lines[0].startswith("error: ") and message in lines[0] and len(lines) == 2, lines
    assert not out.exists()


CAPTURABLE = dict(
    cuda_graphs=True, cuda_graph_lengths=None, deepspeed=None, fsdp="", gradient_accumulation_steps=1,
    fp16=False, torch_compile_mode=None, optim="adamw_torch_fused", lr_scheduler_type="linear",
)  # fmt: skip


@pytest.mark.parametrize(
    "setting, message",
    [
        ({}, None),
        ({"torch_compile_mode": "max-autotune-no-cudagraphs"}, None),
        ({"world_size": 2}, "captures one process's step, and this run has 2 processes"),
        ({"deepspeed": "configs/accelerate/deepspeed_zero2.json"}, "does not capture a DeepSpeed or FSDP step"),
        ({"fsdp": "full_shard"}, "does not capture a DeepSpeed or FSDP step"),
        ({"gradient_accumulation_steps": 2}, "captures one batch a step, and --gradient_accumulation_steps is 2"),
        ({"fp16": True}, "cannot capture fp16's dynamic loss scale"),
        ({"torch_compile_mode": "reduce-overhead"}, "reduce-overhead makes CUDA graphs of its own"),
        ({"torch_compile_mode": "max-autotune"}, "max-autotune makes CUDA graphs of its own"),
        ({"optim": "adamw_torch"}, "captures fused AdamW's step, and --optim is adamw_torch"),
        ({"device": "mps"}, "captures the training step on a CUDA device, and this run is on mps"),
        ({"lr_scheduler_type": "cosine"}, None),
        ({"lr_scheduler_type": "reduce_lr_on_plateau"}, "reduce_lr_on_plateau sets it from the evaluation's"),
        ({"lr_scheduler_type": "greedy"}, "--lr_scheduler_type greedy sets it from the evaluation's metrics"),
    ],
)
def test_the_settings_a_captured_step_cannot_have_are_refused_on_a_gpu(setting, message):
    """The refusals a CUDA machine gives, each with its hint (the arguments as a GPU run has them)."""
    from types import SimpleNamespace

    from cse.arguments import check_cuda_graphs

    setting = dict(setting)
    device, world_size = setting.pop("device", "cuda"), setting.pop("world_size", 1)
    args = SimpleNamespace(**(CAPTURABLE | setting))
    if message is None:
        check_cuda_graphs(args, device, world_size)
        return
    with pytest.raises(CSEUsageError, match=re.escape(message)) as refused:
        check_cuda_graphs(args, device, world_size)
    assert refused.value.hint


def test_a_part_that_cannot_be_captured_runs_eagerly_and_says_why(tiny_bert, tmp_path, caplog):
    """The decision a CUDA run takes when the trainer is built (here with the flag set after the
    arguments' own check, which a CPU refuses)."""
    from cse.arguments import DataArguments, ModelArguments
    from cse.build import build
    from cse.methods.vadvcse import VAdvCSE, VAdvCSEArguments
    from cse.pipeline import build_trainer
    from cse.run import Run

    def trainer(parts):
        args = CSETrainingArguments(
            output_dir=str(tmp_path), use_cpu=True, report_to=[], max_steps=1, per_device_train_batch_size=8
        )
        args.cuda_graphs = True
        model_args = ModelArguments(model_name_or_path=tiny_bert)
        data_args = DataArguments(train_file=WIKI_HEAD, max_train_samples=16, senteval_data_dir=SENTEVAL)
        model, loss = build(parts, model_args)
        return build_trainer(Run(registry.get("vadvcse"), parts, model_args, data_args, args), model, loss)

    with caplog.at_level(logging.WARNING):
        shared = trainer([VAdvCSE(VAdvCSEArguments(shared_dropout=True))])
    assert shared.whole_step is None and shared.step_path.startswith("eager (V-advCSE's --shared_dropout")
    assert "--cuda_graphs: the training step runs eagerly, uncaptured: V-advCSE's --shared_dropout" in caplog.text
    plain = trainer([VAdvCSE()])
    assert plain.whole_step == "captured" and plain.step_path == "cuda graphs"
    assert not plain.accelerator.autocast_handler.cache_enabled


# --- on a GPU: the captured step ----------------------------------------------------------------

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")


def train_on_cuda(names, backbones, out, *flags, steps):
    """The method or composition ``names`` run small on the GPU in bf16, ``flags`` after (``--cuda_graphs``)."""
    script, family, method_flags = tiny_run(*names)
    argv = small_run_argv(
        backbones[family], out, steps, "--learning_rate", "1e-3", "--logging_steps", "1", "--bf16", "true",
        "--fp16", "false", *method_flags, *flags,
    )  # fmt: skip
    trainer = importlib.import_module(script).main(argv)
    weights = {name: t.detach().float().clone() for name, t in trainer.model.state_dict().items()}
    for part in trainer.parts:
        weights.update({f"{part.name}.{i}": t.detach().float().clone() for i, t in enumerate(part.parameters())})
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    return trainer, weights, losses


# bf16 keeps 8 significant bits: a step's roundings put the weights within 2^-8 of each other,
# relative to their norm; the captured kernels are the eager ones, so what differs is their order of
# accumulation (atomics in the embeddings' backward) and the learning rate read from a float32 tensor.
# A tensor whose gradient is rounding alone (the attention key biases: softmax ignores them) differs
# by AdamW's steps on that noise, each about the learning rate: no element further than 2 lr a step.
BF16 = 2.0**-8


def weights_agree(weights: dict, expected: dict, steps: int, lr: float = 1e-3) -> list[str]:
    """What breaks the tolerance above, if anything."""
    difference = sum((weights[k] - expected[k]).pow(2).sum() for k in expected).sqrt()
    size = sum(expected[k].pow(2).sum() for k in expected).sqrt()
    problems = [] if difference <= BF16 * size else [f"weights {difference / size:.2e} apart relative to their norm"]
    far = {k: (weights[k] - expected[k]).abs().max().item() for k in expected}
    return problems + [f"{k}: {v:.2e}" for k, v in far.items() if v > 2 * lr * steps]


@CUDA
@pytest.mark.e2e
@pytest.mark.parametrize("names", RUNS, ids="+".join)
def test_cuda_captured_step_equals_the_eager_step(names, no_dropout_backbones, tmp_path):
    """Without dropout, from the same state and batches, 6 steps: 2 eager warm-up steps of the shape,
    its capture and 3 replays, against the Trainer's own eager step."""
    _, expected, eager_losses = train_on_cuda(names, no_dropout_backbones, tmp_path / "eager", steps=6)
    trainer, weights, losses = train_on_cuda(
        names, no_dropout_backbones, tmp_path / "graphs", "--cuda_graphs", "true", steps=6
    )
    assert trainer.step_path == "cuda graphs" and trainer.step_graphs.captured, trainer.step_path
    assert not weights_agree(weights, expected, steps=6)
    assert losses == pytest.approx(eager_losses, rel=BF16)


@CUDA
@pytest.mark.e2e
@pytest.mark.parametrize("names", [("simcse",), ("adcse", "mixcse")], ids="+".join)
def test_cuda_loss_curves_with_dropout_agree(names, backbones, tmp_path):
    """With dropout, 200 steps: the captured run's losses over the last 100 steps have the eager run's
    mean, within three standard errors of the difference."""
    _, _, eager = train_on_cuda(names, backbones, tmp_path / "eager", steps=200)
    _, _, captured = train_on_cuda(names, backbones, tmp_path / "graphs", "--cuda_graphs", "true", steps=200)
    a, b = torch.tensor(eager[100:]), torch.tensor(captured[100:])
    error = (a.var() / len(a) + b.var() / len(b)).sqrt()
    assert abs(a.mean() - b.mean()) <= 3 * error, (a.mean().item(), b.mean().item(), error.item())


@CUDA
@pytest.mark.e2e
def test_cuda_kill_and_resume_ends_as_the_uninterrupted_captured_run(backbones, tmp_path):
    """kill -9 at step 6 of 10 (checkpoints every 4 steps) under --cuda_graphs, the same command again:
    the run resumes from checkpoint-4 (the resumed process warms up and captures anew) and ends with
    the uninterrupted captured run's weights, within bf16 rounding (the embeddings' backward adds with
    atomics, whose order varies from run to run)."""
    import json
    import os
    import subprocess
    import sys

    from safetensors.torch import load_file

    from .conftest import DATA, REPO

    def command(out):
        script, family, flags = tiny_run("simcse")
        argv = small_run_argv(
            backbones[family], out, 10, "--learning_rate", "1e-3", "--save_strategy", "steps", "--save_steps", "4",
            "--logging_steps", "1", "--bf16", "true", "--fp16", "false", "--cuda_graphs", "true", *flags,
        )  # fmt: skip
        return [sys.executable, os.path.join(REPO, "tests", "kill_worker.py"), f"{script}.py", *argv]

    env = {**os.environ, "CSE_DATA_DIR": DATA}
    straight = subprocess.run(command(tmp_path / "straight"), env=env, capture_output=True, text=True, cwd=REPO)
    assert straight.returncode == 0, straight.stderr[-3000:]
    killed = subprocess.run(
        command(tmp_path / "cut"), env={**env, "CSE_TEST_KILL": "6:step"}, capture_output=True, text=True, cwd=REPO
    )
    assert killed.returncode == -9, killed.stderr[-3000:]
    resumed = subprocess.run(command(tmp_path / "cut"), env=env, capture_output=True, text=True, cwd=REPO)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resuming from" in resumed.stdout + resumed.stderr and "captured the training step" in resumed.stdout
    a = load_file(str(tmp_path / "straight" / "model.safetensors"))
    b = load_file(str(tmp_path / "cut" / "model.safetensors"))
    identical = all(torch.equal(a[k], b[k]) for k in a)
    with open(tmp_path / "cut" / "trainer_state.json", encoding="utf-8") as f:
        assert json.load(f)["global_step"] == 10
    problems = weights_agree({k: v.float() for k, v in b.items()}, {k: v.float() for k, v in a.items()}, steps=10)
    print(f"resumed run: bit-identical {identical}; beyond bf16 rounding: {problems or 'nothing'}")
    assert identical or not problems
