"""What each term of a method's loss contributes: ``python -m cse.diagnostics --method M ...`` runs
``--num_batches`` real training batches of ``--batch_size`` sentences through the method's own model,
loss and trainer (built as its ``run_*.py`` builds them, from the same flags; ``--parts a,b``: a
composition's, as ``run_cse.py`` builds it) and prints, per term,
its raw value, weight, weighted value, the L2 norm of its gradient on the encoder's trainable
weights and its share ||g_t|| / sum_s ||g_s|| (:func:`cse.trainer.term_gradients`), each the mean
over the batches. Nothing is trained: the weights stay as loaded.

For V-advCSE it also reports the divergence F of the batch's final perturbation with independent
dropout masks (the training default: dropout and BatchNorm disagreement plus r) and with shared
ones (r alone), and ||r||. ``--output_json`` keeps the table with the settings and the
``environment`` block. docs/diagnostics.md has the measurements on all-MiniLM-L6-v2.

    python -m cse.diagnostics --method vadvcse --model_name_or_path DIR --train_file wiki1m_for_simcse.txt
    python -m cse.diagnostics --parts mixcse,vadvcse --model_name_or_path DIR --train_file wiki1m_for_simcse.txt
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import tempfile
from dataclasses import dataclass, field

from transformers import set_seed

from . import composition, registry
from .atomic import write_json
from .build import build
from .environment import check_min_versions, collect_environment
from .errors import CSEUsageError, run_cli
from .pipeline import build_trainer
from .trainer import term_gradients


@dataclass
class DiagnosticsArguments:
    num_batches: int = field(default=1, metadata={"help": "Training batches to average over."})
    batch_size: int = field(default=32, metadata={"help": "Sentences per batch."})
    output_json: str | None = field(
        default=None, metadata={"help": "Also write the table, settings and environment here."}
    )

    def __post_init__(self):
        if self.num_batches < 1 or self.batch_size < 2:
            raise ValueError(
                f"need --num_batches >= 1 and --batch_size >= 2, got {self.num_batches}, {self.batch_size}"
            )


def parse(method: str | None, argv: list[str]):
    """``(run, diag_args)``: the run of the method (or variant) ``method`` as its run script parses
    it, else of the composition ``argv``'s ``--parts`` names, as ``run_cse.py`` does
    (:func:`cse.composition.parse`)."""
    if method is None:
        return composition.parse(argv, extra=(DiagnosticsArguments,))
    record, implied = registry.variant(method)
    return composition.parse([*implied, *argv], extra=(DiagnosticsArguments,), preset=record)


def diagnose(method: str | None, argv: list[str]) -> dict:
    run, diag_args = parse(method, argv)
    model_args, data_args, training_args, parts = run.model_args, run.data_args, run.training_args, run.parts
    training_args.per_device_train_batch_size = diag_args.batch_size  # before the run's global batch is read
    set_seed(training_args.seed)
    model, loss = build(list(parts), model_args)
    # no evaluation runs, so no evaluation data is read
    trainer = build_trainer(run, model, loss, eval_dataset=())
    for part in parts:
        part.begin(trainer, resumed=False)  # as a run's start: SARCSE's token frequencies
    model.train()
    batches, extras = [], {}
    for step, batch in enumerate(trainer.get_train_dataloader()):
        if step == diag_args.num_batches:
            break
        inputs = {k: v.to(training_args.device) for k, v in batch.items()}
        terms = trainer.step_terms(model, inputs, separate=True).terms
        stats = term_gradients(terms, trainer.encoder_parameters())
        batches.append({k: v.item() for k, v in stats.items()})
        for part in parts:
            for key, reading in part.readings(trainer, model, inputs).items():
                extras.setdefault(key, []).append(reading)
    if len(batches) < diag_args.num_batches:
        raise CSEUsageError(
            f"the corpus gave {len(batches)} batches of {diag_args.batch_size}, not {diag_args.num_batches}"
        )
    mean = lambda key, rows: sum(row[key] for row in rows) / len(rows)  # noqa: E731
    names = [key.removeprefix("term_share_") for key in batches[0] if key.startswith("term_share_")]
    weights = trainer.term_weights()  # every term the step gives has one
    table = {}
    for name in names:
        weighted, weight = mean(f"term_{name}", batches), weights[name]
        table[name] = {
            "raw": weighted / weight if weight else None,
            "weight": weight,
            "weighted": weighted,
            "grad_norm": mean(f"term_grad_norm_{name}", batches),
            "share": mean(f"term_share_{name}", batches),
        }
    report = {
        "method": method or run.record.name,
        "num_batches": diag_args.num_batches,
        "batch_size": diag_args.batch_size,
        "terms": table,
        "per_batch": batches,
        "settings": {
            "model": dataclasses.asdict(model_args),
            "data": dataclasses.asdict(data_args),
            "method": run.method_settings or {},
            "seed": training_args.seed,
        },
        "environment": collect_environment(training_args),
    }
    for name, rows in extras.items():
        report[name] = {key: mean(key, rows) for key in rows[0]}
    if diag_args.output_json:
        os.makedirs(os.path.dirname(os.path.abspath(diag_args.output_json)), exist_ok=True)
        write_json(diag_args.output_json, report, default=str)
    return report


def format_report(report: dict) -> str:
    fmt = lambda x: "n/a" if x is None else f"{x:.4g}"  # noqa: E731
    lines = [
        f"{report['method']}: mean of {report['num_batches']} batch(es) of {report['batch_size']}",
        "| term | raw value | weight | weighted value | grad norm (encoder) | share |",
        "|---|---|---|---|---|---|",
    ]
    for name, row in report["terms"].items():
        cells = [row[key] for key in ("raw", "weight", "weighted", "grad_norm", "share")]
        lines.append(f"| {name} | " + " | ".join(fmt(x) for x in cells) + " |")
    if "vadv" in report:
        v = report["vadv"]
        lines.append(
            f"F, independent dropout masks: {fmt(v['independent'])}; shared masks (r alone): {fmt(v['shared'])}; "
            f"mean ||r_i||: {fmt(v['perturbation_norm'])}"
        )
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    """This command's own flags: ``--method`` or ``--parts``, and :class:`DiagnosticsArguments`'; every
    other flag is the method's run script's (``run_cse.py``'s with ``--parts``). :func:`main` reads
    ``--method`` and hands the others on as given: they are declared here for ``--help``."""
    parser = argparse.ArgumentParser(
        prog="python -m cse.diagnostics",
        description="Per-term values and gradient shares of a method's loss, or of a composition's.",
        epilog="Every other flag is the method's run script's (python run_<method>.py --help), or with --parts "
        "run_cse.py's (python run_cse.py --parts a,b --help): e.g. --model_name_or_path, --train_file, "
        "--vadv_reduction.",
        allow_abbrev=False,
    )
    parser.add_argument(
        "--method",
        choices=registry.variant_names(),
        help="The method (or variant) whose loss to read, built as its run script builds it.",
    )
    parser.add_argument(
        "--parts",
        default=argparse.SUPPRESS,
        metavar="A,B",
        help="Instead of --method: the parts of a composition, as run_cse.py takes them.",
    )
    for flag in dataclasses.fields(DiagnosticsArguments):
        default = "" if flag.default is None else f" Default: {flag.default}."
        parser.add_argument(
            f"--{flag.name}", default=argparse.SUPPRESS, metavar=flag.name.upper(), help=flag.metadata["help"] + default
        )
    return parser


def main(argv: list[str] | None = None) -> dict:
    check_min_versions()
    argv = list(sys.argv[1:] if argv is None else argv)
    known, rest = build_parser().parse_known_args(argv)
    handed_on = {name: value for name, value in vars(known).items() if name != "method"}
    rest += [item for name, value in handed_on.items() for item in (f"--{name}", value)]
    if (known.method is None) == ("parts" not in handed_on):
        raise CSEUsageError(
            "name a method (--method) or a composition (--parts), not both"
            if "parts" in handed_on
            else "--method or --parts is missing",
            hint=f"--method {registry.variant_names()[0]}, or --parts mixcse,vadvcse",
        )
    if any(arg == "--output_dir" or arg.startswith("--output_dir=") for arg in rest):
        report = diagnose(known.method, rest)
    else:  # nothing is saved, but the Trainer wants a directory
        with tempfile.TemporaryDirectory(prefix="cse-diagnostics-") as output_dir:
            report = diagnose(known.method, [*rest, "--output_dir", output_dir])
    print(format_report(report))
    return report


if __name__ == "__main__":
    run_cli(main)
