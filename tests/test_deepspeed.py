"""DeepSpeed ZeRO on CPU: two processes (gloo) with the shipped configs/accelerate/*.json against one
plain process on the concatenated batch; AdCSE's out-of-optimizer state (p's fp32 master under bf16,
the adversaries) against Eq. 4 and across a resume; ZeRO-3 refused where a method cannot use it; a
run killed after training completed by the same command. (AdCSE's fp32 ZeRO-2 equivalence with one
process is test_adcse.py's two-process test.)"""

import importlib
import json
import os
import re
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

import run_simcse
from cse import registry
from cse.errors import CSEUsageError
from cse.run_names import PARTS_STATE_NAME
from cse.trainer import CSETrainer

from .conftest import DATA, REPO, SENTEVAL, WIKI_HEAD, tail_args, tiny_run, torchrun

ENV = {
    **os.environ,
    "CSE_DATA_DIR": DATA,
    "DS_ACCELERATOR": "cpu",  # DeepSpeed's CPU accelerator; without oneCCL it communicates over gloo
    "OMP_NUM_THREADS": "1",
    "TOKENIZERS_PARALLELISM": "false",
}
# No evaluation or export table: the comparisons are of weights and losses.
QUIET = ["--eval_strategy", "no", "--load_best_model_at_end", "false", "--final_eval", "none"]
QUIET += ["--use_cpu", "true", "--disable_tqdm", "true", "--report_to", "none", "--senteval_data_dir", SENTEVAL]


def zero_config(stage):
    return os.path.join(REPO, "configs", "accelerate", f"deepspeed_zero{stage}.json")


def accelerate_launch(config, port, script, *args):
    """The command running ``script`` with ``accelerate launch`` and a shipped config, in two processes."""
    config = os.path.join(REPO, "configs", "accelerate", config)
    launcher = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", config]
    return [*launcher, "--num_processes", "2", "--main_process_port", str(port), os.path.join(REPO, script), *args]


def launch(command, env=ENV, check=True):
    """Runs ``command`` (two processes); fails with its output unless it succeeds or not ``check``."""
    proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600, cwd=REPO)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0 or not check, output[-6000:]
    return output


def losses(run_dir):
    with open(os.path.join(run_dir, "trainer_state.json"), encoding="utf-8") as f:
        return [entry["loss"] for entry in json.load(f)["log_history"] if "loss" in entry]


@pytest.fixture(scope="module")
def simcse_flags(no_dropout_bert):
    flags = ["--model_name_or_path", no_dropout_bert, "--train_file", WIKI_HEAD, "--max_train_samples", "64"]
    flags += ["--max_steps", "3"]
    # tau = 1 and a large step: the three losses differ and the weights move well beyond the tolerance
    return flags + ["--temp", "1.0", "--learning_rate", "1e-3", "--logging_steps", "1", "--save_strategy", "no", *QUIET]


@pytest.fixture(scope="module")
def simcse_one_process(simcse_flags, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("simcse_one") / "run")
    run_simcse.main([*simcse_flags, "--per_device_train_batch_size", "8", "--output_dir", out])
    return out


@pytest.mark.e2e
@pytest.mark.parametrize("stage", [2, 3])
def test_simcse_under_zero_equals_one_process(simcse_flags, simcse_one_process, no_dropout_bert, tmp_path, stage):
    """ZeRO-2 through torchrun and the Trainer's --deepspeed, ZeRO-3 through accelerate launch and the
    shipped YAML (which names the JSON): both launch paths docs/distributed.md gives."""
    out = str(tmp_path / "run")
    args = [*simcse_flags, "--per_device_train_batch_size", "4", "--output_dir", out]
    if stage == 2:
        command = torchrun("../run_simcse.py", 29712, *args, "--deepspeed", zero_config(stage))
    else:
        command = accelerate_launch(f"deepspeed_zero{stage}.yaml", 29713, "run_simcse.py", *args)
    output = launch(command)
    assert "8 sentences per step across 2 process(es), 7 in-batch negatives per anchor" in output
    assert f"DeepSpeed ZeRO-{stage}" in output
    one = losses(simcse_one_process)
    assert len(one) == 3 and len(set(one)) == 3
    torch.testing.assert_close(losses(out), one, rtol=1e-5, atol=1e-6)
    # the exported encoder (gathered from the shards under ZeRO-3) is the one-process encoder
    ours, reference = load_file(f"{out}/model.safetensors"), load_file(f"{simcse_one_process}/model.safetensors")
    initial = load_file(f"{no_dropout_bert}/model.safetensors")
    assert ours.keys() == reference.keys()
    for name, weight in reference.items():
        torch.testing.assert_close(ours[name], weight, rtol=1e-4, atol=1e-5, msg=name)
    moved = "encoder.layer.0.attention.self.query.weight"
    assert (reference[moved] - initial[moved]).abs().max() > 1e-3


@pytest.mark.e2e
def test_adcse_bf16_momentum_master_follows_eq4_and_resumes(no_dropout_bert, tmp_path):
    """ZeRO-2 in bf16: p's fp32 master must follow Eq. 4 from q's fp32 master weights (read back
    from DeepSpeed's checkpoints), p must be its rounding, and a run resumed at step 2 must end with
    the straight run's adversaries, SGD momentum, p and master."""
    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

    m = 0.5
    flags = ["--model_name_or_path", no_dropout_bert, "--train_file", WIKI_HEAD, "--max_steps", "4", "--bf16", "true"]
    flags += ["--learning_rate", "1e-3", "--momentum", str(m), "--adversary_learning_rate", "1.0", "--temp", "1.0"]
    flags += ["--adversary_temperature", "1.0", "--per_device_train_batch_size", "4", "--deepspeed", zero_config(2)]
    flags += ["--save_strategy", "steps", "--save_steps", "1", "--save_total_limit", "10", *QUIET]
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    for out, extra in ((straight, []), (resumed, ["--resume_from_checkpoint", str(straight / "run" / "checkpoint-2")])):
        out.mkdir()
        args = [str(out), *flags, *extra, "--output_dir", str(out / "run")]
        output = launch(torchrun("adcse_ddp_worker.py", 29716, *args))
        assert "momentum encoder p is torch.bfloat16: Eq. 4 runs on an fp32 master copy" in output
    assert "the state of adcse restored from" in output

    a, b = (load_file(str(out / "rank0.safetensors")) for out in (straight, resumed))
    assert a.keys() == b.keys() == load_file(str(straight / "rank1.safetensors")).keys()
    for name in a:
        torch.testing.assert_close(b[name], a[name], rtol=1e-5, atol=1e-6, msg=name)
    masters = {k.removeprefix("momentum_master."): v for k, v in a.items() if k.startswith("momentum_master.")}
    assert masters and all(v.dtype == torch.float32 for v in masters.values())
    for name, master in masters.items():
        assert torch.equal(a[f"momentum_backbone.{name}"], master.bfloat16()), name

    def saved_master(step):
        path = straight / "run" / f"checkpoint-{step}" / PARTS_STATE_NAME
        prefix = "adcse.momentum_backbone."
        return {k.removeprefix(prefix): v.double() for k, v in load_file(str(path)).items() if k.startswith(prefix)}

    q4 = get_fp32_state_dict_from_zero_checkpoint(str(straight / "run" / "checkpoint-4"))
    p3, p4 = saved_master(3), saved_master(4)
    assert p4.keys() == masters.keys()
    bits_below_bf16 = 0
    for name, p in p4.items():
        q = q4[f"backbone.{name}"].double()
        torch.testing.assert_close(p, m * p3[name] + (1 - m) * q, rtol=0, atol=1e-6, msg=name)  # Eq. 4
        torch.testing.assert_close(p, masters[name].double(), rtol=0, atol=0)
        bits_below_bf16 += int((p != p.bfloat16().double()).sum())
    assert bits_below_bf16 > 0  # the master holds what bf16 p cannot


class ReachedTraining(Exception):
    """Raised in place of training: the run was built and its trainer constructed without a refusal."""


def refusing_zero3() -> set[str]:
    """The methods docs/distributed.md's table says refuse ZeRO-3, by their display names."""
    with open(os.path.join(REPO, "docs", "distributed.md"), encoding="utf-8") as f:
        table = f.read().split("| method | ZeRO-3 | why not |\n", 1)[1].split("\n\n", 1)[0]
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in table.splitlines()[1:]]
    return {re.sub(r" \(.*\)$", "", row[0]) for row in rows if row[1] == "refused"}


@pytest.mark.parametrize("record", registry.records(), ids=lambda record: record.name)
def test_zero3_is_refused_with_the_reason_by_the_methods_the_docs_name(
    record, tiny_bert, tiny_roberta, tmp_path, monkeypatch
):
    """Each method's preset under ZeRO-3, up to its training: a method docs/distributed.md names as
    refusing it stops at the trainer's construction, naming itself, why and what to use instead; every
    other method reaches its training. (A method that refuses ZeRO-3 adds its row to that table.)"""
    assert refusing_zero3() <= {r.display_name for r in registry.records()}
    monkeypatch.setattr(CSETrainer, "zero_stage", property(lambda self: 3))

    def reached(self, *args, **kwargs):
        raise ReachedTraining

    monkeypatch.setattr(CSETrainer, "train", reached)
    script, family, flags = tiny_run(record.name)
    model = {"bert": tiny_bert, "roberta": tiny_roberta}[family]
    args = ["--model_name_or_path", model, "--train_file", WIKI_HEAD, "--max_train_samples", "16", *flags]
    args += ["--per_device_train_batch_size", "8"]
    args += ["--output_dir", str(tmp_path / "run"), "--save_strategy", "no", *QUIET]
    main = importlib.import_module(script).main
    if record.display_name in refusing_zero3():
        reason = r"does not support DeepSpeed ZeRO-3: \w.*\. Use DDP or DeepSpeed ZeRO-2"
        with pytest.raises(CSEUsageError, match=re.escape(record.display_name) + " " + reason):
            main(args)
    else:
        with pytest.raises(ReachedTraining):
            main(args)


# SimCSE and AdCSE have tests of their own above
OTHER_METHODS = [record.name for record in registry.records() if not record.base and record.name != "adcse"]


@pytest.mark.e2e
def test_every_other_method_trains_under_zero2(tiny_bert, tmp_path):
    """Every other method: two bf16 steps each under two-process ZeRO-2, with a checkpoint holding the
    parts' state files (SARCSE's frequency table, outside the optimizer) and the export (one launch for
    all: DeepSpeed's start-up is most of the time)."""
    args = ["--model_name_or_path", tiny_bert, "--train_file", WIKI_HEAD, "--max_train_samples", "64"]
    args += ["--max_steps", "2", "--per_device_train_batch_size", "4", "--bf16", "true", "--deepspeed", zero_config(2)]
    args += ["--save_strategy", "steps", "--save_steps", "2", *QUIET]
    output = launch(torchrun("deepspeed_smoke_worker.py", 29719, str(tmp_path), ",".join(OTHER_METHODS), *args))
    state_files = []
    for method in OTHER_METHODS:
        assert output.count(f"{method}: trained 2 steps across 2 process(es) under ZeRO-2") == 1, method
        assert os.path.isfile(tmp_path / method / "model.safetensors"), method
        assert os.path.isdir(tmp_path / method / "checkpoint-2" / "global_step2"), method  # DeepSpeed's state
        names = re.search(rf"^{method}: state files \[(.*)\]$", output, re.M).group(1)
        state_files += [tmp_path / method / "checkpoint-2" / name for name in names.split(", ") if name]
    assert state_files and all(os.path.isfile(path) for path in state_files), state_files


@pytest.mark.e2e
def test_killed_after_training_under_zero2_the_same_command_completes_the_run(tiny_bert, dev_head, tmp_path):
    """bf16 ZeRO-2, the main process SIGKILLed inside the final evaluation, when the engine's export
    (the best checkpoint's weights, in bf16) is staged in ``_export.tmp``: the same command, without
    the engine, exports those bytes again, and its final scores are those the engine's model got on
    the same dev sets when that checkpoint was evaluated during training."""
    out = tmp_path / "run"
    argv = [*tail_args(tiny_bert, out, dev_head), "--bf16", "true", "--deepspeed", zero_config(2)]
    command = torchrun("kill_worker.py", 29721, "run_simcse.py", *argv)
    output = launch(command, {**ENV, "CSE_TEST_KILL": "tail:during:final_eval"}, check=False)
    assert "exitcode  : -9" in output and "DeepSpeed ZeRO-2" in output, output[-6000:]
    assert not (out / "cse_config.json").exists()
    engine_export = (out / "_export.tmp" / "model.safetensors").read_bytes()
    output = launch(command)
    assert "training had ended at step 4: exporting the model of" in output
    assert (out / "model.safetensors").read_bytes() == engine_export
    assert {t.dtype for t in load_file(str(out / "model.safetensors")).values()} == {torch.bfloat16}
    with open(out / "trainer_state.json", encoding="utf-8") as f:
        state = json.load(f)
    best = int(state["best_model_checkpoint"].rsplit("-", 1)[1])
    dev = next(e for e in state["log_history"] if e["step"] == best and "eval_stsb_spearman" in e)
    with open(out / "sts_dev_results.json", encoding="utf-8") as f:
        scores = json.load(f)["scores"]
    assert scores["STS-B"] / 100.0 == dev["eval_stsb_spearman"]
    assert scores["SICK-R"] / 100.0 == dev["eval_sickr_spearman"]
