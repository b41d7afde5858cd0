"""``python3 -m sweep``: plan the runs of one or more paper tables and run them with an executor.

    bash scripts/mixcse/table3_ablations.sh --plan                 # what it would run, and for how long
    bash scripts/mixcse/table3_ablations.sh --executor gpus        # its runs over this machine's GPUs
    bash scripts/mixcse/table3_ablations.sh --executor slurm --slurm_partition gpu --slurm_time 4:00:00
    python3 -m sweep all --plan                                     # every table together
    python3 -m sweep scripts/vadvcse/table1_sts.sh scripts/vadvcse/table2_transfer.sh --executor gpus

A table script hands its arguments to the driver: the options below are the driver's, anything else
goes to the table's training runs, and must be a flag that every run script it goes to accepts
(:mod:`sweep.flags`). Tables come first, by path or ``all``."""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys

from cse.errors import CSEUsageError

from .flags import check_run_flags
from .plan import plan_tables, table_scripts
from .record import MTEB_ENV, REPO, TableRefused
from .report import plan_text

EXECUTORS = ("sequential", "gpus", "slurm")
# what CUDA_VISIBLE_DEVICES takes: an index, or a GPU's or MIG instance's UUID
GPU_ID = re.compile(r"\d+|(GPU|MIG)-[0-9A-Za-z/-]+")


class Parser(argparse.ArgumentParser):
    """argparse's parser, whose errors (a value of the wrong type, an option without its value) are
    one ``error:`` line and a hint, as every refusal here, rather than the usage block."""

    def error(self, message):
        raise CSEUsageError(message, hint=f"{self.prog} --help lists the options")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="python3 -m sweep",
        description="Plan a paper table's runs and run them: one after another, over this machine's GPUs, "
        "or as SLURM jobs. Arguments that are not the driver's go to the table's training runs: "
        "flags that every run script they go to accepts.",
        allow_abbrev=False,
    )
    parser.add_argument("--plan", action="store_true", help="print the plan and its GPU time; run nothing")
    parser.add_argument(
        "--executor",
        default="sequential",
        help="sequential (default: one job after another), gpus (one job per GPU at a time) or slurm",
    )
    parser.add_argument(
        "--mteb",
        action="store_true",
        help="also evaluate each run with MTEB (senteval_eval.py --protocol mteb) and print an MTEB column and table",
    )
    parser.add_argument("--gpus", help="gpus: the GPU ids to use, e.g. 0,1,2,3 (default: CUDA_VISIBLE_DEVICES, or all)")
    parser.add_argument("--max_parallel", type=int, help="gpus and slurm: at most this many jobs at once")
    slurm = parser.add_argument_group("slurm (each also a key of --slurm_config: partition, time, ...)")
    slurm.add_argument("--slurm_config", help="a YAML file of the settings below (the flags override it)")
    slurm.add_argument("--slurm_partition", help="the partition to submit to (default: the cluster's)")
    slurm.add_argument(
        "--slurm_time",
        help="each job's time limit: minutes, or H:MM:SS (default: the partition's limit; 24:00:00 if it has none)",
    )
    slurm.add_argument(
        "--slurm_gpus_per_job", type=int, help="GPUs of each job, the processes of each run (default NUM_GPUS, or 1)"
    )
    slurm.add_argument("--slurm_account", help="the account to charge")
    slurm.add_argument(
        "--slurm_option",
        action="append",
        metavar="KEY=VALUE",
        help="any other sbatch option, as its long name and value (qos=high, constraint=a100); repeatable",
    )
    slurm.add_argument(
        "--slurm_no_wait", action="store_true", help="submit and return (the jobs go on; the same command follows them)"
    )
    return parser


def split_arguments(parser: argparse.ArgumentParser, argv: list[str]) -> tuple[list[str], list[str], list[str]]:
    """``(tables, driver options, run flags)`` of a command line that mixes them: the driver's options
    are taken out wherever they are; the tables are the arguments before the first other flag. A
    driver option given twice is refused (argparse would keep the last one without a word), but for
    the repeatable ``--slurm_option``."""
    takes_value, repeatable = {}, set()
    for action in parser._actions:
        for option in action.option_strings:
            takes_value[option] = action.nargs != 0
            if isinstance(action, argparse._AppendAction):
                repeatable.add(option)
    tables, driver, rest, seen = [], [], [], set()
    i = 0
    while i < len(argv):
        arg = argv[i]
        name = arg.split("=", 1)[0]
        if name in takes_value:
            if name in seen and name not in repeatable:
                raise CSEUsageError(
                    f"{name} is given twice", hint=f"give {name} once (the sweep would otherwise keep the last one)"
                )
            seen.add(name)
            driver.append(arg)
            if takes_value[name] and "=" not in arg and i + 1 < len(argv):
                driver.append(argv[i + 1])
                i += 1
        elif not rest and not arg.startswith("-"):
            tables.append(arg)
        else:
            rest.append(arg)
        i += 1
    return tables, driver, rest


def positive(name: str, value: str) -> int:
    if not value.isdigit() or int(value) < 1:
        raise CSEUsageError(
            f"{name}={value} is not a positive number of processes", hint=f"unset {name} or set it to 1 or more"
        )
    return int(value)


def gpu_slots(option: str | None, processes: int, max_parallel: int | None) -> list[str]:
    """The CUDA_VISIBLE_DEVICES of each slot of the ``gpus`` executor: the GPU ids, ``processes`` a slot."""
    source = "--gpus"
    if option is None:
        source, option = "CUDA_VISIBLE_DEVICES", os.environ.get("CUDA_VISIBLE_DEVICES")
    if option is None:
        source, option = "nvidia-smi", _nvidia_smi_ids()
    if not option.strip():
        raise CSEUsageError(f"no GPU to run on ({source} lists none)", hint="name the GPUs: --gpus 0,1,2,3")
    ids = [gpu.strip() for gpu in option.split(",")]
    wrong = [gpu for gpu in ids if not GPU_ID.fullmatch(gpu)]
    if wrong:
        raise CSEUsageError(
            f"{source} {option}: {', '.join(repr(gpu) for gpu in wrong)} is not a GPU",
            hint="name GPUs by index (0,1,2,3) or UUID (GPU-..., MIG-...), as CUDA_VISIBLE_DEVICES does",
        )
    ids = [str(int(gpu)) if gpu.isdigit() else gpu for gpu in ids]  # 00 is GPU 0
    repeated = sorted({gpu for gpu in ids if ids.count(gpu) > 1})
    if repeated:
        raise CSEUsageError(
            f"{source} {option} names GPU {', '.join(repeated)} more than once",
            hint="name each GPU once: one run at a time per GPU",
        )
    if len(ids) % processes:
        raise CSEUsageError(
            f"NUM_GPUS={processes} does not divide the {len(ids)} GPUs of {source} {option}",
            hint="each run takes NUM_GPUS of them: list a multiple of NUM_GPUS",
        )
    slots = [",".join(ids[i : i + processes]) for i in range(0, len(ids), processes)]
    return slots[:max_parallel] if max_parallel else slots


def _nvidia_smi_ids() -> str:
    if shutil.which("nvidia-smi") is None:
        return ""
    proc = subprocess.run(
        ["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"], capture_output=True, text=True, check=False
    )
    return ",".join(proc.stdout.split()) if proc.returncode == 0 else ""


def resolve_tables(names: list[str]) -> list[str]:
    if not names:
        raise CSEUsageError("no table to plan", hint="name table scripts (scripts/<method>/<table>.sh) or `all`")
    scripts = []
    for name in names:
        if name == "all":
            scripts += [os.path.join(REPO, s) for s in table_scripts()]
        elif not os.path.isfile(name):
            raise CSEUsageError(f"no table script {name}", hint="name a scripts/<method>/<table>.sh, or `all`")
        else:
            scripts.append(os.path.abspath(name))
    return list(dict.fromkeys(scripts))


def print_out(text: str) -> int:
    """Print ``text`` on stdout. A reader that stops early (``--plan | head``) ends the command quietly,
    as it ends any command of a pipe: status 141 (SIGPIPE), no traceback."""
    try:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()
    except BrokenPipeError:
        # Python's recipe (the signal module's docs): stdout is pointed at /dev/null, so that the
        # interpreter's own flush at exit does not fail on the closed pipe again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE
    return 0


def main(argv=None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    if "-h" in argv or "--help" in argv:
        parser.print_help()
        return 0
    names, driver, run_flags = split_arguments(parser, argv)
    args = parser.parse_args(driver)
    if args.executor not in EXECUTORS:
        raise CSEUsageError(f"unknown executor {args.executor!r}", hint=f"--executor {' | '.join(EXECUTORS)}")
    slurm_flags = [a for a in driver if a.startswith("--slurm_")]
    if slurm_flags and args.executor != "slurm":
        raise CSEUsageError(
            f"{slurm_flags[0].split('=')[0]} is an option of the slurm executor", hint="add --executor slurm"
        )
    if args.gpus is not None and args.executor != "gpus":
        raise CSEUsageError("--gpus is an option of the gpus executor", hint="add --executor gpus")
    if args.max_parallel is not None and (args.executor == "sequential" or args.max_parallel < 1):
        raise CSEUsageError(
            f"--max_parallel {args.max_parallel}: a number of jobs at once (1 or more) for the gpus or slurm executor",
            hint="add --executor gpus (or slurm), or leave --max_parallel out",
        )
    processes = positive("NUM_GPUS", os.environ.get("NUM_GPUS", "1"))
    slurm_settings = None
    if args.executor == "slurm":
        from .slurm import settings

        slurm_settings = settings(args, processes, check_cluster=not args.plan)
        processes = slurm_settings.processes
    # the GPUs named are checked under --plan too; those of the machine only when the runs start
    slots = None
    if args.executor == "gpus" and (args.gpus is not None or not args.plan):
        slots = gpu_slots(args.gpus, processes, args.max_parallel)
    scripts = resolve_tables(names)
    # the table scripts read it while they are recorded (scripts/lib.sh)
    record_env = {key: value for key, value in os.environ.items() if key != MTEB_ENV}
    record_env.update({MTEB_ENV: "1"} if args.mteb else {})
    os.chdir(REPO)  # the tables name their directories relative to the repository, as their scripts run there
    if len(scripts) > 1 and os.environ.get("OUTPUT_DIR"):
        raise CSEUsageError(
            "OUTPUT_DIR names one table's directory, and this sweep runs several tables",
            hint="unset OUTPUT_DIR; RESULT_ROOT moves every table's directories",
        )
    try:
        plan = plan_tables(scripts, run_flags, env=record_env, plan_only=args.plan)
    except TableRefused as refused:
        sys.stderr.write(refused.stderr)
        return refused.status
    check_run_flags(plan.tables, run_flags, {o for action in parser._actions for o in action.option_strings})
    for node in plan.nodes:
        if node.run.batch % processes:
            raise CSEUsageError(
                f"{processes} processes a run do not divide the global batch of {node.run.batch} ({node.directory})",
                hint="set NUM_GPUS (or --slurm_gpus_per_job) to a divisor of every run's batch",
            )
    if args.plan:
        return print_out(plan_text(plan, args.executor))
    if plan.notes:
        raise CSEUsageError("; ".join(plan.notes))
    if args.executor == "slurm":
        from .slurm import SlurmExecutor

        return SlurmExecutor(slurm_settings, dict(os.environ)).run(plan)
    from .local import run_local

    return run_local(plan, slots or [None], processes, dict(os.environ))
