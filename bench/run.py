"""The benchmark's command line: ``python -m bench --profile cpu-tiny --output_json bench.json``.

For each method of the profile it saves a randomly initialised backbone of the profile's shape
(with the real tokenizer) to a work directory, runs the method's own ``run_<method>.py`` pipeline
on it in a process of its own (:mod:`bench.worker`), at the paper's batch size and max length,
on real wiki1m sentences, with evaluation, saving and logging kept out of the timed steps, and
prints one table row per method.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

from cse.atomic import write_json
from cse.environment import collect_environment
from cse.registry import BACKBONE, REPO, BenchShape, shape_overrides

from .hardware import describe, measure_bf16_matmul_peak
from .profiles import METHODS, PROFILES, SENTENCE_TRANSFORMERS, Profile
from .report import add_baseline_ratios, overhead_table, summarise, table
from .worker import EVAL_SUITES


def _data_path(*parts: str) -> str | None:
    root = os.environ.get("CSE_DATA_DIR")
    return os.path.join(root, *parts) if root else None


def default_train_file() -> str | None:
    """The corpus head ``wiki1m_head.txt`` if present (tokenised in seconds), else the full wiki1m corpus."""
    for name in ("wiki1m_head.txt", "wiki1m_for_simcse.txt"):
        path = _data_path(name)
        if path and os.path.isfile(path):
            return path
    return None


def default_tokenizer(name: str) -> str:
    """``$CSE_DATA_DIR/../models/tokenizers/<name>`` where a local copy of the data keeps them, else
    the hub name."""
    path = _data_path(os.pardir, "models", "tokenizers", name)
    return os.path.normpath(path) if path and os.path.isdir(path) else name


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("--profile", required=True, choices=list(PROFILES))
    parser.add_argument("--methods", help=f"comma-separated, of {', '.join(METHODS)} (default: the profile's)")
    parser.add_argument("--steps", type=int, help="timed optimizer steps per method (default: the profile's)")
    parser.add_argument("--warmup_steps", type=int, help="untimed steps before them (default: the profile's)")
    parser.add_argument(
        "--eval_repeats", type=int, help="timed runs of each evaluation suite; 0 skips them (default: the profile's)"
    )
    parser.add_argument(
        "--eval_suites", default=",".join(EVAL_SUITES), help=f"comma-separated, of {', '.join(EVAL_SUITES)}"
    )
    parser.add_argument(
        "--bf16", action=argparse.BooleanOptionalAction, help="the Trainer's bf16 (default: on for GPU profiles)"
    )
    parser.add_argument("--tf32", action="store_true", help="the Trainer's --tf32 true")
    parser.add_argument("--torch_compile", action="store_true", help="the Trainer's --torch_compile true")
    parser.add_argument(
        "--cuda_graphs",
        action="store_true",
        help="each method's whole step captured as CUDA graphs over its compiled model (--cuda_graphs true "
        "--torch_compile true); sentence-transformers' recipe is timed eager and compiled beside them",
    )
    parser.add_argument(
        "--extra", default="", help='raw flags for every run script, e.g. --extra "--optim adamw_torch_fused"'
    )
    parser.add_argument(
        "--fixed_shapes",
        action="store_true",
        help="the run scripts' --pad_to_max_length: every batch exactly batch x max_seq_length (static shapes, for "
        "torch.compile's CUDA graphs)",
    )
    parser.add_argument(
        "--hand_loop",
        action="store_true",
        help="time each method's steps beside a hand-written loop's on the same batches, interleaved "
        "(bench/overhead.py; captured too under --cuda_graphs); on by default for cpu-micro",
    )
    parser.add_argument("--no_flops", action="store_true", help="do not count FLOPs (nor MFU)")
    parser.add_argument("--train_file", default=default_train_file(), help="default $CSE_DATA_DIR/wiki1m_head.txt")
    parser.add_argument("--senteval_data_dir", help="default $CSE_DATA_DIR/senteval")
    parser.add_argument("--bert_tokenizer", default=default_tokenizer("bert-base-uncased"))
    parser.add_argument("--roberta_tokenizer", default=default_tokenizer("roberta-base"))
    parser.add_argument("--threads", type=int, help="OMP_NUM_THREADS of each method's process (default: unchanged)")
    parser.add_argument("--workdir", help="random models, logs and run outputs (default: a temporary directory)")
    parser.add_argument("--output_json", help="write the results here")
    return parser


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(argv)
    profile = PROFILES[args.profile]
    args.methods = args.methods.split(",") if args.methods else list(profile.methods)
    unknown = [m for m in args.methods if m not in METHODS]
    if unknown:
        parser.error(f"unknown method(s) {', '.join(unknown)}; choose from {', '.join(METHODS)}")
    args.eval_suites = [s for s in args.eval_suites.split(",") if s]
    unknown = [s for s in args.eval_suites if s not in EVAL_SUITES]
    if unknown:
        parser.error(f"unknown evaluation suite(s) {', '.join(unknown)}; choose from {', '.join(EVAL_SUITES)}")
    for name in ("steps", "warmup_steps", "eval_repeats"):
        if getattr(args, name) is None:
            setattr(args, name, getattr(profile, name))
    if args.bf16 is None:
        args.bf16 = profile.bf16
    if args.train_file is None or not os.path.isfile(args.train_file):
        parser.error(f"training corpus not found ({args.train_file}): set $CSE_DATA_DIR or pass --train_file")
    return args


def save_random_backbone(family: str, profile: Profile, tokenizer_name: str, directory: str) -> str:
    """A randomly initialised BERT or RoBERTa of the profile's shape, saved with the real tokenizer:
    timing a step needs the shapes, not the pretrained weights."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel, RobertaConfig, RobertaModel

    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_name)
    if family == "bert":
        model = BertModel(BertConfig(vocab_size=len(tokenizer), **profile.backbone_config()))
    else:  # roberta-base's layout: positions offset by the padding index, one token type
        config = RobertaConfig(
            vocab_size=len(tokenizer),
            max_position_embeddings=514,
            pad_token_id=tokenizer.pad_token_id,
            type_vocab_size=1,
            layer_norm_eps=1e-5,
            **profile.backbone_config(),
        )
        model = RobertaModel(config)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def shapes(method: BenchShape, extra: str) -> dict:
    """The batch size and max length a method runs at: its paper configuration's and variant flags',
    unless ``--extra`` overrides them."""
    return {**method.shapes(), **shape_overrides(shlex.split(extra))}


def method_argv(
    method: BenchShape, args: argparse.Namespace, profile: Profile, model_dir: str, run_dir: str, captured: bool
) -> list[str]:
    """The method's paper configuration with a random backbone, and nothing but training steps;
    compiled and captured (``--cuda_graphs``) if ``captured``."""
    total_steps = args.warmup_steps + args.steps
    train_file = args.train_file
    argv = [
        os.path.join(REPO, method.config),
        # a shape's flag may name the random backbone itself (DiffCSE's generator): BACKBONE
        *(model_dir if arg == BACKBONE else arg for arg in method.args),
        "--model_name_or_path", model_dir,
        "--output_dir", os.path.join(run_dir, "output"),
        "--train_file", train_file,
        # Enough sentences for every step in one epoch, and no time spent tokenising the rest.
        "--max_train_samples", str(shapes(method, args.extra)["batch_size"] * total_steps),
        "--max_steps", str(total_steps),
        "--eval_strategy", "no",
        "--save_strategy", "no",
        "--load_best_model_at_end", "false",
        "--final_eval", "none",
        "--logging_steps", str(total_steps + 1),
        "--report_to", "none",
        "--disable_tqdm", "true",
        "--fp16", "false",
        "--bf16", str(args.bf16).lower(),
    ]  # fmt: skip
    if profile.device == "cpu":
        argv += ["--use_cpu", "true"]
    if args.tf32:
        argv += ["--tf32", "true"]
    if args.torch_compile or captured:
        argv += ["--torch_compile", "true"]
    if captured:
        argv += ["--cuda_graphs", "true"]
    if args.fixed_shapes:
        argv += ["--pad_to_max_length", "true"]
    if args.senteval_data_dir:
        argv += ["--senteval_data_dir", args.senteval_data_dir]
    return argv + list(profile.run_args) + shlex.split(args.extra)


def runs(args: argparse.Namespace) -> list[tuple[str, str, argparse.Namespace]]:
    """``(label, method, settings)`` of each timed run: every method of ``args``, and under
    ``--cuda_graphs`` sentence-transformers' recipe also compiled (``st-mnrl-compiled``), which has no
    captured step of its own."""
    planned = []
    for name in args.methods:
        planned.append((name, name, args))
        if args.cuda_graphs and name == SENTENCE_TRANSFORMERS:
            planned.append((f"{name}-compiled", name, argparse.Namespace(**{**vars(args), "torch_compile": True})))
    return planned


def run_method(
    name: str, args: argparse.Namespace, profile: Profile, model_dir: str, workdir: str, label: str | None = None
) -> dict:
    """Run one method's worker process (its directory named ``label``, default ``name``); its raw
    result, or ``{"error": ...}`` with its log's tail."""
    method = METHODS[name]
    run_dir = os.path.join(workdir, label or name)
    os.makedirs(run_dir, exist_ok=True)
    captured = args.cuda_graphs and name != SENTENCE_TRANSFORMERS
    hand_loop = (args.hand_loop or profile.hand_loop) and name != SENTENCE_TRANSFORMERS
    spec = {
        "script": method.script,
        "argv": method_argv(method, args, profile, model_dir, run_dir, captured),
        "warmup_steps": args.warmup_steps,
        "steps": args.steps,
        # a replayed graph runs no operator the counter sees: the eager run of the same shapes counts them
        "count_flops": not args.no_flops and not captured and not hand_loop,
        # beside the run script's steps, a hand-written loop's on the same batches (bench.overhead)
        "hand_loop": hand_loop,
        "captured": captured,
        "eval_suites": args.eval_suites if method.evaluates else [],
        "eval_repeats": args.eval_repeats,
        "senteval_data_dir": args.senteval_data_dir,
    }
    spec_path, result_path, log_path = (os.path.join(run_dir, f) for f in ("spec.json", "result.json", "log.txt"))
    write_json(spec_path, spec)
    env = dict(os.environ)
    if args.threads:
        env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(args.threads)
    start = time.perf_counter()
    with open(log_path, "w", encoding="utf-8") as log:
        process = subprocess.run(
            [sys.executable, "-m", "bench.worker", spec_path, result_path],
            cwd=REPO,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    wall = time.perf_counter() - start
    if process.returncode != 0:
        with open(log_path, encoding="utf-8", errors="replace") as f:
            tail = f.read().splitlines()[-25:]
        return {"error": f"exit status {process.returncode} (log: {log_path})", "log_tail": tail, "argv": spec["argv"]}
    with open(result_path, encoding="utf-8") as f:
        result = json.load(f)
    return {**result, "argv": spec["argv"], "process_wall_s": wall}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    profile = PROFILES[args.profile]
    command = ["python", "-m", "bench", *(sys.argv[1:] if argv is None else argv)]
    if profile.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise SystemExit(f"profile {args.profile} needs a CUDA GPU and torch sees none")
    hardware = describe(profile.device)
    peak = measure_bf16_matmul_peak() if profile.device == "cuda" else None
    if peak:
        print(f"measured bf16 matmul peak: {peak['flops_per_s'] / 1e12:.0f} TFLOP/s", flush=True)

    settings = {
        "methods": args.methods,
        "steps": args.steps,
        "warmup_steps": args.warmup_steps,
        "eval_repeats": args.eval_repeats,
        "eval_suites": args.eval_suites,
        "bf16": args.bf16,
        "tf32": args.tf32,
        "torch_compile": args.torch_compile,
        "cuda_graphs": args.cuda_graphs,
        "hand_loop": args.hand_loop or profile.hand_loop,
        "fixed_shapes": args.fixed_shapes,
        "extra": args.extra,
        "threads": args.threads or os.environ.get("OMP_NUM_THREADS"),
        "train_file": args.train_file,
    }
    results = {}
    report = {
        "command": shlex.join(command),
        "profile": {"name": args.profile, "device": profile.device, **profile.backbone_config()},
        "settings": settings,
        "hardware": hardware,
        "environment": collect_environment(precision="bf16" if args.bf16 else "fp32"),
        "bf16_matmul_peak": peak,
        "methods": results,
    }
    workdir = args.workdir or tempfile.mkdtemp(prefix="cse-bench-")
    os.makedirs(workdir, exist_ok=True)
    models = {}
    try:
        for label, name, settings in runs(args):
            family = METHODS[name].backbone
            if family not in models:
                tokenizer = args.bert_tokenizer if family == "bert" else args.roberta_tokenizer
                models[family] = save_random_backbone(
                    family, profile, tokenizer, os.path.join(workdir, f"{family}-random")
                )
            print(f"[{args.profile}] {label} ...", flush=True)
            result = run_method(name, settings, profile, models[family], workdir, label)
            result["shapes"] = shapes(METHODS[name], args.extra)
            # Other jobs on the machine while this method ran (a shared CPU makes every figure slower).
            result["load_average_1_min_after"] = os.getloadavg()[0]
            if "error" not in result:
                result.update(summarise(name, result, result["shapes"]["batch_size"], peak and peak["flops_per_s"]))
                print(
                    f"[{args.profile}] {label}: {result['step_time_s']['median'] * 1e3:.1f} ms/step "
                    f"({result.get('step_path', 'eager')})",
                    flush=True,
                )
            else:
                print(
                    f"[{args.profile}] {label} FAILED: {result['error']}\n" + "\n".join(result["log_tail"]), flush=True
                )
            results[label] = result
            add_baseline_ratios(results)
            hardware["load_average_at_end"] = list(os.getloadavg())
            # After every method, so that an interrupted run keeps what it measured; atomically, so
            # that an interruption while writing leaves the previous report whole.
            if args.output_json:
                write_json(args.output_json, report)
    finally:
        if not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    print(table(results))
    if any("hand_step_time_s" in result for result in results.values()):
        print(overhead_table(results))
    if args.output_json:
        print(f"results written to {args.output_json}")
    return 1 if any("error" in r for r in results.values()) else 0
