"""Input a run used to accept although it was wrong, or to misreport, refused before any work with one
``error:`` line and one ``hint:`` line (exit 2), nothing written into ``--output_dir``: a global batch
larger than the corpus, a step count beyond any possible run, a config file giving a key twice, a
corpus that is not a regular file, a file system without room for the run. Lines far longer than
``--max_seq_length`` are cut before tokenisation, to the same tokens. The faults are real: a FIFO
(``os.mkfifo``), ``/dev/zero`` and ``/dev/null``, a device node, a listening socket, a small tmpfs."""

import contextlib
import os
import random
import socket
import stat
import subprocess

import datasets
import pytest
from transformers import AutoTokenizer

import run_simcse
from cse.arguments import MAX_STEPS, CSETrainingArguments, DataArguments, ModelArguments, parse_args
from cse.data import CLIP_CHARS_PER_TOKEN, CorpusStatistics, check_corpus, load_corpus, tokenize_corpus
from cse.errors import CSEUsageError, run_cli

from .conftest import TOKENIZERS, WIKI_HEAD, overridden, refusal, tmpfs, train_argv

TYPES = (ModelArguments, DataArguments, CSETrainingArguments)


def refused(capsys, argv):
    lines = refusal(capsys, run_simcse.main, argv)
    assert len(lines) == 2, lines
    return lines


# --- the batch and the run's length ------------------------------------------------------------


def test_a_global_batch_larger_than_the_corpus_is_refused_before_work(capsys, tiny_bert, tmp_path):
    """16 sentences and a batch of 17: the Trainer trained batches of 16 and run_args.json recorded 17."""
    out = tmp_path / "out"
    argv = train_argv(tiny_bert, out, "--max_train_samples", "16", "--per_device_train_batch_size", "17")
    assert refused(capsys, argv) == [
        f"error: the global batch of 17 sentences exceeds the 16 of training corpus {WIKI_HEAD}: every step would "
        "train a batch of 16, not the size asked for",
        "  hint: pass a global batch (--per_device_train_batch_size x processes) of at most 16, or more of the corpus "
        "(--max_train_samples 17 or more, or none)",
    ]
    assert not out.exists()
    # the rule, at its edge: a batch of the whole corpus is a batch of the size asked for
    statistics = CorpusStatistics(16, {1: 16})
    check_corpus(statistics, 16, "c.txt")
    with pytest.raises(CSEUsageError, match="the global batch of 17 sentences exceeds the 16 of"):
        check_corpus(statistics, 17, "c.txt")


def test_a_batch_larger_than_a_corpus_max_train_samples_exceeds_asks_for_a_larger_corpus(capsys, tiny_bert, tmp_path):
    """A 16-line corpus and --max_train_samples 100: more samples cannot help, only a larger corpus."""
    corpus = tmp_path / "c.txt"
    corpus.write_text("".join(f"sentence number {i}\n" for i in range(16)))
    out = tmp_path / "out"
    argv = train_argv(
        tiny_bert, out, "--train_file", str(corpus), "--max_train_samples", "100", "--per_device_train_batch_size", "17"
    )
    assert refused(capsys, argv)[1] == (
        "  hint: pass a global batch (--per_device_train_batch_size x processes) of at most 16, or a larger corpus "
        "(--max_train_samples 100 already exceeds its 16 sentences)"
    )
    argv = train_argv(tiny_bert, out, "--train_file", str(corpus), "--per_device_train_batch_size", "17")
    assert refused(capsys, argv)[1].endswith("of at most 16, or a larger corpus")
    assert not out.exists()


@pytest.mark.parametrize("steps", [10**12, 10**20, 2**63, 2**31])
def test_max_steps_beyond_any_possible_run_is_refused_at_parse(steps, capsys, tmp_path):
    out = tmp_path / "out"
    assert refused(capsys, ["--output_dir", str(out), "--max_steps", str(steps)]) == [
        f"error: --max_steps must be a whole number in [1, 2147483647] or -1, got {steps}",
        "  hint: -1 (the default) trains --num_train_epochs epochs; N in [1, 2147483647] trains N steps",
    ]
    assert not out.exists()


def test_the_largest_step_count_is_accepted_and_epochs_beyond_it_are_refused_before_work(capsys, tiny_bert, tmp_path):
    training = parse_args(TYPES, ["--output_dir", str(tmp_path / "a"), "--max_steps", str(MAX_STEPS)])[2]
    assert training.max_steps == MAX_STEPS == 2**31 - 1
    # 64 sentences in batches of 8: 8 steps an epoch; 2^28 epochs are 2^31 steps, one too many
    out = tmp_path / "out"
    argv = train_argv(tiny_bert, out, "--max_train_samples", "64", "--per_device_train_batch_size", "8")
    argv[argv.index("--max_steps") + 1] = "-1"
    assert refused(capsys, [*argv, "--num_train_epochs", str(2**28)]) == [
        "error: --num_train_epochs 2.68435e+08 over 64 sentences takes 2,147,483,648 steps, beyond the "
        "2,147,483,647 a run may take",
        "  hint: pass at most 268,435,455 epochs, or --max_steps N",
    ]
    assert not out.exists()


# --- config files ------------------------------------------------------------------------------

DUPLICATES = [
    ("twice.yaml", "learning_rate: 1.0e-5\nseed: 3\nlearning_rate: 3.0e-5\n", "learning_rate twice (lines 1 and 3)"),
    ("nested.yaml", "lr_scheduler_kwargs:\n  power: 1.0\n  power: 2.0\n", "power twice (lines 2 and 3)"),
    ("flow.yaml", "{seed: 1, seed: 2}\n", "seed twice (lines 1 and 1)"),
    ("twice.json", '{"learning_rate": 1e-5, "seed": 3, "learning_rate": 3e-5}', "learning_rate twice"),
    ("nested.json", '{"lr_scheduler_kwargs": {"power": 1.0, "power": 2.0}}', "power twice"),
]


@pytest.mark.parametrize("name,content,said", DUPLICATES, ids=[name for name, _, _ in DUPLICATES])
def test_a_config_file_giving_a_key_twice_is_refused(name, content, said, capsys, tmp_path):
    """JSON and PyYAML keep the last of two values of a key without a word."""
    config = tmp_path / name
    config.write_text(content)
    out = tmp_path / "out"
    error, hint = refused(capsys, [str(config), "--output_dir", str(out)])
    key = said.split()[0]
    assert error == f"error: config file {config} gives {said}: which value is meant is unclear"
    assert hint == f"  hint: give {key} once in {config}"
    assert not out.exists()


MERGES = [
    "base: &base {seed: 1, learning_rate: 1.0e-5}\nrun:\n  <<: *base\n  seed: 2\n",
    "base: &base {seed: 1}\n<<: *base\nseed: 3\n",
    "a: &a {seed: 1, warmup_steps: 2}\nb: &b\n  <<: *a\n  seed: 2\nc:\n  <<: [*b, *a]\n  warmup_steps: 4\n",
]


@pytest.mark.parametrize("content", MERGES)
def test_a_config_file_with_merge_keys_reads_as_yaml_safe_load_reads_it(content, tmp_path):
    """A key beside a merge key (``<<: *base``) overrides the merged one (YAML's merge rule), no duplicate."""
    import yaml

    from cse.arguments import read_config_file

    config = tmp_path / "merge.yaml"
    config.write_text(content)
    assert read_config_file(str(config)) == yaml.safe_load(content)


def test_a_key_twice_beside_a_merge_key_is_refused_and_yaml_errors_name_line_and_column(capsys, tmp_path):
    config = tmp_path / "merge.yaml"
    config.write_text("base: &base {seed: 1}\nrun:\n  <<: *base\n  seed: 2\n  seed: 3\n")
    error, _ = refused(capsys, [str(config), "--output_dir", str(tmp_path / "out")])
    assert error == f"error: config file {config} gives seed twice (lines 4 and 5): which value is meant is unclear"
    config.write_text("seed: 1\nwarmup_steps: !!python/object:os.system 1\n")
    error, _ = refused(capsys, [str(config), "--output_dir", str(tmp_path / "out")])
    assert error == (
        f"error: config file {config} is not valid YAML: could not determine a constructor for the tag "
        "'tag:yaml.org,2002:python/object:os.system' (line 2, column 15)"
    )
    assert not (tmp_path / "out").exists()


def test_the_shipped_configs_give_each_key_once():
    from cse.arguments import read_config_file

    configs = os.path.join(os.path.dirname(os.path.dirname(__file__)), "configs")
    names = [name for name in sorted(os.listdir(configs)) if name.endswith((".yaml", ".json"))]
    assert len(names) > 5 and all(read_config_file(os.path.join(configs, name)) for name in names)


# --- the corpus file ---------------------------------------------------------------------------


@contextlib.contextmanager
def listening_socket(path):
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(path))
    sock.listen()
    try:
        yield path
    finally:
        sock.close()


def test_a_corpus_that_is_not_a_regular_file_is_refused_naming_what_it_is(capsys, tiny_bert, tmp_path):
    """A FIFO named .txt was reported as "training corpus is empty", /dev/zero too (their size is 0);
    a device node, a socket or a directory named .txt are no corpus either."""
    fifo = tmp_path / "fifo.txt"
    os.mkfifo(fifo)
    null_link = tmp_path / "null.txt"
    null_link.symlink_to("/dev/null")
    zero_link = tmp_path / "zero.txt"
    zero_link.symlink_to("/dev/zero")
    folder = tmp_path / "folder.txt"
    folder.mkdir()
    cases = {fifo: "a FIFO (named pipe)", null_link: "a character device", zero_link: "a character device"}
    cases |= {"/dev/zero": "a character device", "/dev/null": "a character device"}
    node = tmp_path / "node.txt"
    try:
        os.mknod(node, stat.S_IFCHR | 0o600, os.makedev(1, 5))  # a second /dev/zero
        cases[node] = "a character device"
    except PermissionError:  # creating a device node needs CAP_MKNOD
        pass
    out = tmp_path / "out"
    with listening_socket(tmp_path / "s.txt") as sock:
        cases[sock] = "a socket"
        for path, kind in cases.items():
            assert refused(capsys, train_argv(tiny_bert, out, "--train_file", str(path))) == [
                f"error: --train_file {path} is {kind}, not a regular file",
                "  hint: pass a regular file of one sentence a line (.txt) or a .csv; to train on a stream, save it "
                "first (cat STREAM > corpus.txt)",
            ], path
            assert not out.exists()
    error, _ = refused(capsys, train_argv(tiny_bert, out, "--train_file", str(folder)))
    assert error == f"error: --train_file {folder} is a directory, not a corpus file"


@pytest.mark.parametrize("content,said", [("", "is empty"), ("\n  \n\t\r\n", "has no non-blank line")])
def test_an_empty_corpus_is_refused_before_anything_is_loaded_or_read(content, said, capsys, tiny_bert, tmp_path):
    """An empty file, or blank lines alone: the refusal is the only output, before the model's weights
    load and datasets reads the file (``Loading weights``, ``Generating train split``, ``Dropping blank
    lines`` came first); the default corpus too, when datasets is called directly."""
    import cse.data
    from cse.errors import run_cli

    corpus = tmp_path / "c.txt"
    corpus.write_text(content)
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as stop:
        run_cli(run_simcse.main, train_argv(tiny_bert, out, "--train_file", str(corpus)))
    assert stop.value.code == 2
    assert capsys.readouterr().err.splitlines() == [
        f"error: training corpus {said}: {corpus}",
        "  hint: pass a corpus of one sentence a line (e.g. wiki1m_for_simcse.txt, scripts/download_data.sh)",
    ]
    assert not out.exists()
    (tmp_path / "wiki1m_for_simcse.txt").write_text(content)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("CSE_DATA_DIR", str(tmp_path))
        patch.setattr(cse.data.datasets, "load_dataset", None)  # never reached
        with pytest.raises(cse.data.EmptyCorpusError, match=f"training corpus {said}"):
            load_corpus()


def test_the_default_corpus_that_is_a_fifo_is_refused(tmp_path, monkeypatch):
    os.mkfifo(tmp_path / "wiki1m_for_simcse.txt")
    monkeypatch.setenv("CSE_DATA_DIR", str(tmp_path))
    with pytest.raises(CSEUsageError, match=r"training corpus \S+wiki1m_for_simcse.txt is a FIFO \(named pipe\)"):
        load_corpus()
    # a link to a regular corpus is read through
    (tmp_path / "link.txt").symlink_to(WIKI_HEAD)
    assert len(load_corpus(str(tmp_path / "link.txt"), max_train_samples=5)) == 5


# --- free space --------------------------------------------------------------------------------


SAVING = (
    "--max_train_samples 64 --per_device_train_batch_size 8 --max_steps 4 --save_strategy steps --save_steps 2 "
    "--save_total_limit 2 --eval_strategy no --load_best_model_at_end false --final_eval none --disable_tqdm true"
).split()


def asked_space(capsys, argv, out):
    """The refusal of a run its file system has no room for: what it says the run needs and the
    space it asks to free, in MiB."""
    error, hint = refused(capsys, argv)
    assert error.startswith(f"error: {out} needs at least ")
    assert "(2 checkpoint(s) of 12.3 MiB at once and the export, 4.5 MiB), and its file system has " in error
    assert hint.startswith("  hint: free at least ") and hint.endswith(
        "MiB on that file system, choose an --output_dir with more space, or keep fewer checkpoints "
        "(--save_total_limit 1)"
    )
    need = float(error.split(" needs at least ")[1].split()[0])
    free = float(hint.split("free at least ")[1].split()[0])
    return need, free


def test_a_file_system_without_room_for_the_run_s_checkpoints_and_export_is_refused_before_training(
    capsys, tiny_bert, tmp_path
):
    """Two checkpoints of 12.3 MiB at once (the Trainer writes the second before it deletes any) and the
    4.6 MiB export do not fit in 10 MiB: the run stopped at its second checkpoint; now it is refused
    before training, nothing written, with the space to free."""
    with tmpfs(tmp_path / "disk", "size=10m") as disk:
        out = disk / "run"
        need, free = asked_space(capsys, train_argv(tiny_bert, out, *SAVING), out)
        assert need == 29.0 and free == pytest.approx(need - 10.0, abs=0.1)
        assert os.listdir(disk) == []


def test_a_run_saving_no_checkpoint_without_room_for_its_export_is_refused_naming_the_export_alone(
    capsys, tiny_bert, tmp_path
):
    """``--save_strategy no``: the line and the hint speak of the export, not of 0 checkpoints to keep fewer of."""
    no_saves = overridden(SAVING, ["--save_strategy", "no"])
    del no_saves[no_saves.index("--save_steps") : no_saves.index("--save_steps") + 2]
    with tmpfs(tmp_path / "disk", "size=2m") as disk:
        out = disk / "run"
        error, hint = refused(capsys, train_argv(tiny_bert, out, *no_saves))
        assert error.startswith(
            f"error: {out} needs at least 4.5 MiB for this run (the export, 4.5 MiB; no checkpoint)"
        )
        assert hint.startswith("  hint: free at least ") and hint.endswith(
            "MiB on that file system, or choose an --output_dir with more space"
        )
        assert os.listdir(disk) == []


@pytest.mark.e2e
def test_the_space_the_refusal_asks_for_is_what_the_run_takes(capsys, tiny_bert, tmp_path):
    """Given the space asked for (and 1 MiB for the files the bound leaves out), the same command
    trains and exports; the bound is below what the run took at its fullest."""
    with tmpfs(tmp_path / "disk", "size=10m") as disk:
        out = disk / "run"
        argv = train_argv(tiny_bert, out, *SAVING)
        need, _ = asked_space(capsys, argv, out)
        subprocess.run(["mount", "-o", f"remount,size={int(need) + 1}m", str(disk)], check=True)
        run_cli(run_simcse.main, argv)
        assert (out / "cse_config.json").is_file()
        statvfs = os.statvfs(disk)
        used = (statvfs.f_blocks - statvfs.f_bfree) * statvfs.f_frsize
        assert used >= need * 2**20 * 0.9


# --- long lines --------------------------------------------------------------------------------


class CallSpy:
    """A tokenizer whose calls record the longest text it was given."""

    def __init__(self, tokenizer):
        self.tokenizer, self.longest = tokenizer, 0

    def __call__(self, text, *args, **kwargs):
        texts = [text] if isinstance(text, str) else text
        self.longest = max([self.longest, *map(len, texts)])
        return self.tokenizer(text, *args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.tokenizer, name)


def test_long_lines_are_cut_before_they_are_tokenised(tmp_path):
    """Lines of 256 KiB of wiki text (a 1 MiB line took 3 s to tokenise whole): the tokenizer sees at
    most 64 x max_seq_length characters of each, and gives the tokens of the whole line."""
    tokenizer = AutoTokenizer.from_pretrained(os.path.join(TOKENIZERS, "bert-base-uncased"))
    with open(WIKI_HEAD, encoding="utf-8") as f:
        text = " ".join(f.read().split("\n"))
    lines = [(text[i * 1000 :] + " " + text)[: 1 << 18] for i in range(4)]
    spy = CallSpy(tokenizer)
    corpus = datasets.Dataset.from_dict({"text": lines})
    tokens = tokenize_corpus(corpus, spy, 32, overwrite_cache=True)
    assert spy.longest <= CLIP_CHARS_PER_TOKEN * 32 == 2048
    whole = tokenizer(lines[:1], truncation=True, max_length=32)
    assert tokens["input_ids"][:1] == whole["input_ids"] and tokens["token_type_ids"][:1] == whole["token_type_ids"]


def adversarial_lines(rng, words):
    """Lines around and far beyond the cut: wiki words, runs of spaces, tabs, words longer than
    WordPiece's 100 characters, accents, combining marks, CJK, emoji, digits, punctuation, and lines
    with no space before the cut."""
    pieces = [*words, "  ", "\t", "x" * 150, "é", "e\u0301", "中文字", "🙂🙂", "12345", "--,", "naïve", "l'été"]
    lines = []
    for _ in range(60):
        length = rng.choice([50, 300, 600, 2000, 2100, 6000])
        parts, size = [], 0
        while size < length:
            piece = rng.choice(pieces)
            parts.append(piece)
            size += len(piece) + 1
        lines.append(" ".join(parts))
    lines += ["a" * 20000, "a" * 3000 + " b" * 40, " " * 5000 + "word " * 100, "word" + " " * 9000 + "end"]
    return lines


@pytest.mark.parametrize("family", ["bert-base-uncased", "roberta-base"])
def test_cut_lines_tokenise_to_the_whole_lines_first_tokens(family):
    """The cut (at a space, where the text before it tokenises alike whatever follows) changes no token:
    every line, at lengths from 2 to 32 tokens (cuts at 128 to 2,048 characters), tokenises as the whole
    line truncated does."""
    tokenizer = AutoTokenizer.from_pretrained(os.path.join(TOKENIZERS, family))
    with open(WIKI_HEAD, encoding="utf-8") as f:
        words = f.read(200_000).split()
    lines = adversarial_lines(random.Random(0), words)
    for max_length in (2, 3, 8, 32):
        corpus = datasets.Dataset.from_dict({"text": lines})
        ours = tokenize_corpus(corpus, tokenizer, max_length, overwrite_cache=True)
        whole = tokenizer(lines, truncation=True, max_length=max_length)
        for key in whole:
            assert ours[key] == whole[key], (family, max_length, key)
