"""The GPU time a run will take, from the step times the benchmark measured (BENCHMARKS.md).

The figures are the eager bf16 medians on one H200 at dc3f040 (BENCHMARKS.md, "Every method at
dc3f040": the ``gpu-base`` profile, BERT-base shapes; SG-BERT's over 150 timed steps, as its 50-step
medians are unstable), with the dev suite the Trainer runs every ``eval_steps`` timed in the same
run. A run takes

    steps x step + (steps // eval_steps) x dev suite

with ``steps`` = ``--max_steps`` when given, else one pass over the corpus per epoch at the run's
global batch (wiki1m: 1,000,000 sentences; SG-BERT's STS-B sentences: 17,256; a ``--train_file`` that
exists: its lines). A large backbone multiplies both by SimCSE's bert-large / bert-base step ratio
(49.9 / 43.7 ms, ``gpu-large`` against ``gpu-base``); a global batch above the measured one multiplies
the step by their ratio (an upper bound: the measured step is bound by kernel launches, not by
arithmetic), and a smaller one leaves it as it is. Evaluations after training are not included."""

from __future__ import annotations

import functools
import math
import os

import yaml

from .record import REPO, Run

SOURCE = "BENCHMARKS.md: eager bf16 step on one H200 at dc3f040 (gpu-base)"
# method -> (median step in ms, the batch it was measured at, dev suite in s)
MEASURED = {
    "simcse": (43.7, 64, 0.66),
    "adcse": (61.2, 64, 0.60),
    "mixcse": (38.8, 64, 0.69),
    "sarcse": (49.4, 64, 1.09),
    "vadvcse": (84.0, 64, 0.41),
    "sgbert-sg": (63.9, 16, 0.41),
    "sgbert-opt": (51.4, 16, 0.66),
}
LARGE = 49.9 / 43.7
WIKI1M_SENTENCES = 1_000_000
STSB_SENTENCES = 17_256


def method(run: Run) -> str | None:
    """The benchmark's name for the method ``run`` trains, None for a script it does not time."""
    name = os.path.basename(run.script).removeprefix("run_").removesuffix(".py")
    if name == "sgbert":
        return "sgbert-sg" if setting(run, "loss_variant") == "base" else "sgbert-opt"
    return name if name in MEASURED else None


@functools.lru_cache(maxsize=None)
def _load(path: str) -> dict:
    with open(os.path.join(REPO, path), encoding="utf-8") as f:
        return yaml.safe_load(f) or {}


def _config(run: Run) -> dict:
    return {} if run.config is None else _load(run.config)


def setting(run: Run, name: str):
    """The value ``run`` trains with: its flag, else its configuration's (None when neither sets it)."""
    value = run.flag(name)
    return _config(run).get(name) if value is None else value


def _corpus_sentences(run: Run) -> int | None:
    train_file = setting(run, "train_file")
    if train_file is None:
        return STSB_SENTENCES if method(run) in ("sgbert-sg", "sgbert-opt") else WIKI1M_SENTENCES
    try:
        with open(train_file, "rb") as f:
            return sum(1 for _ in f)
    except OSError:
        return None


def steps(run: Run) -> int | None:
    max_steps = int(setting(run, "max_steps") or -1)
    if max_steps > 0:
        return max_steps
    sentences = _corpus_sentences(run)
    if sentences is None:
        return None
    return math.ceil(sentences / run.batch) * math.ceil(float(setting(run, "num_train_epochs") or 3))


def seconds(run: Run) -> float | None:
    """The estimated GPU seconds of ``run``, None where they cannot be told (a method the benchmark does
    not time, a corpus that is not there)."""
    name, count = method(run), steps(run)
    if name is None or count is None:
        return None
    step_ms, measured_batch, dev_suite = MEASURED[name]
    scale = LARGE if "large" in str(setting(run, "model_name_or_path")) else 1.0
    step = step_ms / 1000 * max(1.0, run.batch / measured_batch)
    evaluations = count // int(setting(run, "eval_steps") or 500) if setting(run, "eval_strategy") != "no" else 0
    return scale * (count * step + evaluations * dev_suite)


def human(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
