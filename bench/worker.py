"""One method, one process: ``python -m bench.worker SPEC.json RESULT.json``.

Runs the method's ``run_<method>.main`` with the spec's command line and a :class:`StepTimer`, then
times the evaluations the method's trainer runs. Each method gets a process of its own so that peak
memory, allocator state and compiled kernels do not carry over from one method to the next.
"""

from __future__ import annotations

import importlib
import json
import statistics
import sys
import time

from cse.atomic import write_json
from cse.evaluation import STS_DEV_TASKS, SentEvalSuite

from .overhead import Breakdown, InterleavedTimer
from .timer import StepTimer, synchronize

# Name -> (mode, tasks): STS-B dev alone; the dev suite the Trainer runs every eval_steps; the 7 STS test sets.
EVAL_SUITES = {
    "stsb_dev": ("dev", ("STSBenchmark",)),
    "dev_suite": ("dev", STS_DEV_TASKS),
    "sts_test": ("test", None),
}


def time_evaluation(trainer, suites: list[str], repeats: int, senteval_data_dir: str | None) -> dict:
    """Median seconds of ``trainer.evaluate`` on each suite over ``repeats`` runs, after a warm-up
    encoding of a few batches (the first pass pays for allocator growth and kernel selection)."""
    loaded = {
        name: SentEvalSuite("sts", EVAL_SUITES[name][0], senteval_data_dir, tasks=EVAL_SUITES[name][1])
        for name in suites
    }
    trainer.encode(next(iter(loaded.values())).sentences[: 4 * trainer.args.per_device_eval_batch_size])
    timings = {}
    for name, suite in loaded.items():
        seconds = []
        for _ in range(repeats):
            synchronize(trainer.args.device)
            start = time.perf_counter()
            trainer.evaluate(suite)
            synchronize(trainer.args.device)
            seconds.append(time.perf_counter() - start)
        timings[name] = {"sentences": len(suite), "seconds": seconds, "median_s": statistics.median(seconds)}
    return timings


def run(spec: dict) -> dict:
    if spec.get("hand_loop"):
        breakdown = Breakdown()
        breakdown.install(timed=not spec["captured"])
        timer = InterleavedTimer(spec["warmup_steps"], spec["steps"], breakdown, capture=spec["captured"])
    else:
        timer = StepTimer(spec["warmup_steps"], spec["steps"], count_flops=spec["count_flops"])
    trainer = importlib.import_module(spec["script"]).main(spec["argv"], callbacks=[timer])
    step_times = timer.step_times()  # first: it says so if training stopped short
    peak_bytes, peak_kind = timer.peak_memory
    result = {
        "step_times_s": step_times,
        "step_cpu_times_s": timer.step_times(cpu=True),
        "flops_per_step": timer.flops_per_step,
        "peak_memory_bytes": peak_bytes,
        "peak_memory_kind": peak_kind,
        # which step ran: the Trainer's, or the whole step captured as CUDA graphs (and which shapes)
        "step_path": getattr(trainer, "step_path", "eager"),
        "captured_shapes": list(getattr(getattr(trainer, "step_graphs", None), "captured", None) or []),
    }
    if spec.get("hand_loop"):
        result["hand_step_times_s"] = timer.hand_times
        result["hand_step_cpu_times_s"] = timer.hand_cpu_times
        if not spec["captured"]:
            result["breakdown_s"] = timer.breakdown.per_step(spec["steps"])
    if spec["eval_repeats"] and spec["eval_suites"]:
        result["eval"] = time_evaluation(trainer, spec["eval_suites"], spec["eval_repeats"], spec["senteval_data_dir"])
    return result


def main(argv: list[str] | None = None) -> None:
    spec_path, result_path = argv if argv is not None else sys.argv[1:]
    with open(spec_path, encoding="utf-8") as f:
        spec = json.load(f)
    result = run(spec)
    write_json(result_path, result)


if __name__ == "__main__":
    main()
