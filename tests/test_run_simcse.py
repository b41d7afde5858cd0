"""``run_simcse.py`` end to end on tiny random encoders with the real tokenizers and corpus."""

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModel, AutoTokenizer

from .conftest import REPO, SENTEVAL, SIMCSE_ENV, WIKI_HEAD, run_simcse
from .senteval_reference import reference_scores

pytestmark = pytest.mark.e2e  # each test runs run_simcse.py in processes of its own


def log_history(out):
    with open(os.path.join(out, "trainer_state.json")) as f:
        return json.load(f)


def test_end_to_end_bert_best_checkpoint_and_reload(tiny_bert, tmp_path):
    out = str(tmp_path / "run")
    proc = run_simcse(
        ["--model_name_or_path", tiny_bert, "--output_dir", out, "--max_steps", "40", "--eval_steps", "10"]
    )
    assert "16 sentences per step across 1 process(es), 15 in-batch negatives" in proc.stdout + proc.stderr
    state = log_history(out)
    evals = [h for h in state["log_history"] if "eval_stsb_spearman" in h]
    assert [h["step"] for h in evals] == [10, 20, 30, 40]
    best = max(evals, key=lambda h: h["eval_stsb_spearman"])
    assert state["best_metric"] == pytest.approx(best["eval_stsb_spearman"])
    assert state["best_model_checkpoint"].endswith(f"checkpoint-{best['step']}")
    with open(os.path.join(out, "README.md"), encoding="utf-8") as f:
        assert (
            f"Model selection: the exported weights are the best of 4 dev evaluations, checkpoint-{best['step']}, by "
            f"stsb_spearman ({state['best_metric']:.4f}).\n" in f.read()
        )
    assert len({round(h["eval_stsb_spearman"], 6) for h in evals}) > 1  # training moved the model
    losses = [h["loss"] for h in state["log_history"] if "loss" in h]
    assert len(losses) == 8 and all(0 < x < 10 for x in losses)

    # The exported directory is a plain HF model + tokenizer, the recorded pooler, the best weights.
    with open(os.path.join(out, "cse_config.json")) as f:
        assert json.load(f)["pooler"] == "cls_before_pooler"
    with open(os.path.join(out, "sts_dev_results.json")) as f:
        report = json.load(f)
    assert report["scores"]["STS-B"] == pytest.approx(100 * best["eval_stsb_spearman"], abs=1e-6)
    model, tok = AutoModel.from_pretrained(out), AutoTokenizer.from_pretrained(out)
    ckpt = load_file(os.path.join(state["best_model_checkpoint"], "model.safetensors"))
    for name, value in model.state_dict().items():
        torch.testing.assert_close(value, ckpt[f"backbone.{name}"], rtol=0, atol=0)
    # The trained head (the MLP) is the exported pooling layer, so `cls` gives [CLS] + MLP.
    assert not torch.equal(model.pooler.dense.weight, AutoModel.from_pretrained(tiny_bert).pooler.dense.weight)

    # Re-evaluated by an independent implementation from AutoModel: the same numbers.
    ref = reference_scores(model, tok, ["STSBenchmark", "SICKRelatedness"], "dev", SENTEVAL, cosine_dtype=np.float64)[
        "cls_before_pooler"
    ]
    assert ref["STSBenchmark"] == pytest.approx(report["scores"]["STS-B"], abs=0.01)
    assert ref["SICKRelatedness"] == pytest.approx(report["scores"]["SICK-R"], abs=0.01)

    # and by senteval_eval.py, which reads the pooler from cse_config.json
    proc = subprocess.run(
        [
            sys.executable,
            os.path.join(REPO, "senteval_eval.py"),
            "--model_name_or_path",
            out,
            "--mode",
            "dev",
            "--output_json",
            str(tmp_path / "dev.json"),
        ],
        capture_output=True,
        text=True,
        env=SIMCSE_ENV,
        check=True,
        cwd=REPO,
    )
    assert "| STS-B | SICK-R | Avg. |" in proc.stdout
    with open(tmp_path / "dev.json") as f:
        again = json.load(f)
    assert again["pooler"] == "cls_before_pooler"
    assert again["environment"]["versions"]["torch"] == torch.__version__
    assert again["environment"]["precision"] == "fp32"
    for column in ("STS-B", "SICK-R"):
        assert again["scores"][column] == pytest.approx(report["scores"][column], abs=1e-4)


def test_end_to_end_roberta_avg_pooler(tiny_roberta, tmp_path):
    out = str(tmp_path / "run")
    run_simcse(
        [
            "--model_name_or_path",
            tiny_roberta,
            "--output_dir",
            out,
            "--max_steps",
            "10",
            "--eval_steps",
            "5",
            "--pooler_type",
            "avg",
        ]
    )
    with open(os.path.join(out, "cse_config.json")) as f:
        assert json.load(f)["pooler"] == "avg"
    with open(os.path.join(out, "sts_dev_results.json")) as f:
        report = json.load(f)
    ref = reference_scores(
        AutoModel.from_pretrained(out),
        AutoTokenizer.from_pretrained(out),
        ["STSBenchmark"],
        "dev",
        SENTEVAL,
        cosine_dtype=np.float64,
    )["avg"]
    assert ref["STSBenchmark"] == pytest.approx(report["scores"]["STS-B"], abs=0.01)


def test_seeds_reproduce_and_resume_after_interruption_equals_uninterrupted_run(tiny_bert, tmp_path):
    def args(out, seed="42"):
        return [
            "--model_name_or_path",
            tiny_bert,
            "--output_dir",
            str(out),
            "--max_steps",
            "20",
            "--eval_steps",
            "10",
            "--save_strategy",
            "steps",
            "--save_steps",
            "10",
            "--save_total_limit",
            "5",
            "--final_eval",
            "none",
            "--seed",
            seed,
        ]

    out = tmp_path / "run"
    run_simcse(args(out))
    uninterrupted = load_file(str(out / "checkpoint-20" / "model.safetensors"))
    state = log_history(str(out))
    losses = [h["loss"] for h in state["log_history"] if "loss" in h]

    # The same seed in a fresh directory: the same weights, bit for bit; another seed: other weights.
    run_simcse(args(tmp_path / "again"))
    again = load_file(str(tmp_path / "again" / "checkpoint-20" / "model.safetensors"))
    assert all(torch.equal(again[k], uninterrupted[k]) for k in uninterrupted)
    run_simcse(args(tmp_path / "other", seed="43"))
    other = load_file(str(tmp_path / "other" / "checkpoint-20" / "model.safetensors"))
    assert not torch.equal(other["backbone.pooler.dense.weight"], uninterrupted["backbone.pooler.dense.weight"])

    # A crash after step 10 leaves checkpoint-10 and the run's settings; the same command resumes.
    for name in os.listdir(out):
        if name not in ("checkpoint-10", "run_args.json"):
            shutil.rmtree(out / name) if (out / name).is_dir() else os.remove(out / name)
    # The run's environment is recorded but not compared: a resume may run on other versions.
    saved = json.loads((out / "run_args.json").read_text())
    assert saved["environment"]["versions"]["torch"] == torch.__version__
    saved["environment"].update(versions={"torch": "0.0"}, git={"commit": "0" * 40, "dirty": True})
    (out / "run_args.json").write_text(json.dumps(saved))
    proc = run_simcse(args(out))
    assert "resuming from" in proc.stdout + proc.stderr
    resumed = load_file(str(out / "checkpoint-20" / "model.safetensors"))
    for name in uninterrupted:
        torch.testing.assert_close(resumed[name], uninterrupted[name], rtol=1e-5, atol=1e-6, msg=name)
    state_resumed = log_history(str(out))
    assert [h["loss"] for h in state_resumed["log_history"] if "loss" in h] == pytest.approx(losses, rel=1e-5)
    # the best-model record survives the interruption
    assert state_resumed["best_metric"] == pytest.approx(state["best_metric"])
    assert state_resumed["best_model_checkpoint"] == state["best_model_checkpoint"]

    # A finished run is not silently resumed or overwritten.
    proc = run_simcse(args(out), check=False)
    assert proc.returncode == 2 and "holds a finished run" in proc.stderr and "Traceback" not in proc.stderr
    # An interrupted run (stopped before its last checkpoint and export) is not continued with other
    # settings.
    for name in os.listdir(out):
        if name not in ("checkpoint-10", "run_args.json"):
            shutil.rmtree(out / name) if (out / name).is_dir() else os.remove(out / name)
    proc = run_simcse([*args(out), "--learning_rate", "5e-4"], check=False)
    assert proc.returncode == 2 and "training.learning_rate: 0.001 -> 0.0005" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_standard_trainer_flags(tiny_bert, tmp_path):
    def first_losses(name, *flags):
        out = tmp_path / name
        run_simcse(
            [
                "--model_name_or_path",
                tiny_bert,
                "--output_dir",
                str(out),
                "--max_steps",
                "6",
                "--eval_steps",
                "3",
                "--seed",
                "7",
                "--logging_steps",
                "1",
                "--gradient_accumulation_steps",
                "2",
                *flags,
            ]
        )
        state = log_history(str(out))
        assert state["global_step"] == 6 and state["best_model_checkpoint"] is not None
        assert (out / "model.safetensors").is_file() and (out / "sts_dev_results.json").is_file()
        return [h["loss"] for h in state["log_history"] if "loss" in h]

    fp32, bf16 = first_losses("fp32"), first_losses("bf16", "--bf16", "true")
    # bf16 autocast really ran: the same seed gives close but not identical losses
    assert fp32[0] != bf16[0] and bf16[0] == pytest.approx(fp32[0], rel=0.05)


def test_bad_input_gives_clear_errors(tiny_bert, tmp_path):
    base = ["--model_name_or_path", tiny_bert, "--output_dir", str(tmp_path / "o"), "--max_steps", "2"]
    proc = run_simcse([*base, "--per_device_train_batch_size", "1"], check=False)
    assert proc.returncode != 0 and "needs at least 2" in proc.stderr
    env = {k: v for k, v in SIMCSE_ENV.items() if k != "CSE_DATA_DIR"}
    proc = run_simcse(base, check=False, env=env)
    assert proc.returncode != 0 and "CSE_DATA_DIR is not set" in proc.stderr
    proc = run_simcse([*base, "--senteval_data_dir", str(tmp_path / "absent")], check=False)
    assert proc.returncode != 0 and "SentEval data directory not found" in proc.stderr
    (tmp_path / "blank.txt").write_text("\n \n")
    proc = run_simcse([*base, "--train_file", str(tmp_path / "blank.txt")], check=False)
    assert proc.returncode != 0 and "no non-blank line" in proc.stderr


def test_accelerate_launch_one_and_two_processes(tiny_bert, tmp_path):
    accelerate = [sys.executable, "-m", "accelerate.commands.launch"]
    flags = ["--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no"]
    args = [
        "--model_name_or_path",
        tiny_bert,
        "--max_steps",
        "10",
        "--eval_steps",
        "5",
        "--per_device_train_batch_size",
        "8",
    ]
    one = run_simcse(
        [*args, "--output_dir", str(tmp_path / "one")], launcher=(*accelerate, "--num_processes", "1", *flags)
    )
    assert "8 sentences per step across 1 process(es)" in one.stdout + one.stderr
    two = run_simcse(
        [*args, "--output_dir", str(tmp_path / "two")],
        launcher=(*accelerate, "--multi_gpu", "--num_processes", "2", "--main_process_port", "29533", *flags),
    )
    assert "16 sentences per step across 2 process(es), 15 in-batch negatives" in two.stdout + two.stderr
    epochs = [h["epoch"] for h in log_history(str(tmp_path / "two"))["log_history"] if "loss" in h]
    corpus = sum(1 for line in open(WIKI_HEAD, encoding="utf-8") if line.strip())
    assert epochs[-1] == pytest.approx(10 * 16 / corpus, rel=1e-3)  # 16 sentences a step: both ranks' data
    assert os.path.isfile(tmp_path / "two" / "model.safetensors")
