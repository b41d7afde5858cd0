"""Saved models load in sentence-transformers and embed exactly as our evaluator's pooler does; a
SARCSE export embeds with its trained Z there, with trust_remote_code=True, and is refused without."""

import json
import os

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from sentence_transformers import SentenceTransformer
from transformers import AutoModel, AutoTokenizer

import run_sarcse
from cse import composition
from cse.encoders.autoencoding import SARCSEModel
from cse.encoders.textcnn import TextCNNAutoEncoder
from cse.export import EXPORTABLE_POOLERS
from cse.modeling import CSEModel, load_model

from .conftest import REPO, WIKI_HEAD, assert_sentence_transformers_refuses, run_simcse, tiny_run, train_argv

SENTENCES = [
    "A man is playing a guitar.",
    "Two dogs run through a snowy field while the sun sets behind the hills.",
    "ok",
    "The quick brown fox jumps over the lazy dog near the riverbank.",
]


def ours_and_theirs(model_dir, pooler=None):
    ours = CSEModel.from_pretrained(model_dir, pooler_type=pooler).encode(SENTENCES, batch_size=2).numpy()
    theirs = SentenceTransformer(model_dir, device="cpu").encode(SENTENCES, batch_size=3, convert_to_numpy=True)
    return ours, theirs


@pytest.mark.e2e
def test_a_model_saved_by_run_simcse_loads_in_sentence_transformers(tiny_bert, tmp_path):
    out = str(tmp_path / "run")
    run_simcse(["--model_name_or_path", tiny_bert, "--output_dir", out, "--max_steps", "4", "--final_eval", "none"])
    with open(os.path.join(out, "modules.json")) as f:
        assert [m["type"].rsplit(".", 1)[1] for m in json.load(f)] == ["Transformer", "Pooling"]
    ours, theirs = ours_and_theirs(out)  # the recorded pooler: cls_before_pooler (mlp_only_train)
    assert ours.shape == theirs.shape == (len(SENTENCES), 32)
    np.testing.assert_allclose(theirs, ours, atol=1e-5, rtol=0)


@pytest.mark.parametrize("pooler", [*EXPORTABLE_POOLERS, "avg_top2"])
def test_every_exportable_pooler_matches(tiny_roberta, tmp_path, pooler):
    out = str(tmp_path / pooler)
    CSEModel(
        AutoModel.from_pretrained(tiny_roberta), AutoTokenizer.from_pretrained(tiny_roberta), pooler
    ).save_pretrained(out)
    if pooler not in EXPORTABLE_POOLERS:  # reads intermediate layers: CSEModel only
        assert_sentence_transformers_refuses(out)
        return
    ours, theirs = ours_and_theirs(out)
    np.testing.assert_allclose(theirs, ours, atol=1e-5, rtol=0)
    # the cls head really is applied: the embedding differs from the raw [CLS] state
    if pooler == "cls":
        raw = CSEModel.from_pretrained(out, pooler_type="cls_before_pooler").encode(SENTENCES).numpy()
        assert np.abs(raw - theirs).max() > 1e-2
    with open(os.path.join(out, "sentence_bert_config.json")) as f:
        assert json.load(f)["max_seq_length"] == 512


# --- SARCSE: Z as a module of the export's own ------------------------------------------------------


def sarcse_model(model_dir, seed=0):
    """A SARCSE encoder as run_sarcse.py trains it (decoder included), its autoencoder drawn at ``seed``."""
    encoder = CSEModel.from_pretrained(model_dir, pooler_type="cls_before_pooler")
    torch.manual_seed(seed)
    autoencoder = TextCNNAutoEncoder(encoder.config.hidden_size, textcnn_channels=16, cnn_channels=2)
    return SARCSEModel(encoder.backbone, encoder.tokenizer, autoencoder)


def assert_z_in_sentence_transformers(model_dir):
    """SentenceTransformer(dir, trust_remote_code=True) gives load_model(dir)'s Z, within float32
    rounding (the backbones see the same tokens, batched and masked differently); without
    trust_remote_code sentence-transformers refuses the export, naming the flag."""
    with pytest.raises(ValueError, match=r"sarcse_embedding\.SARCSEEmbedding.*\n.*trust_remote_code=True"):
        SentenceTransformer(model_dir, device="cpu")
    model = SentenceTransformer(model_dir, device="cpu", trust_remote_code=True)
    theirs = model.encode(SENTENCES, batch_size=3, convert_to_numpy=True)
    ours = load_model(model_dir).encode(SENTENCES, batch_size=2).numpy()
    z_size = 2 * (16 - 1)  # co_c (co_t - 1), Eq. 4; the backbone's states have 32
    assert ours.shape == theirs.shape == (len(SENTENCES), z_size) and model.get_embedding_dimension() == z_size
    np.testing.assert_allclose(theirs, ours, rtol=0, atol=1e-6 * np.abs(ours).max())
    return ours


def test_a_sarcse_export_loads_in_sentence_transformers_with_its_z(tiny_roberta, tmp_path):
    """Exported with the weights given to save_pretrained (those gathered under DeepSpeed), not the
    live ones: sentence-transformers' module holds them too."""
    live, given = sarcse_model(tiny_roberta, seed=0), sarcse_model(tiny_roberta, seed=1)
    out = str(tmp_path / "sarcse")
    live.save_pretrained(out, state_dict=given.state_dict())
    with open(os.path.join(out, "modules.json")) as f:
        assert [(m["path"], m["type"]) for m in json.load(f)] == [
            ("", "sentence_transformers.models.Transformer"),
            ("1_SARCSEEmbedding", "sarcse_embedding.SARCSEEmbedding"),
        ]
    # the module's code is the package's own files, as they are
    for name in ("sarcse_embedding.py", "textcnn.py"):
        with open(os.path.join(out, name)) as copied, open(os.path.join(REPO, "cse", "encoders", name)) as source:
            assert copied.read() == source.read()
    # its weights are the autoencoder's encoder (Eqs. 3-4), as the export's autoencoder holds them
    module = load_file(os.path.join(out, "1_SARCSEEmbedding", "model.safetensors"))
    autoencoder = load_file(os.path.join(out, "sarcse_autoencoder.safetensors"))
    assert sorted(module) == sorted(k for k in autoencoder if k.startswith(("textcnn.", "cnn.")))
    assert all(torch.equal(module[k], autoencoder[k]) for k in module)
    z = assert_z_in_sentence_transformers(out)
    np.testing.assert_allclose(z, given.encode(SENTENCES).numpy(), rtol=0, atol=1e-6 * np.abs(z).max())
    assert np.abs(z - live.encode(SENTENCES).numpy()).max() > 1e-3


@pytest.mark.e2e
@pytest.mark.parametrize("parts", [("sarcse",), ("adcse", "sarcse")], ids=["run_sarcse", "adcse+sarcse"])
def test_a_trained_sarcse_export_loads_in_sentence_transformers(tiny_roberta, tmp_path, parts):
    script, _, flags = tiny_run(*parts)
    main = run_sarcse.main if script == "run_sarcse" else composition.main
    out = tmp_path / "run"
    flags += ["--train_file", WIKI_HEAD, "--max_train_samples", "16", "--per_device_train_batch_size", "8"]
    flags += ["--learning_rate", "1e-3", "--eval_strategy", "no", "--save_strategy", "no"]
    main(train_argv(tiny_roberta, out, *flags, "--load_best_model_at_end", "false", "--final_eval", "none"))
    assert_z_in_sentence_transformers(str(out))
    # the card, written while the export was staged, names the code beside the model
    card = (out / "README.md").read_text(encoding="utf-8")
    assert f'SentenceTransformer("{out}", trust_remote_code=True)' in card
    assert "this model's own code (`sarcse_embedding.py`, `textcnn.py`)" in card


@pytest.mark.parametrize("offline", [True, False])
def test_the_exported_tokenizer_does_not_record_how_its_files_were_found(tiny_bert, tmp_path, monkeypatch, offline):
    """transformers 5.24 keeps the hub's offline mode (``local_files_only``) and ``is_local`` among a
    loaded tokenizer's settings: an export would differ between a run resumed offline and the same run
    online. The export's tokenizer_config.json holds the tokenizer alone, whatever the hub's mode."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", offline)
    CSEModel.from_pretrained(tiny_bert, pooler_type="cls").save_pretrained(str(tmp_path / "export"))
    with open(tmp_path / "export" / "tokenizer_config.json", encoding="utf-8") as f:
        saved = json.load(f)
    assert "local_files_only" not in saved and "is_local" not in saved
    with open(os.path.join(tiny_bert, "tokenizer_config.json"), encoding="utf-8") as f:
        source = {k: v for k, v in json.load(f).items() if k not in ("local_files_only", "is_local")}
    assert {k: saved[k] for k in source if k in saved} == {k: v for k, v in source.items() if k in saved}


def test_a_sentence_transformers_model_s_pooling_is_its_pooler(tiny_bert, tmp_path, minilm):
    """With no pooler named, a directory without cse_config.json embeds as its sentence-transformers
    modules do: Transformer, Pooling of one mode, maybe Normalize (all-MiniLM-L6-v2: mean, ``avg``);
    anything else is left to --pooler."""
    from cse.export import sentence_transformers_pooler

    assert load_model(minilm).pooler_type == "avg"

    def modules(*types, **modes):
        folder = tmp_path / f"st{len(list(tmp_path.iterdir()))}"
        folder.mkdir()
        listed = [
            {"idx": i, "name": str(i), "path": "" if i == 0 else f"{i}_m", "type": t} for i, t in enumerate(types)
        ]
        (folder / "modules.json").write_text(json.dumps(listed))
        (folder / "1_m").mkdir()
        (folder / "1_m" / "config.json").write_text(json.dumps({f"pooling_mode_{k}": v for k, v in modes.items()}))
        return str(folder)

    st = "sentence_transformers.models."
    assert sentence_transformers_pooler(modules(f"{st}Transformer", f"{st}Pooling", cls_token=True)) == (
        "cls_before_pooler"
    )
    assert sentence_transformers_pooler(modules(f"{st}Transformer", f"{st}Pooling", max_tokens=True)) == "max"
    normalized = modules(f"{st}Transformer", f"{st}Pooling", f"{st}Normalize", mean_tokens=True)
    assert sentence_transformers_pooler(normalized) == "avg"
    assert (
        sentence_transformers_pooler(modules(f"{st}Transformer", f"{st}Pooling", f"{st}Dense", mean_tokens=True))
        is None
    )
    assert (
        sentence_transformers_pooler(modules(f"{st}Transformer", f"{st}Pooling", mean_tokens=True, cls_token=True))
        is None
    )
    assert sentence_transformers_pooler(tiny_bert) is None
