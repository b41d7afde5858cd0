"""What the benchmark runs: the model shapes of each profile and, for each method, the run script and
paper configuration it is timed with.

Every method is timed at its own paper shapes (batch, max_seq_length), read from its
``configs/<method>_*.yaml``: the bench only swaps in a random backbone of the profile's size and
switches off everything that is not a training step (evaluation, saving, mixed precision it did
not ask for).
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass

from cse.arguments import read_config_file

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# One full reproduction run: an epoch of wiki1m (1,000,000 sentences) at batch 64, STS-B dev + SICK-R
# trial every 125 steps (SimCSE's protocol, which the papers here follow).
FULL_RUN_STEPS = 15_625
FULL_RUN_EVALS = FULL_RUN_STEPS // 125


@dataclass(frozen=True)
class Profile:
    device: str  # "cpu" or "cuda"
    num_hidden_layers: int
    hidden_size: int
    num_attention_heads: int
    intermediate_size: int
    warmup_steps: int
    steps: int
    eval_repeats: int
    methods: tuple[str, ...]
    bf16: bool

    def backbone_config(self) -> dict:
        return {
            "num_hidden_layers": self.num_hidden_layers,
            "hidden_size": self.hidden_size,
            "num_attention_heads": self.num_attention_heads,
            "intermediate_size": self.intermediate_size,
        }


@dataclass(frozen=True)
class Method:
    script: str  # the run_<method>.py module whose main() is timed
    config: str  # the paper's configuration, relative to the repository root
    backbone: str  # "bert" or "roberta": the paper's backbone family
    args: tuple[str, ...] = ()  # flags after the config that select this variant
    evaluates: bool = True  # its trainer runs the SentEval suites (CSETrainer.evaluate)

    def shapes(self) -> dict:
        config = read_config_file(os.path.join(REPO, self.config))
        paper = {"batch_size": config["per_device_train_batch_size"], "max_seq_length": config["max_seq_length"]}
        return {**paper, **shape_overrides(list(self.args))}


def shape_overrides(argv: list[str]) -> dict:
    """The batch size and max length that command-line flags set, if any."""
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    parser.add_argument("--per_device_train_batch_size", dest="batch_size", type=int)
    parser.add_argument("--max_seq_length", type=int)
    overrides, _ = parser.parse_known_args(argv)
    return {k: v for k, v in vars(overrides).items() if v is not None}


METHODS = {
    "simcse": Method("run_simcse", "configs/simcse_bert_base.yaml", "bert"),
    # The baseline at SG-BERT's shapes: overheads are measured against SimCSE on the same shapes.
    "simcse-16x128": Method(
        "run_simcse",
        "configs/simcse_bert_base.yaml",
        "bert",
        ("--per_device_train_batch_size", "16", "--max_seq_length", "128"),
    ),
    "adcse": Method("run_adcse", "configs/adcse_bert_base.yaml", "bert"),
    "mixcse": Method("run_mixcse", "configs/mixcse_bert_base.yaml", "bert"),
    # Early stopping needs evaluations, which the timed loop leaves out.
    "sgbert-sg": Method(
        "run_sgbert",
        "configs/sgbert_bert_base.yaml",
        "bert",
        ("--loss_variant", "base", "--early_stopping_patience", "0"),
    ),
    "sgbert-opt": Method(
        "run_sgbert",
        "configs/sgbert_bert_base.yaml",
        "bert",
        ("--loss_variant", "opt3", "--early_stopping_patience", "0"),
    ),
    "vadvcse": Method("run_vadvcse", "configs/vadvcse_bert_base.yaml", "bert", ("--num_steps", "1")),
    "sarcse": Method("run_sarcse", "configs/sarcse_roberta_base.yaml", "roberta"),
    # sentence-transformers' recipe for the same objective (bench/st_mnrl.py), at SimCSE's shapes
    "st-mnrl": Method("bench.st_mnrl", "configs/simcse_bert_base.yaml", "bert", evaluates=False),
}

# Overhead targets (BENCHMARKS.md): step time relative to SimCSE's on the same profile.
OVERHEAD_TARGETS = {"adcse": 1.5, "mixcse": 1.05, "sarcse": 1.3, "sgbert-opt": 1.6, "vadvcse": 2.3}

PROFILES = {
    "cpu-tiny": Profile(
        "cpu", 2, 128, 2, 512, warmup_steps=3, steps=20, eval_repeats=3, methods=tuple(METHODS), bf16=False
    ),
    # all-MiniLM-L6-v2's shape
    "cpu-minilm": Profile(
        "cpu", 6, 384, 12, 1536, warmup_steps=2, steps=10, eval_repeats=1, methods=tuple(METHODS), bf16=False
    ),
    "gpu-base": Profile(
        "cuda", 12, 768, 12, 3072, warmup_steps=20, steps=50, eval_repeats=2, methods=tuple(METHODS), bf16=True
    ),
    "gpu-large": Profile(
        "cuda", 24, 1024, 16, 4096, warmup_steps=10, steps=30, eval_repeats=1, methods=("simcse",), bf16=True
    ),
}
