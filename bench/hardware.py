"""The machine a benchmark ran on, and the GPU's bf16 matmul peak measured rather than looked up.
Library versions, revision and GPUs are the report's ``environment`` block (:mod:`cse.environment`)."""

from __future__ import annotations

import os
import platform
import statistics

import torch


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def describe(device: str) -> dict:
    """CPU (model, cores the process may use, load average), GPU name and memory."""
    info = {
        "cpu": cpu_model(),
        "cpu_cores_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "load_average_1_5_15": list(os.getloadavg()),
    }
    if device == "cuda":
        props = torch.cuda.get_device_properties(0)
        info["gpu"] = props.name
        info["gpu_memory_bytes"] = props.total_memory
        info["cuda"] = torch.version.cuda
    return info


def measure_bf16_matmul_peak(size: int = 8192, repeats: int = 20) -> dict:
    """The GPU's achievable bf16 matmul rate: median of ``repeats`` ``size``^3 matmuls timed with CUDA
    events, after a few untimed ones (clocks up, cuBLAS heuristics settled)."""
    a = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
    out = torch.empty_like(a)
    for _ in range(5):
        torch.matmul(a, b, out=out)
    seconds = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.matmul(a, b, out=out)
        end.record()
        end.synchronize()
        seconds.append(start.elapsed_time(end) / 1e3)
    del a, b, out
    torch.cuda.empty_cache()
    median = statistics.median(seconds)
    return {"size": size, "repeats": repeats, "median_s": median, "flops_per_s": 2 * size**3 / median}
