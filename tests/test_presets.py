"""Every preset, its variants that take another path through the training step, and every composition
that trains end as they ended at revision 78ca14f: the same logged values, the same dev scores and
the same exported weights (tests/fixtures/presets.json, written by ``python tests/preset_outputs.py``
at 78ca14f; its runs were bit-identical to those of 71c0a48, before the training step became a
program of parts).

Tiny random encoders, one thread per run, 6 steps of 8 sentences. On the machine the fixture was
recorded on (the same torch and transformers on the same processor, :func:`preset_outputs.machine`) every value and
every weight tensor's bytes must be equal. Elsewhere other kernels round differently: six AdamW steps
at lr 1e-3 from the same start leave float32 rounding differences of about 1e-6 relative, so values
and each tensor's float64 sum, absolute sum and norm must agree to 1e-4 relative (1e-5 absolute, for
values near zero), far below the gap between any two cases of the fixture.
"""

import json
import math
import os

import pytest

from . import preset_outputs
from .conftest import REPO

FIXTURE = os.path.join(REPO, "tests", "fixtures", "presets.json")
RTOL, ATOL = 1e-4, 1e-5


@pytest.fixture(scope="module")
def recorded():
    with open(FIXTURE, encoding="utf-8") as f:
        return json.load(f)


@pytest.fixture(scope="module")
def replayed(recorded, tiny_bert, tiny_roberta, dev_head, tmp_path_factory):
    """Every case of the fixture, run by today's code."""
    models = {"bert": tiny_bert, "roberta": tiny_roberta}
    workdir = str(tmp_path_factory.mktemp("presets"))
    return preset_outputs.run_all(list(recorded["cases"]), models, dev_head, workdir)


def close(a, b) -> bool:
    return math.isclose(a, b, rel_tol=RTOL, abs_tol=ATOL)


def compare(recorded: dict, now: dict, exact: bool) -> list[str]:
    """The differences between a case's recorded outputs and today's, as lines."""
    problems = []
    if len(recorded["log_history"]) != len(now["log_history"]):
        return [f"{len(now['log_history'])} log entries, recorded {len(recorded['log_history'])}"]
    for old, new in zip(recorded["log_history"], now["log_history"]):
        if old.keys() != new.keys():
            problems.append(f"step {old.get('step')}: logged {sorted(new)}, recorded {sorted(old)}")
            continue
        for key, value in old.items():
            same = new[key] == value if exact or not isinstance(value, float) else close(new[key], value)
            if not same:
                problems.append(f"step {old.get('step')} {key}: {new[key]!r}, recorded {value!r}")
    for column, score in recorded["scores"].items():
        if not (now["scores"].get(column) == score if exact else close(now["scores"].get(column, math.nan), score)):
            problems.append(f"dev {column}: {now['scores'].get(column)}, recorded {score}")
    if recorded["weights"].keys() != now["weights"].keys():
        return [*problems, f"weight files {sorted(now['weights'])}, recorded {sorted(recorded['weights'])}"]
    for name, tensors in recorded["weights"].items():
        if tensors.keys() != now["weights"][name].keys():
            problems.append(f"{name}: other tensors")
            continue
        for tensor, stats in tensors.items():
            new = now["weights"][name][tensor]
            if exact and new["sha256"] != stats["sha256"]:
                problems.append(f"{name} {tensor}: other bytes")
            elif not all(close(new[k], stats[k]) for k in ("sum", "abs", "norm")):
                problems.append(f"{name} {tensor}: {new}, recorded {stats}")
    return problems


@pytest.mark.e2e
def test_every_preset_and_composition_trains_as_at_78ca14f(recorded, replayed):
    exact = recorded["machine"] == preset_outputs.machine()
    problems = {name: compare(recorded["cases"][name], replayed[name], exact) for name in recorded["cases"]}
    problems = {name: lines[:5] for name, lines in problems.items() if lines}
    assert not problems, f"{'exact' if exact else f'rtol {RTOL}'}: {json.dumps(problems, indent=1)}"


def test_the_comparison_sees_a_change_of_one_rounding(recorded):
    """One ulp in one logged loss, or one tensor's bytes, is a difference on the recording machine."""
    case = json.loads(json.dumps(recorded["cases"]["simcse"]))
    case["log_history"][0]["loss"] = math.nextafter(case["log_history"][0]["loss"], math.inf)
    assert compare(recorded["cases"]["simcse"], case, exact=True) == [
        f"step 1 loss: {case['log_history'][0]['loss']!r}, "
        f"recorded {recorded['cases']['simcse']['log_history'][0]['loss']!r}"
    ]
    assert compare(recorded["cases"]["simcse"], case, exact=False) == []
    other = json.loads(json.dumps(recorded["cases"]["simcse"]))
    tensor = next(iter(other["weights"]["model.safetensors"].values()))
    tensor["sha256"] = "0" * 64
    assert len(compare(recorded["cases"]["simcse"], other, exact=True)) == 1
