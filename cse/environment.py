"""Provenance: the software and hardware a result was produced with, recorded in every results JSON
(``environment``) so that a number can be traced to a cse revision, library versions and a GPU."""

from __future__ import annotations

import os
import platform
import subprocess
from importlib import metadata

import torch

import cse

PACKAGES = ("torch", "transformers", "accelerate", "datasets", "deepspeed", "sentence-transformers")
REPOSITORY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def package_version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def git_revision(path: str = REPOSITORY) -> dict | None:
    """``{"commit", "dirty"}`` of the checkout cse runs from, or ``None`` outside a git checkout (an
    installed copy) or without git."""
    try:
        commit = subprocess.run(
            ["git", "-C", path, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
        status = subprocess.run(
            ["git", "-C", path, "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return {"commit": commit, "dirty": bool(status.strip())}


def collect_environment(training_args=None, precision: str | None = None) -> dict:
    """The ``environment`` block: cse version and git revision, Python, library versions, CUDA and
    cuDNN, GPU names and count, and, given the run's ``TrainingArguments``, its world size and
    precision (``precision`` overrides it, for runs without ``TrainingArguments``)."""
    cuda = torch.cuda.is_available()
    env = {
        "cse_version": cse.__version__,
        "git": git_revision(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "versions": {name: package_version(name) for name in PACKAGES},
        "cuda": torch.version.cuda if cuda else None,
        "cudnn": torch.backends.cudnn.version() if cuda else None,
        "gpus": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if cuda else [],
        "gpu_count": torch.cuda.device_count() if cuda else 0,
    }
    if training_args is not None:
        env["world_size"] = training_args.world_size
        if precision is None:
            precision = "bf16" if training_args.bf16 else "fp16" if training_args.fp16 else "fp32"
    else:
        env["world_size"] = int(os.environ.get("WORLD_SIZE", 1))
    env["precision"] = precision or "fp32"
    return env
