"""SARCSE: the autoencoder's shapes and Eqs. 3-4 against float64 loops, its ability to invert itself,
f(w) and L_R against float64 hand computations, the token-count table through checkpoints and
resume, the export read back by senteval_eval.py, the density plot, the scripts, and
``run_sarcse.py`` end to end with each Table 1 ablation."""

import json
import os
import subprocess
import sys
from collections import Counter

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModel, AutoTokenizer, TrainerCallback

import senteval_eval
from cse.arguments import ModelArguments
from cse.encoders.autoencoding import SARCSEModel
from cse.encoders.textcnn import TextCNNAutoEncoder
from cse.errors import CSEUsageError
from cse.losses.reconstruction import SelfAdaptiveReconstructionLoss, count_tokens
from cse.methods import sarcse
from cse.methods.sarcse import (
    TOKEN_COUNTS_NAME,
    SARCSEArguments,
    build_model,
)
from cse.modeling import load_model
from cse.run_names import PARTS_STATE_NAME

from .conftest import DATA, REPO, SENTEVAL, WIKI_HEAD, launches, make_sarcse_trainer, small_sarcse_args


@pytest.fixture(autouse=True)
def one_thread(monkeypatch):
    """One thread for this module's in-process training: on a shared CPU two threads per process are
    several times slower than one."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    monkeypatch.setenv("CSE_DATA_DIR", DATA)
    yield
    torch.set_num_threads(threads)


# --- the autoencoder (Eqs. 3-7) ---------------------------------------------------------------


def padded_batch(lengths, d, seed=0):
    g = torch.Generator().manual_seed(seed)
    length = max(lengths)
    x = torch.randn(len(lengths), length, d, generator=g, dtype=torch.float64)
    mask = torch.arange(length)[None] < torch.tensor(lengths)[:, None]
    return x.masked_fill(~mask[..., None], 7.0), mask  # padding holds junk: it must not matter


def hand_encode(ae, x, n):
    """Eqs. 3-4 for one sentence of n real tokens, as loops in float64: H_ks[c] = max over windows t
    (t <= max(n - ks, 0); tokens past n are zero vectors) of relu(b_c + sum_j sum_e W[c, e, j] x[t + j, e]),
    a_ks[c] the first window reaching it; Z[o, j] = b_o + sum_r sum_s K[o, 0, r, s] H[r][j + s],
    flattened over (o, j). Returns Z and the windows a."""
    x = x[:n].numpy()
    d = x.shape[1]
    rows, windows = [], []
    for ks, conv in zip(ae.kernel_sizes, ae.textcnn):
        w, b = conv.weight.detach().numpy(), conv.bias.detach().numpy()
        padded = np.zeros((max(n, ks), d))
        padded[:n] = x
        h, a = np.full(ae.textcnn_channels, -np.inf), [0] * ae.textcnn_channels
        for t in range(max(n - ks, 0) + 1):
            for c in range(ae.textcnn_channels):
                value = max(b[c] + sum(w[c, e, j] * padded[t + j, e] for j in range(ks) for e in range(d)), 0.0)
                if value > h[c]:
                    h[c], a[c] = value, t
        rows.append(h)
        windows.append(a)
    k, kb = ae.cnn.weight.detach().numpy(), ae.cnn.bias.detach().numpy()
    z = np.zeros((ae.cnn_channels, ae.textcnn_channels - 1))
    for o in range(ae.cnn_channels):
        for j in range(ae.textcnn_channels - 1):
            z[o, j] = kb[o] + sum(k[o, 0, r, s] * rows[r][j + s] for r in range(len(rows)) for s in range(2))
    return z.reshape(-1), windows


def hand_decode(ae, z, windows, n):
    """Eqs. 5-7 for one sentence as loops in float64, from Z and the windows a of hand_encode:
    H'[r, c] = b + sum_o sum_s K[o, 0, r, s] Z[o, c - s] (0 <= c - s < co_t - 1); H'_ks put back at a_ks
    (max-unpooling), X'_ks[t, e] = b_e + sum_c W[c, e, t - a_ks[c]] H'_ks[c] (0 <= t - a_ks[c] < ks);
    X' the mean of the X'_ks over the n real tokens."""
    co_c, co_t, d = ae.cnn_channels, ae.textcnn_channels, ae.hidden_size
    z = z.reshape(co_c, co_t - 1)
    k, kb = ae.transposed_cnn.weight.detach().numpy(), ae.transposed_cnn.bias.detach().numpy()
    scales = np.full((len(ae.kernel_sizes), co_t), kb[0])
    for r in range(len(ae.kernel_sizes)):
        for c in range(co_t):
            for o in range(co_c):
                for s in range(2):
                    if 0 <= c - s < co_t - 1:
                        scales[r, c] += k[o, 0, r, s] * z[o, c - s]
    out = np.zeros((n, d))
    for r, (ks, deconv) in enumerate(zip(ae.kernel_sizes, ae.transposed_textcnn)):
        w, b = deconv.weight.detach().numpy(), deconv.bias.detach().numpy()
        for t in range(n):
            for e in range(d):
                value = b[e]
                for c in range(co_t):
                    if 0 <= t - windows[r][c] < ks:
                        value += w[c, e, t - windows[r][c]] * scales[r, c]
                out[t, e] += value / len(ae.kernel_sizes)
    return out


def test_shapes_over_lengths_with_padding_and_eqs_3_to_7_by_hand():
    d, co_t, co_c = 4, 6, 3
    torch.manual_seed(0)
    ae = TextCNNAutoEncoder(d, (3, 4, 5), textcnn_channels=co_t, cnn_channels=co_c).double()
    lengths = [12, 6, 5, 4, 3, 1, 0]  # longer than, equal to and shorter than the kernels; empty
    x, mask = padded_batch(lengths, d)
    z, argmax = ae.encode(x, mask)
    assert z.shape == (len(lengths), co_c * (co_t - 1))
    for ks, where in zip(ae.kernel_sizes, argmax):
        assert where.shape == (len(lengths), co_t)
        # every maximum is taken at a window inside the sentence (the one window at 0 when n < ks)
        assert (where <= (torch.tensor(lengths)[:, None] - ks).clamp_min(0)).all()
    out = ae(x, mask)
    assert out.reconstruction.shape == (len(lengths), max(lengths), d)
    assert torch.isfinite(out.reconstruction).all()
    for i, n in enumerate(lengths):
        z_hand, windows = hand_encode(ae, x[i], n)
        np.testing.assert_allclose(z[i].detach().numpy(), z_hand, rtol=1e-10, atol=1e-12)
        assert [where[i].tolist() for where in argmax] == windows
        expected = hand_decode(ae, z_hand, windows, n)
        np.testing.assert_allclose(out.reconstruction[i, :n].detach().numpy(), expected, rtol=1e-10, atol=1e-12)
        # a sentence alone, unpadded, gives the same Z and the same reconstruction of its tokens
        alone = ae(x[i : i + 1, :n], mask[i : i + 1, :n])
        torch.testing.assert_close(alone.embedding[0], z[i])
        torch.testing.assert_close(alone.reconstruction[0], out.reconstruction[i, :n])
    # a batch of short sentences only (all below the largest kernel) keeps its own length
    short = ae(*padded_batch([2, 1], d))
    assert short.embedding.shape == (2, co_c * (co_t - 1)) and short.reconstruction.shape == (2, 2, d)
    encoder_only = TextCNNAutoEncoder(d, textcnn_channels=co_t, decoder=False)
    assert encoder_only(x.float(), mask, reconstruct=False).reconstruction is None
    assert not any(name.startswith("transposed") for name, _ in encoder_only.named_parameters())
    with pytest.raises(ValueError, match="distinct positive"):
        TextCNNAutoEncoder(d, (3, 3))
    with pytest.raises(ValueError, match="textcnn_channels >= 2"):
        TextCNNAutoEncoder(d, textcnn_channels=1)


def test_autoencoder_overfits_a_few_token_matrices():
    """The decoder inverts the encoder: on four fixed sentences the reconstruction error falls by
    orders of magnitude; decoding another sentence's Z instead gives back a large error."""
    torch.manual_seed(0)
    d, lengths = 16, [9, 6, 4, 2]
    x, mask = padded_batch(lengths, d)
    x = x.float()
    ae = TextCNNAutoEncoder(d, textcnn_channels=64)
    optimizer = torch.optim.Adam(ae.parameters(), lr=3e-3)

    def error(reconstruction):
        return ((reconstruction - x) ** 2).mean(-1)[mask].mean()

    for step in range(200):
        loss = error(ae(x, mask).reconstruction)
        if step == 0:
            initial = loss.item()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    with torch.no_grad():
        final = error(ae(x, mask).reconstruction).item()
        z, argmax = ae.encode(x, mask)
        swapped = error(ae.decode(z.roll(1, dims=0), argmax, x.shape[1])).item()
    assert final < initial * 1e-4, (initial, final)
    assert swapped > initial * 0.1, (initial, swapped)


# --- f(w) and L_R (Eqs. 8-10) -------------------------------------------------------------------

SPECIAL = [0, 1, 2]  # <s>, <pad>, </s> of the toy vocabulary
TOY_CORPUS = [[0, 3, 4, 3, 5, 2], [0, 3, 6, 2], [0, 7, 3, 4, 2], [0, 2]]


def test_token_counts_and_weights_equal_a_hand_computation():
    counts = count_tokens(TOY_CORPUS, 10, SPECIAL)
    hand = Counter(t for s in TOY_CORPUS for t in s if t not in SPECIAL)
    assert counts.tolist() == [hand.get(t, 0) for t in range(10)]
    total = sum(hand.values())  # 9 real tokens: 3 four times, 4 twice, 5, 6, 7 once
    theta, lam = 0.1, 2.5
    loss = SelfAdaptiveReconstructionLoss(10, SPECIAL, theta=theta, freq_lambda=lam)
    with pytest.raises(RuntimeError, match="not counted"):
        loss.token_weights(torch.tensor([3]))
    loss.set_counts(counts)
    ids = torch.arange(10)
    expected = [0.0 if t in SPECIAL else max(theta, 1.0 - lam * hand.get(t, 0) / total) for t in range(10)]
    np.testing.assert_allclose(loss.token_weights(ids).double().numpy(), expected, rtol=1e-6)
    assert expected[3] == theta and 0.1 < expected[4] < 1.0 and expected[8] == 1.0  # the clip is exercised
    assert (
        SelfAdaptiveReconstructionLoss(10, SPECIAL, self_adaptive=False).token_weights(ids).tolist()
        == [0.0] * 3 + [1.0] * 7
    )
    with pytest.raises(ValueError, match="vocabulary"):
        loss.set_counts(torch.zeros(5, dtype=torch.int64))
    with pytest.raises(ValueError, match="special tokens"):
        loss.set_counts(torch.ones(10, dtype=torch.int64))
    with pytest.raises(ValueError, match="theta"):
        SelfAdaptiveReconstructionLoss(10, SPECIAL, theta=1.5)


@pytest.mark.parametrize("self_adaptive", [True, False])
def test_reconstruction_loss_equals_float64_hand_computation(self_adaptive):
    theta, lam = 0.1, 2.5
    loss = SelfAdaptiveReconstructionLoss(10, SPECIAL, theta=theta, freq_lambda=lam, self_adaptive=self_adaptive)
    counts = count_tokens(TOY_CORPUS, 10, SPECIAL)
    loss.set_counts(counts)
    ids = torch.tensor([[3, 4, 5, 1], [6, 2, 7, 1], [1, 1, 1, 1]])  # a special id inside row 1; row 2 empty
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 0], [0, 0, 0, 0]])
    g = torch.Generator().manual_seed(1)
    x, x_rec = torch.randn(3, 4, 5, generator=g), torch.randn(3, 4, 5, generator=g)
    got = loss(x, x_rec, ids, mask)
    hand = Counter(t for s in TOY_CORPUS for t in s if t not in SPECIAL)
    total = sum(hand.values())
    for b in range(3):
        n = sum(1 for i in range(4) if mask[b, i] and int(ids[b, i]) not in SPECIAL)  # N: real tokens only
        acc = 0.0
        for i in range(4):
            w = int(ids[b, i])
            if not mask[b, i] or w in SPECIAL:
                continue
            f = max(theta, 1.0 - lam * hand[w] / total) if self_adaptive else 1.0
            mse = sum((float(x[b, i, e]) - float(x_rec[b, i, e])) ** 2 for e in range(5)) / 5
            acc += f * mse
        expected = acc / n if n else 0.0
        assert got[b].item() == pytest.approx(expected, rel=1e-5, abs=1e-7), b


def test_arguments_refuse_contradictions():
    with pytest.raises(ValueError, match="beta set, but --no_decoder"):
        SARCSEArguments(decoder=False, beta=0.1)
    with pytest.raises(ValueError, match="plain_mse set, but --no_decoder"):
        SARCSEArguments(decoder=False, plain_mse=True)
    with pytest.raises(ValueError, match="theta set, but --plain_mse"):
        SARCSEArguments(plain_mse=True, theta=0.3)
    with pytest.raises(ValueError, match="--beta must be >= 0, got -1"):
        SARCSEArguments(beta=-1.0)
    with pytest.raises(ValueError, match="--pooler_type and --mlp_only_train do not apply"):
        import run_sarcse

        run_sarcse.main(["--output_dir", "unused", "--pooler_type", "avg"])


# --- the model: real tokens, export, loading ----------------------------------------------------


def test_real_tokens_exclude_special_tokens_and_padding(tiny_roberta):
    model = build_model(ModelArguments(model_name_or_path=tiny_roberta), small_sarcse_args())
    tok = model.tokenizer
    sentences = ["a cat sat on the mat", "hi", ""]
    for side in ("right", "left"):
        tok.padding_side = side
        batch = tok(sentences, padding=True, return_tensors="pt")
        states = torch.randn(*batch["input_ids"].shape, 32)
        tokens, ids, mask = model.content_tokens(states, batch["input_ids"], batch["attention_mask"])
        for i, sentence in enumerate(sentences):
            plain = tok(sentence, add_special_tokens=False)["input_ids"]
            assert ids[i][mask[i]].tolist() == plain and int(mask[i].sum()) == len(plain)
            where = [j for j, t in enumerate(batch["input_ids"][i].tolist()) if batch["attention_mask"][i, j]][1:-1]
            torch.testing.assert_close(tokens[i, : len(plain)], states[i, where])
    tok.padding_side = "right"


@pytest.mark.e2e
def test_export_reloads_to_the_same_z_and_senteval_eval_evaluates_z(tiny_roberta, tmp_path, monkeypatch):
    torch.manual_seed(0)
    model = build_model(ModelArguments(model_name_or_path=tiny_roberta), small_sarcse_args())
    model.save_pretrained(str(tmp_path))
    sentences = ["a man plays a guitar", "the weather is cold today", "ok"]
    reference = model.encode(sentences)
    assert reference.shape == (3, 3 * 7)
    loaded = load_model(str(tmp_path))
    assert isinstance(loaded, SARCSEModel) and loaded.autoencoder.has_decoder
    torch.testing.assert_close(loaded.encode(sentences), reference, rtol=0, atol=0)
    # Z by hand from the plain Hugging Face backbone the directory also holds
    backbone, tok = AutoModel.from_pretrained(str(tmp_path)), AutoTokenizer.from_pretrained(str(tmp_path))
    with torch.no_grad():
        for i, sentence in enumerate(sentences):
            states = backbone(**tok(sentence, return_tensors="pt")).last_hidden_state[:, 1:-1]
            z, _ = loaded.autoencoder.encode(states, torch.ones(states.shape[:2], dtype=torch.bool))
            torch.testing.assert_close(z[0], reference[i], rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="its embedding is 'textcnn', not pooler 'avg'"):
        load_model(str(tmp_path), pooler_type="avg")
    os.rename(tmp_path / "sarcse_autoencoder.safetensors", tmp_path / "moved.safetensors")
    with pytest.raises(FileNotFoundError, match="autoencoder's shape or weights"):
        load_model(str(tmp_path))
    os.rename(tmp_path / "moved.safetensors", tmp_path / "sarcse_autoencoder.safetensors")
    # senteval_eval.py's encoder is Z
    captured = {}

    def fake_evaluate(encode, **kwargs):
        captured["vectors"] = encode(sentences)
        return {"scores": {"STS-B": 0.0}, "score_groups": {"sts": {"STS-B": 0.0}}}

    monkeypatch.setattr(senteval_eval, "evaluate", fake_evaluate)
    report = senteval_eval.main(["--model_name_or_path", str(tmp_path), "--mode", "dev", "--device", "cpu"])
    np.testing.assert_allclose(captured["vectors"], reference.numpy(), rtol=1e-6, atol=1e-7)
    assert report["pooler"] == "textcnn"
    config = json.loads((tmp_path / "cse_config.json").read_text())
    # the class is this package's (an export names no code to run), read by its module alone; a class
    # outside it only when trusted, and then only an encoder class
    assert config["model_class"] == "cse.encoders.autoencoding:SARCSEModel"
    for other, refusal in [
        ("unheard-of", "names no encoder class \\('unheard-of'\\)"),
        ("os:system", "names the encoder class os:system, outside this package"),
    ]:
        (tmp_path / "cse_config.json").write_text(json.dumps({**config, "model_class": other}))
        with pytest.raises(CSEUsageError, match=refusal):
            load_model(str(tmp_path))
    with pytest.raises(CSEUsageError, match="names os:system, which is not an encoder class"):
        load_model(str(tmp_path), trust_remote_code=True)
    # an export written before the class was recorded names SARCSE's by its kind
    legacy = {key: value for key, value in config.items() if key != "model_class"}
    (tmp_path / "cse_config.json").write_text(json.dumps({**legacy, "model_kind": "sarcse"}))
    torch.testing.assert_close(load_model(str(tmp_path)).encode(sentences), reference, rtol=0, atol=0)
    # (transformers' own loading imports accelerate)
    script = (
        "import sys; from cse.modeling import load_model; load_model(sys.argv[1]); "
        "print(sorted(m for m in ('cse.trainer', 'cse.methods', 'transformers.trainer') if m in sys.modules))"
    )
    proc = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0 and proc.stdout.strip() == "[]", proc.stderr[-2000:]


# cse_config.json of a SARCSE export written before the encoders moved to cse.encoders (recorded
# from such an export of small_sarcse_args()'s model): the class by its former module.
FORMER_CSE_CONFIG = {
    "model_class": "cse.autoencoding:SARCSEModel",
    "pooler": "textcnn",
    "autoencoder": {
        "hidden_size": 32,
        "kernel_sizes": [3, 4, 5],
        "textcnn_channels": 8,
        "cnn_channels": 3,
        "decoder": True,
    },
    "detach_target": False,
}


def test_an_export_naming_the_former_module_of_sarcses_class_loads(tiny_roberta, tmp_path):
    """An export whose cse_config.json names cse.autoencoding:SARCSEModel loads as the class at its
    new path (cse.encoders.autoencoding), with the same Z."""
    torch.manual_seed(0)
    model = build_model(ModelArguments(model_name_or_path=tiny_roberta), small_sarcse_args())
    model.save_pretrained(str(tmp_path))
    (tmp_path / "cse_config.json").write_text(json.dumps(FORMER_CSE_CONFIG))
    sentences = ["a man plays a guitar", "the weather is cold today", "ok"]
    loaded = load_model(str(tmp_path))
    assert type(loaded) is SARCSEModel and loaded.autoencoder.has_decoder
    torch.testing.assert_close(loaded.encode(sentences), model.encode(sentences), rtol=0, atol=0)


# --- the trainer: the token-count table, resume --------------------------------------------------


def test_loss_is_eq12_of_both_views(tiny_roberta, tmp_path):
    trainer = make_sarcse_trainer(tiny_roberta, tmp_path, small_sarcse_args(alpha=0.5, beta=0.3, gamma=0.7))
    trainer.part("sarcse").count_token_frequencies(trainer)
    trainer.model.train()
    batch = trainer.data_collator([trainer.train_dataset[i] for i in range(4)])
    torch.manual_seed(3)
    loss = trainer.compute_loss(trainer.model, batch)
    torch.manual_seed(3)  # the same dropout masks
    outputs = trainer.model(**batch)
    views, recon = outputs["embeddings"], outputs["reconstruction"]
    per_row = trainer.part("sarcse").reconstruction_loss(
        recon.target, recon.reconstruction, recon.token_ids, recon.mask
    )
    l_i = trainer.loss_fn(views[:, 0], views[:, 1])
    # rows alternate view 0, view 1 of each sentence: L_R averages the first views, L_R+ the second
    expected = 0.5 * l_i + 0.3 * per_row[0::2].mean() + 0.7 * per_row[1::2].mean()
    assert loss.item() == pytest.approx(expected.item(), rel=1e-6)
    assert per_row[0::2].mean() != per_row[1::2].mean()  # dropout: the two views differ
    with pytest.raises(TypeError, match="needs a SARCSEModel with a decoder.*--no_decoder"):
        make_sarcse_trainer(tiny_roberta, tmp_path / "no_decoder", small_sarcse_args(decoder=False))


def test_reconstruction_is_an_add_on_to_another_methods_trainer(tiny_roberta, tmp_path):
    """SARCSE's part beside AdCSE's adversaries (one encoder, adversarial InfoNCE on Z): AdCSE's loss
    plus the reconstruction terms, and both AdCSE's adversaries and the autoencoder's decoder learn."""
    from cse.losses.adcse import AdversarialInfoNCELoss
    from cse.methods.adcse import AdCSE, AdCSEArguments
    from cse.methods.sarcse import SARCSE
    from cse.trainer import CSETrainer

    base = make_sarcse_trainer(tiny_roberta, tmp_path / "base", small_sarcse_args(beta=0.3, gamma=0.7), max_steps=1)
    model = base.model
    adcse_loss = AdversarialInfoNCELoss(model.embedding_size, num_adversaries=4, temperature=1.0)
    trainer = CSETrainer(
        model=model,
        args=base.args,
        train_dataset=base.train_dataset,
        data_collator=base.data_collator,
        processing_class=model.tokenizer,
        loss=adcse_loss,
        senteval_data_dir=SENTEVAL,
        parts=[
            AdCSE(AdCSEArguments(adversary_learning_rate=1.0, untied_dual_encoder=False)),
            SARCSE(small_sarcse_args(beta=0.3, gamma=0.7)),
        ],
    )
    trainer.part("sarcse").count_token_frequencies(trainer)
    model.train()
    batch = trainer.data_collator([trainer.train_dataset[i] for i in range(4)])
    torch.manual_seed(3)
    loss = trainer.compute_loss(model, batch)
    torch.manual_seed(3)
    outputs = model(**batch)
    views, recon = outputs["embeddings"], outputs["reconstruction"]
    per_row = trainer.part("sarcse").reconstruction_loss(
        recon.target, recon.reconstruction, recon.token_ids, recon.mask
    )
    expected = adcse_loss(views[:, 0], views[:, 1]) + 0.3 * per_row[0::2].mean() + 0.7 * per_row[1::2].mean()
    assert loss.item() == pytest.approx(expected.item(), rel=1e-6)
    adversaries = trainer.part("adcse").adversaries.detach().clone()
    decoder = model.autoencoder.transposed_cnn.weight.detach().clone()
    trainer.train()
    assert not torch.allclose(trainer.part("adcse").adversaries, adversaries)
    assert not torch.allclose(model.autoencoder.transposed_cnn.weight, decoder)


@pytest.mark.e2e
def test_token_counts_are_saved_and_reused_on_resume(tiny_roberta, tmp_path, monkeypatch):
    class StopAt(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            control.should_training_stop = state.global_step == 2

    straight = make_sarcse_trainer(tiny_roberta, tmp_path / "straight")
    straight.train()
    expected = count_tokens(
        [t["input_ids"] for t in straight.train_dataset],
        len(straight.model.tokenizer),
        straight.part("sarcse").reconstruction_loss.special_ids,
    )
    torch.testing.assert_close(straight.part("sarcse").reconstruction_loss.token_counts, expected)
    make_sarcse_trainer(tiny_roberta, tmp_path / "cut", callbacks=[StopAt()]).train()
    checkpoint = tmp_path / "cut" / "checkpoint-2"
    assert torch.equal(load_file(str(checkpoint / PARTS_STATE_NAME))["sarcse.token_counts"], expected)

    def no_recount(*args, **kwargs):
        raise AssertionError("the token counts were recounted on resume")

    monkeypatch.setattr(sarcse, "count_tokens", no_recount)
    resumed = make_sarcse_trainer(tiny_roberta, tmp_path / "cut")
    resumed.train(resume_from_checkpoint=str(checkpoint))
    torch.testing.assert_close(resumed.part("sarcse").reconstruction_loss.token_counts, expected)
    for (name, a), b in zip(straight.model.state_dict().items(), resumed.model.state_dict().values()):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6, msg=name)
    # the final export carries the table too
    resumed.save_encoder(str(tmp_path / "export"))
    assert torch.equal(load_file(str(tmp_path / "export" / TOKEN_COUNTS_NAME))["token_counts"], expected)
    last = tmp_path / "straight" / "checkpoint-4"
    # a checkpoint of another model layout is refused, by the trainer and by run_sarcse.py (whose
    # --no_decoder runs on the plain CSETrainer), before anything is loaded or counted
    with pytest.raises(ValueError, match="saved by a different model.*autoencoder.textcnn"):
        make_sarcse_trainer(tiny_roberta, tmp_path / "other", small_sarcse_args(textcnn_channels=6)).train(
            resume_from_checkpoint=str(last)
        )
    import run_sarcse

    argv = ["--model_name_or_path", tiny_roberta, "--train_file", WIKI_HEAD, "--output_dir", str(tmp_path / "nd")]
    argv += ["--textcnn_channels", "8", "--no_decoder", "--use_cpu", "true"]
    argv += ["--resume_from_checkpoint", str(last)]
    with pytest.raises(ValueError, match="saved by a different model.*autoencoder.transposed"):
        run_sarcse.main(argv)
    os.remove(last / PARTS_STATE_NAME)
    with pytest.raises(ValueError, match="lacks the token-frequency table"):
        make_sarcse_trainer(tiny_roberta, tmp_path / "straight").train(resume_from_checkpoint=str(last))


# --- the scripts, the config -----------------------------------------------------------


def test_sarcse_scripts_pass_each_runs_settings(tmp_path):
    runs, _ = launches(tmp_path / "abl", "scripts/sarcse/table1_ablations.sh")
    assert [[a for a in run if a in ("--plain_mse", "--no_decoder")] for run in runs] == [
        [],
        ["--plain_mse"],
        ["--no_decoder"],
    ]
    assert all(run[4:6] == ["run_sarcse.py", "configs/sarcse_roberta_base.yaml"] for run in runs)
    runs, _ = launches(tmp_path / "t1", "scripts/sarcse/table1_main.sh")
    assert [(r[4], r[5], r[-1]) for r in runs] == [
        ("run_sarcse.py", "configs/sarcse_roberta_base.yaml", "64"),
        ("run_simcse.py", "configs/simcse_bert_base.yaml", "512"),
        ("run_sarcse.py", "configs/sarcse_roberta_large.yaml", "64"),
        ("run_simcse.py", "configs/simcse_bert_base.yaml", "512"),
    ]
    simcse = [r for r in runs if "run_simcse.py" in r]
    assert [(r[r.index("--model_name_or_path") + 1], r[r.index("--learning_rate") + 1]) for r in simcse] == [
        ("roberta-base", "1e-5"),
        ("roberta-large", "3e-5"),
    ]
    runs, _ = launches(tmp_path / "t2", "scripts/sarcse/table2_batch_size.sh")
    batches = ["32", "64", "128", "256", "512"]
    assert [r[-1] for r in runs if "run_sarcse.py" in r] == batches == [r[-1] for r in runs if "run_simcse.py" in r]
    runs, _ = launches(tmp_path / "t3", "scripts/sarcse/table3_theta.sh")
    assert [r[r.index("--theta") + 1] for r in runs] == ["0.0", "0.1", "0.2", "0.3", "0.4", "0.5", "0.6"]
    runs, printed = launches(tmp_path / "d", "scripts/sarcse/appD_density.sh")
    assert len(runs) == 2 and "python -m cse.plots cosine_density" in printed


def test_shipped_configs_hold_the_papers_settings():
    from cse.arguments import DataArguments, parse_args
    from cse.methods.sarcse import SARCSEModelArguments, SARCSETrainingArguments

    types = (SARCSEModelArguments, DataArguments, SARCSETrainingArguments, SARCSEArguments)
    defaults = parse_args(types, ["--output_dir", "o"])
    for size in ("base", "large"):
        model_args, data_args, train_args, args = parse_args(
            types, [f"{REPO}/configs/sarcse_roberta_{size}.yaml", "--output_dir", "o"]
        )
        # Sect. 3.1: RoBERTa, theta 0.1, lambda 50, tau 0.05, alpha 1, beta = gamma = 2.5e-4, co_t 500,
        # co_c 3, AdamW lr 1e-5, batch 64, one epoch
        assert model_args.model_name_or_path == f"roberta-{size}" and model_args.temp == 0.05
        assert (args.theta, args.freq_lambda, args.alpha, args.beta, args.gamma) == (0.1, 50.0, 1.0, 2.5e-4, 2.5e-4)
        assert (args.kernel_sizes, args.textcnn_channels, args.cnn_channels) == ([3, 4, 5], 500, 3)
        assert (train_args.learning_rate, train_args.per_device_train_batch_size, train_args.num_train_epochs) == (
            1e-5,
            64,
            1.0,
        )
        assert not args.plain_mse and args.decoder and not args.detach_target
    # the flags' defaults are the paper's too
    assert (defaults[0].model_name_or_path, defaults[2].learning_rate) == ("roberta-base", 1e-5)
    assert defaults[3] == SARCSEArguments()


# --- run_sarcse.py ------------------------------------------------------------------------------


@pytest.mark.e2e
@pytest.mark.parametrize("flags", [[], ["--plain_mse"], ["--no_decoder"]], ids=["default", "plain_mse", "no_decoder"])
def test_run_sarcse_with_each_ablation(tiny_roberta, tmp_path, flags):
    import run_sarcse

    out = str(tmp_path / "run")
    args = ["--model_name_or_path", tiny_roberta, "--train_file", WIKI_HEAD, "--output_dir", out]
    args += ["--max_train_samples", "400", "--per_device_train_batch_size", "8", "--max_steps", "24"]
    args += ["--logging_steps", "12", "--learning_rate", "1e-3", "--textcnn_channels", "16"]
    args += ["--use_cpu", "true", "--disable_tqdm", "true", "--final_eval", "none"]
    if flags:  # no STS-B dev evaluation: checkpoints on a fixed schedule, the last model exported
        args += ["--eval_strategy", "no", "--save_strategy", "steps", "--save_steps", "12"]
        args += ["--load_best_model_at_end", "false"]
    else:
        args += ["--eval_steps", "24"]
    trainer = run_sarcse.main(args + flags)
    assert [part.name for part in trainer.parts] == ["sarcse"]
    assert trainer.checkpoint_files() == (() if flags else (PARTS_STATE_NAME,))
    decoder, adaptive = "--no_decoder" not in flags, not flags
    with open(os.path.join(out, "trainer_state.json")) as f:
        history = json.load(f)["log_history"]
    logged = [entry for entry in history if "loss" in entry]
    assert len(logged) == 2 and all(("reconstruction_loss" in entry) == decoder for entry in logged)
    assert sum("eval_stsb_spearman" in entry for entry in history) == (0 if flags else 1)
    checkpoints = [os.path.join(out, d) for d in os.listdir(out) if d.startswith("checkpoint-")]
    assert checkpoints
    assert os.path.isfile(os.path.join(out, TOKEN_COUNTS_NAME)) == adaptive
    for directory in checkpoints:
        assert os.path.isfile(os.path.join(directory, PARTS_STATE_NAME)) == adaptive, directory
    with open(os.path.join(out, "cse_config.json")) as f:
        config = json.load(f)
    assert (config["model_class"], config["pooler"], config["autoencoder"]["decoder"]) == (
        "cse.encoders.autoencoding:SARCSEModel",
        "textcnn",
        decoder,
    )
    model = load_model(out)
    assert model.encode(["a man plays a guitar", "hi"]).shape == (2, 3 * 15)
    assert any(key.startswith("transposed") for key in model.autoencoder.state_dict()) == decoder
