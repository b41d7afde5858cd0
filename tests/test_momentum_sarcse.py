"""SARCSE's model under AdCSE's momentum encoder (a ``SARCSEModel`` with a momentum backbone, trained
with the parts of both): one step's loss against a float64 hand computation (adversarial InfoNCE of
q's Z against p's Z+, L_R of q's tokens, L_R+ of p's), Eq. 4 on the weights after two steps, where
L_R+'s gradient goes, the export read back as SARCSE's; and SARCSE's reconstruction that of the
two-view forward when V-advCSE re-encodes the anchors alone."""

import copy
import math
from collections import Counter

import datasets
import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModel, AutoTokenizer, set_seed

from cse.arguments import CSETrainingArguments, ModelArguments
from cse.data import TwoViewCollator
from cse.encoders.autoencoding import SARCSEModel, special_token_ids
from cse.losses import InfoNCELoss
from cse.losses.adcse import AdversarialInfoNCELoss
from cse.methods.adcse import AdCSE, AdCSEArguments
from cse.methods.sarcse import SARCSE, build_model
from cse.methods.vadvcse import VAdvCSE, VAdvCSEArguments
from cse.modeling import load_model, read_cse_config
from cse.trainer import CSETrainer

from .conftest import QUIET_CPU, SENTENCES, SENTEVAL, MomentumWeights, small_sarcse_args

THETA, FREQ_LAMBDA = 0.1, 5.0  # a lambda at which the frequency weights vary on 8 sentences


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def make_trainer(model_dir, out, *, momentum=0.9, beta=0.3, gamma=0.7, tau=1.0, max_steps=2, callbacks=None):
    tok = AutoTokenizer.from_pretrained(model_dir)
    dataset = datasets.Dataset.from_dict(dict(tok(SENTENCES[:8], truncation=True, max_length=32)))
    set_seed(0)
    sarcse_args = small_sarcse_args(beta=beta, gamma=gamma, theta=THETA, freq_lambda=FREQ_LAMBDA)
    model = build_model(ModelArguments(model_name_or_path=model_dir), sarcse_args)
    model.attach_momentum_backbone(shared_head=True)
    args = dict(QUIET_CPU, output_dir=str(out), per_device_train_batch_size=4, max_steps=max_steps)
    args.update(learning_rate=1e-3, lr_scheduler_type="constant", seed=0, save_strategy="steps", save_steps=2)
    adcse = AdCSEArguments(num_adversaries=4, momentum=momentum, adversary_learning_rate=1.0, adversary_weight_decay=0)
    return CSETrainer(
        model=model,
        args=CSETrainingArguments(**args),
        train_dataset=dataset,
        data_collator=TwoViewCollator(tok),
        processing_class=tok,
        # tau = 1: at 0.05 random adversaries hold ~e^-20 of the softmax and would not move
        loss=AdversarialInfoNCELoss(model.embedding_size, num_adversaries=4, temperature=tau),
        senteval_data_dir=SENTEVAL,
        callbacks=callbacks,
        parts=[AdCSE(adcse), SARCSE(sarcse_args)],
    )


def first_batch(trainer, size=4):
    return trainer.data_collator([trainer.train_dataset[i] for i in range(size)])


def hand_views(trainer, batch, backbones):
    """For each view v encoded by ``backbones[v]``, per sentence in float64: Z (the sentence's real
    tokens alone, unpadded, through a float64 copy of the autoencoder) and L_R (Eq. 9: the tokens'
    f(w) = max(theta, 1 - lambda freq(w)), freq counted on the training sentences, times their MSE
    over d, summed over the n real tokens, over n)."""
    model = trainer.model
    special = set(special_token_ids(model.tokenizer))
    counts = Counter(t for ids in trainer.train_dataset["input_ids"] for t in ids if t not in special)
    total = sum(counts.values())
    autoencoder = copy.deepcopy(model.autoencoder).double()
    codes, losses = [], []
    with torch.no_grad():
        for v, backbone in enumerate(backbones):
            ids, mask = batch["input_ids"][:, v], batch["attention_mask"][:, v]
            states = backbone(input_ids=ids, attention_mask=mask).last_hidden_state.double()
            z, l_r = [], []
            for i in range(len(ids)):
                keep = [j for j in range(ids.shape[1]) if mask[i, j] and int(ids[i, j]) not in special]
                x = states[i, keep]
                out = autoencoder(x[None], torch.ones(1, len(keep), dtype=torch.bool))
                z.append(out.embedding[0].numpy())
                weights = [max(THETA, 1 - FREQ_LAMBDA * counts[int(ids[i, j])] / total) for j in keep]
                errors = ((x - out.reconstruction[0]) ** 2).mean(-1).tolist()
                l_r.append(sum(w * e for w, e in zip(weights, errors)) / len(keep))
            codes.append(np.stack(z))
            losses.append(float(np.mean(l_r)))
    return codes, losses


def hand_adversarial_infonce(anchors, positives, adversaries, tau):
    """AdCSE's released loss: -log e^{cos(h_i, h_i+)/tau} / (sum_j e^{cos(h_i, h_j+)/tau} + sum_k
    e^{cos(h_i, n_k)/tau}), mean over i, in float64."""

    def cos(a, b):
        return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))

    total = 0.0
    for i, h in enumerate(anchors):
        denominator = sum(math.exp(cos(h, p) / tau) for p in positives)
        denominator += sum(math.exp(cos(h, n) / tau) for n in adversaries)
        total += -(cos(h, positives[i]) / tau - math.log(denominator))
    return total / len(anchors)


def test_one_steps_loss_is_adcse_on_q_and_p_plus_both_reconstructions(no_dropout_roberta, tmp_path):
    trainer = make_trainer(no_dropout_roberta, tmp_path)
    model = trainer.model
    trainer.part("sarcse").count_token_frequencies(trainer)
    with torch.no_grad():  # p apart from q, so that which encoder gives which view shows
        g = torch.Generator().manual_seed(1)
        for t in model.momentum_backbone.parameters():
            t.add_(0.05 * torch.randn(t.shape, generator=g))
    model.train()
    batch = first_batch(trainer)
    loss = trainer.compute_loss(model, batch)
    (z, z_plus), (l_r, l_r_plus) = hand_views(trainer, batch, (model.backbone, model.momentum_backbone))
    adversaries = trainer.part("adcse").adversaries.detach().double().numpy()
    expected = hand_adversarial_infonce(z, z_plus, adversaries, 1.0) + 0.3 * l_r + 0.7 * l_r_plus
    assert loss.item() == pytest.approx(expected, rel=1e-5)
    # not vacuous: view 1 through q instead of p gives other codes and another L_R+
    (_, z_plus_q), (_, l_r_plus_q) = hand_views(trainer, batch, (model.backbone, model.backbone))
    assert np.abs(z_plus - z_plus_q).max() > 1e-3 and abs(l_r_plus - l_r_plus_q) > 1e-4 * l_r_plus


def test_two_steps_move_p_by_eq4_and_the_adversaries_and_autoencoder_and_export_sarcse(no_dropout_roberta, tmp_path):
    m = 0.9
    trainer = make_trainer(no_dropout_roberta, tmp_path / "run", momentum=m)
    model = trainer.model
    record = MomentumWeights(model)
    trainer.add_callback(record)
    adversaries = trainer.part("adcse").adversaries.detach().clone()
    decoder = model.autoencoder.transposed_cnn.weight.detach().clone()
    encoder = model.autoencoder.textcnn[0].weight.detach().clone()
    trainer.train()
    q, p = record.q, record.p
    assert len(p) == 3 and set(p[0]) == {name for name in q[0] if not name.startswith("pooler.")}
    for name in p[0]:
        assert torch.equal(p[0][name], q[0][name]), name  # p starts as q's copy
    moved = [name for name in p[0] if not torch.equal(q[1][name], q[0][name])]
    assert "encoder.layer.0.attention.self.query.weight" in moved
    for k in (1, 2):  # Eq. 4 after each step: theta_p = m theta_p + (1 - m) theta_q, q after its update
        for name in p[0]:
            torch.testing.assert_close(p[k][name], m * p[k - 1][name] + (1 - m) * q[k][name], rtol=0, atol=1e-7)
    assert not torch.allclose(trainer.part("adcse").adversaries, adversaries)
    assert not torch.allclose(model.autoencoder.transposed_cnn.weight, decoder)
    assert not torch.allclose(model.autoencoder.textcnn[0].weight, encoder)
    assert all(not t.requires_grad and t.grad is None for t in model.momentum_backbone.parameters())
    # the checkpoint holds p (to resume), without a pooling layer
    state = load_file(str(tmp_path / "run" / "checkpoint-2" / "model.safetensors"))
    p_keys = {key.removeprefix("momentum_backbone.") for key in state if key.startswith("momentum_backbone.")}
    assert p_keys == set(p[0])

    # where the gradients of one step's terms go
    model.train()
    step = trainer.step_terms(model, first_batch(trainer))
    autoencoder = list(model.autoencoder.named_parameters())
    q_weights = [t for t in model.backbone.parameters() if t.requires_grad]

    def grads(value, parameters):
        return torch.autograd.grad(value, parameters, retain_graph=True, allow_unused=True)

    # Z+ carries no gradient (its stack with Z passes zeros back)
    z_plus = grads(step.outputs["embeddings"][:, 1].sum(), q_weights + [t for _, t in autoencoder])
    assert all(g is None or not g.any() for g in z_plus)
    positive_grads = grads(step.terms["reconstruction_positive"], [t for _, t in autoencoder])
    reached = [name for (name, _), g in zip(autoencoder, positive_grads) if g is not None and g.abs().sum() > 0]
    assert reached == [name for name, _ in autoencoder]  # L_R+ trains the whole autoencoder...
    # ... and neither q nor p (the view-0 rows it is computed beside pass zeros back to q)
    assert all(g is None or not g.any() for g in grads(step.terms["reconstruction_positive"], q_weights))
    assert any(g is not None and g.any() for g in grads(step.terms["reconstruction"], q_weights))  # L_R reaches q

    # the export is SARCSE's: q's backbone and the autoencoder, read back as a SARCSEModel with q's Z
    export = tmp_path / "export"
    trainer.save_encoder(str(export))
    assert read_cse_config(str(export))["model_class"] == "cse.encoders.autoencoding:SARCSEModel"
    loaded = load_model(str(export))
    assert type(loaded) is SARCSEModel
    sentences = ["a man plays a guitar", "the weather is cold today", "ok"]
    torch.testing.assert_close(loaded.encode(sentences), model.encode(sentences), rtol=0, atol=0)
    exported = AutoModel.from_pretrained(str(export)).state_dict()
    for name, value in model.backbone.state_dict().items():
        assert torch.equal(exported[name], value), name
    query = "encoder.layer.0.attention.self.query.weight"
    assert not torch.equal(exported[query], model.momentum_backbone.get_parameter(query))  # p is not q
    # Z by hand from q's backbone, sentence by sentence
    tok = AutoTokenizer.from_pretrained(str(export))
    one_view = {k: v[:, None] for k, v in tok(sentences, padding=True, return_tensors="pt").items()}
    (z,), _ = hand_views(trainer, one_view, (model.backbone,))
    np.testing.assert_allclose(loaded.encode(sentences).numpy(), z, rtol=1e-4, atol=1e-5)


# --- one-view forwards reconstruct nothing ---------------------------------------------------------


def test_vadvcses_one_view_forward_leaves_sarcse_the_two_view_reconstruction(no_dropout_roberta, tmp_path):
    """V-advCSE's perturbed re-encoding of the anchors is a one-view forward, which reconstructs
    nothing: a run with both parts scores the two-view forward's reconstruction."""
    tok = AutoTokenizer.from_pretrained(no_dropout_roberta)
    model = build_model(ModelArguments(model_name_or_path=no_dropout_roberta), small_sarcse_args()).train()
    batch = TwoViewCollator(tok)([tok(s) for s in SENTENCES[:4]])
    one_view = model(**{k: v[:, :1] for k, v in batch.items()})
    assert set(one_view) == {"embeddings"} and one_view["embeddings"].shape[:2] == (4, 1)
    expected = model(**batch)["reconstruction"]
    assert expected.target.shape[0] == 8
    sarcse = SARCSE(small_sarcse_args(beta=0.3, gamma=0.7))
    trainer = CSETrainer(
        model=model,
        args=CSETrainingArguments(**QUIET_CPU, output_dir=str(tmp_path), per_device_train_batch_size=4),
        train_dataset=datasets.Dataset.from_dict(dict(tok(SENTENCES[:8]))),
        data_collator=TwoViewCollator(tok),
        processing_class=tok,
        loss=InfoNCELoss(0.05),
        senteval_data_dir=SENTEVAL,
        parts=[sarcse, VAdvCSE(VAdvCSEArguments(vadv_lambda=1.0))],
    )
    sarcse.count_token_frequencies(trainer)
    step = trainer.step_terms(model, batch)
    assert "vadv" in step.terms
    per_row = sarcse.reconstruction_loss(expected.target, expected.reconstruction, expected.token_ids, expected.mask)
    assert step.terms["reconstruction"].item() == pytest.approx(0.3 * per_row[0::2].mean().item(), rel=1e-6)
    assert step.terms["reconstruction_positive"].item() == pytest.approx(0.7 * per_row[1::2].mean().item(), rel=1e-6)
