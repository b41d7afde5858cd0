"""Which checkpoint a run resumes from, and the settings it must keep: the newest checkpoint by step
number (not by name), every process's RNG state required in a multi-process checkpoint, and the
corpus' statistics compared when ``run_args.json`` records them."""

import json
import os
import types

import pytest
import torch
from transformers import TrainingArguments

from cse.arguments import CSETrainingArguments
from cse.data import CorpusStatistics
from cse.errors import CSEUsageError
from cse.resume import checkpoint_problem, find_checkpoint, last_complete_checkpoint, model_selection
from cse.run_names import RUN_ARGS_NAME

from .conftest import DATA, WIKI_HEAD, fake_checkpoint, method_run


def test_the_newest_checkpoint_is_the_highest_step_not_the_last_name(tmp_path):
    args = TrainingArguments(output_dir=str(tmp_path), use_cpu=True)
    for step in (9, 90, 100):  # by name, "checkpoint-90" sorts after "checkpoint-100"
        fake_checkpoint(tmp_path / f"checkpoint-{step}", step)
    assert last_complete_checkpoint(str(tmp_path), args) == str(tmp_path / "checkpoint-100")


def test_a_two_process_checkpoint_needs_both_rng_states(tmp_path):
    args = types.SimpleNamespace(save_only_model=False, world_size=2)
    checkpoint = fake_checkpoint(tmp_path / "checkpoint-4", 4)
    os.remove(os.path.join(checkpoint, "rng_state.pth"))  # a two-process run writes one per rank instead
    assert checkpoint_problem(checkpoint, args) == "rng_state_0.pth is missing"
    for rank in (0, 1):
        torch.save({"state": torch.arange(8.0)}, os.path.join(checkpoint, f"rng_state_{rank}.pth"))
    assert checkpoint_problem(checkpoint, args) is None
    os.remove(os.path.join(checkpoint, "rng_state_1.pth"))
    assert checkpoint_problem(checkpoint, args) == "rng_state_1.pth is missing"


def test_a_changed_corpus_is_refused_and_settings_without_corpus_statistics_still_resume(tmp_path):
    args = CSETrainingArguments(output_dir=str(tmp_path), use_cpu=True)

    def find(corpus):
        return find_checkpoint(method_run(args), corpus=corpus)

    corpus = CorpusStatistics(100, {1: 90, 2: 5})
    assert find(corpus) is None  # a fresh directory: the settings are recorded
    with open(tmp_path / RUN_ARGS_NAME) as f:
        assert json.load(f)["corpus"] == {"sentences": 100, "distinct": 95}
    last = fake_checkpoint(tmp_path / "checkpoint-2", 2)
    assert find(corpus) == last
    with pytest.raises(CSEUsageError, match=r"other settings \(corpus.distinct: 95 -> 96\)"):
        find(CorpusStatistics(100, {1: 92, 2: 4}))
    # written before the corpus was counted: the rest is compared, the corpus is recorded from now on
    with open(tmp_path / RUN_ARGS_NAME) as f:
        saved = json.load(f)
    del saved["corpus"]
    (tmp_path / RUN_ARGS_NAME).write_text(json.dumps(saved))
    assert find(CorpusStatistics(100, {1: 92, 2: 4})) == last
    with open(tmp_path / RUN_ARGS_NAME) as f:
        assert json.load(f)["corpus"]["distinct"] == 96


def test_a_run_of_another_method_is_refused_even_when_the_new_one_has_no_arguments_of_its_own(tmp_path):
    """MixCSE's interrupted run, resumed by SimCSE's command (no method arguments): the saved method
    group and the method's name differ, though the new run has neither to compare."""
    from cse.methods.mixcse import MixCSEArguments

    args = CSETrainingArguments(output_dir=str(tmp_path), use_cpu=True)
    assert find_checkpoint(method_run(args, "mixcse", MixCSEArguments())) is None
    last = fake_checkpoint(tmp_path / "checkpoint-2", 2)
    changed = (
        r"other settings \(run\.method: 'mixcse' -> 'simcse'; method\.variant: .released. -> None;.*; and 1 more\)"
    )
    with pytest.raises(CSEUsageError, match=changed) as e:
        find_checkpoint(method_run(args))
    assert "it is a run of mixcse, which this command cannot continue" in e.value.hint  # no resume to suggest
    # written before the name was recorded: the method's arguments still tell the two apart
    with open(tmp_path / RUN_ARGS_NAME) as f:
        saved = json.load(f)
    del saved["run"]
    (tmp_path / RUN_ARGS_NAME).write_text(json.dumps(saved))
    unnamed = r"other settings \(method\.variant: .released. -> None;[^)]*True -> None\)"
    with pytest.raises(CSEUsageError, match=unnamed):
        find_checkpoint(method_run(args))
    assert find_checkpoint(method_run(args, "mixcse", MixCSEArguments())) == last


def test_a_named_checkpoint_of_another_method_is_refused_though_its_weights_fit(tmp_path):
    """V-advCSE's model and MixCSE + V-advCSE's have the same weights; their runs' records tell them apart."""
    from cse.methods.vadvcse import VAdvCSEArguments

    other = CSETrainingArguments(output_dir=str(tmp_path / "mix_vadv"), use_cpu=True)
    find_checkpoint(method_run(other, "mixcse+vadvcse"))
    checkpoint = fake_checkpoint(tmp_path / "mix_vadv" / "checkpoint-2", 2)
    args = CSETrainingArguments(output_dir=str(tmp_path / "vadv"), use_cpu=True, resume_from_checkpoint=checkpoint)
    with pytest.raises(CSEUsageError, match=f"{checkpoint} is a checkpoint of mixcse\\+vadvcse, not of vadvcse"):
        find_checkpoint(method_run(args, "vadvcse", VAdvCSEArguments()))
    assert find_checkpoint(method_run(args, "mixcse+vadvcse")) == checkpoint


def selection_of(evaluations, best=None, strategy="steps", load_best=True):
    """model_selection of a 40-step run whose dev scores were logged at ``evaluations``."""
    args = CSETrainingArguments(
        output_dir="o", use_cpu=True, eval_strategy=strategy, load_best_model_at_end=load_best, save_strategy=strategy
    )
    history = [{"loss": 1.0, "step": 5}, *({"eval_stsb_spearman": 0.1 * s, "step": s} for s in evaluations)]
    state = types.SimpleNamespace(
        global_step=40, eval_steps=125, log_history=history, best_model_checkpoint=best, best_metric=0.3
    )
    return model_selection(types.SimpleNamespace(args=args, state=state))


def test_the_selection_note_says_when_nothing_was_compared():
    assert selection_of([10, 20, 30], best="o/checkpoint-30") == (
        "the exported weights are the best of 3 dev evaluations, checkpoint-30, by stsb_spearman (0.3000)"
    )
    assert selection_of([40], best="o/checkpoint-40") == (
        "training ended at step 40 with a single dev evaluation, at step 40 (scheduled every 125 steps), so no "
        "checkpoint was selected: the exported weights are step 40's, the last step"
    )
    # an epoch strategy and a run stopped by --max_steps inside the first epoch: never evaluated
    assert selection_of([], strategy="epoch") == (
        "training ended at step 40 with no dev evaluation (scheduled each epoch), so no checkpoint was selected: "
        "the exported weights are step 40's, the last step"
    )
    assert selection_of([10, 20], load_best=False) == (
        "the exported weights are the last step's (step 40): no best-checkpoint selection"
    )


def test_a_checkpoint_of_another_model_is_refused_in_one_line_before_any_work(tiny_bert, tmp_path, capsys, monkeypatch):
    """SimCSE's command resuming from a checkpoint with other weights (another method's): the Trainer
    would load it non-strictly, keeping what matches and silently dropping the rest."""
    import run_simcse
    from cse.errors import run_cli

    checkpoint = fake_checkpoint(tmp_path / "other" / "checkpoint-2", 2)  # one weight, "w"
    out = tmp_path / "run"
    argv = ["--model_name_or_path", tiny_bert, "--output_dir", str(out), "--train_file", WIKI_HEAD]
    with pytest.raises(SystemExit) as stop:
        run_cli(run_simcse.main, [*argv, "--use_cpu", "true", "--resume_from_checkpoint", checkpoint])
    lines = capsys.readouterr().err.strip().splitlines()[-2:]  # after the model's loading bar
    assert stop.value.code == 2 and lines[0].startswith(f"error: {checkpoint} was saved by a different model")
    assert lines[1].startswith("  hint: ") and not out.exists()
    # torn: not a different model, an incomplete checkpoint (found once the evaluation data are)
    monkeypatch.setenv("CSE_DATA_DIR", DATA)
    weights = os.path.join(checkpoint, "model.safetensors")
    os.truncate(weights, os.path.getsize(weights) // 2)
    with pytest.raises(SystemExit):
        run_cli(run_simcse.main, [*argv, "--use_cpu", "true", "--resume_from_checkpoint", checkpoint])
    assert f"error: --resume_from_checkpoint {checkpoint} is incomplete: model.safetensors" in capsys.readouterr().err
