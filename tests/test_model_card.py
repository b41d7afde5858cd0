"""The exported encoder's model card (README.md), its provenance, and --push_to_hub's upload."""

import json
import os
import re
from types import SimpleNamespace

import pytest
import torch
import yaml
from huggingface_hub import ModelCard
from transformers import AutoModel, AutoTokenizer

import cse.model_card
import run_simcse
from cse import citations, registry
from cse.encoders.autoencoding import SARCSEModel
from cse.encoders.textcnn import TextCNNAutoEncoder
from cse.errors import CSEUsageError
from cse.export import EXPORTABLE_POOLERS
from cse.model_card import CardData, build_model_card
from cse.modeling import CSEModel
from cse.run_names import WRITTEN_BY_KEY

from .conftest import SENTEVAL, WIKI_HEAD


def front_matter(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    match = re.match(r"^---\n(.*?)\n---\n", text, re.S)
    assert match, text[:200]
    return yaml.safe_load(match.group(1)), text


def code_blocks(text, language):
    return re.findall(rf"```{language}\n(.*?)\n```", text, re.S)


@pytest.fixture(scope="module")
def pushed_run(tiny_bert, tmp_path_factory):
    """run_simcse.py in this process with --push_to_hub, the Hub calls captured instead of made."""
    out = str(tmp_path_factory.mktemp("card") / "run")
    uploads = []

    def upload_folder(**kwargs):
        files = sorted(
            os.path.relpath(os.path.join(root, name), kwargs["folder_path"])
            for root, _, names in os.walk(kwargs["folder_path"])
            for name in names
        )
        uploads.append({**kwargs, "files": files})

    fake_api = SimpleNamespace(create_repo=lambda name, **_: SimpleNamespace(repo_id=name))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("transformers.trainer.hf_api", lambda: fake_api)
        patch.setattr(cse.model_card, "upload_folder", upload_folder)
        patch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
        run_simcse.main(
            ["--model_name_or_path", tiny_bert, "--train_file", WIKI_HEAD, "--max_train_samples", "64"]
            + ["--per_device_train_batch_size", "16", "--max_steps", "2", "--logging_steps", "2"]
            + ["--eval_strategy", "no", "--load_best_model_at_end", "false", "--save_strategy", "no"]
            + ["--senteval_data_dir", SENTEVAL, "--final_eval", "dev", "--use_cpu", "true", "--report_to", "none"]
            + ["--disable_tqdm", "true", "--output_dir", out, "--push_to_hub", "true", "--hub_model_id", "me/tiny"]
        )
    return out, uploads


@pytest.mark.e2e
def test_run_simcse_writes_a_card_with_metadata_scores_settings_and_environment(pushed_run, tiny_bert):
    out, _ = pushed_run
    path = os.path.join(out, "README.md")
    meta, text = front_matter(path)
    assert meta == {
        "library_name": "sentence-transformers",  # modules.json was exported
        "tags": ["sentence-transformers", "sentence-similarity", "simcse", "cse"],
        "metrics": ["spearman"],
        "pipeline_tag": "sentence-similarity",
    }  # a local base model and corpus name no Hub repository: no base_model, datasets or license
    assert ModelCard.load(path).data.to_dict() == meta

    with open(os.path.join(out, "sts_dev_results.json")) as f:
        report = json.load(f)
    row = next(line for line in text.splitlines() if line.startswith("| SimCSE |"))
    assert [float(cell) for cell in row.strip("|").split("|")[1:]] == pytest.approx(
        [report["scores"][c] for c in ("STS-B", "SICK-R", "Avg.")], abs=0.005
    )
    with open(os.path.join(out, "run_args.json")) as f:
        run_args = json.load(f)
    (settings,) = code_blocks(text, "yaml")
    # the card's settings are the run's: the file's mark of its writer and the environment aside
    assert yaml.safe_load(settings) == {k: v for k, v in run_args.items() if k not in ("environment", WRITTEN_BY_KEY)}
    (environment,) = code_blocks(text, "json")
    environment = json.loads(environment)
    # the provenance block of every output, the same in each
    assert environment == report["environment"] == run_args["environment"]
    assert environment["versions"]["torch"] == torch.__version__
    assert (environment["world_size"], environment["precision"]) == (1, "fp32")
    assert "64 sentences from `" + WIKI_HEAD in text and f"from `{tiny_bert}`" in text
    with open(WIKI_HEAD, encoding="utf-8") as f:
        distinct = len({next(f) for _ in range(64)})
    assert f"64 sentences from `{WIKI_HEAD}`, {distinct} of them distinct" in text
    assert "Model selection: the exported weights are the last step's (step 2): no best-checkpoint selection.\n" in text
    assert code_blocks(text, "bibtex") == [citations.SIMCSE]
    assert 'SentenceTransformer("me/tiny")' in text and 'AutoModel.from_pretrained("me/tiny")' in text


@pytest.mark.e2e
def test_push_to_hub_uploads_the_exported_encoder_with_its_card(pushed_run):
    out, uploads = pushed_run
    (upload,) = uploads  # once, after the final evaluation: no checkpoint pushes on the way
    assert upload["repo_id"] == "me/tiny" and upload["folder_path"] == out
    assert "checkpoint-*" in upload["ignore_patterns"]
    files = {
        f
        for f in upload["files"]
        if not any(re.fullmatch(p.replace("*", ".*"), f.split(os.sep)[0]) for p in upload["ignore_patterns"])
    }
    assert {"README.md", "model.safetensors", "config.json", "cse_config.json", "modules.json"} <= files
    assert {"tokenizer.json", "1_Pooling/config.json", "sts_dev_results.json"} <= files
    # what is uploaded as the model is the exported encoder, which AutoModel loads without missing weights
    _, info = AutoModel.from_pretrained(out, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]


def test_push_to_hub_refuses_checkpoint_strategies(tiny_bert, tmp_path):
    with pytest.raises(CSEUsageError, match="hub_strategy every_save would push the training checkpoints"):
        run_simcse.main(
            ["--model_name_or_path", tiny_bert, "--output_dir", str(tmp_path), "--push_to_hub", "true"]
            + ["--hub_strategy", "every_save", "--use_cpu", "true"]
        )


@pytest.mark.parametrize("pooler", [*EXPORTABLE_POOLERS, "avg_top2"])
def test_card_loading_code_reproduces_the_embedding(tiny_bert, tmp_path, pooler):
    out = str(tmp_path / pooler)
    model = CSEModel(AutoModel.from_pretrained(tiny_bert), AutoTokenizer.from_pretrained(tiny_bert), pooler)
    model.save_pretrained(out)
    base = tmp_path / "base"
    base.mkdir()
    (base / "README.md").write_text("---\nlicense: mit\n---\n# a base model\n")
    card = build_model_card(
        CardData(
            output_dir=out,
            method=registry.get("mixcse"),
            base_model=str(base),
            train_source="corpus.txt",
            train_dataset_name="someone/sentences",
            train_sentences=1000,
            settings={"method": {"mix_lambda": 0.2}},
            reports={},
            citations=[citations.MIXCSE, citations.SIMCSE],
            environment={"python": "3"},
        )
    )
    card.save(tmp_path / "README.md")
    meta, text = front_matter(tmp_path / "README.md")
    assert meta["license"] == "mit" and meta["datasets"] == ["someone/sentences"] and "base_model" not in meta
    assert meta["library_name"] == ("sentence-transformers" if pooler in EXPORTABLE_POOLERS else "transformers")
    # the tag that lists the model among sentence-transformers' only where its modules are exported
    assert ("sentence-transformers" in meta["tags"]) == (pooler in EXPORTABLE_POOLERS)
    assert code_blocks(text, "bibtex") == [citations.MIXCSE, citations.SIMCSE]
    assert "Unsupervised Sentence Representation via Contrastive Learning with Mixing Negatives" in text
    snippets = [block for block in code_blocks(text, "python") if "AutoModel.from_pretrained" in block]
    if pooler not in EXPORTABLE_POOLERS:
        assert not snippets  # intermediate layers: cse's loader only
        return
    scope = {}
    exec(snippets[0], scope)
    expected = model.encode(["A man is playing a guitar."])
    torch.testing.assert_close(scope["embeddings"], expected, rtol=1e-5, atol=1e-5)


def test_card_of_a_sarcse_export_loads_its_z_in_sentence_transformers(tiny_roberta, tmp_path):
    """The card's sentence-transformers snippet of an export whose embedding is a module of its own
    (SARCSE's Z) trusts its code, names the files, and gives cse's embeddings; AutoModel has no Z."""
    encoder = CSEModel.from_pretrained(tiny_roberta, pooler_type="cls_before_pooler")
    autoencoder = TextCNNAutoEncoder(encoder.config.hidden_size, textcnn_channels=8, cnn_channels=2)
    model = SARCSEModel(encoder.backbone, encoder.tokenizer, autoencoder)
    out = str(tmp_path / "sarcse")
    model.save_pretrained(out)
    card = build_model_card(
        CardData(
            output_dir=out,
            method=registry.get("sarcse"),
            base_model=tiny_roberta,
            train_source="corpus.txt",
            train_dataset_name=None,
            train_sentences=10,
            settings={},
            reports={},
            citations=[citations.SARCSE],
            environment={},
        )
    )
    assert card.data.library_name == "sentence-transformers"
    assert "this model's own code (`sarcse_embedding.py`, `textcnn.py`)" in card.text
    assert not [block for block in code_blocks(card.text, "python") if "AutoModel" in block]
    (snippet,) = [block for block in code_blocks(card.text, "python") if "SentenceTransformer(" in block]
    assert f'SentenceTransformer("{out}", trust_remote_code=True)' in snippet
    scope = {}
    exec(snippet, scope)
    expected = model.encode(["A man is playing a guitar.", "Someone plays an instrument."])
    torch.testing.assert_close(torch.as_tensor(scope["embeddings"]), expected, rtol=0, atol=1e-6)


def test_card_names_a_hub_base_model():
    card = build_model_card(
        CardData(
            output_dir=os.path.dirname(__file__),  # no export here: the card still renders, pooler unknown
            method=registry.get("sgbert"),
            base_model="bert-base-uncased",
            train_source="stsb_sentences.txt",
            train_dataset_name=None,
            train_sentences=10,
            settings={},
            reports={"test": {"scores": {"STS12": 60.0, "Avg.": 60.0}, "pooler": "cls_before_pooler"}},
            citations=[citations.SGBERT],
            environment={},
        )
    )
    assert card.data.base_model == "bert-base-uncased" and card.data.library_name == "transformers"
    assert "| SG-BERT | 60.00 | 60.00 |" in card.text
