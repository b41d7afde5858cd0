"""The parts' state in a checkpoint (cse/parts_state.py): one safetensors file whose keys are
``<part>.<key>``, handed back to each part on resume; and checkpoints written at 78ca14f, when each
part kept files of its own, resuming to the weights that version reached without a stop
(tests/fixtures/parts_state_78ca14f/, recorded at 78ca14f)."""

import gzip
import hashlib
import json
import os
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import TrainingArguments

from cse.parts import Part
from cse.parts_state import EARLIER_STATE_FILES, load_parts_state, read_parts_state, save_parts_state, state_files
from cse.resume import checkpoint_problem
from cse.run_dir import is_run_checkpoint, run_format
from cse.run_names import CHECKPOINT_MARKER_NAME, LEGACY_FORMAT, PARTS_STATE_NAME, RUN_ARGS_NAME

from . import preset_outputs
from .conftest import DATA, REPO, WIKI_HEAD, common_args, fake_checkpoint, tiny_run

FIXTURE = os.path.join(REPO, "tests", "fixtures", "parts_state_78ca14f")


class Holder(Part):
    """A part keeping the tensors it is given, and taking back whatever it is handed."""

    def __init__(self, name, state):
        super().__init__()
        self.name = name
        self.state = state
        self.loaded = None

    def state_dict(self):
        return self.state

    def load_state_dict(self, state):
        self.loaded = state


def hand_built():
    """Two parts with state (dtypes a part keeps: float32 with its optimizer's, int64 counts, bf16,
    keys with dots) and one without."""
    first = {
        "adversaries": torch.arange(12.0).reshape(3, 4),
        "momentum_buffer": torch.full((3, 4), -0.5),
        "momentum_backbone.encoder.layer.0.weight": torch.tensor([[1.5, 2.5]], dtype=torch.bfloat16),
    }
    second = {"token_counts": torch.tensor([0, 7, 2, 0, 41], dtype=torch.int64)}
    return [Holder("first", first), Holder("none", {}), Holder("second", second)]


def test_one_file_holds_every_part_s_state_under_its_name_and_hands_each_part_its_own(tmp_path):
    parts = hand_built()
    save_parts_state(parts, str(tmp_path))
    assert os.listdir(tmp_path) == [PARTS_STATE_NAME]
    written = load_file(str(tmp_path / PARTS_STATE_NAME))
    expected = {f"{part.name}.{key}": t for part in parts for key, t in part.state.items()}
    assert (
        sorted(written)
        == sorted(expected)
        == [
            "first.adversaries",
            "first.momentum_backbone.encoder.layer.0.weight",
            "first.momentum_buffer",
            "second.token_counts",
        ]
    )
    assert all(written[k].dtype == t.dtype and torch.equal(written[k], t) for k, t in expected.items())

    fresh = [Holder(part.name, {}) for part in parts]
    load_parts_state(fresh, str(tmp_path), "cpu")
    for part, loaded in zip(parts, fresh):
        assert loaded.loaded.keys() == part.state.keys()  # the part's own keys, the prefix taken off
        assert all(
            torch.equal(loaded.loaded[k], t) and loaded.loaded[k].dtype == t.dtype for k, t in part.state.items()
        )


def test_no_file_without_state_and_another_part_s_state_is_refused(tmp_path):
    save_parts_state([Holder("none", {})], str(tmp_path))
    assert os.listdir(tmp_path) == []
    save_parts_state(hand_built(), str(tmp_path))
    with pytest.raises(ValueError, match=r"holds the state of parts this run does not have \(second\)"):
        load_parts_state([Holder("first", {}), Holder("none", {})], str(tmp_path), "cpu")


def test_a_checkpoint_of_the_earlier_layout_is_read_file_by_file_and_counts_as_complete(tmp_path):
    """Before parts_state.safetensors each part wrote files of its own, whose keys were its state's:
    read under the part that wrote them, and such a checkpoint is complete (cse.resume)."""
    args = TrainingArguments(output_dir=str(tmp_path), use_cpu=True)
    old = fake_checkpoint(tmp_path / "checkpoint-2", 2)
    assert "parts_state.safetensors is missing" in checkpoint_problem(old, args, (PARTS_STATE_NAME,))
    adversaries = {"adversaries": torch.ones(2, 3), "momentum_buffer": torch.zeros(2, 3)}
    save_file(adversaries, os.path.join(old, "adcse_adversaries.safetensors"))
    save_file({"momentum_backbone.w": torch.full((2,), 3.0)}, os.path.join(old, "adcse_momentum_master.safetensors"))
    save_file({"token_counts": torch.arange(5)}, os.path.join(old, "sarcse_token_counts.safetensors"))
    assert state_files(old) == list(EARLIER_STATE_FILES)
    assert checkpoint_problem(old, args, (PARTS_STATE_NAME,)) is None
    state = read_parts_state(old)
    assert sorted(state) == ["adcse", "sarcse"]
    assert sorted(state["adcse"]) == ["adversaries", "momentum_backbone.w", "momentum_buffer"]
    assert torch.equal(state["sarcse"]["token_counts"], torch.arange(5))
    # the one file, where there is one, is what is read
    save_parts_state([Holder("sarcse", {"token_counts": torch.arange(3)})], old)
    assert state_files(old) == [PARTS_STATE_NAME] and sorted(read_parts_state(old)) == ["sarcse"]
    assert is_run_checkpoint(old)


# --- checkpoints written at 78ca14f --------------------------------------------------------------


def recorded():
    with open(os.path.join(FIXTURE, "record.json"), encoding="utf-8") as f:
        return json.load(f)


def digest(path):
    """The sha256 of a safetensors file's tensors as the fixture records it: name, dtype, shape and
    bytes of each, in name order."""
    h = hashlib.sha256()
    for key, t in sorted(load_file(str(path)).items()):
        h.update(f"{key} {t.dtype} {tuple(t.shape)}\n".encode())
        h.update(t.contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def weight_digests(out):
    return {name: digest(os.path.join(out, name)) for name in sorted(os.listdir(out)) if name.endswith(".safetensors")}


def run(script, argv, monkeypatch):
    """``script``'s run of ``argv`` in this process, on one thread, as the fixture was recorded
    (OMP_NUM_THREADS=1: another thread count sums in another order, and rounds otherwise)."""
    monkeypatch.setenv("CSE_DATA_DIR", DATA)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        __import__(script).main(argv)
    finally:
        torch.set_num_threads(threads)


@pytest.mark.e2e
@pytest.mark.parametrize("case", ["adcse", "sarcse", "adcse+sarcse"])
def test_a_checkpoint_written_at_78ca14f_resumes_to_the_weights_of_its_run(
    case, backbones, tmp_path, monkeypatch, caplog
):
    """A run of 78ca14f stopped after checkpoint-2, as that version left it: its run_args.json, its
    unmarked checkpoint with each part's own state files (recorded), the Trainer's files (this
    version's: the two train bit-identically, which the recorded weights of checkpoint-2 show on the
    recording machine). The same command resumes from it, hands each part its recorded state and
    ends with the weights of the run never stopped: this version's, and on the recording machine the
    sha256 recorded at 78ca14f."""
    record = recorded()
    expected = record["runs"][case]
    exact = record["machine"] == preset_outputs.machine()
    script, family, flags = tiny_run(*case.split("+"))
    model = backbones[family]
    run(script, [*common_args(model, tmp_path / "straight", max_steps=4, save_steps=2), *flags], monkeypatch)
    straight_checkpoint = tmp_path / "straight" / "checkpoint-2"

    out = tmp_path / "old"
    out.mkdir()
    settings = json.dumps(expected["run_args"]).replace("@MODEL@", model).replace("@TRAIN_FILE@", WIKI_HEAD)
    (out / RUN_ARGS_NAME).write_text(settings)
    checkpoint = out / "checkpoint-2"
    shutil.copytree(straight_checkpoint, checkpoint)
    os.remove(checkpoint / CHECKPOINT_MARKER_NAME)
    os.remove(checkpoint / PARTS_STATE_NAME)
    legacy = sorted(name.removesuffix(".gz") for name in os.listdir(os.path.join(FIXTURE, case)))
    for name in legacy:
        with gzip.open(os.path.join(FIXTURE, case, name + ".gz"), "rb") as src, open(checkpoint / name, "wb") as dst:
            shutil.copyfileobj(src, dst)
    assert sorted(os.listdir(checkpoint)) == expected["checkpoint_2_files"]
    assert run_format(str(out)) == LEGACY_FORMAT
    # this version's state of the same step, under <part>.<key>, is what 78ca14f wrote into each part's files
    state = load_file(str(straight_checkpoint / PARTS_STATE_NAME))
    old = {
        f"{EARLIER_STATE_FILES[name]}.{key}": t
        for name in legacy
        for key, t in load_file(str(checkpoint / name)).items()
    }
    assert state.keys() == old.keys()
    if exact:
        assert all(torch.equal(state[key], t) for key, t in old.items())
        assert {name: digest(checkpoint / name) for name in expected["checkpoint_2"]} == expected["checkpoint_2"]

    with caplog.at_level("INFO"):
        run(script, [*common_args(model, out, max_steps=4, save_steps=2), *flags], monkeypatch)
    assert f"resuming from {checkpoint}" in caplog.text
    assert f"the state of {', '.join(case.split('+'))} restored from {checkpoint}" in caplog.text
    assert weight_digests(out) == weight_digests(tmp_path / "straight")
    if exact:
        assert weight_digests(out) == expected["final"]
