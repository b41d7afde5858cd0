"""The documentation against the repository: every relative link resolves, and every ``--flag`` the
README, BENCHMARKS.md, docs/ and the shell scripts mention is one that some command of the repository
accepts."""

import glob
import importlib
import importlib.util
import os
import re
import sys

import pytest

from cse.arguments import ArgumentParser

from .conftest import REPO, import_example

DOCS = sorted(
    [os.path.join(REPO, "README.md"), os.path.join(REPO, "BENCHMARKS.md")]
    + glob.glob(os.path.join(REPO, "docs", "**", "*.md"), recursive=True)
)
SHELL_SCRIPTS = sorted(glob.glob(os.path.join(REPO, "scripts", "**", "*.sh"), recursive=True))
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
INLINE_CODE = re.compile(r"`([^`\n]+)`")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FLAG = re.compile(r"(?<![\w-])--[A-Za-z][\w-]*")

# Flags of other programs that the docs quote, each with where it comes from.
EXTERNAL_FLAGS = {
    "--config_file",  # accelerate launch
    "--multi_gpu",  # accelerate launch
    "--num_processes",  # accelerate launch
    "--machine_rank",  # accelerate launch (multi-node)
    "--nproc_per_node",  # torchrun
    "--lambdas",  # MixCSE's released training script, quoted as the setting we do not use
    "--pooling2",  # SG-BERT's released code (sentence-transformers 0.3.9), quoted against ours
    "--dup_type",  # ESimCSE's released train.py, quoted against ours
    "--neg_size",  # ESimCSE's released run.sh (its queue size), quoted against ours
    "--retry",  # curl, in scripts/download_data.sh
    "--signal",  # timeout, in scripts/gpu_checks.sh
    "--kill-after",  # timeout, in scripts/gpu_checks.sh
    "--maxfail",  # pytest, in scripts/gpu_checks.sh
    "--durations",  # pytest, in scripts/gpu_checks.sh
    "--test-only",  # sbatch, which the slurm executor asks before it submits
    "--format",  # pip list, in scripts/setup.sh
    "--version",  # pip, in scripts/setup.sh
}


def _rel(path):
    return os.path.relpath(path, REPO)


def _slug(heading):
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(path):
    with open(path, encoding="utf-8") as f:
        text = FENCE.sub("", f.read())
    seen, anchors = {}, set()
    for line in text.splitlines():
        if line.startswith("#"):
            slug = _slug(line.lstrip("#"))
            anchors.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
            seen[slug] = seen.get(slug, 0) + 1
    return anchors


def _relative_links(path):
    with open(path, encoding="utf-8") as f:
        text = FENCE.sub("", f.read())
    return [target for target in LINK.findall(text) if not re.match(r"[a-z]+:", target)]


@pytest.mark.parametrize("path", DOCS, ids=_rel)
def test_relative_links_resolve(path):
    broken = []
    for target in _relative_links(path):
        file_part, _, anchor = target.partition("#")
        resolved = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) if file_part else path
        if not os.path.exists(resolved):
            broken.append(f"{target}: no {_rel(resolved)}")
        elif anchor and (not resolved.endswith(".md") or anchor not in _anchors(resolved)):
            broken.append(f"{target}: no heading #{anchor} in {_rel(resolved)}")
    assert not broken, f"{_rel(path)}: " + "; ".join(broken)


def test_the_slug_rule_on_known_headings():
    assert _slug('The evaluation protocol, and why "all" matters') == "the-evaluation-protocol-and-why-all-matters"
    assert _slug("Evaluation frequency: 125 or 250 steps") == "evaluation-frequency-125-or-250-steps"


def _options(parser):
    return {option for action in parser._actions for option in action.option_strings if option.startswith("--")}


def _load_script(relative):
    name = relative.replace("/", "_")[:-3]
    spec = importlib.util.spec_from_file_location(name, os.path.join(REPO, relative))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # its dataclasses look their module up while being defined
    spec.loader.exec_module(module)
    return module


def _run_script_dataclasses(module_name):
    """The dataclasses ``run_<method>.main`` parses: its record's (the script runs ``run_method`` of it)."""
    module = importlib.import_module(module_name)
    return module.RECORD.argument_types


def _example_records():
    """The records of ``examples/*.py``, each a part that registers itself when imported: imported here
    into a copy of the registry, which is put back, so that no other test sees them."""
    paths = sorted(glob.glob(os.path.join(REPO, "examples", "*.py")))
    with pytest.MonkeyPatch.context() as patch:
        return [import_example(patch, path).RECORD for path in paths]


def _example_dataclasses():
    """The argument dataclasses of ``examples/*.py``."""
    return {record.method_arguments for record in _example_records()}


@pytest.fixture(scope="module")
def accepted_flags():
    import anli_eval
    import senteval_eval
    from bench import run as bench_run
    from cse import composition, diagnostics, plots, registry, results, stsb_corpus
    from sweep import cli as sweep_cli

    run_scripts = sorted(os.path.basename(p)[:-3] for p in glob.glob(os.path.join(REPO, "run_*.py")))
    # every method's preset, and run_cse.py, whose flags are the parts'
    presets = {shape.script for record in registry.records() for shape in record.bench.values()}
    assert {name for name in presets if name.startswith("run_")} | {"run_cse"} == set(run_scripts)
    dataclasses = {cls for name in run_scripts if name != "run_cse" for cls in _run_script_dataclasses(name)}
    dataclasses |= {composition.PartsArguments, *_example_dataclasses()}
    dataclasses |= {anli_eval.ANLIArguments, anli_eval.ANLITrainingArguments, diagnostics.DiagnosticsArguments}
    flags = set()
    for cls in dataclasses:  # one parser each: the methods' classes redefine shared fields
        flags |= _options(ArgumentParser(cls))
    parsers = [senteval_eval.build_parser(), results.build_parser(), plots.build_parser()]
    parsers += [stsb_corpus.build_parser(), bench_run.build_parser(), diagnostics.build_parser()]
    parsers += [_load_script(p).build_parser() for p in ("scripts/speed_check.py", "scripts/verify_data.py")]
    parsers.append(sweep_cli.build_parser())
    for parser in parsers:
        flags |= _options(parser)
    # a part's flags spelled with its part, which every composition takes (cse.composition)
    for record in [*registry.parts(), *(r for r in _example_records())]:
        for field in composition.flag_fields(record):
            flags |= {f"--{record.name}_{field}", f"--no_{record.name}_{field}"}
    return flags


def _documented_flags(path):
    """Flags in a markdown file's code blocks and inline code, or anywhere in a shell script."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if path.endswith(".sh"):
        return set(FLAG.findall(text))
    code = FENCE.findall(text) + INLINE_CODE.findall(FENCE.sub("", text))
    return {flag for snippet in code for flag in FLAG.findall(snippet)}


def test_flag_extraction():
    assert _documented_flags(os.path.join(REPO, "docs", "methods", "adcse.md")) >= {
        "--variant",
        "--no_adversaries",
        "--no_untied_dual_encoder",
    }


def test_the_parsers_hold_what_the_run_scripts_take(accepted_flags):
    # TrainingArguments' own fields, the shared and per-method dataclasses, and HfArgumentParser's
    # --no_ form of bool fields that default to True
    for flag in ("--output_dir", "--deepspeed", "--eval_steps", "--mix_lambda", "--loss_variant", "--theta"):
        assert flag in accepted_flags
    assert "--no_adversaries" in accepted_flags and "--no_stop_gradient" in accepted_flags
    assert "--not_a_flag" not in accepted_flags


@pytest.mark.parametrize("path", DOCS + SHELL_SCRIPTS, ids=_rel)
def test_every_documented_flag_exists(path, accepted_flags):
    unknown = sorted(_documented_flags(path) - accepted_flags - EXTERNAL_FLAGS)
    assert not unknown, f"{_rel(path)} mentions flags no command accepts: {unknown}"


def test_every_test_the_reliability_table_names_exists():
    """docs/reliability.md's tables of faults and bad inputs, and of the ways a sweep stops: each row
    names a test that exists."""
    with open(os.path.join(REPO, "docs", "reliability.md"), encoding="utf-8") as f:
        text = f.read()
    rows = []
    for heading, header, least in [
        ("## Every fault and bad input the tests cover", "| What you do", 40),
        ("## Sweeps: stopped, killed, and started again", "| How the sweep stops", 10),
    ]:
        table = text.split(heading, 1)[1].split("\n## ", 1)[0]
        found = [line for line in table.splitlines() if line.startswith("| ") and not line.startswith(header)]
        assert len(found) >= least, heading
        rows += found
    for row in rows:
        (named,) = re.findall(r"`(tests/\w+\.py)::(\w+)`", row) or [None]
        assert named is not None, f"a row without its test: {row}"
        path, name = named
        with open(os.path.join(REPO, path), encoding="utf-8") as f:
            assert re.search(rf"^def {name}\(", f.read(), re.M), f"{path}::{name} does not exist"
