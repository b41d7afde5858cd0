#!/usr/bin/env python
"""Evaluate a sentence encoder under the SentEval protocol (see cse/evaluation/sts.py).

    python senteval_eval.py --model_name_or_path result/my-simcse --mode test --task_set sts

prints the papers' table (Spearman x 100; transfer tasks: accuracy x 100) and, with --output_json,
writes every figure. --analysis adds alignment, uniformity and the largest angle on STS-B.
"""

from __future__ import annotations

import argparse
import logging
import os
import time

import torch

from cse.arguments import check_output_file
from cse.atomic import write_json
from cse.environment import check_min_versions, collect_environment
from cse.errors import run_cli
from cse.evaluation import MODES, TASK_SETS, evaluate
from cse.evaluation.analysis import stsb_analysis
from cse.modeling import CSE_CONFIG_NAME, load_model
from cse.paths import senteval_dir
from cse.pooling import POOLERS
from cse.ranges import at_least, check_values, seed
from cse.results import markdown_table

DTYPES = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}
# The values of the numeric flags that make sense (cse.ranges), checked before any work.
RANGES = {
    "batch_size": (at_least(1), "sentences per encoding batch (default 128)"),
    "max_seq_length": (at_least(2), "leave room for the special tokens, or leave it out: no truncation"),
    "seed": (seed, "a whole number in [0, 2^32 - 1] (SentEval's 1111)"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False
    )
    parser.add_argument("--model_name_or_path", required=True, help="model directory or hub name")
    parser.add_argument(
        "--pooler", choices=POOLERS, default=None, help=f"default: the pooler recorded in the model's {CSE_CONFIG_NAME}"
    )
    parser.add_argument(
        "--mode",
        choices=MODES,
        default="test",
        help="dev: STS-B dev + SICK-R trial, transfer devacc (fasttest); test: test sets",
    )
    parser.add_argument(
        "--task_set", choices=sorted(TASK_SETS), default="sts", help="sts, transfer (MR ... MRPC) or full (both)"
    )
    parser.add_argument(
        "--analysis",
        action="store_true",
        help="also alignment (STS-B pairs with gold >= 4), uniformity and largest angle (STS-B sentences)",
    )
    parser.add_argument("--tasks", nargs="+", default=None, help="only these tasks of the set (e.g. MR SUBJ TREC)")
    parser.add_argument("--seed", type=int, default=1111, help="transfer-task classifiers' seed (SentEval's 1111)")
    parser.add_argument("--senteval_data_dir", default=None, help="default: $CSE_DATA_DIR/senteval")
    parser.add_argument("--output_json", default=None)
    parser.add_argument("--batch_size", type=int, default=128)
    parser.add_argument(
        "--max_seq_length", type=int, default=None, help="truncate sentences (default: no truncation, as SentEval)"
    )
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="fp32", help="autocast dtype for the encoder (GPU)")
    return parser


def parse_args(argv=None):
    """The command line's arguments; numbers out of range and an --output_json that could not be
    written are refused before any work."""
    args = build_parser().parse_args(argv)
    check_values(vars(args), RANGES)
    if args.output_json:
        check_output_file(args.output_json, "--output_json")
    return args


def main(argv=None) -> dict:
    check_min_versions()
    args = parse_args(argv)
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    model = load_model(args.model_name_or_path, pooler_type=args.pooler).to(args.device)
    start = time.perf_counter()

    def encode(sentences):
        return model.encode(
            sentences, batch_size=args.batch_size, max_length=args.max_seq_length, autocast_dtype=DTYPES[args.dtype]
        ).numpy()

    report = evaluate(
        encode,
        task_set=args.task_set,
        mode=args.mode,
        senteval_data_dir=args.senteval_data_dir,
        seed=args.seed,
        classifier_device=args.device,
        tasks=args.tasks,
        progress=True,
    )
    if args.analysis:
        report["analysis"] = stsb_analysis(encode, args.mode, senteval_dir(args.senteval_data_dir))
    report.update(
        model=args.model_name_or_path,
        pooler=model.pooler_type,
        seconds=round(time.perf_counter() - start, 2),
        environment=collect_environment(precision=args.dtype),
    )
    name = os.path.basename(os.path.normpath(args.model_name_or_path))
    for scores in report["score_groups"].values():
        print(markdown_table({name: scores}, list(scores)))
    if args.analysis:
        analysis = {k: report["analysis"][k] for k in ("alignment", "uniformity", "largest_angle")}
        print(markdown_table({name: analysis}, list(analysis)))
    if args.output_json:
        os.makedirs(os.path.dirname(os.path.abspath(args.output_json)), exist_ok=True)
        write_json(args.output_json, report)
    return report


if __name__ == "__main__":
    run_cli(main)
