"""Runs that are killed, doubled or diverge: one run per output directory (two real processes; a
lock left by a SIGKILLed one), torn checkpoints skipped on resume (files really cut short), the
kill-anywhere test (processes SIGKILLed at steps and inside checkpoint writes, resumed with the
same command, end with the weights of an uninterrupted run bit for bit), and non-finite values
(refused flags, a really diverging run, export of NaN weights).

The kill-anywhere test's long form (every method, dozens of kill points) runs with
``CSE_LONG_TESTS=1``."""

import errno
import json
import math
import os
import random
import signal
import socket
import subprocess
import sys
import time

import pytest
import torch
from safetensors.torch import load_file
from transformers import TrainingArguments

import cse.atomic
from cse import registry
from cse.arguments import CSETrainingArguments, DataArguments, ModelArguments, parse_args
from cse.atomic import write_json
from cse.errors import CSEUsageError
from cse.methods.adcse import AdCSEArguments
from cse.parts import Part
from cse.reliability import PROGRESS, NonFiniteGuard, interruption_error, output_dir_lock
from cse.resume import checkpoint_problem, find_checkpoint, last_complete_checkpoint
from cse.run_dir import begin_checkpoint
from cse.run_names import CHECKPOINT_MARKER_NAME, INCOMPLETE_NAME, LOCK_NAME, PARTS_STATE_NAME
from cse.trainer import CSETrainer

from .conftest import (
    ENV,
    REPO,
    SIGKILLED,
    assert_bit_identical,
    common_args,
    fake_checkpoint,
    in_process,
    method_run,
    refusal,
    tail_args,
    tiny_run,
    train_argv,
    worker,
)

# OMP_NUM_THREADS is inherited, not set: the in-process reference runs use the same thread count.
LONG = pytest.mark.skipif(os.environ.get("CSE_LONG_TESTS") != "1", reason="long form: set CSE_LONG_TESTS=1")


# composed runs (run_cse.py --parts): the state of every part resumes
COMPOSITIONS = [
    ("mixcse", "vadvcse"),
    ("sarcse", "vadvcse"),
    ("adcse", "sarcse"),
    ("adcse", "mixcse"),
    ("esimcse", "mixcse"),
]
# each method and composition, run small: name -> (script, tiny backbone family, flags)
METHODS = {
    "+".join(names): tiny_run(*names) for names in [*((record.name,) for record in registry.records()), *COMPOSITIONS]
}


# --- one run per output directory -----------------------------------------------------------------

HOLDER = """
import sys, time
sys.path.insert(0, {repo!r})
from transformers import TrainingArguments
from cse.reliability import output_dir_lock
with output_dir_lock(TrainingArguments(output_dir={out!r}, use_cpu=True)):
    print("held", flush=True)
    time.sleep(600)
"""


@pytest.mark.e2e
def test_second_run_is_refused_naming_the_holder_and_a_killed_holders_lock_is_taken_over(tiny_bert, tmp_path, caplog):
    out = tmp_path / "run"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER.format(repo=REPO, out=str(out))], stdout=subprocess.PIPE, text=True, env=ENV
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        before = sorted(os.listdir(out))
        proc = worker("run_simcse.py", common_args(tiny_bert, out), check=False)
        assert proc.returncode not in (0, SIGKILLED)
        assert f"in use by another run (PID {holder.pid} on host {socket.gethostname()}" in proc.stderr
        assert sorted(os.listdir(out)) == before == [LOCK_NAME]  # nothing written
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    # The holder died without releasing: its marker is left, and taken over with a warning.
    assert (out / LOCK_NAME).read_text().startswith(f"{holder.pid}\n")
    with caplog.at_level("WARNING", logger="cse.reliability"):
        with output_dir_lock(TrainingArguments(output_dir=str(out), use_cpu=True)):
            assert (out / LOCK_NAME).read_text().startswith(f"{os.getpid()}\n")
    assert f"left by PID {holder.pid}" in caplog.text and "no longer running" in caplog.text
    assert not (out / LOCK_NAME).exists()  # released at exit


def test_a_refused_run_removes_the_directories_it_created_and_no_others(tmp_path):
    (tmp_path / "kept").mkdir()  # empty, but there before the run
    for out in (tmp_path / "kept" / "new" / "deeper" / "run", tmp_path / "kept"):
        with pytest.raises(CSEUsageError):
            with output_dir_lock(TrainingArguments(output_dir=str(out), use_cpu=True)):
                raise CSEUsageError("refused before writing anything")
    assert os.listdir(tmp_path) == ["kept"] and os.listdir(tmp_path / "kept") == []


# --- torn checkpoints -------------------------------------------------------------------------------


def cut(path, fraction=0.5):
    os.truncate(path, int(os.path.getsize(path) * fraction))


@pytest.mark.parametrize(
    "name",
    ["model.safetensors", "optimizer.pt", "scheduler.pt", "rng_state.pth", "trainer_state.json", PARTS_STATE_NAME],
)
@pytest.mark.parametrize("fault", ["missing", "cut"])
def test_a_torn_checkpoint_is_skipped_for_the_newest_complete_one(tmp_path, name, fault, caplog):
    args = TrainingArguments(output_dir=str(tmp_path), use_cpu=True)
    files = (PARTS_STATE_NAME,)
    older = fake_checkpoint(tmp_path / "checkpoint-10", 10, files)
    newer = fake_checkpoint(tmp_path / "checkpoint-20", 20, files)
    assert checkpoint_problem(newer, args, files) is None
    os.remove(os.path.join(newer, name)) if fault == "missing" else cut(os.path.join(newer, name))
    assert name in checkpoint_problem(newer, args, files)
    with caplog.at_level("WARNING", logger="cse.resume"):
        assert last_complete_checkpoint(str(tmp_path), args, files) == older
    assert f"skipping the incomplete checkpoint {newer}: {name}" in caplog.text
    # the method's file is required only where the method writes one
    if name == PARTS_STATE_NAME and fault == "missing":
        assert checkpoint_problem(newer, args) is None


def test_torn_checkpoints_and_none_complete_are_set_aside_and_the_run_starts_over(tmp_path, caplog):
    args = TrainingArguments(output_dir=str(tmp_path), use_cpu=True)
    begin_checkpoint(str(tmp_path / "checkpoint-4"))  # killed before its first file: only the run's marker
    cut(os.path.join(fake_checkpoint(tmp_path / "checkpoint-2", 2), "model.safetensors"), 0.001)
    assert last_complete_checkpoint(str(tmp_path), args) is None
    assert sorted(os.listdir(tmp_path)) == ["checkpoint-2", "checkpoint-4"]  # only a run moves them
    caplog.clear()
    with caplog.at_level("WARNING", logger="cse.resume"):
        assert last_complete_checkpoint(str(tmp_path), args, move_torn=True) is None
    (warning,) = caplog.messages  # one warning, naming each and what is wrong
    assert f"{tmp_path / 'checkpoint-4'} is incomplete, trainer_state.json is missing" in warning
    assert f"{tmp_path / 'checkpoint-2'} is incomplete, model.safetensors is unreadable" in warning
    assert warning.endswith(f"moved to {tmp_path / INCOMPLETE_NAME}): training starts over from step 0")
    aside = tmp_path / INCOMPLETE_NAME
    assert os.listdir(tmp_path) == [INCOMPLETE_NAME] and sorted(os.listdir(aside)) == ["checkpoint-2", "checkpoint-4"]
    # torn again at the same step: set aside beside the earlier torn copy, which is kept; the Trainer
    # never sees either
    begin_checkpoint(str(tmp_path / "checkpoint-4"))
    (tmp_path / "checkpoint-4" / "model.safetensors").write_bytes(b"cut")
    assert last_complete_checkpoint(str(tmp_path), args, move_torn=True) is None
    assert sorted(os.listdir(aside)) == ["checkpoint-2", "checkpoint-4", "checkpoint-4.2"]
    assert os.listdir(aside / "checkpoint-4") == [CHECKPOINT_MARKER_NAME]
    assert sorted(os.listdir(aside / "checkpoint-4.2")) == [CHECKPOINT_MARKER_NAME, "model.safetensors"]
    assert last_complete_checkpoint(str(aside / "checkpoint-4"), args) is None  # no checkpoint at all


def test_a_torn_checkpoint_after_a_complete_one_is_moved_aside_by_the_run(tmp_path, caplog):
    older = fake_checkpoint(tmp_path / "checkpoint-10", 10)
    newer = fake_checkpoint(tmp_path / "checkpoint-20", 20)
    os.remove(os.path.join(newer, "trainer_state.json"))
    with caplog.at_level("WARNING", logger="cse.resume"):
        found = find_checkpoint(method_run(CSETrainingArguments(output_dir=str(tmp_path))))
    assert found == older and not os.path.exists(newer)
    assert f"skipping the incomplete checkpoint {newer}: trainer_state.json is missing; moved to " in caplog.text
    assert (tmp_path / INCOMPLETE_NAME / "checkpoint-20" / "model.safetensors").is_file()


@pytest.mark.e2e
@pytest.mark.parametrize("method", ["simcse", "adcse"])
def test_killed_inside_the_first_checkpoint_the_same_command_starts_over_bit_identical(
    method, tiny_bert, tmp_path, monkeypatch, caplog
):
    """A real SIGKILL while the first checkpoint's optimizer state is written (no trainer_state.json
    yet): the same command sets it aside, says so once, trains from step 0 and ends with the weights
    of a run never interrupted."""
    script, _, flags = METHODS[method]
    in_process(script, [*common_args(tiny_bert, tmp_path / "straight"), *flags], monkeypatch)
    argv = [*common_args(tiny_bert, tmp_path / "killed"), *flags]
    worker(script, argv, "2:during:optimizer.pt")
    torn = tmp_path / "killed" / "checkpoint-2"
    assert os.listdir(tmp_path / "killed").count("checkpoint-2") == 1 and not (torn / "trainer_state.json").exists()
    with caplog.at_level("WARNING"):
        in_process(script, argv, monkeypatch)  # the same command
    (warning,) = [r.getMessage() for r in caplog.records if r.name == "cse.resume" and r.levelno >= 30]
    assert warning.startswith(f"{tmp_path / 'killed'} holds no complete checkpoint ({torn} is incomplete, ")
    assert warning.endswith("training starts over from step 0")
    assert (tmp_path / "killed" / INCOMPLETE_NAME / "checkpoint-2" / "optimizer.pt").is_file()
    assert_bit_identical(str(tmp_path / "killed"), str(tmp_path / "straight"))


@pytest.mark.e2e
def test_a_signal_inside_a_checkpoint_write_finishes_that_checkpoint_first_and_says_so(tiny_bert, tmp_path):
    """SIGTERM while checkpoint-4's optimizer state is being written: the run says it finishes that
    checkpoint, then stops naming it, whole; the same command resumes from it."""
    argv = common_args(tiny_bert, tmp_path / "run")
    proc = worker("run_simcse.py", argv, "4:signal:optimizer.pt", check=False)
    checkpoint = tmp_path / "run" / "checkpoint-4"
    assert proc.returncode == 128 + signal.SIGTERM, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    notice = (
        f"SIGTERM: finishing the checkpoint being written, {checkpoint}, before stopping (a second signal stops "
        "at once)"
    )
    assert lines.count(notice) == 1  # the run's log may go on while it finishes
    error, hint = lines[-2:]
    assert error == f"error: SIGTERM stopped the run at step 4; the newest complete checkpoint is {checkpoint}"
    assert hint == "  hint: rerun the same command to resume"
    assert checkpoint_problem(str(checkpoint), TrainingArguments(output_dir=str(tmp_path), use_cpu=True)) is None
    assert not (tmp_path / "run" / LOCK_NAME).exists()
    rerun = worker("run_simcse.py", argv)
    assert f"resuming from {checkpoint}" in rerun.stdout + rerun.stderr


def test_the_signal_line_names_the_checkpoint_that_exists_not_the_one_the_trainer_deleted(tmp_path):
    """At the end of training the Trainer deletes the last checkpoint when it is not the best
    (--save_total_limit 1): the line names the one a rerun resumes from."""
    best = fake_checkpoint(tmp_path / "checkpoint-10", 10)
    args = TrainingArguments(output_dir=str(tmp_path), use_cpu=True)
    PROGRESS.reset()
    PROGRESS.step, PROGRESS.checkpoint, PROGRESS.args = 40, str(tmp_path / "checkpoint-40"), args  # deleted
    try:
        error = interruption_error(signal.SIGTERM, str(tmp_path))
        assert str(error).splitlines() == [
            f"SIGTERM stopped the run at step 40; the newest complete checkpoint is {best}",
            "  hint: rerun the same command to resume",
        ]
        assert error.exit_code == 143
        # a torn newer one is never named, nor one being written
        cut(os.path.join(fake_checkpoint(tmp_path / "checkpoint-20", 20), "optimizer.pt"))
        fake_checkpoint(tmp_path / "checkpoint-30", 30)
        error = interruption_error(signal.SIGINT, str(tmp_path), writing=str(tmp_path / "checkpoint-30"))
        assert str(error).splitlines()[0] == (
            f"SIGINT stopped the run at step 40; the newest complete checkpoint is {best} "
            f"({tmp_path / 'checkpoint-30'} was being written and is incomplete)"
        )
        PROGRESS.reset()  # a run completing its end without training: the step of its last checkpoint
        assert str(interruption_error(signal.SIGTERM, str(tmp_path))).startswith("SIGTERM stopped the run at step 30;")
    finally:
        PROGRESS.reset()


def test_an_incomplete_named_or_best_checkpoint_is_refused_before_training(tmp_path):
    def find(**training):
        args = CSETrainingArguments(output_dir=str(tmp_path), use_cpu=True, **training)
        return find_checkpoint(method_run(args))

    best = fake_checkpoint(tmp_path / "checkpoint-10", 10)
    last = fake_checkpoint(tmp_path / "checkpoint-20", 20, best=best)
    assert find() == last
    os.remove(os.path.join(best, "rng_state.pth"))
    with pytest.raises(CSEUsageError, match="records .*checkpoint-10 as the best .*rng_state.pth is missing"):
        find()
    assert find(load_best_model_at_end=False) == last  # without best-model selection it does not matter
    with pytest.raises(CSEUsageError, match="--resume_from_checkpoint .*checkpoint-10 is incomplete"):
        find(resume_from_checkpoint=best, load_best_model_at_end=False)


# --- kill anywhere ---------------------------------------------------------------------------------


def state_files(checkpoint):
    """The parts' state file a method's trainer added to ``checkpoint`` (``checkpoint_files()``), if
    any: every safetensors file but the model's."""
    return [f for f in sorted(os.listdir(checkpoint)) if f.endswith(".safetensors") and f != "model.safetensors"]


def keeps_state(record) -> bool:
    """Whether the method's part adds state to its checkpoints."""
    return record.part.state_dict is not Part.state_dict


# The base, each method whose checkpoints hold state of its own, and each composition.
FAST_KILLED = [
    *(record.name for record in registry.records() if record.base or keeps_state(record)),
    *("+".join(names) for names in COMPOSITIONS),
]


@pytest.mark.e2e
@pytest.mark.parametrize("method", FAST_KILLED)
def test_killed_inside_a_checkpoint_write_resumes_bit_identical(
    method, tiny_bert, tiny_roberta, tmp_path, monkeypatch, caplog
):
    """Torn inside the write of the parts' state file (else the optimizer's):
    checkpoint-2 is complete, checkpoint-4 is not."""
    script, family, flags = METHODS[method]
    model_dir = tiny_bert if family == "bert" else tiny_roberta
    in_process(script, [*common_args(model_dir, tmp_path / "straight"), *flags], monkeypatch)
    written = state_files(tmp_path / "straight" / "checkpoint-8")
    argv = [*common_args(model_dir, tmp_path / "killed"), *flags]
    worker(script, argv, f"4:during:{(written or ['optimizer.pt'])[0]}")
    torn = tmp_path / "killed" / "checkpoint-4"
    assert checkpoint_problem(str(torn), TrainingArguments(output_dir=str(tmp_path), use_cpu=True)) is not None
    with caplog.at_level("WARNING"):
        in_process(script, argv, monkeypatch)  # the same command (here in this process, which is cheaper)
    assert f"skipping the incomplete checkpoint {torn}" in caplog.text
    assert "checkpoint-2, left in the output" in caplog.text and "took over the lock" in caplog.text
    assert_bit_identical(str(tmp_path / "killed"), str(tmp_path / "straight"))


def kill_points(method, straight, steps=12, save_steps=3):
    """Every kind of point: at a step's end, and before, inside and after each file of a checkpoint
    but the first (a run killed while writing its first checkpoint starts over from step 0:
    test_killed_inside_the_first_checkpoint_the_same_command_starts_over_bit_identical); the state
    files are those of the uninterrupted run ``straight``."""
    files = ["model.safetensors", "training_args.bin", "optimizer.pt", "scheduler.pt", "rng_state.pth"]
    files += state_files(os.path.join(straight, f"checkpoint-{steps}"))
    files.append("trainer_state.json")
    points = [f"{s}:step" for s in range(1, steps)]
    points += [
        f"{s}:{when}:{name}"
        for s in range(2 * save_steps, steps + 1, save_steps)
        for name in files
        for when in ("before", "during", "after")
    ]
    return points


@pytest.mark.e2e
@LONG
@pytest.mark.slow
@pytest.mark.parametrize("method", list(METHODS))
def test_long_kill_anywhere(method, tiny_bert, tiny_roberta, tmp_path):
    """Kills at random points in step order (several at the same checkpoint: each resume may be
    killed again before reaching further), then the same command until done."""
    script, family, flags = METHODS[method]
    model_dir = tiny_bert if family == "bert" else tiny_roberta
    steps, save_steps = 12, 3
    worker(script, [*common_args(model_dir, tmp_path / "straight", steps, save_steps), *flags])
    argv = [*common_args(model_dir, tmp_path / "killed", steps, save_steps), *flags]
    rng = random.Random(f"{method}-kills")
    points = kill_points(method, tmp_path / "straight", steps, save_steps)
    chosen = sorted(rng.sample(points, 6), key=lambda p: (int(p.split(":")[0]), points.index(p)))
    done = []
    for point in chosen:
        proc = worker(script, argv, point, check=False)
        if proc.returncode == SIGKILLED:
            done.append(point)
        else:  # a point the resumed run no longer reaches (its checkpoint was complete): must not happen
            raise AssertionError(f"{point}: exit {proc.returncode}\n{proc.stderr[-3000:]}")
    worker(script, argv)
    assert_bit_identical(str(tmp_path / "killed"), str(tmp_path / "straight"))
    if os.environ.get("CSE_KILL_REPORT"):  # the figure docs/reliability.md quotes
        with open(os.environ["CSE_KILL_REPORT"], "a") as report:
            report.write(json.dumps({"method": method, "kills": done}) + "\n")


# --- non-finite values -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "flags,name",
    [
        (["--temp", "nan"], "--temp"),
        (["--learning_rate", "inf"], "--learning_rate"),
        (["--momentum=-inf"], "--momentum"),
        (["--adversary_learning_rate", "NaN"], "--adversary_learning_rate"),
    ],
)
def test_non_finite_flags_are_refused_at_parse(flags, name):
    types = (ModelArguments, DataArguments, CSETrainingArguments, AdCSEArguments)
    with pytest.raises(CSEUsageError, match=f"^{name} must be a finite number"):
        parse_args(types, ["--output_dir", "o", *flags])
    parse_args(types, ["--output_dir", "o", "--temp", "0.05"])  # the defaults and a finite value pass


def test_non_finite_value_in_a_config_file_is_refused(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text("output_dir: o\nweight_decay: .nan\n")
    with pytest.raises(CSEUsageError, match="--weight_decay must be a finite number, got nan"):
        parse_args((ModelArguments, DataArguments, CSETrainingArguments), [str(config)])


@pytest.mark.e2e
def test_a_diverging_run_stops_at_the_step_and_exports_nothing(tiny_bert, tmp_path):
    # lr 1e30: Adam's first step moves every weight by ~1e30, so step 2's forward overflows float32
    out = tmp_path / "run"
    argv = [*common_args(tiny_bert, out, max_steps=6, save_steps=1), "--learning_rate", "1e30", "--logging_steps", "1"]
    proc = worker("run_simcse.py", argv, check=False)
    assert proc.returncode not in (0, SIGKILLED)
    assert "training diverged: the training loss is nan at step 2" in proc.stderr
    assert not (out / "model.safetensors").exists() and not (out / "cse_config.json").exists()
    # the checkpoint before the divergence is complete and finite, and none after it was written
    args = TrainingArguments(output_dir=str(out), use_cpu=True)
    assert checkpoint_problem(str(out / "checkpoint-1"), args) is None
    assert all(torch.isfinite(t).all() for t in load_file(str(out / "checkpoint-1" / "model.safetensors")).values())
    assert not (out / "checkpoint-2").exists()


def test_a_nan_dev_score_or_grad_norm_stops_training(tmp_path):
    from transformers import TrainerControl, TrainerState

    args = CSETrainingArguments(output_dir=str(tmp_path), use_cpu=True)
    state, control, guard = TrainerState(global_step=250), TrainerControl(), NonFiniteGuard()
    guard.on_log(args, state, control, logs={"loss": 0.5, "grad_norm": 1.0})
    guard.on_evaluate(args, state, control, metrics={"eval_stsb_spearman": 0.7, "eval_sickr_spearman": 0.6})
    with pytest.raises(CSEUsageError, match="the dev score eval_stsb_spearman is nan at step 250"):
        guard.on_evaluate(args, state, control, metrics={"eval_stsb_spearman": math.nan})
    with pytest.raises(CSEUsageError, match="the training grad norm is inf at step 250"):
        guard.on_log(args, state, control, logs={"loss": 0.5, "grad_norm": math.inf})


def test_export_refuses_non_finite_weights(tiny_bert, tmp_path):
    from cse.losses import InfoNCELoss
    from cse.modeling import CSEModel

    from .conftest import SENTEVAL

    model = CSEModel.from_pretrained(tiny_bert, pooler_type="cls")
    args = CSETrainingArguments(output_dir=str(tmp_path / "out"), use_cpu=True, report_to=[])
    trainer = CSETrainer(model=model, args=args, loss=InfoNCELoss(), senteval_data_dir=SENTEVAL)
    with torch.no_grad():
        model.backbone.encoder.layer[1].output.dense.weight[3, 5] = math.nan
    with pytest.raises(CSEUsageError, match="1 weight tensor.*NaN or infinite values, first .*layer.1.output.dense"):
        trainer.save_encoder()
    assert not os.path.exists(tmp_path / "out" / "model.safetensors")
    with torch.no_grad():
        model.backbone.encoder.layer[1].output.dense.weight[3, 5] = 0.0
    trainer.save_encoder()
    assert os.path.exists(tmp_path / "out" / "model.safetensors")


# --- the run's tail: training results, export, final evaluation, model card ------------------------


# What two runs of the same command legitimately write differently: the Trainer's timings.
TIMINGS = ("train_runtime", "train_samples_per_second", "train_steps_per_second")


def run_files(out, volatile=TIMINGS):
    """Every file of a run but its checkpoints and lock, by relative path: the JSON files parsed
    (``out`` itself replaced by a placeholder, the ``volatile`` keys left out), the others as bytes."""

    def strip(value):
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k not in volatile}
        return [strip(v) for v in value] if isinstance(value, list) else value

    files = {}
    for root, dirs, names in os.walk(out):
        dirs[:] = [d for d in dirs if not d.startswith("checkpoint-")]
        for name in names:
            path = os.path.join(root, name)
            with open(path, "rb") as f:
                data = f.read()
            if name.endswith((".json", ".md")):
                data = data.decode("utf-8").replace(os.path.abspath(out), "<out>").replace(str(out), "<out>")
                data = strip(json.loads(data)) if name.endswith(".json") else data
            files[os.path.relpath(path, out)] = data
    files.pop(LOCK_NAME, None)
    return files


def assert_same_run(out, reference, volatile=TIMINGS):
    got, expected = run_files(out, volatile), run_files(reference, volatile)
    assert sorted(got) == sorted(expected)
    differ = [name for name in expected if got[name] != expected[name]]
    assert not differ, f"differ from the uninterrupted run: {differ}"
    if any(name.startswith("checkpoint-") for name in os.listdir(reference)):
        assert_bit_identical(out, reference)  # and the last checkpoint's tensors


@pytest.fixture(scope="module")
def uninterrupted(tiny_bert, dev_head, tmp_path_factory):
    """method -> the output directory of its tail test's command run without interruption."""
    runs = {}

    def run(method):
        if method not in runs:
            script, _, flags = METHODS[method]
            out = tmp_path_factory.mktemp("uninterrupted") / method
            with pytest.MonkeyPatch.context() as patch:
                in_process(script, tail_args(tiny_bert, out, dev_head, flags), patch)
            runs[method] = str(out)
        return runs[method]

    return run


# In the order a run's end reaches them, each rerun of the same command killed at the next one.
TAIL_KILLS = [
    "tail:during:final_eval",  # the export staged in _export.tmp, the final evaluation under way
    "tail:during:_export.tmp/README.md",  # the results written; the model card (staged too) cut half-way
    "tail:after:1_Pooling/config.json",  # the export's first file in place (they move in sorted order)
    "tail:after:cse_config.json",  # the last file in place: the run is finished
]
FINISHED_HINT = "choose another --output_dir, delete it, or pass --resume_from_checkpoint explicitly"


@pytest.mark.e2e
@pytest.mark.parametrize("method", ["simcse", "adcse"])
def test_killed_in_the_tail_the_same_command_completes_the_run(
    method, tiny_bert, dev_head, uninterrupted, tmp_path, monkeypatch, capsys
):
    """Each kill in turn, every rerun of the same command completing what the one before left; the
    run killed after cse_config.json had finished it: the same command once more is refused, and the
    run's files equal the uninterrupted run's."""
    script, _, flags = METHODS[method]
    out = tmp_path / "killed"
    argv = tail_args(tiny_bert, out, dev_head, flags)
    for kill in TAIL_KILLS:
        worker(script, argv, kill)
        assert (out / "cse_config.json").exists() == (kill == TAIL_KILLS[-1]), kill
        if kill == "tail:after:1_Pooling/config.json":
            assert not (out / "model.safetensors").exists() and (out / "_export.tmp" / "model.safetensors").exists()
        for name in os.listdir(out):  # whatever is in place is whole
            if name.endswith(".json"):
                with open(out / name, encoding="utf-8") as f:
                    json.load(f)
    assert not (out / "_export.tmp").exists() and not list(out.glob("*.tmp"))
    assert refusal(capsys, lambda argv: in_process(script, argv, monkeypatch), argv) == [
        f"error: {out} holds a finished run",
        f"  hint: {FINISHED_HINT}",
    ]
    assert_same_run(out, uninterrupted(method))


def test_a_run_stopped_after_training_under_fsdp_is_refused_in_one_line(tiny_bert, tmp_path, monkeypatch, capsys):
    """FSDP's checkpoints hold its sharded state, not the model the run exports: the end of such a run
    is not completed, the same command says so and what to do. accelerate turns FSDP on only over
    accelerators (GPUs and the like), never on a CPU, so the trainer is told it is on, as the Trainer
    records it."""
    create = CSETrainer.create_accelerator_and_postprocess

    def under_fsdp(self):
        create(self)
        self.is_fsdp_enabled = True

    monkeypatch.setattr(CSETrainer, "create_accelerator_and_postprocess", under_fsdp)
    out = tmp_path / "run"
    last = fake_checkpoint(out / "checkpoint-2", 2, max_steps=2)  # train_argv's --max_steps 2
    run = lambda argv: in_process("run_simcse.py", argv, monkeypatch)  # noqa: E731
    assert refusal(capsys, run, train_argv(tiny_bert, out)) == [
        f"error: training ended at {last}, but the run was stopped before its export, which is not completed "
        "under FSDP",
        "  hint: train again into another --output_dir",
    ]
    assert sorted(os.listdir(out)) == ["checkpoint-2"]  # refused before the run wrote anything


def test_a_full_disk_leaves_the_previous_file_whole_and_no_partial_one(tmp_path):
    """A real full filesystem (a 64 KiB tmpfs; mounting needs root)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(disk)], capture_output=True).returncode:
        pytest.skip("mounting a tmpfs needs root")
    try:
        path = disk / "sts_test_results.json"
        write_json(str(path), {"scores": {"Avg.": 1.0}})
        before = path.read_bytes()
        (disk / "filler").write_bytes(b"x" * (disk_free(disk) - 2048))
        with pytest.raises(OSError) as error:
            write_json(str(path), {"scores": {"Avg.": 2.0}, "padding": "y" * 16384})
        assert error.value.errno == errno.ENOSPC
        assert path.read_bytes() == before and sorted(os.listdir(disk)) == ["filler", path.name]
    finally:
        subprocess.run(["umount", str(disk)], check=True)


def disk_free(path):
    stat = os.statvfs(path)
    return stat.f_bavail * stat.f_frsize


def test_a_disk_full_while_the_results_are_written_then_the_same_command_completes_the_run(
    tiny_bert, dev_head, uninterrupted, tmp_path, monkeypatch
):
    """The final results' write fails half-way with ENOSPC (the run stops with one line); no partial
    file is left, the run is not marked finished, and the same command completes it."""
    out = tmp_path / "full"
    argv = tail_args(tiny_bert, out, dev_head)
    write_text = cse.atomic.write_text

    def full_disk(path, text):
        if not path.endswith("sts_dev_results.json"):
            return write_text(path, text)
        with cse.atomic.atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as f:
            f.write(text[: len(text) // 2])
            f.flush()
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), tmp)

    with monkeypatch.context() as patch:
        patch.setattr(cse.atomic, "write_text", full_disk)
        # one line naming the file whose write failed, not its temporary copy
        with pytest.raises(CSEUsageError, match=r"no space left on device writing \S+/sts_dev_results.json \("):
            in_process("run_simcse.py", argv, patch)
    assert not (out / "sts_dev_results.json").exists() and not [p for p in out.glob("*.tmp") if p.is_file()]
    assert (out / "_export.tmp").is_dir() and not (out / "cse_config.json").exists()
    assert (out / "train_results.json").exists()
    in_process("run_simcse.py", argv, monkeypatch)
    assert_same_run(out, uninterrupted("simcse"))


@pytest.mark.e2e
@pytest.mark.parametrize("strategy", ["best", pytest.param("no", marks=LONG)])
def test_killed_in_the_tail_without_a_last_step_checkpoint_the_same_command_trains_the_rest_again(
    strategy, tiny_bert, dev_head, tmp_path, monkeypatch
):
    """``--save_strategy best`` saves only at a dev improvement and ``no`` never: the same command
    resumes from the newest checkpoint (or the start), and ends with the uninterrupted run's files."""
    argv = tail_args(tiny_bert, tmp_path / "killed", dev_head)
    argv[argv.index("--save_strategy") + 1] = strategy
    i = argv.index("--save_steps")
    del argv[i : i + 2]
    if strategy == "no":
        argv[argv.index("--load_best_model_at_end") + 1] = "false"
    else:  # STS-B dev improves from step 2 to 4 in this run: the lower score makes step 2 the best
        argv += ["--greater_is_better", "false"]
    reference = [str(tmp_path / "straight") if a == str(tmp_path / "killed") else a for a in argv]
    in_process("run_simcse.py", reference, monkeypatch)
    assert not (tmp_path / "straight" / "checkpoint-4").exists()  # no checkpoint at the last step
    worker("run_simcse.py", argv, "tail:after:model.safetensors")
    in_process("run_simcse.py", argv, monkeypatch)
    # The Trainer's train_loss is the mean over the steps the process trained: here the last two.
    assert_same_run(tmp_path / "killed", tmp_path / "straight", volatile=(*TIMINGS, "train_loss"))


def test_a_process_forked_from_a_run_dies_of_its_own_signal_without_stopping_the_run():
    """A DataLoader worker is forked from the run; the DataLoader terminates one that lingers: it must
    die of SIGTERM, and the run's watcher must not take the worker's signal for its own."""
    import multiprocessing

    from cse.reliability import _stop_on_signals

    stopped = []
    with _stop_on_signals(lambda signum, wake_fd: stopped.append(signum)):
        child = multiprocessing.get_context("fork").Process(target=lambda: os.kill(os.getpid(), signal.SIGTERM))
        child.start()
        child.join(timeout=30)
        time.sleep(0.2)  # time for a watcher woken by mistake to act
    assert child.exitcode == -signal.SIGTERM and stopped == []
