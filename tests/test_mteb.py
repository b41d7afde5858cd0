"""MTEB beside SentEval (cse/evaluation/mteb_protocol.py, senteval_eval.py --protocol): the offline
tasks' data against the SentEval files, mteb's scoring against our evaluator on a tiny encoder, the
result layout, the model card's model-index, and the refusals. The real encoder's published scores
are checked in tests/test_mteb_minilm.py (e2e)."""

import os
import shutil

import mteb
import numpy as np
import pytest
import yaml
from huggingface_hub import EvalResult, ModelCard

import senteval_eval
from cse.evaluation import mteb_protocol
from cse.model_card import add_eval_results

from .conftest import SENTEVAL, assert_nothing_written, refusal

# The pair counts of the SentEval files with gold scores (shared/README.md), SICK's three files.
COUNTS = {"STS12": 3108, "STS13": 1500, "STS14": 3750, "STS15": 3000, "STS16": 1186, "STSBenchmark": 1379}


def test_offline_tasks_hold_the_senteval_pairs_and_all_of_sick():
    for name, count in COUNTS.items():
        assert len(mteb_protocol.local_pairs(name, SENTEVAL).scores) == count, name
    sick = mteb_protocol.local_pairs("SICK-R", SENTEVAL)
    assert len(sick.scores) == 4500 + 500 + 4927
    with open(os.path.join(SENTEVAL, "SICK", "SICK_train.txt"), encoding="utf-8") as f:
        first = f.read().splitlines()[1].split("\t")  # the row after the header
    assert (sick.sentences1[0], sick.sentences2[0], sick.scores[0]) == (first[1], first[2], float(first[3]))
    # the test split comes last: its 4,927 pairs close the set
    with open(os.path.join(SENTEVAL, "SICK", "SICK_test_annotated.txt"), encoding="utf-8") as f:
        last = f.read().splitlines()[-1].split("\t")
    assert (sick.sentences1[-1], sick.scores[-1]) == (last[1], float(last[3]))


def test_a_local_task_is_mteb_s_own_task_with_the_local_data():
    task = mteb_protocol.local_task("STS16", SENTEVAL)
    registered = mteb.get_task("STS16")
    assert isinstance(task, type(registered)) and task.metadata == registered.metadata
    task.load_data()
    split = task.dataset["test"]
    pairs = mteb_protocol.local_pairs("STS16", SENTEVAL)
    assert split["sentence1"] == pairs.sentences1 and split["score"] == pairs.scores.tolist()


@pytest.fixture
def model_with_card(tiny_bert, tmp_path):
    """The tiny encoder in a folder of its own, with a card as cse writes them (tag ``cse``)."""
    model = tmp_path / "tiny"
    shutil.copytree(tiny_bert, model)
    (model / "README.md").write_text("---\ntags:\n- cse\n---\n\n# tiny\n")
    return model


def test_kept_embeddings_encode_each_sentence_once_in_first_seen_order():
    asked = []

    def encode(sentences):
        asked.append(list(sentences))
        return np.array([[len(s), ord(s[0])] for s in sentences], dtype=np.float32)

    kept = mteb_protocol.KeptEmbeddings(encode)
    first = kept(["bb", "a", "bb"])
    assert asked == [["bb", "a"]] and first.tolist() == [[2, 98], [1, 97], [2, 98]]
    second = kept(["ccc", "a", "ccc", "bb"])
    assert asked[1:] == [["ccc"]] and second.tolist() == [[3, 99], [1, 97], [3, 99], [2, 98]]
    assert kept(["a"]).tolist() == [[1, 97]] and len(asked) == 2
    assert kept(np.array(["a", "dd"])).tolist() == [[1, 97], [2, 100]]
    with pytest.raises(ValueError, match="gave 0 embeddings for 1 sentences"):
        mteb_protocol.KeptEmbeddings(lambda s: np.zeros((0, 2)))(["x"])


def test_both_protocols_score_alike_and_mteb_writes_its_layout_and_the_card(
    model_with_card, tmp_path, capsys, monkeypatch
):
    """On STS16 (1,186 pairs): mteb's cosine Spearman of a tiny random encoder equals our evaluator's
    (two implementations of the same figure, on embeddings encoded once: MTEB's STS16 asks for
    SentEval's sentences), printed in one table; the result loads with mteb's ResultCache and its
    figure is in the card's model-index."""
    from cse.modeling import CSEModel

    encoded = []
    encode = CSEModel.encode

    def counting(self, sentences, *args, **kwargs):
        encoded.extend(sentences)
        return encode(self, sentences, *args, **kwargs)

    monkeypatch.setattr(CSEModel, "encode", counting)
    results = tmp_path / "mteb"
    report = senteval_eval.main(
        ["--model_name_or_path", str(model_with_card), "--pooler", "avg", "--protocol", "both", "--tasks", "STS16"]
        + ["--mteb_tasks", "STS16", "--mteb_output_dir", str(results), "--senteval_data_dir", SENTEVAL]
    )
    ours, theirs = report["scores"]["STS16"], report["mteb"]["scores"]["STS16"]
    assert theirs == pytest.approx(ours, abs=1e-3)  # mteb rounds its figures to 6 decimals
    pairs = mteb_protocol.local_pairs("STS16", SENTEVAL)
    assert sorted(encoded) == sorted(set(pairs.sentences1 + pairs.sentences2))
    printed = capsys.readouterr().out
    assert "| Model | STS16 | Avg. |" in printed
    assert f"| tiny (SentEval) | {ours:.2f} | {ours:.2f} |" in printed
    assert f"| tiny (MTEB) | {theirs:.2f} | {theirs:.2f} |" in printed
    (model,) = mteb.ResultCache(str(results)).load_results().model_results
    assert model.model_name == "cse/tiny"
    assert [(t.task_name, 100 * t.get_score()) for t in model.task_results] == [("STS16", pytest.approx(theirs))]
    front = yaml.safe_load((model_with_card / "README.md").read_text().split("---")[1])
    (entry,) = front["model-index"]
    (result,) = entry["results"]
    assert result["dataset"]["type"] == "mteb/sts16-sts" and result["dataset"]["split"] == "test"
    assert result["metrics"] == [
        {"type": "cosine_spearman", "value": pytest.approx(theirs / 100), "name": "cosine_spearman"}
    ]
    assert front["tags"] == ["cse"]  # the rest of the card kept


def test_a_card_cse_did_not_write_is_left_alone(tmp_path):
    card = "---\nlicense: mit\n---\n\nsomeone's card\n"
    (tmp_path / "README.md").write_text(card)
    result = EvalResult(
        task_type="STS", dataset_type="mteb/sts12-sts", dataset_name="STS12", metric_type="x", metric_value=0.5
    )
    assert add_eval_results(str(tmp_path), [result]) is None
    assert (tmp_path / "README.md").read_text() == card


def test_new_results_replace_those_of_the_same_dataset_and_keep_the_others(tmp_path):
    ModelCard("---\ntags:\n- cse\n---\n\n# m\n").save(tmp_path / "README.md")

    def result(dataset, value):
        return EvalResult(
            task_type="STS", dataset_type=dataset, dataset_name=dataset, dataset_split="test", metric_type="s",
            metric_value=value,
        )  # fmt: skip

    add_eval_results(str(tmp_path), [result("a", 0.1), result("b", 0.2)])
    add_eval_results(str(tmp_path), [result("b", 0.3)])
    card = ModelCard.load(tmp_path / "README.md")
    assert [(r.dataset_type, r.metric_value) for r in card.data.eval_results] == [("a", 0.1), ("b", 0.3)]
    assert card.data.model_name == os.path.basename(tmp_path)


def test_the_encoder_mteb_gets_embeds_through_the_callable_it_is_given():
    """The hook for methods whose embedding is more than a pooled backbone: whatever ``encode`` does
    (here, a prompt template) is what mteb's texts go through."""
    seen = []

    def encode(sentences):
        seen.extend(sentences)
        return np.array([[len(f"This sentence: {s}"), 1.0] for s in sentences])

    encoder = mteb_protocol.make_encoder(encode, "cse/x")
    batches = [{"text": ["a b", "c"]}, {"text": ["de"]}]
    out = encoder.encode(batches, task_metadata=None, hf_split="test", hf_subset="default")
    assert seen == ["a b", "c", "de"] and out[:, 0].tolist() == [18.0, 16.0, 17.0]
    assert encoder.mteb_model_meta.name == "cse/x"


@pytest.fixture
def offline(monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)


def test_a_task_that_needs_the_hub_is_refused_offline_before_any_encoding(capsys, tiny_bert, tmp_path, offline):
    out = tmp_path / "mteb"
    error, hint = refusal(
        capsys,
        senteval_eval.main,
        ["--model_name_or_path", tiny_bert, "--protocol", "mteb", "--mteb_tasks", "STS12,STS22"]
        + ["--mteb_output_dir", str(out), "--output_json", str(tmp_path / "r.json"), "--senteval_data_dir", SENTEVAL],
    )
    assert error.startswith(
        "error: MTEB task STS22 needs the Hugging Face hub and the hub is offline (HF_HUB_OFFLINE=1)"
    )
    assert hint.startswith("  hint: offline, MTEB runs the STS tasks built from the SentEval files: ")
    assert "--mteb_tasks STS12,STS13,STS14,STS15,STS16,STSBenchmark,SICK-R" in hint
    assert_nothing_written(out)
    assert not (tmp_path / "r.json").exists()


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        ("--mteb_tasks STS12", "error: --mteb_tasks is an option of the MTEB evaluation"),
        ("--protocol mteb --mode dev", "error: MTEB evaluates its tasks' test splits: no --mode dev"),
        ("--protocol mteb --analysis", "error: --analysis and --tasks are options of the SentEval evaluation"),
        ("--protocol mteb --mteb_tasks STS99", "error: --mteb_tasks: 'STS99' not found. Did you mean: 'STSB'?"),
        ("--protocol mteb --mteb_tasks ,", "error: --mteb_tasks ',' names no task"),
        (
            "--protocol mteb --mteb_output_dir /proc/version/m",
            "error: --mteb_output_dir /proc/version/m: /proc/version is a file",
        ),
    ],
)
def test_mteb_options_that_do_not_fit_are_refused(capsys, tiny_bert, tmp_path, flags, said):
    error, _ = refusal(
        capsys,
        senteval_eval.main,
        ["--model_name_or_path", tiny_bert, "--mteb_output_dir", str(tmp_path / "m")] + flags.split(),
    )
    assert error == said
    assert_nothing_written(tmp_path / "m")


def test_a_model_that_is_no_run_of_ours_needs_a_result_folder(capsys, tiny_bert):
    """MTEB's results go into a run's directory by default; a hub name, or a folder that is not a run
    of this package (an installed package's model, a user's), needs --mteb_output_dir and is left as it
    was."""
    before = sorted(os.listdir(tiny_bert))
    for model in ("org/model", tiny_bert):
        error, hint = refusal(capsys, senteval_eval.main, ["--model_name_or_path", model, "--protocol", "mteb"])
        assert error == f"error: {model} is no run directory of this package to keep MTEB's results in"
        assert hint == "  hint: name a folder: --mteb_output_dir DIR"
    assert sorted(os.listdir(tiny_bert)) == before
