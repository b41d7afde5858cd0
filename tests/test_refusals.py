"""Bad input, tried as an attacker would: every flag with a range (zero, negative, NaN, infinite, huge,
the wrong type), every file a run reads (a config file, a corpus, a model directory, a result JSON:
empty, cut short, not UTF-8, not what its name says, a link to nowhere) and every directory it writes
(another program's files, a link elsewhere). Each ends in exactly one ``error:`` line and one
``  hint:`` line, exit status 2, before any work and with nothing written; or, where the input is
valid after all, in the run it asks for. docs/reliability.md's table lists them.

All run in this process through the entry points' own path (``run_cli``); a flag is refused while
the arguments are parsed, before any model is loaded."""

import json
import os
import random
import shutil
from pathlib import Path

import pytest

import anli_eval
import run_adcse
import run_esimcse
import run_mixcse
import run_promptbert
import run_sarcse
import run_sgbert
import run_simcse
import run_vadvcse
import senteval_eval
from cse import composition, plots, results
from cse.data import CorpusStatistics, load_corpus

from .conftest import SENTEVAL, WIKI_HEAD, assert_nothing_written, refusal, train_argv

MAINS = {
    "simcse": run_simcse.main,
    "adcse": run_adcse.main,
    "esimcse": run_esimcse.main,
    "mixcse": run_mixcse.main,
    "promptbert": run_promptbert.main,
    "sarcse": run_sarcse.main,
    "sgbert": run_sgbert.main,
    "vadvcse": run_vadvcse.main,
    "cse": composition.main,
}


def refused(capsys, main, argv):
    """The refusal's two lines, ``error: ...`` and ``  hint: ...`` (conftest.refusal checks the form)."""
    lines = refusal(capsys, main, argv)
    assert len(lines) == 2, lines
    return lines


# (script, flags, the start of the error line)
OUT_OF_RANGE = [
    ("simcse", "--temp 0", "--temp must be > 0, got 0"),
    ("simcse", "--temp -0.05", "--temp must be > 0, got -0.05"),
    ("simcse", "--temp nan", "--temp must be a finite number, got nan"),
    ("simcse", "--temp abc", "argument --temp: invalid float value: 'abc'"),
    ("simcse", "--learning_rate 0", "--learning_rate must be > 0, got 0"),
    ("simcse", "--learning_rate=-3e-5", "--learning_rate must be > 0, got -3e-05"),
    ("simcse", "--learning_rate nan", "--learning_rate must be a finite number, got nan"),
    ("simcse", "--learning_rate inf", "--learning_rate must be a finite number, got inf"),
    ("simcse", "--num_train_epochs 0", "--num_train_epochs 0 without --max_steps trains nothing"),
    ("simcse", "--num_train_epochs -1 --max_steps 10", "--num_train_epochs must be >= 0, got -1"),
    ("simcse", "--max_steps 0", "--max_steps must be a whole number in [1, 2147483647] or -1, got 0"),
    ("simcse", "--max_steps -5", "--max_steps must be a whole number in [1, 2147483647] or -1, got -5"),
    ("simcse", "--eval_steps 0", "--eval_steps must be > 0, got 0"),
    ("simcse", "--eval_steps -125", "--eval_steps must be > 0, got -125"),
    ("simcse", "--logging_steps 0", "--logging_steps must be > 0, got 0"),
    ("simcse", "--save_strategy steps --save_steps 0", "--save_steps must be > 0, got 0"),
    ("simcse", "--save_total_limit 0", "--save_total_limit must be a whole number >= 1, got 0"),
    ("simcse", "--per_device_train_batch_size 1", "the global batch is 1 sentence(s)"),
    ("simcse", "--per_device_train_batch_size 0", "--per_device_train_batch_size must be a whole number >= 1"),
    ("simcse", "--per_device_train_batch_size -64", "--per_device_train_batch_size must be a whole number >= 1"),
    ("simcse", "--per_device_eval_batch_size 0", "--per_device_eval_batch_size must be a whole number >= 1"),
    ("simcse", "--gradient_accumulation_steps 0", "--gradient_accumulation_steps must be a whole number >= 1"),
    ("simcse", "--warmup_steps -1", "--warmup_steps must be >= 0, got -1"),
    ("simcse", "--weight_decay -0.01", "--weight_decay must be >= 0, got -0.01"),
    ("simcse", "--adam_beta1 1", "--adam_beta1 must lie in [0, 1), got 1"),
    ("simcse", "--adam_beta2 1.5", "--adam_beta2 must lie in [0, 1), got 1.5"),
    ("simcse", "--adam_epsilon 0", "--adam_epsilon must be > 0, got 0"),
    ("simcse", "--max_grad_norm -1", "--max_grad_norm must be >= 0, got -1"),
    ("simcse", "--seed -1", "--seed must be a whole number in [0, 4294967295], got -1"),
    ("simcse", "--seed 99999999999", "--seed must be a whole number in [0, 4294967295], got 99999999999"),
    ("simcse", "--dataloader_num_workers -1", "--dataloader_num_workers must be a whole number >= 0"),
    ("simcse", "--max_seq_length 1", "--max_seq_length must be a whole number >= 2, got 1"),
    ("simcse", "--max_seq_length -32", "--max_seq_length must be a whole number >= 2, got -32"),
    ("simcse", "--max_train_samples 0", "--max_train_samples must be a whole number >= 1, got 0"),
    ("simcse", "--preprocessing_num_workers 0", "--preprocessing_num_workers must be a whole number >= 1"),
    ("adcse", "--momentum 1.5", "--momentum must lie in [0, 1], got 1.5"),
    ("adcse", "--momentum -0.1", "--momentum must lie in [0, 1], got -0.1"),
    ("adcse", "--num_adversaries 0", "--num_adversaries must be a whole number >= 1, got 0"),
    ("adcse", "--adversary_learning_rate -1", "--adversary_learning_rate must be >= 0, got -1"),
    ("adcse", "--adversary_momentum 1", "--adversary_momentum must lie in [0, 1), got 1"),
    ("adcse", "--adversary_weight_decay=-1e-4", "--adversary_weight_decay must be >= 0, got -0.0001"),
    ("adcse", "--adversary_temperature 0", "--adversary_temperature must be > 0, got 0"),
    ("adcse", "--momentum=-inf", "--momentum must be a finite number, got -inf"),
    ("esimcse", "--dup_rate 1.5", "--dup_rate must lie in [0, 1], got 1.5"),
    ("esimcse", "--queue_size -1", "--queue_size must be a whole number >= 0, got -1"),
    ("esimcse", "--momentum 1.2", "--momentum must lie in [0, 1], got 1.2"),
    ("esimcse", "--queue_size 0 --momentum 0.9", "--momentum set, but --queue_size 0 leaves no momentum encoder"),
    (
        "esimcse",
        "--queue_size 0 --momentum_start pretrained",
        "--momentum_start set, but --queue_size 0 leaves no momentum encoder",
    ),
    ("mixcse", "--mix_lambda 1", "--mix_lambda must lie in [0, 1), got 1"),
    (
        "promptbert",
        "--template *cls*_*mask*_means_*sent_0*.*sep+*",
        "--template '*cls*_*mask*_means_*sent_0*.*sep+*': its *mask* comes before *sent_0*",
    ),
    (
        "promptbert",
        "--positive_template *cls*_It_means*mask*.*sep+*",
        "--positive_template '*cls*_It_means*mask*.*sep+*'",
    ),
    ("mixcse", "--mix_lambda -0.2", "--mix_lambda must lie in [0, 1), got -0.2"),
    ("sarcse", "--alpha 0", "--alpha must be > 0, got 0"),
    ("sarcse", "--beta -1", "--beta must be >= 0, got -1"),
    ("sarcse", "--gamma -1", "--gamma must be >= 0, got -1"),
    ("sarcse", "--theta 1.5", "--theta must lie in [0, 1], got 1.5"),
    ("sarcse", "--freq_lambda -50", "--freq_lambda must be >= 0, got -50"),
    ("sarcse", "--kernel_sizes 3 0 5", "--kernel_sizes must be a whole number >= 1, got [3, 0, 5]"),
    ("sarcse", "--textcnn_channels 1", "--textcnn_channels must be a whole number >= 2, got 1"),
    ("sarcse", "--cnn_channels 0", "--cnn_channels must be a whole number >= 1, got 0"),
    ("sgbert", "--temp 0", "--temp must be > 0, got 0"),
    ("sgbert", "--reg_lambda -0.1", "--reg_lambda must be >= 0, got -0.1"),
    ("sgbert", "--projection_size 0", "--projection_size must be a whole number >= 1, got 0"),
    ("sgbert", "--early_stopping_patience -1", "--early_stopping_patience must be a whole number >= 0, got -1"),
    ("sgbert", "--layers 0 -1", "--layers must be a whole number >= 0, got [0, -1]"),
    ("vadvcse", "--vadv_lambda=-1e-6", "--vadv_lambda must be >= 0, got -1e-06"),
    ("vadvcse", "--sigma -1", "--sigma must be >= 0, got -1"),
    ("vadvcse", "--epsilon 0", "--epsilon must be > 0, got 0"),
    ("vadvcse", "--step_size=-1e-3", "--step_size must be >= 0, got -0.001"),
    ("vadvcse", "--num_steps 0", "--num_steps must be a whole number >= 1, got 0"),
    ("cse", "--parts mixcse,vadvcse --mix_lambda 1", "mixcse: --mix_lambda must lie in [0, 1), got 1"),
    ("cse", "--parts adcse,sarcse --adcse_variant paper --momentum 2", "adcse: --momentum must lie in [0, 1], got 2"),
]


@pytest.mark.parametrize("script,flags,said", OUT_OF_RANGE, ids=[f"{s} {f}" for s, f, _ in OUT_OF_RANGE])
def test_a_flag_out_of_its_range_is_refused_before_work(script, flags, said, capsys, tmp_path):
    out = tmp_path / "out"
    error, hint = refused(capsys, MAINS[script], ["--output_dir", str(out), *flags.split()])
    assert error.startswith(f"error: {said}"), error
    assert hint.startswith("  hint: ") and len(hint) > len("  hint: ") + 10
    assert_nothing_written(out)


def test_the_evaluation_scripts_refuse_numbers_out_of_range_and_an_output_they_could_not_write(capsys, tmp_path):
    model = ["--model_name_or_path", str(tmp_path / "not-read")]
    for flags, said in [
        ("--batch_size 0", "--batch_size must be a whole number >= 1, got 0"),
        ("--max_seq_length 1", "--max_seq_length must be a whole number >= 2, got 1"),
        ("--seed -1", "--seed must be a whole number in [0, 4294967295], got -1"),
        (f"--output_json {tmp_path}", f"--output_json {tmp_path} is a directory"),
    ]:
        error, _ = refused(capsys, senteval_eval.main, [*model, *flags.split()])
        assert error == f"error: {said}"
    (tmp_path / "file").write_text("")
    error, _ = refused(capsys, senteval_eval.main, [*model, "--output_json", str(tmp_path / "file" / "r.json")])
    assert error == f"error: --output_json {tmp_path / 'file' / 'r.json'} goes through {tmp_path / 'file'}, a file"
    out = tmp_path / "anli"
    for flags, said in [
        ("--max_seq_length 0", "--max_seq_length must be a whole number >= 2, got 0"),
        ("--anli_upsampling 10 -1 10", "--anli_upsampling must be a whole number >= 0, got [10, -1, 10]"),
        ("--learning_rate 0", "--learning_rate must be > 0, got 0"),
    ]:
        error, _ = refused(capsys, anli_eval.main, [*model, "--output_dir", str(out), *flags.split()])
        assert error == f"error: {said}"
    assert_nothing_written(out)


# --- the config file ---------------------------------------------------------------------------

BAD_CONFIGS = [
    ("empty.yaml", b"", "is empty: it sets no argument"),
    ("comments.yaml", b"# nothing set\n", "is empty: it sets no argument"),
    ("latin1.yaml", "learning_rate: 3e-5  # café\n".encode("latin-1"), "is not UTF-8 text (byte 26: b'\\xe9')"),
    ("syntax.yaml", b"learning_rate: [3e-5\n", "is not valid YAML: while parsing a flow sequence"),
    ("syntax.json", b'{"learning_rate": 3e-5', "is not valid JSON: Expecting ',' delimiter"),
    ("list.yaml", b"- learning_rate\n- 3e-5\n", "holds a list, not a mapping of argument names to values"),
    ("unknown.yaml", b"learning_rat: 3e-5\n", "unknown argument(s) learning_rat"),
    ("type.yaml", b"learning_rate: [1, 2]\n", "learning_rate must be a number, got [1, 2]"),
    ("int.yaml", b"max_steps: 2.5\n", "max_steps must be a whole number, got 2.5"),
    ("null.yaml", b"temp: null\n", "temp must be a number, got None"),
    ("bool.yaml", b"seed: true\n", "seed must be a whole number, got True"),
    ("text.yaml", b"output_dir: 5\n", "output_dir must be text, got 5"),
    ("string.yaml", b"learning_rate: fast\n", "argument --learning_rate/--learning-rate: invalid float value: 'fast'"),
    ("nan.yaml", b"weight_decay: .nan\n", "--weight_decay must be a finite number, got nan"),
    ("range.yaml", b"temp: 0\n", "--temp must be > 0, got 0"),
]


@pytest.mark.parametrize("name,content,said", BAD_CONFIGS, ids=[name for name, _, _ in BAD_CONFIGS])
def test_a_config_file_that_is_not_a_mapping_of_valid_values_is_refused(name, content, said, capsys, tmp_path):
    config = tmp_path / name
    config.write_bytes(content)
    out = tmp_path / "out"
    error, hint = refused(capsys, run_simcse.main, [str(config), "--output_dir", str(out)])
    assert said in error, error
    assert_nothing_written(out)
    if name == "unknown.yaml":
        assert hint == "  hint: did you mean learning_rate?"


def test_a_config_file_that_is_missing_or_a_directory_is_refused(capsys, tmp_path):
    error, _ = refused(capsys, run_simcse.main, [str(tmp_path / "gone.yaml"), "--output_dir", "o"])
    assert error == f"error: config file not found: {tmp_path / 'gone.yaml'}"
    (tmp_path / "dir.yaml").mkdir()
    error, _ = refused(capsys, run_simcse.main, [str(tmp_path / "dir.yaml"), "--output_dir", "o"])
    assert error == f"error: config file {tmp_path / 'dir.yaml'} is a directory"


@pytest.mark.parametrize(
    "flags,said",
    [
        (["--output_dir", ""], "--output_dir is empty"),
        (["--train_file", ""], "--train_file is empty"),
        (["--senteval_data_dir="], "--senteval_data_dir is empty"),
        (["--temp="], "argument --temp: invalid float value: ''"),
    ],
)
def test_an_empty_value_is_refused_rather_than_replaced_by_a_default(flags, said, capsys, tmp_path):
    """An unset shell variable (`--train_file "$CORPUS"`) would otherwise train on the default corpus."""
    out = tmp_path / "out"
    error, _ = refused(
        capsys, run_simcse.main, [*(["--output_dir", str(out)] if "--output_dir" not in flags else []), *flags]
    )
    assert error == f"error: {said}"
    assert_nothing_written(out)


def test_an_empty_value_in_a_config_file_is_refused(capsys, tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text('train_file: ""\n')
    assert refused(capsys, run_simcse.main, [str(config), "--output_dir", "o"])[0] == "error: --train_file is empty"


# --- the output directory ----------------------------------------------------------------------


def test_an_output_dir_holding_the_user_s_own_files_is_refused_and_left_untouched(capsys, tiny_bert, tmp_path):
    """A directory of the user's own README.md and config.json, not a run's."""
    out = tmp_path / "mine"
    out.mkdir()
    (out / "README.md").write_text("my notes\n")
    (out / "config.json").write_text('{"mine": true}\n')
    error, hint = refused(capsys, run_simcse.main, train_argv(tiny_bert, out))
    assert error == f"error: --output_dir {out} is not empty and holds no run of this package: README.md, config.json"
    assert hint == (
        "  hint: a run writes its model, README.md and config.json there: choose a new or empty --output_dir "
        f"(e.g. {out / 'run'}), or move those files away"
    )
    assert sorted(os.listdir(out)) == ["README.md", "config.json"]
    assert (out / "README.md").read_text() == "my notes\n" and json.loads((out / "config.json").read_text())
    # a link to such a directory is the same directory
    link = tmp_path / "link"
    link.symlink_to(out)
    error, _ = refused(capsys, run_simcse.main, train_argv(tiny_bert, link))
    assert error.startswith(f"error: --output_dir {link} (a link to {out}) is not empty and holds no run")
    # many entries: the first five, and how many more
    for i in range(7):
        (out / f"f{i}.txt").write_text("")
    error, _ = refused(capsys, run_simcse.main, train_argv(tiny_bert, out))
    assert error.endswith(": README.md, config.json, f0.txt, f1.txt, f2.txt and 4 more")


def test_an_output_dir_that_links_to_nowhere_is_refused(capsys, tiny_bert, tmp_path):
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "gone")
    error, hint = refused(capsys, run_simcse.main, train_argv(tiny_bert, link))
    assert error == f"error: --output_dir {link} is a symbolic link to {tmp_path / 'gone'}, which does not exist"
    assert not (tmp_path / "gone").exists()


# --- the model directory -----------------------------------------------------------------------


def damaged_model(tiny_bert, tmp_path, name, damage):
    model = tmp_path / "model"
    shutil.copytree(tiny_bert, model)
    path = model / name
    if damage == "cut":
        os.truncate(path, os.path.getsize(path) // 2)
    elif damage == "empty":
        path.write_bytes(b"")
    elif damage == "text":
        path.write_text("not what the name says\n")
    return model, path


@pytest.mark.parametrize(
    "name,damage,said",
    [
        ("model.safetensors", "cut", "unreadable (SafetensorError: Error while deserializing header: incomplete"),
        ("model.safetensors", "empty", "unreadable (SafetensorError: Error while deserializing header: header too"),
        ("config.json", "cut", "unreadable (JSONDecodeError: "),
        ("config.json", "empty", "unreadable (JSONDecodeError: Expecting value: line 1 column 1 (char 0))"),
        ("tokenizer.json", "cut", "unreadable (JSONDecodeError: "),
        ("tokenizer_config.json", "text", "unreadable (JSONDecodeError: Expecting value"),
    ],
)
def test_a_damaged_model_directory_is_refused_naming_the_file(name, damage, said, capsys, tiny_bert, tmp_path):
    model, path = damaged_model(tiny_bert, tmp_path, name, damage)
    out = tmp_path / "out"
    error, hint = refused(capsys, run_simcse.main, train_argv(str(model), out))
    assert error.startswith(f"error: {path} is {said}"), error
    assert hint == "  hint: the file is damaged or cut short: copy or download the model directory again"
    assert_nothing_written(out)
    # so does an evaluation of it
    error, _ = refused(capsys, senteval_eval.main, ["--model_name_or_path", str(model), "--pooler", "cls"])
    assert error.startswith(f"error: {path} is {said}")


def test_a_config_json_that_transformers_cannot_read_is_one_line(capsys, tiny_bert, tmp_path):
    model, path = damaged_model(tiny_bert, tmp_path, "config.json", None)
    path.write_text('{"hidden_size": 32}')  # valid JSON, no model_type
    error, hint = refused(capsys, run_simcse.main, train_argv(str(model), tmp_path / "out"))
    assert error.startswith(f"error: cannot load {model}: Unrecognized model in {model}")
    assert hint.startswith("  hint: pass a directory saved by save_pretrained")


def test_a_model_path_that_links_to_nowhere_or_is_a_file_is_refused(capsys, tiny_bert, tmp_path):
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "gone")
    error, _ = refused(capsys, run_simcse.main, train_argv(str(link), tmp_path / "out"))
    assert error == f"error: {link} is a symbolic link to {tmp_path / 'gone'}, which does not exist"
    error, hint = refused(capsys, run_simcse.main, train_argv(os.path.join(tiny_bert, "config.json"), tmp_path / "o"))
    assert error.endswith("config.json is a file, not a model directory")


def test_a_directory_of_an_unfinished_run_says_to_finish_it(capsys, tmp_path):
    """senteval_eval.py on a run's output directory before the run exported its model."""
    run = tmp_path / "run"
    for step in (9, 10):
        (run / f"checkpoint-{step}").mkdir(parents=True)
    error, hint = refused(capsys, senteval_eval.main, ["--model_name_or_path", str(run)])
    assert error == f"error: {run} has no config.json: not a model directory"
    assert hint == (
        "  hint: it holds a run that has not finished (checkpoint-10): rerun the run's command, which completes it "
        "and exports the model there"
    )


def test_a_damaged_cse_config_json_is_refused(capsys, tiny_bert, tmp_path):
    model, path = damaged_model(tiny_bert, tmp_path, "cse_config.json", None)
    path.write_text('["cls"]')
    error, hint = refused(capsys, senteval_eval.main, ["--model_name_or_path", str(model)])
    assert error == f"error: the encoder's settings {path} hold a list, not a mapping"
    assert hint.startswith("  hint: restore the file, or delete it and name the pooler (--pooler cls/")


def test_max_seq_length_beyond_the_model_s_positions_is_refused_before_work(capsys, tiny_bert, tmp_path):
    """--max_seq_length 100000 with lines longer than the model's 512 positions, which would fail at the
    first batch holding one (a size mismatch of tensors, run_args.json left behind): refused before the
    corpus is read, nothing written."""
    corpus = tmp_path / "long.txt"
    corpus.write_text("\n".join(" ".join(f"w{i}{j}" for j in range(800)) for i in range(20)) + "\n")
    out = tmp_path / "out"
    argv = train_argv(tiny_bert, out, "--train_file", str(corpus), "--max_seq_length", "100000")
    assert refused(capsys, run_simcse.main, argv) == [
        "error: --max_seq_length 100000 exceeds the 512 tokens a sentence of this model (bert, 512 positions) can hold",
        "  hint: pass --max_seq_length 512 or less (SimCSE: 32)",
    ]
    assert_nothing_written(out)


@pytest.mark.parametrize(("script", "longest"), [("run_promptbert", 10), ("run_cotbert", 20)])
def test_max_seq_length_that_fits_but_not_with_the_template_is_refused_before_work(
    capsys, tiny_bert, tmp_path, script, longest
):
    """--max_seq_length 512 on a model of 512 positions: the sentence fits, but not inside the template
    (PromptBERT's longest is 10 tokens, CoT-BERT's 20: inputs of up to 510 + 10 or 20 tokens), which would
    fail at the first batch of a long sentence; refused before the corpus is read, nothing written.
    502 or 492 tokens fit."""
    import importlib

    out = tmp_path / "out"
    argv = train_argv(tiny_bert, out, "--max_seq_length", "512")
    assert refused(capsys, importlib.import_module(script).main, argv) == [
        f"error: --max_seq_length 512 makes inputs of up to {510 + longest} tokens with the template around the "
        "sentence, beyond the 512 tokens an input of this model (bert, 512 positions) can hold",
        f"  hint: pass --max_seq_length {512 - (longest - 2)} or less",
    ]
    assert_nothing_written(out)


# --- the corpus --------------------------------------------------------------------------------


def test_a_corpus_whose_batches_cannot_hold_distinct_sentences_is_refused(capsys, tiny_bert, tmp_path):
    """5,000 one-character lines (here the 26 letters, in random order): a batch of 64 holds
    23.9 distinct sentences on average, so most of its rows repeat one of the batch."""
    rng = random.Random(0)
    corpus = tmp_path / "letters.txt"
    corpus.write_text("".join(rng.choice("abcdefghijklmnopqrstuvwxyz") + "\n" for _ in range(5000)))
    out = tmp_path / "out"
    argv = train_argv(tiny_bert, out, "--train_file", str(corpus), "--per_device_train_batch_size", "64")
    error, hint = refused(capsys, run_simcse.main, argv)
    assert error == (
        f"error: training corpus {corpus} repeats its 26 distinct sentences over 5,000 lines: a batch of 64 holds "
        "23.9 distinct sentences on average, so most of its rows repeat a sentence of the batch (a false negative: "
        "the loss pushes a sentence away from itself); a batch must hold distinct sentences for at least half of its "
        "rows"
    )
    assert hint == (
        f"  hint: deduplicate it (awk '!seen[$0]++' {corpus} > deduplicated.txt keeps the first of each), or train "
        "with a global batch of at most 41"
    )
    assert_nothing_written(out)


def test_three_identical_lines_are_refused_with_a_hint(capsys, tiny_bert, tmp_path):
    corpus = tmp_path / "three.txt"
    corpus.write_text("the same sentence.\n" * 3)
    error, hint = refused(capsys, run_simcse.main, train_argv(tiny_bert, tmp_path / "out", "--train_file", str(corpus)))
    assert error.startswith(f"error: training corpus {corpus} holds 1 distinct sentence(s) in 3 lines")
    assert hint == "  hint: pass a corpus of different sentences (one a line)"


@pytest.mark.parametrize(
    "name,content,said",
    [
        ("empty.txt", b"", "training corpus is empty: "),
        ("blank.txt", b"\n  \n\t\n", "training corpus has no non-blank line: "),
        ("utf16.txt", "one sentence\nanother one\n".encode("utf-16"), "looks like binary data, not text: NUL bytes"),
        ("corpus.json", b'{"text": "a sentence"}\n', "training corpus must be .txt or .csv, got "),
    ],
)
def test_an_unusable_corpus_is_refused_before_work(name, content, said, capsys, tiny_bert, tmp_path):
    corpus = tmp_path / name
    corpus.write_bytes(content)
    out = tmp_path / "out"
    error, hint = refused(capsys, run_simcse.main, train_argv(tiny_bert, out, "--train_file", str(corpus)))
    assert said in error, error
    assert_nothing_written(out)


def test_a_corpus_link_reads_its_target_and_a_link_to_nowhere_is_refused(capsys, tiny_bert, tmp_path):
    link = tmp_path / "corpus.txt"
    link.symlink_to(WIKI_HEAD)
    assert load_corpus(str(link), max_train_samples=50)["text"] == load_corpus(WIKI_HEAD, max_train_samples=50)["text"]
    dangling = tmp_path / "gone.txt"
    dangling.symlink_to(tmp_path / "nowhere.txt")
    error, hint = refused(capsys, run_simcse.main, train_argv(tiny_bert, tmp_path / "o", "--train_file", str(dangling)))
    assert error == f"error: training corpus not found: {dangling}"


def test_latin1_text_decodes_with_replacements_and_a_warning(tiny_bert, tmp_path, caplog):
    """A corpus saved as Latin-1 is text with a few invalid UTF-8 bytes: it is read, each bad byte a
    U+FFFD, with a warning counting the lines."""
    corpus = tmp_path / "latin1.txt"
    corpus.write_bytes("un café au lait\nthe river runs\nsnow on the roads\n".encode("latin-1"))
    with caplog.at_level("WARNING", logger="cse.data"):
        assert load_corpus(str(corpus))["text"][0] == "un caf\ufffd au lait"
    assert "1 line(s) are not valid UTF-8" in caplog.text


def test_the_expected_distinct_sentences_of_a_batch_match_closed_forms_and_a_simulation():
    # all distinct: a batch of B holds B; one sentence: 1; a batch of the whole corpus holds every sentence
    assert CorpusStatistics(1000, {1: 1000}).expected_distinct(64) == pytest.approx(64, rel=1e-9)
    assert CorpusStatistics(500, {500: 1}).expected_distinct(64) == pytest.approx(1, rel=1e-9)
    assert CorpusStatistics(30, {3: 10}).expected_distinct(64) == pytest.approx(10, rel=1e-9)
    # two sentences of k copies each, batches of 2: 1 + P(the two rows differ) = 1 + k / (2k - 1)
    k = 7
    assert CorpusStatistics(2 * k, {k: 2}).expected_distinct(2) == pytest.approx(1 + k / (2 * k - 1), rel=1e-9)
    # against a seeded simulation of shuffled batches
    rng = random.Random(3)
    lines = [f"s{i}" for i in range(40) for _ in range(1 + i % 5)]
    statistics = CorpusStatistics(len(lines), {c: 8 for c in range(1, 6)})
    draws = [len(set(rng.sample(lines, 32))) for _ in range(20000)]
    assert statistics.expected_distinct(32) == pytest.approx(sum(draws) / len(draws), rel=5e-3)
    # the largest batch that keeps half of its rows distinct: the share falls as the batch grows
    largest = statistics.largest_batch()
    assert statistics.expected_distinct(largest) >= largest / 2 > statistics.expected_distinct(largest + 1) - 0.5


# --- result files ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "content,said",
    [
        ('{"scores": {"STS12": 70.1', "is not valid JSON"),
        ('["STS12", 70.1]', "is not a result JSON: it holds no mapping of tasks to scores"),
        ('{"score": {"STS12": 70.1}}', "is not a result JSON: it holds no mapping of tasks to scores"),
    ],
)
def test_a_damaged_result_json_is_refused_by_the_tables_and_the_figures(content, said, capsys, tmp_path):
    path = tmp_path / "run" / "sts_test_results.json"
    path.parent.mkdir()
    path.write_text(content)
    for main, argv in [
        (results.main, [str(path)]),
        (results.main, ["--runs", str(path.parent)]),
        (plots.main, ["align_uniform", str(tmp_path / "figure.png"), str(path)]),
    ]:
        error, hint = refused(capsys, main, argv)
        assert said in error
        assert hint.startswith("  hint: pass a result JSON written by senteval_eval.py --output_json")
    assert not (tmp_path / "figure.png").exists()
    error, _ = refused(capsys, results.main, [str(tmp_path / "absent.json")])
    assert error == f"error: result JSON not found: {tmp_path / 'absent.json'}"


def test_senteval_data_given_as_a_file_is_refused(capsys, tiny_bert, tmp_path):
    out = tmp_path / "out"
    error, hint = refused(
        capsys, run_simcse.main, train_argv(tiny_bert, out, "--senteval_data_dir", os.path.join(SENTEVAL, "README"))
    )
    assert "SentEval data directory not found" in error
    assert_nothing_written(out)


def test_a_damaged_run_args_json_is_no_run_s_and_is_left_untouched(capsys, tiny_bert, tmp_path):
    """A run_args.json that is not JSON does not say which package wrote it: the directory is not
    taken for a run (cse.run_dir.run_format), and nothing in it is touched."""
    out = tmp_path / "run"
    (out / "checkpoint-2").mkdir(parents=True)
    (out / "run_args.json").write_text('{"model": {"temp"')
    error, hint = refused(capsys, run_simcse.main, train_argv(tiny_bert, out))
    assert (
        error == f"error: --output_dir {out} is not empty and holds no run of this package: checkpoint-2, run_args.json"
    )
    assert sorted(os.listdir(out)) == ["checkpoint-2", "run_args.json"] and os.listdir(out / "checkpoint-2") == []
    assert (out / "run_args.json").read_text() == '{"model": {"temp"'


def test_a_resume_from_checkpoint_that_is_not_a_folder_is_refused_before_work(capsys, tiny_bert, tmp_path):
    out = tmp_path / "out"
    for path, why in [(tmp_path / "gone", "does not exist"), (Path(tiny_bert) / "config.json", "is a file")]:
        error, hint = refused(
            capsys, run_simcse.main, train_argv(tiny_bert, out, "--resume_from_checkpoint", str(path))
        )
        assert error == f"error: --resume_from_checkpoint {path} {why}: it names a checkpoint folder"
    assert_nothing_written(out)


def test_a_hub_dataset_that_cannot_be_loaded_is_one_line(capsys, tiny_bert, tmp_path):
    out = tmp_path / "out"
    argv = [*train_argv(tiny_bert, out), "--dataset_name", "nobody/no-such-corpus"]
    argv[argv.index("--train_file") : argv.index("--train_file") + 2] = []
    error, hint = refused(capsys, run_simcse.main, argv)
    assert error.startswith("error: cannot load the dataset nobody/no-such-corpus: ")
    assert hint == "  hint: pass a local --train_file, or download the dataset once with HF_DATASETS_OFFLINE unset"
    assert_nothing_written(out)
