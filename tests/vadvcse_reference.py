"""V-advCSE references shared by test_vadvcse.py, test_diagnostics.py and vadvcse_ddp_worker.py: a
search that records what it found, Eq. 10 by hand in float64 with r fixed, and the objective with its
gradients on one batch."""

import torch
from transformers import AutoTokenizer

from cse.data import TwoViewCollator
from cse.encoders.mlp_head import MLPHeadEncoder
from cse.losses import InfoNCELoss
from cse.losses.vadvcse import VirtualAdversarialLoss
from cse.methods.vadvcse import vadv_term
from cse.modeling import CSEModel
from cse.parts import Step, total
from cse.trainer import base_terms

from .conftest import SENTENCES


def batch_of(model_dir, sentences=SENTENCES[:6]):
    tok = AutoTokenizer.from_pretrained(model_dir)
    return TwoViewCollator(tok)([dict(tok(s)) for s in sentences])


class RecordingSearch(VirtualAdversarialLoss):
    """Keeps the clean logits it was given and the r it found."""

    def forward(self, clean_logits, perturbed_logits, noise, mask=None):
        self.clean_logits = clean_logits
        self.r, loss = super().forward(clean_logits, perturbed_logits, noise, mask)
        return self.r, loss


def vadvcse_terms(
    model,
    encoder: CSEModel,
    inputs: dict,
    contrastive_loss,
    vadv_loss,
    vadv_lambda: float,
    noise=None,
    shared_dropout: bool = False,
):
    """The terms of Eq. 10, ``{"contrastive": L_cont, "vadv": lambda * L_vadv}`` (the second only if
    lambda > 0), for one batch of ``(batch, 2, length)`` inputs, as the step program of a run with
    V-advCSE's part alone computes them (:func:`cse.parts.base_terms`, then
    :func:`cse.methods.vadvcse.vadv_term`). Returns ``(terms, views, statistics)``; the arguments as
    ``vadv_term``'s."""
    outputs = model(**inputs)
    terms, statistics = base_terms(contrastive_loss, outputs)
    step = Step(model, encoder, inputs, outputs, terms, statistics)
    added, stats = vadv_term(
        step, contrastive_loss.temperature, vadv_loss if vadv_lambda else None, vadv_lambda, noise, shared_dropout
    )
    return {**terms, **added}, outputs["embeddings"], stats


def hand_objective(encoder, inputs, r, tau, lam, detach_clean=True):
    """Eq. 10 in float64 with r fixed: L_cont (Eq. 7) + lambda * mean_i JS(p_i, q_i) (Eqs. 13-14), p_i
    the clean softmax over the candidates h_j+, q_i the softmax of x_i + r_i. The perturbed anchors
    go through ``inputs_embeds`` (word embeddings + r), not through the hook."""
    backbone, ids, mask = encoder.backbone, inputs["input_ids"][:, 0], inputs["attention_mask"][:, 0]
    words = backbone.get_input_embeddings()(ids)
    cls = lambda embeds: backbone(inputs_embeds=embeds, attention_mask=mask).last_hidden_state[:, 0]  # noqa: E731
    n = ids.shape[0]
    clean = encoder.head(torch.cat([cls(words), cls(words)]))  # both views in one BN batch, as trained
    anchors, positives = clean[:n], clean[n:]
    perturbed = encoder.head(cls(words + r.double()))
    unit = lambda x: x / x.pow(2).sum(1, keepdim=True).sqrt()  # noqa: E731
    logits = unit(anchors) @ unit(positives).T / tau
    l_cont = -(logits.diagonal() - logits.exp().sum(1).log()).mean()
    p = logits.softmax(1)
    p = p.detach() if detach_clean else p
    q = (unit(perturbed) @ unit(positives).T / tau).softmax(1)
    m = (p + q) / 2
    js = 0.5 * (p * (p / m).log()).sum(1) + 0.5 * (q * (q / m).log()).sum(1)
    return l_cont + lam * js.mean()


def grads(model):
    return {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


# The step sizes of the ascent along the normalised and along the raw gradient (Algorithm 1 as printed):
# the raw gradient is small: eta = 100 moves r well inside the ball (norm 0.2-0.5 of 1), where a step twice
# as long shows.
DDP_STEP_SIZES = {"normalized": 1.0, "raw": 100.0}


def objective_and_gradients(model_dir, batch, wrap=lambda model: model, ascent="normalized"):
    """V-advCSE's loss on ``batch`` (``noise`` included) with the ``mlp`` head (BatchNorm's
    statistics are per process) through ``wrap(model)``, the ascent along the ``normalized`` or the
    ``raw`` gradient; its r and the parameters' gradients."""
    torch.manual_seed(0)
    encoder = MLPHeadEncoder.from_encoder(
        CSEModel.from_pretrained(model_dir, pooler_type="cls", mlp_only_train=True), batch_norm=False
    )
    inputs = {k: v for k, v in batch.items() if k != "noise"}
    search = RecordingSearch(
        "symmetric_kl",
        "l2",
        sigma=1e-2,
        epsilon=1.0,
        step_size=DDP_STEP_SIZES[ascent],
        normalize_gradient=ascent == "normalized",
    )
    model = wrap(encoder)  # held until after backward: DDP's gradient hooks die with it
    loss, _, _ = vadvcse_loss(model, encoder, inputs, InfoNCELoss(0.05), search, 1.0, noise=batch["noise"])
    loss.backward()
    return {"loss": loss.detach().reshape(1), "r": search.r.contiguous(), **grads(encoder)}


def vadvcse_loss(*args, **kwargs):
    """L = L_cont + lambda L_vadv (Eq. 10), the sum of :func:`vadvcse_terms`' terms:
    ``(L, views, statistics)``."""
    terms, views, stats = vadvcse_terms(*args, **kwargs)
    return total(terms), views, stats
