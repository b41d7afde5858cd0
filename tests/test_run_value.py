"""The run's path takes one :class:`cse.run.Run`: no function of the modules on that path threads the
argument groups one by one (at most five parameters each), and what the run derives from its
arguments (output directory, global batch, settings) is the Run's."""

import importlib
import inspect

import pytest

from cse import composition, registry
from cse.arguments import CSETrainingArguments

from .conftest import method_run

RUN_PATH = ("cse.pipeline", "cse.composition", "cse.resume", "cse.model_card")
MOST = 5


def functions(module):
    """The functions and methods written in ``module``'s file, by qualified name (a dataclass's
    generated ``__init__``, one parameter a field, is a record's constructor, not a function of the path)."""
    found = {}
    for name, value in vars(module).items():
        if inspect.isfunction(value):
            found[name] = value
        elif inspect.isclass(value):
            for attribute, member in vars(value).items():
                found[f"{name}.{attribute}"] = getattr(member, "__func__", member)
    return {name: f for name, f in found.items() if inspect.isfunction(f) and f.__code__.co_filename == module.__file__}


@pytest.mark.parametrize("name", RUN_PATH)
def test_no_function_of_the_run_path_takes_more_than_five_parameters(name):
    module = importlib.import_module(name)
    over = {
        qualified: len(inspect.signature(function).parameters)
        for qualified, function in functions(module).items()
        if len(inspect.signature(function).parameters) > MOST
    }
    assert functions(module) and not over, f"{name}: {over}"


def test_a_run_derives_its_output_directory_global_batch_and_settings(tmp_path):
    args = CSETrainingArguments(output_dir=str(tmp_path / "out"), use_cpu=True, per_device_train_batch_size=6)
    run = method_run(args, "mixcse+vadvcse")
    assert run.output_dir == str(tmp_path / "out")
    assert run.global_batch == 6  # one process
    assert list(run.settings) == ["run", "model", "data", "training", "method"]
    assert run.settings["run"] == {"method": "mixcse+vadvcse"}
    assert run.settings["method"]["parts"] == ["mixcse", "vadvcse"]
    assert run.settings["training"]["per_device_train_batch_size"] == 6
    assert "senteval_data_dir" not in run.settings["data"]  # where, not what
    assert run.settings is run.settings  # computed once
    assert "method" not in method_run(args).settings  # SimCSE has no flags of its own


@pytest.mark.parametrize("name", [record.name for record in registry.parts()])
def test_a_run_script_and_run_cse_parse_one_preset_alike(tmp_path, name):
    """``run_<m>.py`` and ``run_cse.py --parts <m>`` make the same run of the same command line."""
    argv = ["--output_dir", str(tmp_path / "out"), "--seed", "3"]
    (script,) = composition.parse(argv, preset=registry.get(name))
    (parts,) = composition.parse(["--parts", name, *argv])
    assert script.record is parts.record and [p.args for p in script.parts] == [p.args for p in parts.parts]
    assert script.settings == parts.settings and script.global_batch == parts.global_batch
