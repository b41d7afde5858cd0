"""Bad input ends in one clear refusal: exit status 2, ``error: <message>`` (and a hint line) on stderr,
no traceback, nothing written into the output directory; and evaluations report their progress.

Refusals are checked through ``run_cli`` in-process (the entry points' own ``__main__`` path); one
runs as a real subprocess, for the exit status and stderr a shell sees."""

import logging
import os
import shutil
import subprocess
import sys
import time

import pytest

from cse import modeling
from cse.arguments import CSETrainingArguments, DataArguments, ModelArguments, parse_args
from cse.data import load_corpus
from cse.errors import CSEUsageError, run_cli
from cse.evaluation import SentEvalSuite

from .conftest import REPO, SENTEVAL, assert_nothing_written, refusal, train_argv

sys.path.insert(0, REPO)
import run_simcse  # noqa: E402
import senteval_eval  # noqa: E402

TYPES = (ModelArguments, DataArguments, CSETrainingArguments)
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}


# -- the handler -----------------------------------------------------------------------------------


def test_run_cli_prints_user_errors_as_one_line_and_keeps_tracebacks_of_bugs(capsys):
    def refuse(argv):
        raise CSEUsageError("no such thing: x", hint="pass y")

    assert refusal(capsys, refuse, []) == ["error: no such thing: x", "  hint: pass y"]

    def bug(argv):
        raise KeyError("a bug")

    with pytest.raises(KeyError):
        run_cli(bug, [])
    assert run_cli(lambda argv: 0, []) == 0


@pytest.mark.e2e
def test_abbreviated_flag_is_refused_by_a_real_process(tmp_path):
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, os.path.join(REPO, "run_simcse.py"), "--output_dir", str(out), "--learning_rat", "1e-4"],
        capture_output=True,
        text=True,
        env=ENV,
        cwd=REPO,
        timeout=300,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "error: unknown argument(s): --learning_rat 1e-4",
        "  hint: did you mean --learning_rate? (flags are never abbreviated)",
    ]
    assert not out.exists()


# -- strict inputs ---------------------------------------------------------------------------------


def test_argument_parsers_never_take_abbreviations():
    assert parse_args(TYPES, ["--output_dir", "o", "--learning_rate", "1e-4"])[2].learning_rate == 1e-4
    with pytest.raises(CSEUsageError, match="unknown argument"):
        parse_args(TYPES, ["--output_dir", "o", "--learning_rat", "1e-4"])
    with pytest.raises(SystemExit):  # argparse's own refusal: exit 2 with usage
        senteval_eval.parse_args(["--model_name_or_path", "m", "--mod", "dev"])
    from bench.run import parse_args as bench_parse_args

    with pytest.raises(SystemExit):
        bench_parse_args(["--profil", "cpu"])


def test_config_file_after_flags_says_it_goes_first(capsys, tmp_path):
    config = tmp_path / "cfg.yaml"
    config.write_text("seed: 5\n")
    lines = refusal(capsys, run_simcse.main, ["--output_dir", str(tmp_path / "o"), "--seed", "3", str(config)])
    assert lines[0] == f"error: the config file goes first, got it after flags: {config}"
    assert lines[1].endswith(f"{config} --output_dir {tmp_path / 'o'} --seed 3")
    # first, it is read and the flags override it
    assert parse_args(TYPES, [str(config), "--output_dir", "o"])[2].seed == 5
    assert parse_args(TYPES, [str(config), "--output_dir", "o", "--seed", "3"])[2].seed == 3


def test_save_steps_needs_the_steps_strategy(capsys, tmp_path):
    out = tmp_path / "out"
    lines = refusal(capsys, run_simcse.main, ["--output_dir", str(out), "--save_steps", "20"])
    assert lines[0] == "error: --save_steps 20 has no effect with --save_strategy best"
    assert_nothing_written(out)
    config = tmp_path / "cfg.json"
    config.write_text('{"save_steps": 250}')
    with pytest.raises(CSEUsageError, match="no effect"):
        parse_args(TYPES, [str(config), "--output_dir", "o"])
    args = parse_args(TYPES, ["--output_dir", "o", "--save_steps", "250", "--save_strategy", "steps"])[2]
    assert (args.save_strategy, args.save_steps, args.load_best_model_at_end) == ("steps", 250, True)
    # the Trainer's own checks are user errors too (best model needs save_steps a multiple of eval_steps)
    with pytest.raises(CSEUsageError, match="multiple"):
        parse_args(TYPES, ["--output_dir", "o", "--save_steps", "200", "--save_strategy", "steps"])


def test_binary_corpus_is_refused_unless_allowed(capsys, tiny_bert, tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_bytes(os.urandom(200_000))
    out = tmp_path / "out"
    lines = refusal(capsys, run_simcse.main, train_argv(tiny_bert, out, "--train_file", str(corpus)))
    assert lines[0].startswith(f"error: training corpus {corpus} looks like binary data, not text: NUL bytes")
    assert "--allow_binary_corpus" in lines[1]
    assert_nothing_written(out)
    assert len(load_corpus(str(corpus), allow_binary_corpus=True)) > 0
    # no NUL byte, but most lines invalid UTF-8 (Latin-1 bytes of a binary format)
    latin = tmp_path / "latin.txt"
    latin.write_bytes(b"\xff\xfe\xfa\n" * 3 + b"text\n")
    with pytest.raises(CSEUsageError, match="3 of its first 4 lines are not valid UTF-8"):
        load_corpus(str(latin))
    # a few stray bytes in a text corpus are decoded with replacements (and warned about), not refused
    mostly = tmp_path / "mostly.txt"
    mostly.write_bytes(b"a sentence\n" * 3 + b"bad \xff byte\n")
    assert len(load_corpus(str(mostly))) == 4


def test_a_corpus_of_one_sentence_twice_is_refused_in_one_line(capsys, tiny_bert, tmp_path):
    corpus = tmp_path / "twice.txt"
    corpus.write_text("the same sentence.\nthe same sentence.\n")
    out = tmp_path / "out"
    lines = refusal(capsys, run_simcse.main, train_argv(tiny_bert, out, "--train_file", str(corpus)))
    assert lines == [
        f"error: training corpus {corpus} holds 1 distinct sentence(s) in 2 lines: contrastive learning needs at "
        "least 2 different sentences (the others in a batch are the negatives)",
        "  hint: pass a corpus of different sentences (one a line)",
    ]
    assert_nothing_written(out)


def test_non_text_column_is_refused_naming_it(tmp_path):
    path = tmp_path / "corpus.csv"
    path.write_text("text,label\nfirst sentence,1\nsecond one,0\n")
    with pytest.raises(CSEUsageError, match="column 'label' holds int64, not text"):
        load_corpus(str(path), text_column="label")
    assert load_corpus(str(path), text_column="text")["text"] == ["first sentence", "second one"]


def test_fp16_on_the_cpu_is_refused_before_work(capsys, tiny_bert, tmp_path):
    out = tmp_path / "out"
    lines = refusal(capsys, run_simcse.main, train_argv(tiny_bert, out, "--fp16", "true"))
    assert lines[0] == "error: --fp16 needs a GPU and this run is on the CPU"
    assert_nothing_written(out)


# -- model paths -----------------------------------------------------------------------------------


def test_missing_local_model_directory(capsys, tmp_path):
    for name in ("./no-such-dir", str(tmp_path / "absent"), "~/no-such-dir-cse", "a/b/c"):
        lines = refusal(capsys, run_simcse.main, train_argv(name, tmp_path / "out"))
        assert lines == [
            f"error: model directory not found: {name}",
            "  hint: check the path (a hub name is owner/name, without a leading ./ or /)",
        ]
    assert_nothing_written(tmp_path / "out")


def test_uncached_hub_name_offline_fails_at_once(capsys, monkeypatch, tmp_path):
    monkeypatch.setattr(modeling.hub_constants, "HF_HUB_OFFLINE", True)
    start = time.perf_counter()
    lines = refusal(
        capsys, run_simcse.main, train_argv("bert-base-uncased", tmp_path / "out", "--cache_dir", str(tmp_path / "c"))
    )
    assert time.perf_counter() - start < 5
    assert lines[0] == (
        "error: bert-base-uncased is not a local directory nor in the Hugging Face cache, and HF_HUB_OFFLINE is set"
    )
    assert "--model_name_or_path ./my-model" in lines[1]


def test_directory_with_config_but_no_weights_is_one_line(capsys, tiny_bert, tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    shutil.copy(os.path.join(tiny_bert, "config.json"), model)
    lines = refusal(capsys, run_simcse.main, train_argv(str(model), tmp_path / "out"))
    assert lines[0].startswith(f"error: cannot load {model}: ")


def test_senteval_eval_names_what_the_path_is(capsys, tiny_bert, tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(tiny_bert, run_dir)  # an exported model ...
    checkpoint = run_dir / "checkpoint-20"  # ... and a Trainer checkpoint inside its output directory
    checkpoint.mkdir()
    (checkpoint / "model.safetensors").write_bytes(b"")
    (checkpoint / "trainer_state.json").write_text("{}")
    lines = refusal(capsys, senteval_eval.main, ["--model_name_or_path", str(checkpoint)])
    assert lines == [
        f"error: {checkpoint} is a training checkpoint (weights and optimizer state to resume from), "
        "not an exported model",
        f"  hint: use the exported model in {run_dir}",
    ]
    not_a_model = tmp_path / "notes"
    not_a_model.mkdir()
    lines = refusal(capsys, senteval_eval.main, ["--model_name_or_path", str(not_a_model)])
    assert lines == [
        f"error: {not_a_model} has no config.json: not a model directory",
        "  hint: pass the directory of an exported model (a finished run's --output_dir) or of a Hugging Face model",
    ]
    lines = refusal(capsys, senteval_eval.main, ["--model_name_or_path", str(tmp_path / "gone")])
    assert lines[0] == f"error: model directory not found: {tmp_path / 'gone'}"
    lines = refusal(capsys, senteval_eval.main, ["--model_name_or_path", tiny_bert])  # no cse_config.json
    assert lines[0] == (
        f"error: no pooler given and {tiny_bert} records none in cse_config.json or sentence-transformers' modules.json"
    )


# -- check before work -----------------------------------------------------------------------------


def test_missing_sts_test_files_stop_the_run_before_training(capsys, tiny_bert, tmp_path):
    # SentEval data with the model-selection sets only: STS-B and SICK-R, no STS12-16.
    senteval = tmp_path / "senteval"
    (senteval / "STS").mkdir(parents=True)
    os.symlink(os.path.join(SENTEVAL, "SICK"), senteval / "SICK")
    os.symlink(os.path.join(SENTEVAL, "STS", "STSBenchmark"), senteval / "STS" / "STSBenchmark")
    out = tmp_path / "out"
    argv = train_argv(tiny_bert, out, "--senteval_data_dir", str(senteval), "--final_eval", "test")
    lines = refusal(capsys, run_simcse.main, argv)
    assert lines[0].startswith(f"error: SentEval file not found: {senteval}/STS/STS12-en-test/STS.input.")
    assert_nothing_written(out)


# -- progress --------------------------------------------------------------------------------------


def test_evaluation_logs_each_task_and_the_encoding(caplog, tiny_bert, tmp_path, monkeypatch):
    model_dir = tmp_path / "model"
    modeling.CSEModel.from_pretrained(tiny_bert, pooler_type="avg").save_pretrained(str(model_dir))
    monkeypatch.setattr(modeling, "PROGRESS_SECONDS", 0.0)  # a report after every batch
    argv = ["--model_name_or_path", str(model_dir), "--mode", "dev", "--senteval_data_dir", SENTEVAL]
    with caplog.at_level(logging.INFO, logger="cse"):
        report = senteval_eval.main([*argv, "--tasks", "SICKRelatedness", "--device", "cpu", "--batch_size", "256"])
    messages = [record.getMessage() for record in caplog.records]
    sentences = len(SentEvalSuite("sts", "dev", SENTEVAL, tasks=["SICKRelatedness"]))
    encoded = [m for m in messages if m.startswith("encoded ") and " of " in m]
    # one line per batch of 256 sentences, the last one all of them
    assert len(encoded) == -(-sentences // 256) and encoded[-1].startswith(f"encoded {sentences} of {sentences}")
    line = next(m for m in messages if m.startswith("SICK-R: "))
    assert line.startswith(f"SICK-R: {report['scores']['SICK-R']:.2f} (") and line.endswith(" s)")
