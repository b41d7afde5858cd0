#!/usr/bin/env python
"""Evaluate a sentence encoder under the SentEval protocol (see cse/evaluation/sts.py).

    python senteval_eval.py --model_name_or_path result/my-simcse --mode test --task_set sts

prints the papers' table (Spearman x 100; transfer tasks: accuracy x 100) and, with --output_json,
writes every figure. --analysis adds alignment, uniformity and the largest angle on STS-B.

    python senteval_eval.py --model_name_or_path result/my-simcse --protocol both
    python senteval_eval.py --model_name_or_path result/my-simcse --protocol mteb --mteb_tasks STS12,SciFact

--protocol mteb evaluates the same encoder with mteb (cse/evaluation/mteb_protocol.py): the seven STS
tasks from the local SentEval files (no hub needed), any other MTEB task from the hub; its results go
to --mteb_output_dir in mteb's layout, and into the model card's model-index when the model directory
holds one written by cse. --protocol both prints the two rows side by side.
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
from cse.errors import CSEUsageError, nearest_existing, run_cli
from cse.evaluation import MODES, TASK_SETS, evaluate, mteb_protocol
from cse.evaluation.analysis import stsb_analysis
from cse.model_card import add_eval_results
from cse.modeling import load_model
from cse.paths import senteval_dir
from cse.pooling import POOLERS
from cse.ranges import at_least, check_values, seed
from cse.results import markdown_table
from cse.run_dir import run_format
from cse.run_names import CSE_CONFIG_NAME

PROTOCOLS = ("senteval", "mteb", "both")
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
        "--trust_remote_code",
        action="store_true",
        help=f"load an encoder class that the model's {CSE_CONFIG_NAME} names outside the cse package (its module "
        "runs; it must be importable): only for a model whose code you trust",
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
    mteb = parser.add_argument_group("MTEB (--protocol mteb or both)")
    mteb.add_argument(
        "--protocol",
        choices=PROTOCOLS,
        default="senteval",
        help="senteval (default), mteb, or both (the two rows side by side)",
    )
    mteb.add_argument(
        "--mteb_tasks",
        default=None,
        help=f"comma-separated MTEB task names (default {','.join(mteb_protocol.OFFLINE_TASKS)}, which need no hub)",
    )
    mteb.add_argument(
        "--mteb_source",
        choices=mteb_protocol.SOURCES,
        default="local",
        help="local (default): the seven STS tasks from the SentEval files, other tasks from the hub; "
        "hub: every task from the hub",
    )
    mteb.add_argument(
        "--mteb_output_dir",
        default=None,
        help="mteb's result folder (ResultCache layout; default: <model directory>/mteb_results)",
    )
    return parser


def parse_args(argv=None):
    """The command line's arguments; numbers out of range and an --output_json that could not be
    written are refused before any work."""
    args = build_parser().parse_args(argv)
    check_values(vars(args), RANGES)
    if args.output_json:
        check_output_file(args.output_json, "--output_json")
    check_mteb_args(args)
    return args


def check_mteb_args(args) -> None:
    """The MTEB options make sense together: given only with --protocol mteb or both, MTEB's test
    splits only (no --mode dev), a result folder known; the task names are mteb's."""
    if args.protocol == "senteval":
        given = [f"--{k}" for k in ("mteb_tasks", "mteb_output_dir") if getattr(args, k) is not None]
        given += ["--mteb_source"] if args.mteb_source != "local" else []
        if given:
            raise CSEUsageError(f"{given[0]} is an option of the MTEB evaluation", hint="add --protocol mteb (or both)")
        return
    if args.mode == "dev":
        raise CSEUsageError("MTEB evaluates its tasks' test splits: no --mode dev", hint="drop --mode dev")
    if args.protocol == "mteb" and (args.analysis or args.tasks):
        raise CSEUsageError(
            "--analysis and --tasks are options of the SentEval evaluation",
            hint="use --protocol both, or --mteb_tasks for MTEB's tasks",
        )
    if args.mteb_output_dir is None:
        # the results go beside a run's other results; any other folder (a hub cache, an installed
        # package, a user's model) is not ours to write into
        if run_format(args.model_name_or_path) is None:
            raise CSEUsageError(
                f"{args.model_name_or_path} is no run directory of this package to keep MTEB's results in",
                hint="name a folder: --mteb_output_dir DIR",
            )
        args.mteb_output_dir = os.path.join(args.model_name_or_path, "mteb_results")
    existing = nearest_existing(args.mteb_output_dir)
    if not os.path.isdir(existing):
        raise CSEUsageError(f"--mteb_output_dir {args.mteb_output_dir}: {existing} is a file", hint="name a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise CSEUsageError(
            f"--mteb_output_dir {args.mteb_output_dir} cannot be written by this user",
            hint="choose a folder you may write",
        )
    args.mteb_tasks = mteb_protocol.parse_task_names(args.mteb_tasks or ",".join(mteb_protocol.OFFLINE_TASKS))


def main(argv=None) -> dict:
    check_min_versions()
    args = parse_args(argv)
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    # the hub's MTEB tasks are loaded (or refused, offline) before the model and any encoding
    mteb_tasks = (
        mteb_protocol.resolve_tasks(args.mteb_tasks, args.senteval_data_dir, args.mteb_source)
        if args.protocol != "senteval"
        else []
    )
    model = load_model(args.model_name_or_path, pooler_type=args.pooler, trust_remote_code=args.trust_remote_code)
    model = model.to(args.device)
    start = time.perf_counter()

    def encode(sentences):
        return model.encode(
            sentences, batch_size=args.batch_size, max_length=args.max_seq_length, autocast_dtype=DTYPES[args.dtype]
        ).numpy()

    if args.protocol == "both":  # MTEB's STS tasks ask for SentEval's sentences again: each is encoded once
        encode = mteb_protocol.KeptEmbeddings(encode)

    report = {}
    if args.protocol != "mteb":
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
    name = os.path.basename(os.path.normpath(args.model_name_or_path))
    if mteb_tasks:
        mteb_report = run_mteb(args, model, encode, mteb_tasks)
        if args.protocol == "mteb":
            report = mteb_report
        else:
            report["mteb"] = mteb_report
            report["score_groups"][mteb_protocol.GROUP] = mteb_report["scores"]
    report.update(
        model=args.model_name_or_path,
        pooler=model.pooler_type,
        seconds=round(time.perf_counter() - start, 2),
        environment=collect_environment(precision=args.dtype),
    )
    print_tables(report, name, args.protocol)
    if args.analysis:
        analysis = {k: report["analysis"][k] for k in ("alignment", "uniformity", "largest_angle")}
        print(markdown_table({name: analysis}, list(analysis)))
    if args.output_json:
        os.makedirs(os.path.dirname(os.path.abspath(args.output_json)), exist_ok=True)
        write_json(args.output_json, report)
    return report


def run_mteb(args, model, encode, tasks) -> dict:
    """The MTEB report of ``model`` on ``tasks`` (see :mod:`cse.evaluation.mteb_protocol`); its
    scores also go into the model card's ``model-index`` when the model directory holds a card of cse's."""
    encoder = mteb_protocol.make_encoder(
        encode, mteb_protocol.model_name(args.model_name_or_path), getattr(model.config, "hidden_size", None)
    )
    results = mteb_protocol.run(encoder, tasks, args.mteb_output_dir)
    report = mteb_protocol.report_of(results, os.path.abspath(args.mteb_output_dir))
    logging.getLogger(__name__).info("MTEB's results, in its layout: %s", os.path.abspath(args.mteb_output_dir))
    if os.path.isdir(args.model_name_or_path):
        card = add_eval_results(args.model_name_or_path, mteb_protocol.eval_results(results))
        if card:
            report["model_card"] = card
            logging.getLogger(__name__).info("MTEB scores written into the model card's model-index: %s", card)
    return report


def print_tables(report: dict, name: str, protocol: str) -> None:
    """Each score kind's table; with both protocols, SentEval's STS row and MTEB's row in one table
    (MTEB's SICK-R scores all 9,927 SICK pairs, SentEval's its test split)."""
    groups = dict(report["score_groups"])
    if protocol == "both":
        senteval_scores, mteb = groups.pop("sts", None), groups.pop(mteb_protocol.GROUP)
        rows = {f"{name} (MTEB)": mteb}
        if senteval_scores is not None:
            rows = {f"{name} (SentEval)": senteval_scores, **rows}
        columns = list(dict.fromkeys([*(senteval_scores or {}), *mteb]))
        columns.remove("Avg.")
        print(markdown_table(rows, [*columns, "Avg."]))
    for scores in groups.values():
        print(markdown_table({name: scores}, list(scores)))


if __name__ == "__main__":
    run_cli(main)
