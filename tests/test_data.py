import logging

import pytest
import torch
from transformers import AutoTokenizer

from cse.arguments import CSETrainingArguments, DataArguments, ModelArguments, parse_args
from cse.data import EmptyCorpusError, TwoViewCollator, count_undecodable_lines, load_corpus, tokenize_corpus
from cse.modeling import CSEModel
from cse.paths import MissingDataError

from .conftest import TOKENIZERS


@pytest.fixture(scope="module")
def bert_tokenizer():
    return AutoTokenizer.from_pretrained(f"{TOKENIZERS}/bert-base-uncased")


def test_blank_lines_dropped_and_counted(tmp_path, caplog):
    path = tmp_path / "corpus.txt"
    path.write_text("first sentence\n\n   \t \nsecond one\n\n")
    with caplog.at_level(logging.WARNING, logger="cse"):
        corpus = load_corpus(str(path))
    assert corpus["text"] == ["first sentence", "second one"]
    assert "dropped 3 empty or whitespace-only line(s) of 5" in caplog.text


def test_bad_utf8_replaced_and_logged(tmp_path, caplog):
    path = tmp_path / "corpus.txt"
    path.write_bytes(b"good line\nbad \xff\xfe bytes\nalso good\n")
    assert count_undecodable_lines(str(path)) == 1
    with caplog.at_level(logging.WARNING, logger="cse"):
        corpus = load_corpus(str(path))
    assert corpus["text"][1] == "bad \ufffd\ufffd bytes"
    assert "1 line(s) are not valid UTF-8" in caplog.text


def test_csv_columns(tmp_path):
    one = tmp_path / "one.csv"
    one.write_text("sent\nhello there\nsecond\n")
    assert load_corpus(str(one))["text"] == ["hello there", "second"]
    many = tmp_path / "many.csv"
    many.write_text("a,b\nx,y\nz,w\n")
    with pytest.raises(ValueError, match="--text_column"):
        load_corpus(str(many))
    assert load_corpus(str(many), text_column="b")["text"] == ["y", "w"]


def test_dataset_name_path(tmp_path):
    # A hub dataset name goes through datasets.load_dataset; a local dataset folder takes the same path offline.
    folder = tmp_path / "my_dataset"
    folder.mkdir()
    (folder / "train.csv").write_text("id,text\n1,first\n2,\n3,third\n")
    assert load_corpus(dataset_name=str(folder))["text"] == ["first", "third"]
    with pytest.raises(ValueError, match="not both"):
        load_corpus(train_file=str(folder / "train.csv"), dataset_name=str(folder))


def test_bad_corpora(tmp_path, monkeypatch):
    with pytest.raises(MissingDataError, match="nope.txt"):
        load_corpus(str(tmp_path / "nope.txt"))
    (tmp_path / "empty.txt").write_text("")
    with pytest.raises(EmptyCorpusError, match="empty"):
        load_corpus(str(tmp_path / "empty.txt"))
    (tmp_path / "na.csv").write_text("text\nNA\nnull\nnan\n\n")  # words, not missing values; one blank row
    assert load_corpus(str(tmp_path / "na.csv"))["text"] == ["NA", "null", "nan"]
    (tmp_path / "blank.txt").write_text("\n  \n\t\n")
    with pytest.raises(EmptyCorpusError, match="no non-blank line"):
        load_corpus(str(tmp_path / "blank.txt"))
    (tmp_path / "corpus.json").write_text("{}")
    with pytest.raises(ValueError, match=".txt or .csv"):
        load_corpus(str(tmp_path / "corpus.json"))
    monkeypatch.delenv("CSE_DATA_DIR", raising=False)
    with pytest.raises(MissingDataError, match="CSE_DATA_DIR is not set"):
        load_corpus()
    monkeypatch.setenv("CSE_DATA_DIR", str(tmp_path))
    with pytest.raises(MissingDataError, match="wiki1m_for_simcse.txt"):
        load_corpus()


def test_tokenise_and_two_views(tmp_path, bert_tokenizer):
    path = tmp_path / "corpus.txt"
    path.write_text("a short one\n" + "word " * 100 + "\n")
    data = tokenize_corpus(load_corpus(str(path)), bert_tokenizer, max_seq_length=8)
    assert [len(x) for x in data["input_ids"]] == [5, 8]  # [CLS] a short one [SEP]; truncated to 8
    # tokenised once: a second run reads the same cache file instead of tokenising again
    again = tokenize_corpus(load_corpus(str(path)), bert_tokenizer, max_seq_length=8)
    assert again.cache_files == data.cache_files and again.cache_files
    batch = TwoViewCollator(bert_tokenizer)([data[0], data[1]])
    assert batch["input_ids"].shape == (2, 2, 8)
    assert torch.equal(batch["input_ids"][:, 0], batch["input_ids"][:, 1])
    assert batch["attention_mask"][0, 0].tolist() == [1] * 5 + [0] * 3


@pytest.mark.parametrize("pooler", ["cls", "avg"])
def test_padding_to_max_length_leaves_the_embeddings_unchanged(tiny_bert, pooler):
    """--pad_to_max_length gives static shapes; padded positions are masked, so every sentence's
    embedding is the one it gets in a batch padded to its longest sentence."""
    model = CSEModel.from_pretrained(tiny_bert, pooler_type=pooler).eval()
    features = [dict(model.tokenizer(s)) for s in ["a short one", "a slightly longer sentence than that"]]
    dynamic = TwoViewCollator(model.tokenizer)(features)
    static = TwoViewCollator(model.tokenizer, max_length=32)(features)
    assert static["input_ids"].shape == (2, 2, 32) and dynamic["input_ids"].shape[-1] < 32
    with torch.no_grad():
        expected, got = model(**dynamic)["embeddings"], model(**static)["embeddings"]
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)


def test_config_values_keep_their_types(tmp_path):
    cfg = tmp_path / "run.json"
    cfg.write_text(
        '{"save_total_limit": null, "lr_scheduler_kwargs": {"power": 2.0}, "learning_rate": "1e-5",'
        ' "pooler_type": "avg"}'
    )
    model_args, _, train_args = parse_args((ModelArguments, DataArguments, CSETrainingArguments), [str(cfg)])
    assert train_args.save_total_limit is None and train_args.lr_scheduler_kwargs == {"power": 2.0}
    assert train_args.learning_rate == 1e-5
    assert (model_args.pooler_type, model_args.mlp_only_train) == ("avg", False)  # the head only follows cls


def test_contradictory_or_invalid_flags():
    with pytest.raises(ValueError, match="needs --pooler_type cls"):
        ModelArguments(pooler_type="avg", mlp_only_train=True)
    with pytest.raises(ValueError, match="unknown pooler"):
        ModelArguments(pooler_type="mean")
    with pytest.raises(ValueError, match="final_eval"):
        CSETrainingArguments(output_dir="o", final_eval="train")
    # evaluation every 250 steps needs no matching save_steps: checkpoints follow improvements
    assert CSETrainingArguments(output_dir="o", eval_steps=250).save_strategy == "best"


def test_config_file_with_overrides(tmp_path):
    cfg = tmp_path / "run.yaml"
    cfg.write_text("model_name_or_path: some/model\ntemp: 0.1\noutput_dir: out\nmax_steps: 7\nmlp_only_train: false\n")
    model_args, data_args, train_args = parse_args(
        (ModelArguments, DataArguments, CSETrainingArguments), [str(cfg), "--temp", "0.02", "--use_cpu", "true"]
    )
    assert (model_args.model_name_or_path, model_args.temp, model_args.mlp_only_train) == ("some/model", 0.02, False)
    assert (train_args.max_steps, train_args.output_dir) == (7, "out")
    # SimCSE's unsupervised defaults
    assert (train_args.per_device_train_batch_size, train_args.learning_rate, train_args.num_train_epochs) == (
        64,
        3e-5,
        1.0,
    )
    assert (train_args.eval_steps, train_args.metric_for_best_model, train_args.load_best_model_at_end) == (
        125,
        "stsb_spearman",
        True,
    )
    assert (data_args.max_seq_length, model_args.pooler_type) == (32, "cls")
    assert (ModelArguments().mlp_only_train, ModelArguments().temp) == (True, 0.05)
    with pytest.raises(ValueError):
        parse_args((ModelArguments, DataArguments, CSETrainingArguments), [str(cfg), "--no_such_flag", "1"])
    bad = tmp_path / "bad.yaml"
    bad.write_text("temperature: 0.1\n")
    with pytest.raises(ValueError, match="unknown argument.*temperature"):
        parse_args((ModelArguments, DataArguments, CSETrainingArguments), [str(bad)])
    with pytest.raises(FileNotFoundError, match="missing.yaml"):
        parse_args((ModelArguments, DataArguments, CSETrainingArguments), [str(tmp_path / "missing.yaml")])


def test_shipped_configs_parse_to_the_papers_settings():
    from .conftest import REPO

    parse = lambda name: parse_args(  # noqa: E731
        (ModelArguments, DataArguments, CSETrainingArguments), [f"{REPO}/configs/{name}", "--output_dir", "o"]
    )
    model_args, data_args, train_args = parse("simcse_bert_base.yaml")
    # SimCSE's run_unsup_example.sh
    assert (model_args.model_name_or_path, model_args.pooler_type, model_args.mlp_only_train, model_args.temp) == (
        "bert-base-uncased",
        "cls",
        True,
        0.05,
    )
    assert (train_args.per_device_train_batch_size, train_args.learning_rate, train_args.num_train_epochs) == (
        64,
        3e-5,
        1.0,
    )
    assert (data_args.max_seq_length, train_args.eval_steps, train_args.fp16, train_args.seed) == (32, 125, True, 42)
    model_args, _, train_args = parse("quickstart.yaml")
    assert (model_args.pooler_type, train_args.max_steps, train_args.use_cpu) == ("avg", 100, True)
