"""A new method inside the repository is six files (docs/extending.md): a throwaway one, written into a
copy of the checkout, changes nothing else but what ``python -m cse.listings`` regenerates; the copy's
tests of the files that list the methods, of the records, citations and docs, and the method's own
pass there; and it trains there alone (its run script) and with MixCSE (``run_cse.py --parts``).

Its part adds one named term, the squared norm of the batch's mean unit embedding (what pulls the
batch's centre to the origin), weighted by its one flag."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from .conftest import DATA, REPO, SHARED, WIKI_HEAD

NAME = "centroid"
METHOD = '''"""Centroid: SimCSE plus the squared norm of the batch's mean unit embedding, a term that pulls the
batch's centre to the origin (a method the test suite writes, to check that a method is six files)."""

from dataclasses import dataclass, field

import torch.nn.functional as F

from ..parts import Part
from ..registry import BenchShape, MethodRecord, register

CITATION = """@misc{nobody2024centroid,
  title = {Centring the Batch: a Method the Test Suite Writes},
  author = {Nobody, Anne},
  year = {2024},
}"""


@dataclass
class CentroidArguments:
    centre_weight: float = field(default=0.5, metadata={"help": "w, the weight of ||mean_i h_i||^2."})


class Centroid(Part):
    name = "centroid"
    display_name = "Centroid"
    citation = CITATION
    docs = "docs/methods/centroid.md"
    equation = "+ w ||(1/2N) sum_i (h_i + h_i+)||^2 over the two views' unit embeddings"
    Flags = CentroidArguments

    def terms(self, step):
        h = F.normalize(step.outputs["embeddings"].float(), dim=-1)
        value = h.flatten(0, 1).mean(0).pow(2).sum()
        return {"centroid": self.args.centre_weight * value}, {"loss_centroid": value.detach()}

    def term_weights(self):
        return {"centroid": self.args.centre_weight}


BENCH = {"centroid": BenchShape("run_centroid", "configs/centroid_bert_base.yaml", "bert")}
RECORD = register(MethodRecord(part=Centroid, bench=BENCH))
'''
FILES = {
    f"cse/methods/{NAME}.py": METHOD,
    f"run_{NAME}.py": '''#!/usr/bin/env python
"""Centroid: SimCSE plus the squared norm of the batch's mean unit embedding (docs/methods/centroid.md)."""

from cse.errors import run_cli
from cse.methods.centroid import RECORD
from cse.composition import run_method


def main(argv=None, callbacks=()):
    return run_method(RECORD, argv, callbacks)


if __name__ == "__main__":
    run_cli(main)
''',
    f"configs/{NAME}_bert_base.yaml": """# Centroid, BERT-base: SimCSE's settings and the term's weight.
model_name_or_path: bert-base-uncased
output_dir: result/centroid-bert-base
max_seq_length: 32
pooler_type: cls
mlp_only_train: true
temp: 0.05
per_device_train_batch_size: 64
learning_rate: 3.0e-5
num_train_epochs: 1
centre_weight: 0.5
""",
    f"docs/methods/{NAME}.md": """# Centroid: the batch's centre pulled to the origin

SimCSE plus `--centre_weight` times the squared norm of the mean of the batch's unit embeddings, both
views ([extending.md](../extending.md)). Composed, its flag is `--centroid_centre_weight`.
""",
    f"tests/test_{NAME}.py": '''"""Centroid's term against a float64 hand computation."""

import math

import torch

from cse.methods.centroid import Centroid, CentroidArguments
from cse.parts import Step


def test_the_term_is_the_squared_norm_of_the_mean_unit_embedding():
    views = torch.randn(3, 2, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    rows = [[x / math.sqrt(sum(y * y for y in row)) for x in row] for row in views.reshape(6, 4).tolist()]
    mean = [sum(column) / 6 for column in zip(*rows)]
    step = Step(None, None, {}, {"embeddings": views}, {}, {})
    terms, statistics = Centroid(CentroidArguments(centre_weight=2.0)).terms(step)
    assert math.isclose(statistics["loss_centroid"].item(), sum(x * x for x in mean), rel_tol=1e-6)
    assert math.isclose(terms["centroid"].item(), 2 * statistics["loss_centroid"].item(), rel_tol=1e-12)
''',
}
ROW = "| Centroid | Nobody, 2024 | `run_centroid.py` | [docs/methods/centroid.md](docs/methods/centroid.md) |\n"
REGENERATED = {"CITATION.cff", "cse/parts_overview.py", "docs/README.md", "docs/composition.md"}
# the copy's tests of what lists the methods, of the records, citations and docs, and the method's own
TESTS = [
    "tests/test_listings.py",
    "tests/test_citations.py",
    "tests/test_docs.py",
    "tests/test_composition.py::test_docs_composition_is_generated_from_the_records",
    f"tests/test_environment.py::test_every_entry_point_checks_first[run_{NAME}]",
    f"tests/test_deepspeed.py::test_zero3_is_refused_with_the_reason_by_the_methods_the_docs_name[{NAME}]",
    f"tests/test_{NAME}.py",
]


def copy_checkout(destination) -> list[str]:
    """The checkout's files (tracked, and new ones git does not ignore) copied to ``destination``."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout.decode()
    files = [path for path in listed.split("\0") if path and os.path.isfile(os.path.join(REPO, path))]
    for path in files:
        os.makedirs(os.path.join(destination, os.path.dirname(path)), exist_ok=True)
        shutil.copy2(os.path.join(REPO, path), os.path.join(destination, path))
    return files


def add_readme_row(repo) -> None:
    """The method's row at the end of the README's methods table."""
    path = os.path.join(repo, "README.md")
    with open(path, encoding="utf-8") as f:
        lines = f.readlines()
    header = lines.index("| method | paper | script | documentation |\n")
    end = next(i for i in range(header, len(lines)) if not lines[i].startswith("|"))
    lines.insert(end, ROW)
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(lines)


def run(repo, *command, timeout=300):
    env = {**os.environ, "PYTHONPATH": repo, "CSE_DATA_DIR": DATA, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(command, cwd=repo, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return proc.stdout


def logged(out) -> list[dict]:
    with open(os.path.join(out, "trainer_state.json"), encoding="utf-8") as f:
        return [entry for entry in json.load(f)["log_history"] if "loss" in entry]


@pytest.mark.e2e
def test_a_new_method_is_six_files(tiny_bert, tmp_path):
    # the copy sits beside a link to the shared data, as the checkout does
    repo = str(tmp_path / "cse")
    os.symlink(SHARED, tmp_path / "shared")
    files = copy_checkout(repo)
    for path, text in FILES.items():
        with open(os.path.join(repo, path), "w", encoding="utf-8") as f:
            f.write(text)
    add_readme_row(repo)

    assert sorted(run(repo, sys.executable, "-m", "cse.listings").split()[1::2]) == sorted(REGENERATED)
    changed = set()
    for path in files:
        with open(os.path.join(REPO, path), "rb") as ours, open(os.path.join(repo, path), "rb") as theirs:
            if ours.read() != theirs.read():
                changed.add(path)
    assert changed == {"README.md", *REGENERATED}
    run(repo, sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *TESTS)

    flags = ["--model_name_or_path", tiny_bert, "--train_file", WIKI_HEAD, "--max_train_samples", "16"]
    flags += ["--per_device_train_batch_size", "8", "--max_steps", "2", "--logging_steps", "1", "--use_cpu", "true"]
    flags += ["--eval_strategy", "no", "--save_strategy", "no", "--load_best_model_at_end", "false"]
    flags += ["--final_eval", "none", "--report_to", "none", "--disable_tqdm", "true", "--log_term_gradients", "true"]
    alone, composed = tmp_path / "alone", tmp_path / "composed"
    run(repo, sys.executable, f"run_{NAME}.py", *flags, "--centre_weight", "2", "--output_dir", str(alone))
    command = ["run_cse.py", "--parts", f"{NAME},mixcse", "--centre_weight", "3", "--output_dir", str(composed)]
    run(repo, sys.executable, *command, *flags)
    for out, weight, card in ((alone, 2, "# Centroid sentence encoder"), (composed, 3, "# Centroid + MixCSE")):
        logs = logged(out)
        assert len(logs) == 2 and all(0 < log["loss_centroid"] <= 1 for log in logs)
        assert all(log["term_centroid"] == pytest.approx(weight * log["loss_centroid"], rel=1e-5) for log in logs)
        with open(out / "README.md", encoding="utf-8") as f:
            text = f.read()
        assert card in text and "title = {Centring the Batch: a Method the Test Suite Writes}" in text
        with open(out / "run_args.json", encoding="utf-8") as f:
            method = json.load(f)["method"]
        assert (method if out == alone else method[NAME]) == {"centre_weight": weight}
    assert all("mix_score" in log for log in logged(composed))
