#!/usr/bin/env python
"""Compare the loss curves of two training runs, step by step: the check that a speed option (bf16,
attention implementation, torch.compile, another GPU) leaves the results alone.

Train both runs with the same seed and ``--logging_steps 1`` (each step's loss is then logged), e.g.

    python run_simcse.py configs/simcse_bert_base.yaml --max_steps 100 --logging_steps 1 \\
        --eval_strategy no --save_strategy no --load_best_model_at_end false --final_eval none \\
        --output_dir result/fp32
    python run_simcse.py ... --bf16 true --output_dir result/bf16
    python scripts/speed_check.py result/fp32 result/bf16 --max_relative 0.02

It prints the number of steps compared and the largest absolute and relative difference and the mean
difference (bias), and exits 1 if ``--max_relative`` is given and exceeded.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # run as a file, not a module
from cse.errors import CSEUsageError, run_cli  # noqa: E402
from cse.run_names import TRAINER_STATE_NAME  # noqa: E402


def loss_curve(run_dir: str) -> dict[int, float]:
    """``{step: loss}`` from a run's ``trainer_state.json``."""
    path = os.path.join(run_dir, TRAINER_STATE_NAME)
    if not os.path.isfile(path):
        raise CSEUsageError(f"{path} not found: is {run_dir} a finished training run's output directory?")
    with open(path, encoding="utf-8") as f:
        history = json.load(f)["log_history"]
    return {entry["step"]: entry["loss"] for entry in history if "loss" in entry}


def compare(reference: dict[int, float], other: dict[int, float]) -> dict:
    steps = sorted(set(reference) & set(other))
    if not steps:
        raise CSEUsageError("the two runs have no logged step in common", hint="log both with --logging_steps 1")
    differences = [other[s] - reference[s] for s in steps]
    relative = [abs(d) / abs(reference[s]) if reference[s] else float("inf") for d, s in zip(differences, steps)]
    mean_loss = sum(abs(reference[s]) for s in steps) / len(steps)
    return {
        "steps": len(steps),
        "max_absolute": max(abs(d) for d in differences),
        "max_relative": max(relative),
        "worst_step": steps[relative.index(max(relative))],
        "relative_bias": sum(differences) / len(steps) / mean_loss if mean_loss else float("nan"),
    }


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("reference", help="output directory of the reference run")
    parser.add_argument("other", help="output directory of the run to compare")
    parser.add_argument("--max_relative", type=float, help="fail if any step's loss differs by more (e.g. 0.02)")
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    result = compare(loss_curve(args.reference), loss_curve(args.other))
    print(
        f"{result['steps']} steps: max |difference| {result['max_absolute']:.3g}, max relative "
        f"{result['max_relative']:.3g} (step {result['worst_step']}), mean difference / mean loss "
        f"{result['relative_bias']:+.3g}"
    )
    if args.max_relative is not None and result["max_relative"] > args.max_relative:
        print(f"FAIL: relative difference above {args.max_relative}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main))
