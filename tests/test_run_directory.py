"""What a run may write into, move or have its Trainer rotate away, tested as rules over real files
and folders: a directory is a run of this package only when its run_args.json says so (the package
and the run format, or the exact layout the versions before wrote), a checkpoint folder is a run's
only when the run marked it before its first file (recognised torn too), setting a torn one aside
replaces nothing, and a run writes nothing before every check has passed. Runs recorded by the
previous version (tests/fixtures/run_78ca14f.json) resume to the weights of a run never stopped."""

import json
import os
import shutil
import signal
import subprocess
import sys

import pytest

import run_simcse
from cse.errors import CSEUsageError
from cse.run_dir import begin_checkpoint, check_run_directory, foreign_entries, is_run_checkpoint, run_format
from cse.run_names import (
    CHECKPOINT_MARKER_NAME,
    INCOMPLETE_NAME,
    LAUNCHER_LOGS_NAME,
    LEGACY_FORMAT,
    LOCK_NAME,
    RUN_ARGS_NAME,
    RUN_FORMAT,
    STSB_CORPUS_NAME,
    WRITTEN_BY,
    WRITTEN_BY_KEY,
)
from cse.stsb_corpus import write_stsb_corpus

from .conftest import DATA, REPO, SENTEVAL, TOKENIZERS, WIKI_HEAD, common_args, fake_checkpoint, refusal, tiny_run

FIXTURE = os.path.join(REPO, "tests", "fixtures", "run_78ca14f.json")
ENV = {**os.environ, "CSE_DATA_DIR": DATA, "TOKENIZERS_PARALLELISM": "false"}
WORKER = os.path.join(REPO, "tests", "kill_worker.py")


def recorded():
    with open(FIXTURE, encoding="utf-8") as f:
        return json.load(f)


def legacy_settings(model="m", train_file="corpus.txt"):
    """The run_args.json run_simcse.py wrote at 78ca14f, with the recorded run's paths replaced."""
    text = json.dumps(recorded()["run_args"]).replace("@MODEL@", model).replace("@TRAIN_FILE@", train_file)
    return json.loads(text)


def tree(path):
    """Everything under ``path``: each file's bytes, each folder, each link's target."""
    found = {}
    for directory, folders, files in os.walk(path):
        for name in folders + files:
            full = os.path.join(directory, name)
            key = os.path.relpath(full, path)
            if os.path.islink(full):
                found[key] = ("link", os.readlink(full))
            elif os.path.isdir(full):
                found[key] = ("folder",)
            else:
                with open(full, "rb") as f:
                    found[key] = ("file", f.read())
    return found


def refused_untouched(capsys, tiny_bert, out):
    """The refusal (two lines) of the command the previous version's run was recorded with
    (:func:`legacy_settings`), into ``out``, which it left exactly as it was."""
    before = tree(out)
    lines = refusal(capsys, run_simcse.main, [*common_args(tiny_bert, out), "--senteval_data_dir", SENTEVAL])
    assert len(lines) == 2, lines
    assert tree(out) == before
    return lines


def our_run(out, tiny_bert, legacy=False):
    """A run directory of this package, of :func:`refused_untouched`'s command: its run_args.json as
    a run writes it (``legacy``: as the previous version wrote it), with the same settings (a run that
    command would resume)."""
    out.mkdir(parents=True, exist_ok=True)
    settings = legacy_settings(tiny_bert, WIKI_HEAD)
    (out / RUN_ARGS_NAME).write_text(json.dumps(settings if legacy else {WRITTEN_BY_KEY: WRITTEN_BY, **settings}))


# --- what makes a directory a run of this package ------------------------------------------------------

USERS_RUN_ARGS = {
    "another tool's settings": '{"learning_rate": 3e-05, "epochs": 3}\n',
    "not JSON": "lr=3e-5\n",
    "a list": "[1, 2]\n",
    "another package's mark": json.dumps({WRITTEN_BY_KEY: {"package": "other", "format": 1}}),
    "our groups but one": json.dumps({k: v for k, v in legacy_settings().items() if k != "training"}),
    "our groups and another": json.dumps({**legacy_settings(), "optimizer": {"name": "adam"}}),
    "a group not a mapping": json.dumps({**legacy_settings(), "model": "bert-base-uncased"}),
    "a key every such file held missing": json.dumps(
        {
            **legacy_settings(),
            "model": {k: v for k, v in legacy_settings()["model"].items() if k != "model_name_or_path"},
        }
    ),
}


@pytest.mark.parametrize("content", list(USERS_RUN_ARGS.values()), ids=list(USERS_RUN_ARGS))
def test_a_user_s_run_args_json_does_not_make_a_run_and_nothing_is_touched(content, capsys, tiny_bert, tmp_path):
    """A directory of the user's own README.md and run_args.json, whatever the latter holds."""
    out = tmp_path / "mine"
    out.mkdir()
    (out / "README.md").write_text("my notes\n")
    (out / RUN_ARGS_NAME).write_text(content)
    assert run_format(str(out)) is None
    error, _ = refused_untouched(capsys, tiny_bert, out)
    assert error == f"error: --output_dir {out} is not empty and holds no run of this package: README.md, run_args.json"


def test_a_user_s_cse_config_json_or_a_link_to_a_run_s_run_args_json_does_not_make_a_run(capsys, tiny_bert, tmp_path):
    """Neither a finished run's file name (cse_config.json) nor a link to a real run's settings."""
    out = tmp_path / "mine"
    out.mkdir()
    (out / "cse_config.json").write_text('{"pooler_type": "cls"}\n')
    (out / "config.json").write_text('{"mine": true}\n')
    error, _ = refused_untouched(capsys, tiny_bert, out)
    assert error.endswith("holds no run of this package: config.json, cse_config.json")
    run = tmp_path / "run"
    our_run(run, tiny_bert)
    (out / RUN_ARGS_NAME).symlink_to(run / RUN_ARGS_NAME)
    assert run_format(str(run)) == RUN_FORMAT and run_format(str(out)) is None
    error, _ = refused_untouched(capsys, tiny_bert, out)
    assert error.endswith("holds no run of this package: config.json, cse_config.json, run_args.json")


@pytest.mark.parametrize("fmt", [RUN_FORMAT + 1, 0, -1, "1", None, 1.5, True])
def test_a_run_of_a_format_this_version_does_not_read_is_refused_untouched(fmt, capsys, tiny_bert, tmp_path):
    """Of this package, by its mark, in an older or newer format (or none this package writes)."""
    out = tmp_path / "run"
    our_run(out, tiny_bert)
    settings = json.loads((out / RUN_ARGS_NAME).read_text())
    (out / RUN_ARGS_NAME).write_text(json.dumps({**settings, WRITTEN_BY_KEY: {"package": "cse", "format": fmt}}))
    error, hint = refused_untouched(capsys, tiny_bert, out)
    newer = "a newer version of " if fmt == RUN_FORMAT + 1 else ""
    assert error.startswith(f"error: --output_dir {out} holds a run of {newer}this package in run format {fmt!r} ")
    assert error.endswith(
        f"which this version does not read (it reads format {RUN_FORMAT} and the runs of versions "
        "before formats were recorded)"
    )
    assert hint == "  hint: continue it with the version that wrote it, or choose another --output_dir"


def test_a_run_s_settings_and_the_previous_version_s_are_recognised_by_their_content(tiny_bert, tmp_path):
    """The mark a run writes now; the layout the previous version wrote (recorded at 78ca14f), which
    also holds with its optional groups (run, method, corpus) left out, as versions before wrote it."""
    run = tmp_path / "run"
    our_run(run, tiny_bert)
    assert run_format(str(run)) == RUN_FORMAT
    (run / RUN_ARGS_NAME).write_text(json.dumps(legacy_settings()))
    assert run_format(str(run)) == LEGACY_FORMAT
    older = {k: v for k, v in legacy_settings().items() if k not in ("run", "method", "corpus")}
    (run / RUN_ARGS_NAME).write_text(json.dumps(older))
    assert run_format(str(run)) == LEGACY_FORMAT
    # the mark of another package on the same layout is that package's
    (run / RUN_ARGS_NAME).write_text(json.dumps({**older, WRITTEN_BY_KEY: {"package": "other", "format": 1}}))
    assert run_format(str(run)) is None


def test_what_a_run_writes_before_its_settings_is_all_a_new_run_s_directory_may_hold(tmp_path):
    """Its lock, SG-BERT's corpus, the launcher's logs, run_args.json's temporary copy (and checkpoints
    of this package); any other temporary file is someone else's."""
    out = tmp_path / "run"
    (out / LAUNCHER_LOGS_NAME).mkdir(parents=True)
    for name in (LOCK_NAME, STSB_CORPUS_NAME, RUN_ARGS_NAME + ".tmp"):
        (out / name).write_text("")
    fake_checkpoint(out / "checkpoint-2", 2)
    check_run_directory(str(out))
    for name in ("README.md.tmp", "notes.tmp"):
        (out / name).write_text("mine")
        with pytest.raises(CSEUsageError) as refused:
            check_run_directory(str(out))
        assert str(refused.value).splitlines()[0].endswith(f"holds no run of this package: {name}")
        os.remove(out / name)


def test_sg_bert_s_corpus_is_written_only_where_no_file_of_its_name_is_or_that_corpus_is(
    capsys, tiny_bert, tmp_path, monkeypatch
):
    """SG-BERT writes its STS-B corpus into the output directory before the run's checks (they read
    it): a file of that name that holds anything else is the user's, refused untouched; the corpus a
    stopped run wrote is kept as it is, not written again."""
    import run_sgbert

    out = tmp_path / "mine"
    out.mkdir()
    (out / STSB_CORPUS_NAME).write_text("my corpus\n")
    argv = [*common_args(tiny_bert, out), "--senteval_data_dir", SENTEVAL, *tiny_run("sgbert")[2]]
    del argv[argv.index("--train_file") : argv.index("--train_file") + 2]  # SG-BERT's own corpus
    before = tree(out)
    error, hint = refusal(capsys, run_sgbert.main, argv)
    assert error == (
        f"error: {out / STSB_CORPUS_NAME} is not the STS-B sentence corpus a run writes there, and a run would "
        "replace it"
    )
    assert hint == f"  hint: move it away, or pass --train_file {out / STSB_CORPUS_NAME} to train on it"
    assert tree(out) == before
    corpus = tmp_path / "run" / STSB_CORPUS_NAME
    write_stsb_corpus(str(corpus), SENTEVAL)
    written = os.stat(corpus)
    write_stsb_corpus(str(corpus), SENTEVAL, replace=False)
    assert os.stat(corpus).st_ino == written.st_ino and os.stat(corpus).st_mtime_ns == written.st_mtime_ns
    assert len(corpus.read_text().splitlines()) == 17256  # the 8,628 STS-B pairs' sentences


# --- what makes a checkpoint folder a run's -----------------------------------------------------------


def user_checkpoint(out, kind, elsewhere):
    """An entry of the user's own in ``out`` that the Trainer would take for a checkpoint, or where
    a run sets its torn ones aside."""
    if kind == "folder of files":
        (out / "checkpoint-3").mkdir()
        (out / "checkpoint-3" / "notes.txt").write_text("mine\n")
        return "checkpoint-3"
    if kind == "empty folder":
        (out / "checkpoint-3").mkdir()
        return "checkpoint-3"
    if kind == "file":
        (out / "checkpoint-3").write_text("mine\n")
        return "checkpoint-3"
    if kind == "link to a run's checkpoint":
        (out / "checkpoint-3").symlink_to(fake_checkpoint(elsewhere / "checkpoint-3", 3))
        return "checkpoint-3"
    if kind == "another package's mark":
        (out / "checkpoint-3").mkdir()
        (out / "checkpoint-3" / CHECKPOINT_MARKER_NAME).write_text('{"package": "other", "format": 1}')
        return "checkpoint-3"
    if kind == "checkpoint-abc":
        (out / "checkpoint-abc").mkdir()
        return "checkpoint-abc"
    (out / "checkpoint-03").mkdir()  # the Trainer's rotation reads it as step 3
    (out / "checkpoint-03" / "notes.txt").write_text("mine\n")
    return "checkpoint-03"


USER_CHECKPOINTS = [
    "folder of files",
    "empty folder",
    "file",
    "link to a run's checkpoint",
    "another package's mark",
    "checkpoint-abc",
    "checkpoint-03",
]


@pytest.mark.parametrize(
    "kind, where",
    [
        (kind, where)
        for where in ("new", "run", "previous version's run")
        for kind in USER_CHECKPOINTS
        # an empty folder in a run of the previous version is its checkpoint torn before its first file
        if (kind, where) != ("empty folder", "previous version's run")
    ],
)
def test_a_checkpoint_entry_no_run_began_is_refused_untouched(kind, where, capsys, tiny_bert, tmp_path):
    """In a new directory, a run of this package's, or one of the previous version's (whose
    checkpoints are known by holding only a checkpoint's files)."""
    out = tmp_path / "out"
    out.mkdir()
    if where != "new":
        our_run(out, tiny_bert, legacy=where != "run")
    name = user_checkpoint(out, kind, tmp_path / "elsewhere")
    assert not is_run_checkpoint(str(out / name))
    error, hint = refused_untouched(capsys, tiny_bert, out)
    if where == "new":
        assert error == f"error: --output_dir {out} is not empty and holds no run of this package: {name}"
    else:
        assert error == (
            f"error: --output_dir {out} holds a run of this package and entries it did not write, which the run "
            f"would write into, replace or delete: {name}"
        )
        assert hint == "  hint: move those entries out of the run's directory, then rerun the same command"


def test_a_user_s_incomplete_checkpoints_is_no_run_s_and_a_run_s_must_be_a_folder(capsys, tiny_bert, tmp_path):
    out = tmp_path / "out"
    (out / INCOMPLETE_NAME / "checkpoint-2").mkdir(parents=True)
    (out / INCOMPLETE_NAME / "checkpoint-2" / "notes.txt").write_text("mine\n")
    error, _ = refused_untouched(capsys, tiny_bert, out)
    assert error.endswith(f"holds no run of this package: {INCOMPLETE_NAME}")
    run = tmp_path / "run"
    our_run(run, tiny_bert)
    (run / INCOMPLETE_NAME).write_text("mine\n")
    error, _ = refused_untouched(capsys, tiny_bert, run)
    assert error.endswith(f"which the run would write into, replace or delete: {INCOMPLETE_NAME}")


def test_a_checkpoint_is_marked_before_its_first_file_and_known_torn(tmp_path):
    """begin_checkpoint: the folder appears with the marker in it (renamed into place), and a folder
    holding nothing else (a writer killed at once) is the run's; one a process of the run made meanwhile
    is marked where it is."""
    out = tmp_path / "run"
    out.mkdir()
    begin_checkpoint(str(out / "checkpoint-2"))
    assert os.listdir(out) == ["checkpoint-2"] and os.listdir(out / "checkpoint-2") == [CHECKPOINT_MARKER_NAME]
    assert json.loads((out / "checkpoint-2" / CHECKPOINT_MARKER_NAME).read_text()) == {"package": "cse", "format": 1}
    assert is_run_checkpoint(str(out / "checkpoint-2"))
    (out / "checkpoint-4").mkdir()
    (out / "checkpoint-4" / "model.safetensors").write_bytes(b"written by another process of the run")
    begin_checkpoint(str(out / "checkpoint-4"))
    assert sorted(os.listdir(out / "checkpoint-4")) == [CHECKPOINT_MARKER_NAME, "model.safetensors"]
    assert sorted(os.listdir(out)) == ["checkpoint-2", "checkpoint-4"]


# --- nothing written before every check ----------------------------------------------------------------


def test_a_checkpoint_of_another_model_is_refused_before_anything_is_written(capsys, tiny_bert, tmp_path):
    """The run's checks look at the checkpoints (the settings, which checkpoint is complete, the one
    found's weights) before it writes: a refusal of the complete one (another model's weights) leaves
    no run_args.json, and the torn one after it not moved aside."""
    out = tmp_path / "run"
    fake_checkpoint(out / "checkpoint-2", 2, max_steps=8)  # weights of another model than tiny BERT
    torn = fake_checkpoint(out / "checkpoint-4", 4, max_steps=8)
    os.truncate(os.path.join(torn, "optimizer.pt"), 10)
    error, hint = refused_untouched(capsys, tiny_bert, out)
    assert error.startswith(f"error: {out / 'checkpoint-2'} was saved by a different model")
    assert sorted(os.listdir(out)) == ["checkpoint-2", "checkpoint-4"]


# --- real runs -------------------------------------------------------------------------------------


def worker(argv, kill):
    return subprocess.run(
        [sys.executable, WORKER, "run_simcse.py", *argv],
        capture_output=True,
        text=True,
        env={**ENV, "CSE_TEST_KILL": kill},
        timeout=600,
        cwd=REPO,
    )


def in_process(argv, monkeypatch):
    monkeypatch.setenv("CSE_DATA_DIR", DATA)
    run_simcse.main(argv)


def assert_same_weights(out, reference):
    from safetensors.torch import load_file

    for name in ("model.safetensors", os.path.join("checkpoint-8", "model.safetensors")):
        got, expected = load_file(os.path.join(out, name)), load_file(os.path.join(reference, name))
        assert got.keys() == expected.keys() and all((got[k] == expected[k]).all() for k in expected)


@pytest.mark.e2e
def test_a_user_s_checkpoint_is_never_set_aside_nor_replaced_by_a_torn_one(tiny_bert, tmp_path, monkeypatch, caplog):
    """The user's checkpoint-2 in a new directory: refused untouched (the run never starts). Then a run
    really killed with SIGKILL inside its own checkpoint-2: the torn folder is the run's (marked), and
    the same command sets it aside beside what _incomplete_checkpoints/checkpoint-2 already holds,
    replacing nothing, and ends with the weights of a run never stopped."""
    mine = tmp_path / "mine"
    (mine / "checkpoint-2").mkdir(parents=True)
    (mine / "checkpoint-2" / "notes.txt").write_text("mine\n")
    proc = worker(common_args(tiny_bert, mine), "2:during:optimizer.pt")
    assert proc.returncode not in (0, -signal.SIGKILL), proc.stderr[-3000:]  # refused (the worker has no run_cli)
    assert "holds no run of this package: checkpoint-2" in proc.stderr
    assert tree(mine) == {"checkpoint-2": ("folder",), "checkpoint-2/notes.txt": ("file", b"mine\n")}

    in_process(common_args(tiny_bert, tmp_path / "straight"), monkeypatch)
    out = tmp_path / "killed"
    argv = common_args(tiny_bert, out)
    assert worker(argv, "2:during:optimizer.pt").returncode == -signal.SIGKILL
    torn = out / "checkpoint-2"
    assert CHECKPOINT_MARKER_NAME in os.listdir(torn) and "trainer_state.json" not in os.listdir(torn)
    kept = out / INCOMPLETE_NAME / "checkpoint-2"
    kept.mkdir(parents=True)
    (kept / "notes.txt").write_text("mine\n")
    torn_files = tree(torn)
    with caplog.at_level("WARNING", logger="cse.resume"):
        in_process(argv, monkeypatch)  # the same command
    assert (kept / "notes.txt").read_text() == "mine\n" and os.listdir(kept) == ["notes.txt"]
    assert tree(out / INCOMPLETE_NAME / "checkpoint-2.2") == torn_files
    assert f"moved to {out / INCOMPLETE_NAME}" in caplog.text
    assert_same_weights(str(out), str(tmp_path / "straight"))


@pytest.mark.e2e
def test_a_run_killed_under_the_previous_version_resumes_to_the_same_weights(tiny_bert, tmp_path, monkeypatch, caplog):
    """A directory as run_simcse.py left it at 78ca14f when killed inside checkpoint-6's optimizer
    state (recorded: its run_args.json and its files, tests/fixtures/run_78ca14f.json; no marks): the
    same command recognises the run and its checkpoints by their content, sets the torn one aside,
    resumes from checkpoint-4 and ends with the weights of a run never stopped. The checkpoints'
    bytes are this version's (the two versions train bit-identically; only the marks differ)."""
    in_process(common_args(tiny_bert, tmp_path / "straight"), monkeypatch)
    out = tmp_path / "killed"
    argv = common_args(tiny_bert, out)
    assert worker(argv, "6:during:optimizer.pt").returncode == -signal.SIGKILL
    # as the previous version left it: no marks, its run_args.json
    for checkpoint in ("checkpoint-2", "checkpoint-4", "checkpoint-6"):
        os.remove(out / checkpoint / CHECKPOINT_MARKER_NAME)
    (out / RUN_ARGS_NAME).write_text(json.dumps(legacy_settings(tiny_bert, WIKI_HEAD), indent=2))
    files = sorted(key for key, entry in tree(out).items() if entry[0] == "file" and key != LOCK_NAME)
    assert files == recorded()["files"]
    assert run_format(str(out)) == LEGACY_FORMAT
    with caplog.at_level("WARNING", logger="cse.resume"):
        in_process(argv, monkeypatch)  # the same command
    assert f"skipping the incomplete checkpoint {out / 'checkpoint-6'}" in caplog.text
    assert f"resuming from {out / 'checkpoint-4'}" in caplog.text
    assert_same_weights(str(out), str(tmp_path / "straight"))
    assert run_format(str(out)) == RUN_FORMAT
    assert all(is_run_checkpoint(str(out / name)) for name in os.listdir(out) if name.startswith("checkpoint-"))
    assert json.loads((out / RUN_ARGS_NAME).read_text())[WRITTEN_BY_KEY] == WRITTEN_BY


def test_a_mark_without_settings_is_no_run_and_nothing_is_touched(capsys, tiny_bert, tmp_path):
    """``run_args.json`` holding this package's mark and nothing else is an incomplete record: no run
    (its settings cannot be compared), refused naming it, untouched."""
    out = tmp_path / "mine"
    out.mkdir()
    (out / RUN_ARGS_NAME).write_text(json.dumps({WRITTEN_BY_KEY: WRITTEN_BY}))
    assert run_format(str(out)) is None
    error, _ = refused_untouched(capsys, tiny_bert, out)
    assert error == f"error: --output_dir {out} is not empty and holds no run of this package: {RUN_ARGS_NAME}"


def test_an_interrupted_run_without_a_checkpoint_is_refused_with_other_settings(capsys, tiny_bert, tmp_path):
    """A run stopped before its first checkpoint (its run_args.json alone) is still a run of its
    settings: another command into it is refused, untouched, as one with checkpoints is."""
    out = tmp_path / "run"
    our_run(out, tiny_bert)
    before = tree(out)
    argv = [*common_args(tiny_bert, out), "--senteval_data_dir", SENTEVAL, "--learning_rate", "1e-2"]
    error, hint = refusal(capsys, run_simcse.main, argv)
    assert error.startswith(f"error: {out} holds an interrupted run with other settings (training.learning_rate: ")
    assert "delete it to start over" in hint
    assert tree(out) == before


@pytest.mark.parametrize("finished", [False, True])
def test_another_command_into_a_run_is_refused_before_the_model_and_the_corpus_are_read(
    finished, capsys, tiny_bert, tmp_path, monkeypatch
):
    """A finished run, or an interrupted one with other settings, is refused before the model is
    loaded or the corpus tokenised (each would take minutes at a real size), the directory untouched."""
    import cse.pipeline

    def not_now(*args, **kwargs):
        raise AssertionError("read before the refusal")

    monkeypatch.setattr(cse.pipeline, "build", not_now)
    monkeypatch.setattr(cse.pipeline, "build_train_dataset", not_now)
    out = tmp_path / "run"
    our_run(out, tiny_bert)
    if finished:
        (out / "cse_config.json").write_text("{}")
    before = tree(out)
    argv = [*common_args(tiny_bert, out), "--senteval_data_dir", SENTEVAL, "--learning_rate", "1e-2"]
    error, _ = refusal(capsys, run_simcse.main, argv)
    expected = "holds a finished run" if finished else "holds an interrupted run with other settings"
    assert error.startswith(f"error: {out} {expected}"), error
    assert tree(out) == before


@pytest.mark.parametrize("content", ["my important text\n", "12\nhost\n3\nand my notes\n"])
def test_a_user_s_file_named_as_the_lock_is_refused_naming_it(content, capsys, tiny_bert, tmp_path):
    """A ``.cse_run.lock`` that does not hold a lock's record (PID, host, start) is the user's file:
    refused naming it, in a new directory and in a run's, not read as another run's PID; a run's own
    lock (a record, or one being written) is no foreign entry."""
    for out in (tmp_path / "new", tmp_path / "run"):
        out.mkdir()
        if out.name == "run":
            our_run(out, tiny_bert)
        (out / LOCK_NAME).write_text(content)
        error, _ = refused_untouched(capsys, tiny_bert, out)
        assert error.endswith(f": {LOCK_NAME}") and "in use by another run" not in error, error
        for record in ("", "4242\nnode7\n", "4242\nnode7\n99\n", "4242\nno"):
            (out / LOCK_NAME).write_text(record)
            assert LOCK_NAME not in foreign_entries(str(out))


SG_BERT_REFUSALS = {
    "a model that does not exist": ("--model_name_or_path", "/nonexistent/model"),
    "a vocabulary smaller than the tokenizer": ("--tokenizer_name", os.path.join(TOKENIZERS, "roberta-base")),
    "a batch larger than the corpus": ("--max_train_samples", "4"),
}


@pytest.mark.parametrize("flags", list(SG_BERT_REFUSALS.values()), ids=list(SG_BERT_REFUSALS))
def test_a_refused_sg_bert_run_leaves_no_corpus_and_no_directory(flags, capsys, tiny_bert, tmp_path):
    """SG-BERT writes its STS-B corpus into the output directory before the checks that read it: a
    refusal removes it again, and the directories the run created; a corpus a stopped run left is kept."""
    import run_sgbert

    out = tmp_path / "new" / "out"
    argv = [*common_args(tiny_bert, out), "--senteval_data_dir", SENTEVAL, *tiny_run("sgbert")[2], *flags]
    del argv[argv.index("--train_file") : argv.index("--train_file") + 2]  # SG-BERT's own corpus
    refusal(capsys, run_sgbert.main, argv)
    assert os.listdir(tmp_path) == []
    kept = tmp_path / "stopped"
    write_stsb_corpus(str(kept / STSB_CORPUS_NAME), SENTEVAL)
    before = tree(kept)
    argv[argv.index("--output_dir") + 1] = str(kept)
    refusal(capsys, run_sgbert.main, argv)
    assert tree(kept) == before


@pytest.mark.e2e
def test_a_user_s_files_in_an_interrupted_run_are_refused_but_not_the_files_its_export_moved(
    capsys, tiny_bert, tmp_path, monkeypatch
):
    """A run really killed (SIGKILL) during training, the user's README.md, config.json and notes.txt
    then put in its directory: the same command refuses, naming them, untouched (the run's model card
    and configuration would replace them). A run killed in its export's publish, after README.md and
    config.json were moved into place: those are the run's (the publish's list, with the names left in
    _export.tmp, tells); only the user's notes.txt is refused; without it the same command completes."""
    out = tmp_path / "killed"
    argv = common_args(tiny_bert, out, max_steps=4, save_steps=1)
    assert worker(argv, "2:step").returncode == -signal.SIGKILL
    (out / "README.md").write_text("my notes\n")
    (out / "config.json").write_text('{"mine": 1}\n')
    (out / "notes.txt").write_text("mine\n")
    before = tree(out)
    error, hint = refusal(capsys, run_simcse.main, argv)
    assert error == (
        f"error: --output_dir {out} holds a run of this package and entries it did not write, which the run "
        "would write into, replace or delete: README.md, config.json, notes.txt"
    )
    assert tree(out) == before

    out = tmp_path / "publish"
    argv = common_args(tiny_bert, out, max_steps=4, save_steps=1)
    assert worker(argv, "tail:after:config.json").returncode == -signal.SIGKILL
    assert {"README.md", "config.json", "model.safetensors"} <= set(os.listdir(out / "_export.tmp")) | set(
        os.listdir(out)
    )
    assert (out / "config.json").exists() and not (out / "_export.tmp" / "config.json").exists()
    (out / "notes.txt").write_text("mine\n")
    before = tree(out)
    error, _ = refusal(capsys, run_simcse.main, argv)
    assert error.endswith("would write into, replace or delete: notes.txt")
    assert tree(out) == before
    os.remove(out / "notes.txt")
    in_process(argv, monkeypatch)  # the same command completes the run
    assert (out / "cse_config.json").exists() and not (out / "_export.tmp").exists()
    assert not (out / "_export_names.json").exists()


def test_the_files_of_a_publish_are_told_by_its_list_and_the_staging_folder(tiny_bert, tmp_path):
    """In an interrupted run's directory: a name on the publish's list no longer staged is the run's,
    one still staged (not yet moved) is not; with the list gone and only cse_config.json.tmp left to
    rename, the export is in place and nothing is foreign."""
    out = tmp_path / "run"
    our_run(out, tiny_bert)
    (out / "_export.tmp").mkdir()
    (out / "_export.tmp" / "model.safetensors").write_text("staged")
    (out / "_export_names.json").write_text(json.dumps(["README.md", "config.json", "model.safetensors"]))
    for name in ("README.md", "config.json", "model.safetensors", "notes.txt", "train_results.json"):
        (out / name).write_text("x")
    assert foreign_entries(str(out)) == ["model.safetensors", "notes.txt"]
    os.remove(out / "_export_names.json")
    assert foreign_entries(str(out)) == ["README.md", "config.json", "model.safetensors", "notes.txt"]
    shutil.rmtree(out / "_export.tmp")
    (out / "cse_config.json.tmp").write_text("{}")
    assert foreign_entries(str(out)) == []
