"""Provenance: the software and hardware a result was produced with, recorded in every results JSON
(``environment``) so that a number can be traced to a cse revision, library versions and a GPU."""

from __future__ import annotations

import os
import platform
import subprocess
from importlib import metadata

import torch
from packaging.version import Version

import cse

from .errors import CSEUsageError

PACKAGES = ("torch", "transformers", "accelerate", "datasets", "deepspeed", "sentence-transformers")
# The oldest releases cse is tested with (requirements.txt's lower bounds); every entry point checks them.
MIN_VERSIONS = {"torch": "2.13.0", "transformers": "5.23.0", "datasets": "5.2.0", "accelerate": "1.15.0"}
REPOSITORY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def package_version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def check_min_versions() -> None:
    """Refuse to run on a library older than :data:`MIN_VERSIONS` (a ``CSEUsageError`` naming the
    upgrade), in the spirit of transformers' ``check_min_version``: an older release can fail far into
    a run, or train differently without failing."""
    for package, minimum in MIN_VERSIONS.items():
        installed = package_version(package)
        hint = f"pip install -U '{package}>={minimum}'"
        if installed is None:
            raise CSEUsageError(f"{package} is not installed; cse needs >= {minimum}", hint=hint)
        if Version(installed) < Version(minimum):
            raise CSEUsageError(f"{package} {installed} is installed; cse needs >= {minimum}", hint=hint)


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
    }
    env["gpu_count"] = len(env["gpus"])
    if training_args is not None:
        env["world_size"] = training_args.world_size
        if precision is None:
            precision = "bf16" if training_args.bf16 else "fp16" if training_args.fp16 else "fp32"
    else:
        env["world_size"] = int(os.environ.get("WORLD_SIZE", 1))
    env["precision"] = precision or "fp32"
    return env
