"""The minimum-version check of every entry point, and the environment block read back."""

import importlib
import json
import os
import re

import pytest
import torch

import cse.environment
from cse import registry
from cse.environment import MIN_VERSIONS, check_min_versions, collect_environment
from cse.errors import CSEUsageError
from cse.results import main as results_main

from .conftest import REPO

# every method's run script (its record's benchmark shapes name it), composed runs' and the evaluations'
ENTRY_POINTS = sorted({shape.script for record in registry.records() for shape in record.bench.values()})
ENTRY_POINTS += ["run_cse", "senteval_eval", "anli_eval"]


def test_minimums_are_the_requirements_lower_bounds():
    with open(os.path.join(REPO, "requirements.txt"), encoding="utf-8") as f:
        bounds = dict(re.findall(r"^([A-Za-z0-9_.-]+)>=(\S+)$", f.read(), re.M))
    assert MIN_VERSIONS == {name: bounds[name] for name in MIN_VERSIONS}


def test_installed_versions_pass():
    check_min_versions()


def fake_versions(monkeypatch, **versions):
    real = cse.environment.package_version
    monkeypatch.setattr(cse.environment, "package_version", lambda name: versions.get(name, real(name)))


def test_an_older_library_is_refused_with_the_upgrade_command(monkeypatch):
    fake_versions(monkeypatch, transformers="4.40")
    with pytest.raises(CSEUsageError) as error:
        check_min_versions()
    assert error.value.args[0] == "transformers 4.40 is installed; cse needs >= 5.23.0"
    assert error.value.hint == "pip install -U 'transformers>=5.23.0'"


def test_a_missing_library_is_refused(monkeypatch):
    fake_versions(monkeypatch, datasets=None)
    with pytest.raises(CSEUsageError, match="datasets is not installed; cse needs >= 5.2.0"):
        check_min_versions()


@pytest.mark.parametrize("version", ["2.13.0+cpu", "2.13.1", "2.14.0.dev20260101", "3.0"])
def test_local_builds_and_newer_releases_pass(monkeypatch, version):
    fake_versions(monkeypatch, torch=version)
    check_min_versions()


@pytest.mark.parametrize("version", ["2.12.9", "2.13.0rc1", "2.13.0.dev20260101"])
def test_older_and_pre_releases_of_the_minimum_are_refused(monkeypatch, version):
    fake_versions(monkeypatch, torch=version)
    with pytest.raises(CSEUsageError, match=f"torch {re.escape(version)} is installed"):
        check_min_versions()


@pytest.mark.parametrize("script", ENTRY_POINTS)
def test_every_entry_point_checks_first(monkeypatch, script):
    fake_versions(monkeypatch, accelerate="0.30.0")
    with pytest.raises(CSEUsageError, match="accelerate 0.30.0 is installed; cse needs >= 1.15.0"):
        importlib.import_module(script).main([])  # refused before its (missing) arguments are parsed


def test_results_prints_the_environment_block(tmp_path, capsys):
    path = tmp_path / "sts_test_results.json"
    path.write_text(json.dumps({"scores": {"STS12": 1.0}, "environment": collect_environment(precision="bf16")}))
    results_main(["--environment", str(path)])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"{path}:"
    fields = dict(re.match(r"^  (.+?)\s{2,}(.+)$", line).groups() for line in lines[1:])
    assert fields["torch"] == torch.__version__ and fields["precision"] == "bf16"
    assert fields["world size"] == "1" and fields["GPUs"] == (
        ", ".join(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())) or "none"
    )
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"scores": {}}))
    with pytest.raises(SystemExit) as exit_code:
        results_main(["--environment", str(old)])
    assert exit_code.value.code == 2 and "has no environment block" in capsys.readouterr().err
