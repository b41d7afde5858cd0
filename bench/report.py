"""From raw timings to the benchmark's figures: step-time statistics, throughput, overhead and FLOPs
relative to SimCSE, MFU and the projected wall-clock of a full reproduction run; and the table."""

from __future__ import annotations

import statistics

from .profiles import BASELINE, FULL_RUN_EVALS, FULL_RUN_STEPS, METHODS, SENTENCE_TRANSFORMERS


def percentile(values: list[float], q: float) -> float:
    """The ``q``-quantile (0..1) by linear interpolation between order statistics."""
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def mfu(flops_per_step: float, step_time_s: float, peak_flops_per_s: float) -> float:
    """Model FLOPs utilisation: achieved model FLOP/s over the hardware's peak FLOP/s."""
    return flops_per_step / step_time_s / peak_flops_per_s


def projected_run_s(step_time_s: float, dev_suite_s: float | None) -> float | None:
    """Wall-clock of one epoch of wiki1m at batch 64 with the dev suite every 125 steps."""
    if dev_suite_s is None:
        return None
    return FULL_RUN_STEPS * step_time_s + FULL_RUN_EVALS * dev_suite_s


def summarise(method: str, raw: dict, batch_size: int, peak_flops_per_s: float | None) -> dict:
    """A worker's raw result plus the figures derived from it alone."""
    times = raw["step_times_s"]
    median = statistics.median(times)
    evals = raw.get("eval", {})
    dev_suite = evals.get("dev_suite", {}).get("median_s")
    summary = {
        "step_time_s": {"median": median, "p10": percentile(times, 0.1), "p90": percentile(times, 0.9)},
        "step_cpu_time_s": statistics.median(raw["step_cpu_times_s"]),
        "sentences_per_s": batch_size / median,
        "projected_full_run_s": projected_run_s(median, dev_suite),
    }
    if "hand_step_times_s" in raw:
        # step by step: each difference is of two steps that ran back to back, under the same load
        hand = raw["hand_step_times_s"]
        summary["hand_step_time_s"] = statistics.median(hand)
        summary["overhead_per_step_s"] = statistics.median(t - h for t, h in zip(times, hand))
        summary["step_time_vs_hand"] = statistics.median(t / h for t, h in zip(times, hand))
        # the process's CPU time, less disturbed by other jobs on a shared CPU than wall-clock time
        pairs = zip(raw["step_cpu_times_s"], raw["hand_step_cpu_times_s"])
        summary["overhead_cpu_per_step_s"] = statistics.median(t - h for t, h in pairs)
    if raw["flops_per_step"] is not None and peak_flops_per_s is not None:
        summary["mfu"] = mfu(raw["flops_per_step"], median, peak_flops_per_s)
    return summary


def add_baseline_ratios(results: dict) -> None:
    """Step time and counted FLOPs of each method over SimCSE's on the same shapes (batch x max
    length), with the method's overhead target where it has one. ``baseline`` names the SimCSE run used;
    nothing is added for a method whose shapes no successful SimCSE run shares. With a successful
    ``st-mnrl`` run, ``step_time_vs_st`` is each method's step time over it, at its shapes."""
    baselines = {
        _shape_key(result): name
        for name, result in results.items()
        if name.startswith(BASELINE) and "step_time_s" in result
    }
    for method, result in results.items():
        name = baselines.get(_shape_key(result))
        if "step_time_s" not in result or name is None:
            continue
        base = results[name]
        result["baseline"] = name
        result["step_time_vs_simcse"] = result["step_time_s"]["median"] / base["step_time_s"]["median"]
        result["cpu_time_vs_simcse"] = result["step_cpu_time_s"] / base["step_cpu_time_s"]
        if result.get("flops_per_step") and base.get("flops_per_step"):
            result["flops_vs_simcse"] = result["flops_per_step"] / base["flops_per_step"]
        target = METHODS[method].overhead_target if method in METHODS else None
        if target is not None:
            result["target_vs_simcse"] = target
            result["meets_target"] = result["step_time_vs_simcse"] <= target
    reference = results.get(SENTENCE_TRANSFORMERS, {})
    if "step_time_s" not in reference:
        return
    for result in results.values():
        if "step_time_s" in result and _shape_key(result) == _shape_key(reference):
            result["step_time_vs_st"] = result["step_time_s"]["median"] / reference["step_time_s"]["median"]


def _shape_key(result: dict) -> tuple | None:
    shapes = result.get("shapes")
    return None if shapes is None else (shapes["batch_size"], shapes["max_seq_length"])


def _fmt(value, spec: str, missing: str = "-") -> str:
    return missing if value is None else format(value, spec)


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds / 60:.0f} min"


COLUMNS = (
    "method",
    "batch x len",
    "step ms (p10-p90)",
    "sent/s",
    "vs SimCSE (target)",
    "vs sentence-transformers",
    "CPU time vs SimCSE",
    "GFLOP/step",
    "FLOPs vs SimCSE",
    "MFU",
    "peak mem",
    "STS-B dev s",
    "dev suite s",
    "STS test s",
    "full run",
)


BREAKDOWN = ("batch", "copy", "callbacks", "logging", "scheduler")
IN_BOTH = ("step_program", "part_hooks")
OVERHEAD_COLUMNS = (
    "method",
    "run script ms (p10-p90)",
    "hand loop ms",
    "difference ms",
    "ratio",
    "CPU-time difference ms",
    *(f"{name} ms" for name in BREAKDOWN),
    "Trainer's loop ms",
    "in both: step program ms",
    "in both: parts' hooks ms",
)


def overhead_table(results: dict) -> str:
    """The run script's step beside the hand-written loop's (medians), and the mean per step of each
    piece of the Trainer's step (:mod:`bench.overhead`); the Trainer's loop is the difference less the
    pieces the hand loop lacks; the step program's Python and the parts' hooks run in both loops."""
    lines = ["| " + " | ".join(OVERHEAD_COLUMNS) + " |", "|" + "---|" * len(OVERHEAD_COLUMNS)]
    for method, r in results.items():
        if "hand_step_time_s" not in r:
            continue
        step = r["step_time_s"]
        # no breakdown of a captured run: its pieces are not timed (bench.overhead)
        parts = r.get("breakdown_s", {})
        rest = r["overhead_per_step_s"] - sum(parts[name] for name in BREAKDOWN) if parts else None
        row = [
            method + ("" if r.get("step_path", "eager") == "eager" else f" ({r['step_path']})"),
            f"{step['median'] * 1e3:.2f} ({step['p10'] * 1e3:.2f}-{step['p90'] * 1e3:.2f})",
            f"{r['hand_step_time_s'] * 1e3:.2f}",
            f"{r['overhead_per_step_s'] * 1e3:.2f}",
            f"{r['step_time_vs_hand']:.2f}",
            f"{r['overhead_cpu_per_step_s'] * 1e3:.2f}",
            *(_fmt(parts.get(name) and parts[name] * 1e3, ".2f") for name in BREAKDOWN),
            _fmt(rest and rest * 1e3, ".2f"),
            *(_fmt(parts.get(name) and parts[name] * 1e3, ".2f") for name in IN_BOTH),
        ]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def table(results: dict) -> str:
    """A markdown table, one row per method; a failed method's row says so."""
    rows = []
    for method, r in results.items():
        if "error" in r:
            rows.append([method, "FAILED: " + r["error"]] + [""] * (len(COLUMNS) - 2))
            continue
        step = r["step_time_s"]
        ratio = _fmt(r.get("step_time_vs_simcse"), ".2f")
        if "target_vs_simcse" in r:
            ratio += f" (<= {r['target_vs_simcse']}: {'ok' if r['meets_target'] else 'MISSED'})"
        evals = r.get("eval", {})
        path = r.get("step_path", "eager")
        rows.append(
            [
                method + ("" if path == "eager" else f" ({path})"),
                f"{r['shapes']['batch_size']} x {r['shapes']['max_seq_length']}",
                f"{step['median'] * 1e3:.1f} ({step['p10'] * 1e3:.1f}-{step['p90'] * 1e3:.1f})",
                f"{r['sentences_per_s']:.0f}",
                ratio,
                _fmt(r.get("step_time_vs_st"), ".2f"),
                _fmt(r.get("cpu_time_vs_simcse"), ".2f"),
                _fmt(r["flops_per_step"] and r["flops_per_step"] / 1e9, ".1f"),
                _fmt(r.get("flops_vs_simcse"), ".2f"),
                _fmt(r.get("mfu") and 100 * r["mfu"], ".1f") + ("%" if "mfu" in r else ""),
                f"{r['peak_memory_bytes'] / 2**20:.0f} MiB",
                *(_fmt(evals.get(name, {}).get("median_s"), ".2f") for name in ("stsb_dev", "dev_suite", "sts_test")),
                _duration(r["projected_full_run_s"]),
            ]
        )
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)
