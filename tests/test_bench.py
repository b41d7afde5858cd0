"""The benchmark harness (bench/): an end-to-end run on cpu-tiny, the FLOP count and MFU arithmetic
against closed forms, and a report whose rewrite fails half-way leaving the previous one whole."""

import errno
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from torch import nn
from transformers import Trainer, TrainingArguments

from bench.report import mfu, percentile, projected_run_s
from bench.run import main as bench_main
from bench.timer import StepTimer
from cse.errors import OS_ERROR_HINTS

from .conftest import DATA, REPO, TOKENIZERS, WIKI_HEAD


class TwoLinear(nn.Module):
    """x (B, T, d0) -> W1 -> W2, no biases, loss = sum of squares: every FLOP is a matmul."""

    def __init__(self, d0, d1, d2):
        super().__init__()
        self.first = nn.Linear(d0, d1, bias=False)
        self.second = nn.Linear(d1, d2, bias=False)

    def forward(self, x):
        return {"loss": self.second(self.first(x)).pow(2).mean()}


def test_step_timer_counts_a_linear_step_in_closed_form(tmp_path):
    batch, tokens, d0, d1, d2 = 4, 5, 16, 24, 8
    data = [{"x": torch.randn(tokens, d0)} for _ in range(64)]
    timer = StepTimer(warmup_steps=2, steps=3)
    args = TrainingArguments(
        output_dir=str(tmp_path),
        per_device_train_batch_size=batch,
        max_steps=50,  # the timer, not max_steps, ends training
        use_cpu=True,
        report_to="none",
        save_strategy="no",
        logging_steps=100,
        disable_tqdm=True,
    )
    trainer = Trainer(model=TwoLinear(d0, d1, d2), args=args, train_dataset=data, callbacks=[timer])
    trainer.train()

    assert trainer.state.global_step == 5
    times = timer.step_times()
    assert len(times) == 3 and all(t > 0 for t in times)
    # Forward 2 n d_in d_out per layer; backward: the weight gradient of each layer (2 n d_in d_out)
    # and the input gradient of the second only (the data needs none): 6 N2 n + 4 N1 n.
    n = batch * tokens
    assert timer.flops_per_step == 6 * n * d1 * d2 + 4 * n * d0 * d1
    peak_bytes, kind = timer.peak_memory
    assert kind == "cpu_peak_rss" and peak_bytes > 0

    assert mfu(3.0e12, 0.5, 1.0e15) == pytest.approx(6.0e-3)
    assert projected_run_s(0.1, 2.0) == pytest.approx(15_625 * 0.1 + 125 * 2.0)
    values = [0.9, 0.1, 0.5, 0.3, 0.7, 0.2]
    for q in (0.1, 0.5, 0.9):
        assert percentile(values, q) == pytest.approx(np.percentile(np.array(values, dtype=np.float64), 100 * q))


@pytest.mark.e2e
def test_bench_runs_end_to_end_on_cpu_tiny(tmp_path, monkeypatch):
    monkeypatch.setenv("CSE_DATA_DIR", DATA)
    out = tmp_path / "bench.json"
    status = bench_main(
        [
            "--profile", "cpu-tiny",
            "--methods", "simcse,st-mnrl",
            "--steps", "2",
            "--warmup_steps", "1",
            "--eval_repeats", "1",
            "--eval_suites", "stsb_dev,dev_suite",
            "--extra", "--per_device_train_batch_size 8",
            "--train_file", WIKI_HEAD,
            "--bert_tokenizer", os.path.join(TOKENIZERS, "bert-base-uncased"),
            "--threads", "1",
            "--fixed_shapes",
            "--output_json", str(out),
        ]
    )  # fmt: skip
    assert status == 0
    report = json.loads(out.read_text())
    assert report["command"].startswith("python -m bench --profile cpu-tiny")
    assert report["profile"]["hidden_size"] == 128 and report["profile"]["num_hidden_layers"] == 2
    assert report["environment"]["versions"]["torch"] == torch.__version__
    assert report["environment"]["precision"] == "fp32" and report["hardware"]["cpu_cores_usable"] >= 1
    simcse = report["methods"]["simcse"]
    assert simcse["shapes"] == {"batch_size": 8, "max_seq_length": 32}
    assert simcse["argv"][simcse["argv"].index("--pad_to_max_length") + 1] == "true"
    assert len(simcse["step_times_s"]) == 2
    assert simcse["step_time_s"]["p10"] <= simcse["step_time_s"]["median"] <= simcse["step_time_s"]["p90"]
    assert simcse["sentences_per_s"] == pytest.approx(8 / simcse["step_time_s"]["median"])
    assert simcse["step_time_vs_simcse"] == 1.0 and simcse["flops_vs_simcse"] == 1.0
    assert simcse["flops_per_step"] > 0 and simcse["peak_memory_bytes"] > 0
    # STS-B dev: 1,500 pairs, 2,909 distinct sentences; with SICK-R trial's 500 pairs, 3,833.
    assert simcse["eval"]["stsb_dev"]["sentences"] == 2909
    assert simcse["eval"]["dev_suite"]["sentences"] == 3833
    dev = simcse["eval"]["dev_suite"]["median_s"]
    assert simcse["projected_full_run_s"] == pytest.approx(15_625 * simcse["step_time_s"]["median"] + 125 * dev)

    # sentence-transformers' recipe at the same shapes: the same encoder FLOPs (SimCSE adds only its
    # 128 x 128 head on [CLS]), no SentEval timing, and every row's step time relative to it
    st = report["methods"]["st-mnrl"]
    assert st["shapes"] == simcse["shapes"] and len(st["step_times_s"]) == 2 and "eval" not in st
    assert st["argv"][st["argv"].index("--pad_to_max_length") + 1] == "true"
    assert st["flops_per_step"] == pytest.approx(simcse["flops_per_step"], rel=0.02)
    assert st["step_time_vs_st"] == 1.0
    assert simcse["step_time_vs_st"] == pytest.approx(simcse["step_time_s"]["median"] / st["step_time_s"]["median"])


# python -m bench with the measured parts left out (each method's worker "fails" at once), so that
# what remains of a run is its report, written after every method: one run of a method, then the same
# report rewritten by a run of two under a file size limit.
REWRITE_UNDER_LIMIT = """
import sys
sys.path.insert(0, {repo!r})
import bench.run
from cse.errors import run_cli
from tests.conftest import file_size_limit
bench.run.save_random_backbone = lambda family, profile, tokenizer, directory: directory
bench.run.run_method = lambda name, *args: {{"error": "not run", "log_tail": [], "argv": []}}
argv = ["--profile", "cpu-tiny", "--train_file", {corpus!r}, "--output_json", {report!r}, "--methods"]
assert bench.run.main([*argv, "simcse"]) == 1  # its one method failed
file_size_limit({limit})()
sys.exit(run_cli(bench.run.main, [*argv, "simcse,st-mnrl"]))
"""


@pytest.mark.e2e  # launches processes or sweeps that read the run scripts' parsers (torch)
def test_a_report_whose_write_fails_half_way_leaves_the_previous_one_whole(tmp_path):
    """The report's rewrite is really cut at 512 bytes (a file size limit, EFBIG): one line naming the
    file, exit 2, and the report of the run before whole (a cut one would not parse)."""
    report = tmp_path / "bench.json"
    script = REWRITE_UNDER_LIMIT.format(repo=REPO, corpus=WIKI_HEAD, report=str(report), limit=512)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.strip().splitlines()[-2:] == [
        f"error: File too large: {report}.tmp",
        f"  hint: {OS_ERROR_HINTS[errno.EFBIG]}",
    ]
    assert os.path.getsize(report) > 512 and os.listdir(tmp_path) == [report.name]
    methods = json.loads(report.read_text())["methods"]
    assert list(methods) == ["simcse"] and methods["simcse"]["error"] == "not run"


def test_the_breakdown_times_each_piece_without_what_it_calls():
    """Nested timed calls (the callbacks around the step program, say): each piece's exclusive time,
    time excluded by the caller (the timer's own hand step) in none; nothing counted while inactive."""
    import time

    from bench.overhead import Breakdown

    breakdown = Breakdown()
    inner = breakdown.timed(lambda: time.sleep(0.10), "inner")

    def outer_work():
        time.sleep(0.05)
        inner()
        start = time.perf_counter()
        time.sleep(0.10)  # someone else's, excluded as the interleaved timer excludes its own
        breakdown.exclude(time.perf_counter() - start)

    outer = breakdown.timed(outer_work, "outer")
    outer()  # inactive: not counted
    assert breakdown.totals == {}
    breakdown.active = True
    outer()
    outer()
    assert 0.2 <= breakdown.totals["inner"] < 0.2 + 0.15
    assert 0.1 <= breakdown.totals["outer"] < 0.1 + 0.15  # the 2 x 0.10 s of inner and excluded left out


def test_the_hand_loop_figures_are_medians_of_paired_steps():
    """The difference and ratio are medians over pairs of steps that ran back to back, not differences
    of medians: a load that slows one pair slows both of its steps."""
    from bench.report import overhead_table, summarise

    raw = {
        "step_times_s": [0.010, 0.030, 0.011, 0.012, 0.050],
        "step_cpu_times_s": [0.009, 0.010, 0.010, 0.011, 0.012],
        "hand_step_times_s": [0.009, 0.029, 0.010, 0.010, 0.010],
        "hand_step_cpu_times_s": [0.008, 0.009, 0.009, 0.010, 0.011],
        "breakdown_s": {"batch": 2e-4, "copy": 0.0, "callbacks": 1e-4, "logging": 0.0, "scheduler": 1e-4,
                        "step_program": 5e-4, "part_hooks": 0.0},
        "flops_per_step": None,
    }  # fmt: skip
    summary = summarise("simcse", raw, 64, None)
    # pairs' differences: 1, 1, 1, 2, 40 ms -> 1 ms; the medians' difference would be 12 - 10 = 2 ms
    assert summary["overhead_per_step_s"] == pytest.approx(0.001)
    assert summary["overhead_cpu_per_step_s"] == pytest.approx(0.001)
    assert summary["hand_step_time_s"] == pytest.approx(0.010)
    assert summary["step_time_vs_hand"] == pytest.approx(0.010 / 0.009)  # ratios 1.11, 1.03, 1.1, 1.2, 5
    row = overhead_table({"simcse": {**raw, **summary}}).splitlines()[2].split(" | ")
    # the Trainer's loop: the 1 ms difference less batch, callbacks and scheduler (0.4 ms)
    assert row[5:13] == ["1.00", "0.20", "0.00", "0.10", "0.00", "0.10", "0.60", "0.50"]


@pytest.mark.e2e
def test_bench_times_the_run_script_beside_the_hand_loop_on_cpu_micro(tmp_path, monkeypatch):
    monkeypatch.setenv("CSE_DATA_DIR", DATA)
    out = tmp_path / "bench.json"
    argv = ["--profile", "cpu-micro", "--methods", "simcse,adcse+mixcse", "--steps", "3", "--warmup_steps", "2",
            "--train_file", WIKI_HEAD, "--bert_tokenizer", os.path.join(TOKENIZERS, "bert-base-uncased"),
            "--threads", "1", "--output_json", str(out)]  # fmt: skip
    assert bench_main(argv) == 0
    report = json.loads(out.read_text())
    assert report["profile"]["hidden_size"] == 8 and report["settings"]["hand_loop"]
    for name in ("simcse", "adcse+mixcse"):
        result = report["methods"][name]
        assert len(result["hand_step_times_s"]) == len(result["step_times_s"]) == 3
        assert all(t > 0 for t in result["hand_step_times_s"])
        assert set(result["breakdown_s"]) == {"batch", "copy", "callbacks", "logging", "scheduler", "step_program",
                                               "part_hooks"}  # fmt: skip
        assert result["breakdown_s"]["batch"] > 0 and result["breakdown_s"]["step_program"] > 0
        assert result["argv"][result["argv"].index("--attn_implementation") + 1] == "eager"
    assert report["methods"]["adcse+mixcse"]["breakdown_s"]["part_hooks"] > 0  # AdCSE's after-step update


def test_the_gpu_checks_bench_every_method_captured():
    """scripts/gpu_checks.sh: the bench stage measures the baseline, bench-all every other method of
    the bench (its variants, the field's methods and the composition), so a method added to the
    registry is measured without editing the script."""
    from bench.profiles import BASELINE, COMPOSITION, METHODS, SENTENCE_TRANSFORMERS

    script = os.path.join(REPO, "scripts", "gpu_checks.sh")
    others = (
        subprocess.run(
            ["bash", "-c", f'. <(sed -n "/^others()/,/^}}/p" {script}) && others'],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONPATH": REPO},
        )
        .stdout.strip()
        .split(",")
    )
    assert sorted([BASELINE, SENTENCE_TRANSFORMERS, *others]) == sorted(METHODS)
    assert {"esimcse", "promptbert", "cotbert", "diffcse", "sgbert-opt", COMPOSITION} <= set(others)
    with open(script, encoding="utf-8") as f:
        assert '--methods "$(others)"' in f.read()
