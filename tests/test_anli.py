"""anli_eval.py end to end on a tiny NLI fixture with the hub datasets' splits and columns, and the
checks on what a source may hold."""

import json

import datasets
import numpy as np
import pytest

import anli_eval
from cse.evaluation.anli import accuracy_table, nli_split

PAIRS = [
    ("a man plays a guitar", "a person makes music"),
    ("the cat sleeps on the sofa", "an animal is awake"),
    ("children run in the park", "kids are outside"),
    ("it rains in the city", "the streets are dry"),
]
CLASS_LABEL = datasets.ClassLabel(names=["entailment", "neutral", "contradiction"])


def nli_source(path, splits, class_label=True, labels=(0, 1, 2, -1)):
    """A save_to_disk DatasetDict with premise, hypothesis and label columns in every split."""
    features = datasets.Features(
        {
            "premise": datasets.Value("string"),
            "hypothesis": datasets.Value("string"),
            "label": CLASS_LABEL if class_label else datasets.Value("int64"),
        }
    )
    rows = [(p, h, labels[i % len(labels)]) for i, (p, h) in enumerate(PAIRS * 2)]
    data = {"premise": [r[0] for r in rows], "hypothesis": [r[1] for r in rows], "label": [r[2] for r in rows]}
    datasets.DatasetDict({s: datasets.Dataset.from_dict(data, features=features) for s in splits}).save_to_disk(path)
    return str(path)


@pytest.mark.e2e
def test_anli_eval_end_to_end(tiny_bert, tmp_path):
    anli_splits = [f"{part}_r{r}" for part in ("train", "dev", "test") for r in (1, 2, 3)]
    sources = {
        "snli": nli_source(tmp_path / "snli", ["train", "validation", "test"]),  # -1: no gold label
        "mnli": nli_source(tmp_path / "mnli", ["train", "validation_matched"], labels=(0, 1, 2)),
        "fever_nli": nli_source(tmp_path / "fever", ["train", "dev"], class_label=False, labels=(0, 1, 2)),
        "anli": nli_source(tmp_path / "anli", anli_splits, labels=(0, 1, 2)),
    }
    out = tmp_path / "out"
    args = ["--model_name_or_path", tiny_bert, "--output_dir", str(out), "--max_steps", "3"]
    args += ["--per_device_train_batch_size", "4", "--use_cpu", "true", "--disable_tqdm", "true"]
    args += ["--anli_upsampling", "1", "2", "1"]
    for name, path in sources.items():
        args += [f"--{name}", path]
    report = anli_eval.main(args)
    # SNLI without its 2 no-gold pairs, MNLI, FEVER-NLI, then ANLI rounds 1, 2 (twice) and 3
    assert report["train_examples"] == 6 + 8 + 8 + 8 * (1 + 2 + 1)
    with open(out / "anli_results.json") as f:
        saved = json.load(f)
    columns = [f"{c} {part}" for part in ("dev", "test") for c in ("R1", "R2", "R3", "All", "All pooled")]
    assert list(saved["scores"]) == columns
    assert all(0 <= v <= 100 for v in saved["scores"].values())
    assert saved["environment"]["world_size"] == 1 and saved["environment"]["precision"] == "fp32"
    # equal round sizes: the mean of the rounds and the pooled accuracy agree
    for part in ("dev", "test"):
        rounds = [saved["scores"][f"R{r} {part}"] for r in (1, 2, 3)]
        assert saved["scores"][f"All {part}"] == pytest.approx(np.mean(rounds))
        assert saved["scores"][f"All pooled {part}"] == pytest.approx(np.mean(rounds))


def test_accuracy_table_pools_the_rounds():
    gold = {f"{p}_r{r}": np.array([0, 1, 2, 0][: r + 1]) for p in ("dev", "test") for r in (1, 2, 3)}
    predicted = {k: np.zeros_like(v) for k, v in gold.items()}  # always "entailment"
    scores = accuracy_table(predicted, gold)
    assert scores["R1 dev"] == 50.0 and scores["R2 dev"] == pytest.approx(100 / 3) and scores["R3 dev"] == 50.0
    assert scores["All dev"] == pytest.approx((50 + 100 / 3 + 50) / 3)  # the paper's: the mean of the rounds
    assert scores["All pooled dev"] == pytest.approx(100 * 4 / 9)  # (1 + 1 + 2) / (2 + 3 + 4)


def test_sources_with_other_labels_or_columns_are_refused(tmp_path):
    swapped = datasets.ClassLabel(names=["entailment", "contradiction", "neutral"])
    data = datasets.Dataset.from_dict(
        {"premise": ["a"], "hypothesis": ["b"], "label": [1]},
        features=datasets.Features(
            {"premise": datasets.Value("string"), "hypothesis": datasets.Value("string"), "label": swapped}
        ),
    )
    with pytest.raises(ValueError, match="labels are .* expected"):
        nli_split(datasets.DatasetDict({"train": data}), "train", "x")
    with pytest.raises(ValueError, match="lacks column"):
        nli_split(datasets.DatasetDict({"train": data.rename_column("premise", "claim")}), "train", "x")
    with pytest.raises(ValueError, match="no split 'dev_r1'"):
        nli_split(datasets.DatasetDict({"train": data}), "dev_r1", "x")
    bad = datasets.Dataset.from_dict({"premise": ["a"], "hypothesis": ["b"], "label": [3]})
    with pytest.raises(ValueError, match="has labels"):
        nli_split(datasets.DatasetDict({"train": bad}), "train", "x")
