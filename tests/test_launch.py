"""How a run is started and stopped, with real launchers and real signals: torchrun on a machine
without a GPU, accelerate's one-process ``--cpu`` launch, SIGTERM and SIGINT sent to a training run,
a table script whose run refuses, and what a CPU run's console says."""

import json
import os
import signal
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest
from transformers import TrainingArguments

from cse.arguments import check_launch
from cse.errors import CSEUsageError
from cse.resume import checkpoint_problem
from cse.run_names import LOCK_NAME

from .conftest import DATA, REPO, SENTEVAL, WIKI_HEAD

ENV = {**os.environ, "CSE_DATA_DIR": DATA, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
RUN_SIMCSE = os.path.join(REPO, "run_simcse.py")


def run_args(model, out, max_steps, *extra):
    """A short run on the CPU, without --use_cpu: the launch decides."""
    return [
        *f"--model_name_or_path {model} --output_dir {out} --train_file {WIKI_HEAD} --max_train_samples 64".split(),
        *f"--per_device_train_batch_size 8 --max_steps {max_steps} --eval_strategy no --load_best_model_at_end false "
        "--final_eval none --report_to none".split(),
        *extra,
    ]


def launch(command, **kwargs):
    return subprocess.run(command, capture_output=True, text=True, env=ENV, cwd=REPO, timeout=600, **kwargs)


# --- launchers ------------------------------------------------------------------------------------


@pytest.mark.e2e
def test_torchrun_on_a_machine_without_a_gpu_trains_in_both_processes(tiny_bert, tmp_path):
    out = tmp_path / "run"
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", "29551"]
    # no --use_cpu: without the check each process would train alone, and rank 1 meet rank 0's lock
    proc = launch([*torchrun, RUN_SIMCSE, *run_args(tiny_bert, out, 4, "--save_strategy", "no")])
    assert proc.returncode == 0, proc.stderr[-5000:]
    said = proc.stdout + proc.stderr
    assert said.count("2 processes launched on a machine without a GPU: they train together on the CPU") == 1
    assert "16 sentences per step across 2 process(es)" in said
    state = json.loads((out / "trainer_state.json").read_text())
    assert state["global_step"] == 4 and state["log_history"][-1]["epoch"] == 1.0  # 4 x 16 = the 64 sentences


def test_a_launch_the_trainer_does_not_see_is_refused(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(CSEUsageError, match="launched as 2 processes") as refusal:
        check_launch(SimpleNamespace(world_size=1))
    assert refusal.value.hint == "add --use_cpu true to train them together on the CPU (gloo)"
    check_launch(SimpleNamespace(world_size=2))


@pytest.mark.e2e
def test_accelerate_cpu_launch_of_two_processes_warns_and_the_console_says_what_matters(tiny_bert, tmp_path):
    out = tmp_path / "run"
    accelerate = [sys.executable, "-m", "accelerate.commands.launch", "--cpu", "--num_processes", "2"]
    flags = ["--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", "29552"]
    proc = launch([*accelerate, *flags, RUN_SIMCSE, *run_args(tiny_bert, out, 4, "--save_strategy", "no")])
    assert proc.returncode == 0, proc.stderr[-5000:]
    said = proc.stdout + proc.stderr
    assert "accelerate launch was asked for more than one process but started this one alone" in said
    assert "8 sentences per step across 1 process(es)" in said
    # progress bars on: the Trainer's progress callback would print total_flos = 0GF
    for noise in ("Setting accelerator to CPU", "pin_memory", "total_flos", "non_blocking"):
        assert noise not in said
    assert "total_flos" not in json.loads((out / "train_results.json").read_text())


# --- signals --------------------------------------------------------------------------------------


def wait_for_a_checkpoint(out, proc, seconds=300):
    """Until the run has saved a checkpoint. Any checkpoint: with ``--save_total_limit 1`` (the default)
    each one is deleted when the next is saved, so a given one can come and go between two looks."""
    deadline = time.monotonic() + seconds
    while not list(out.glob("checkpoint-*/trainer_state.json")):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"no checkpoint appeared in {out}"
        time.sleep(0.2)


# long enough that the signal, sent once a checkpoint is there, finds the run still training
STEPS = 200


@pytest.mark.e2e
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_ends_the_run_with_one_line_and_the_rerun_resumes(tiny_bert, tmp_path, signum):
    out = tmp_path / "run"
    command = [
        sys.executable,
        RUN_SIMCSE,
        *run_args(tiny_bert, out, STEPS, "--save_strategy", "steps", "--save_steps", "5", "--disable_tqdm", "true"),
    ]
    # SIGINT as in a terminal, even where this test runs in a background job (which ignores it)
    proc = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
        cwd=REPO,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    wait_for_a_checkpoint(out, proc)
    proc.send_signal(signum)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signum and "Traceback" not in stderr, stderr
    error, hint = stderr.strip().splitlines()[-2:]
    name = signal.Signals(signum).name
    step, newest = error.removeprefix(f"error: {name} stopped the run at step ").split(
        "; the newest complete checkpoint is "
    )
    assert int(newest.rsplit("-", 1)[1]) <= int(step) < STEPS
    args = TrainingArguments(output_dir=str(out))
    assert checkpoint_problem(newest, args) is None
    # (a signal while a newer checkpoint is written leaves it, and the line names the one before, the
    # newest the Trainer had reported saved)
    assert hint == "  hint: rerun the same command to resume" and not (out / LOCK_NAME).exists()
    if signum == signal.SIGTERM:  # the rerun, once
        rerun = launch(command)
        assert rerun.returncode == 0, rerun.stderr[-5000:]
        assert f"resuming from {out / 'checkpoint-'}" in rerun.stdout + rerun.stderr
        assert json.loads((out / "trainer_state.json").read_text())["global_step"] == STEPS


@pytest.mark.e2e
def test_a_signal_in_the_run_s_tail_stops_it_within_a_second_naming_the_checkpoint_that_exists(tiny_bert, tmp_path):
    """SIGTERM during the final evaluation (the STS test sets, a long tokenisation and encoding): the
    process exits within a second, and names checkpoint-2, the best, which the rerun resumes from, not
    checkpoint-4, which the Trainer deleted at the end of training (not the best, --save_total_limit 1)."""
    out = tmp_path / "run"
    flags = "--save_strategy steps --save_steps 2 --eval_strategy steps --eval_steps 2 --load_best_model_at_end true"
    flags += f" --greater_is_better false --save_total_limit 1 --final_eval test --senteval_data_dir {SENTEVAL}"
    command = [sys.executable, RUN_SIMCSE, *run_args(tiny_bert, out, 4, *flags.split(), "--disable_tqdm", "true")]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=ENV, cwd=REPO)
    staged = out / "_export.tmp" / "cse_config.json"  # the export is staged: the final evaluation follows
    deadline = time.monotonic() + 300
    while not staged.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"the run never reached its end in {out}"
        time.sleep(0.02)
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)
    took = time.monotonic() - sent
    stderr = proc.stderr.read()
    assert proc.returncode == 143 and took < 1.0, (took, stderr[-3000:])
    assert not (out / "checkpoint-4").exists() and not (out / "sts_test_results.json").exists()
    assert stderr.strip().splitlines()[-2:] == [
        f"error: SIGTERM stopped the run at step 4; the newest complete checkpoint is {out / 'checkpoint-2'}",
        "  hint: rerun the same command to resume",
    ]
    assert checkpoint_problem(str(out / "checkpoint-2"), TrainingArguments(output_dir=str(out))) is None
    assert not (out / LOCK_NAME).exists()


# --- table scripts --------------------------------------------------------------------------------


@pytest.mark.e2e
def test_a_table_script_whose_run_refuses_ends_with_its_line_and_status(tmp_path):
    env = {**ENV, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf"), "OUTPUT_DIR": str(tmp_path / "out")}
    proc = subprocess.run(
        ["bash", "scripts/simcse/table5_unsup_bert_base.sh"], capture_output=True, text=True, env=env, cwd=REPO
    )
    assert proc.returncode == 2
    # the paper's configuration trains in fp16, which a CPU cannot: refused before the model is looked up
    assert proc.stderr.strip().splitlines()[-2:] == [
        "error: --fp16 needs a GPU and this run is on the CPU",
        "  hint: pass --fp16 false to train in float32 (or --fp16 false --bf16 true --use_cpu true for bfloat16)",
    ]
    assert "Traceback" not in proc.stderr and proc.stdout == ""
