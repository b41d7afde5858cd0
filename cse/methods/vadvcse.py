"""V-advCSE (Ko, "V-advCSE: Virtual Adversarial Contrastive Learning for Sentence Embeddings"):
unsupervised SimCSE plus a virtual adversarial term, L = L_cont + lambda * L_vadv (Eq. 10), and an
MLP head with batch normalisation on [CLS].

What the paper leaves open, and our reading (docs/methods/vadvcse.md):

* **x + r**: r perturbs the input word embeddings (the word-embedding layer's output, before the
  position and token-type embeddings are added and normalised), one r per token of each anchor
  sentence, zero on padding; the ball ||r_i|| <= eps is per sentence. r enters through a forward
  hook on the word-embedding layer, so the model still receives ``input_ids`` and computes its
  position ids exactly as in the clean forward (RoBERTa's depend on the padding).
* **p(y|x)**: without labels, the prediction is the contrastive one, the anchor's softmax over the
  in-batch candidates: p(j|x_i) = softmax_j(sim(h_i, h_j+)/tau) (the logits of L_cont, Eq. 7). The
  clean prediction is that of the contrastive forward itself, detached (theta_hat: a constant);
  the perturbed one re-encodes the anchors with x_i + r_i (a fresh dropout mask, as any training
  forward, as in SMART's code) against the same candidates h_j+, which keep their
  gradient (they are the "classes" of this prediction, computed by theta). ``shared_dropout``
  instead re-encodes the clean anchors too and runs it and every perturbed forward under one
  dropout draw, so that F measures r alone, not also the disagreement of two dropout masks (nor
  that of BN statistics over the 2N contrastive rows and over the N anchors).
* Under data parallelism the candidates, the clean logits and the perturbed anchors are gathered,
  so p is over the global batch and every process computes the same L (the repository's rule).
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass, field, fields

import torch
from torch import nn

from .. import citations
from ..distributed import all_gather_with_grad
from ..encoders.mlp_head import MLPHeadEncoder
from ..errors import CSEUsageError
from ..losses import cosine_logits
from ..losses.vadvcse import DIVERGENCES, NORMS, REDUCTIONS, SEARCH_OPTIONS, VirtualAdversarialLoss
from ..parts import Part, Step
from ..ranges import RANGE, at_least, check_choices, check_fields, non_negative, positive
from ..registry import BenchShape, MethodRecord, register

logger = logging.getLogger(__name__)

HEADS = ("mlp_bn", "mlp", "linear_tanh")


@dataclass
class VAdvCSEArguments:
    vadv_lambda: float = field(
        default=1e-6,
        metadata={"help": "lambda in Eq. 10, the weight of L_vadv (Table 6's best; 0: SimCSE).", RANGE: non_negative},
    )
    divergence: str = field(
        default="js",
        metadata={
            "help": "F: kl, symmetric_kl or js (Eqs. 11-14; js: the paper's best, Table 5).",
            "choices": DIVERGENCES,
        },
    )
    norm: str = field(
        default="linf", metadata={"help": "Norm of the ball and of the ascent step (SMART's linf).", "choices": NORMS}
    )
    sigma: float = field(
        default=1e-5, metadata={"help": "Std of the random start of r (SMART, Jiang et al. 2020).", RANGE: non_negative}
    )
    epsilon: float = field(default=1e-5, metadata={"help": "Radius of the ball ||r|| <= eps (SMART).", RANGE: positive})
    step_size: float = field(default=1e-3, metadata={"help": "eta, the ascent step (SMART).", RANGE: non_negative})
    num_steps: int = field(
        default=1, metadata={"help": "K, ascent iterations (1, after Miyato et al. 2018).", RANGE: at_least(1)}
    )
    normalize_gradient: bool = field(
        default=True,
        metadata={
            "help": "Step along the norm's steepest-ascent direction, g/||g||_2 or sign(g) (Eqs. 3-4); "
            "--no_normalize_gradient: eta times each example's own raw gradient, Algorithm 1 as printed."
        },
    )
    vadv_reduction: str = field(
        default="mean",
        metadata={
            "help": "L_vadv from F of the batch's anchors: mean (the per-example reading of Eq. 8) or sum (N times "
            "larger; the order of Sect. 5's L_vadv ~ 100 L_cont). docs/diagnostics.md measures both.",
            "choices": REDUCTIONS,
        },
    )
    shared_dropout: bool = field(
        default=False,
        metadata={
            "help": "Encode the clean and the perturbed anchors under the same dropout masks (one extra no-grad "
            "forward), so that L_vadv measures r alone; default: the perturbed forward draws its own, as in SMART's "
            "code."
        },
    )
    head: str = field(
        default="mlp_bn",
        metadata={
            "help": "Training head on [CLS]: mlp_bn (linear-BN-ReLU-linear, the paper's), mlp (the same without BN), "
            "linear_tanh (SimCSE's; Table 4 'w/o BatchNorm').",
            "choices": HEADS,
        },
    )

    def __post_init__(self):
        check_fields(self)
        check_choices(self)
        if self.vadv_lambda == 0:
            defaults = {f.name: f.default for f in fields(self)}
            search = (*SEARCH_OPTIONS, "vadv_reduction", "shared_dropout")
            changed = [name for name in search if getattr(self, name) != defaults[name]]
            if changed:
                raise ValueError(f"--{', --'.join(changed)} set, but --vadv_lambda 0 leaves no adversarial term")
        else:
            VirtualAdversarialLoss(**self.search_options())  # refuses bad values now, not at the first step

    def search_options(self) -> dict:
        """The :class:`VirtualAdversarialLoss` these arguments describe, as its keyword arguments."""
        return {**{name: getattr(self, name) for name in SEARCH_OPTIONS}, "reduction": self.vadv_reduction}


class _WordEmbeddingPerturbation:
    """A forward hook adding ``r`` to a word-embedding layer's output while ``r`` is set. It stays
    registered: registering and removing a hook around every perturbed forward would be a graph break
    under ``torch.compile`` (each registration mutates a class-wide counter)."""

    def __init__(self):
        self.r: torch.Tensor | None = None

    def __call__(self, module, args, output):
        if self.r is None:
            return output
        if output.shape != self.r.shape:
            raise ValueError(
                f"perturbation of shape {tuple(self.r.shape)} for word embeddings of {tuple(output.shape)}"
            )
        return output + self.r.to(output.dtype)


def word_embedding_perturbation(backbone: nn.Module) -> _WordEmbeddingPerturbation:
    """The backbone's perturbation hook, registered on its word-embedding layer at the first call."""
    layer = backbone.get_input_embeddings()
    hook = getattr(layer, "_cse_perturbation", None)
    if hook is None:
        hook = layer._cse_perturbation = _WordEmbeddingPerturbation()
        layer.register_forward_hook(hook)
    return hook


@contextlib.contextmanager
def perturbed_word_embeddings(backbone: nn.Module, r: torch.Tensor):
    """Within the block, the backbone's word-embedding layer outputs ``embedding + r``."""
    hook = word_embedding_perturbation(backbone)
    hook.r = r
    try:
        yield
    finally:
        hook.r = None


def replaying_rng(device: torch.device):
    """A context manager factory: every block it opens restarts from the RNG state of this call (the
    CPU's, and ``device``'s if a GPU) and leaves the RNG outside it as it was, so that a forward in
    such a block draws the dropout masks of the same forward run right after this call."""
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"shared dropout masks replay the CPU's and CUDA's RNG only, not {device.type}'s")
    gpu = [device] if device.type == "cuda" else []
    cpu_state = torch.get_rng_state()
    gpu_states = [torch.cuda.get_rng_state(d) for d in gpu]

    @contextlib.contextmanager
    def replay():
        with torch.random.fork_rng(devices=gpu):
            torch.set_rng_state(cpu_state)
            for d, state in zip(gpu, gpu_states):
                torch.cuda.set_rng_state(state, d)
            yield

    return replay


def vadv_term(
    step: Step,
    temperature: float,
    vadv_loss,
    vadv_lambda: float,
    noise=None,
    shared_dropout: bool = False,
) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """``({"vadv": lambda L_vadv}, statistics)`` of the step's batch (no term if ``vadv_loss`` is None).

    The contrastive forward is the step's (``step.model``'s: under DDP the wrapped model, whose
    backward syncs the gradients); ``step.encoder`` (the unwrapped model) runs the perturbed forwards,
    whose gradients join the same backward; ``temperature``: the contrastive logits'. ``noise``: the
    standard normal draw of r's random start (default: drawn here, shaped like the anchors' word
    embeddings). ``shared_dropout``: the clean prediction comes from its own no-grad forward of the
    anchors, under the dropout masks of every perturbed forward (default: it is the contrastive
    forward's, and each perturbed forward draws its own masks). (Under ``torch.compile`` the search's
    ``torch.autograd.grad`` splits the compiled step around it, tests/test_compile.py.)"""
    encoder, inputs = step.encoder, step.inputs
    views = step.outputs["embeddings"]
    anchors, positives = views[:, 0], views[:, 1]
    loss_cont = step.terms["contrastive"]
    stats = {"loss_contrastive": loss_cont.detach()}
    if vadv_loss is None:
        return {}, stats
    candidates = all_gather_with_grad(positives)
    anchor_inputs = {k: v[:, :1] for k, v in inputs.items()}
    mask = inputs["attention_mask"][:, 0]
    dropout = replaying_rng(mask.device) if shared_dropout else contextlib.nullcontext
    if shared_dropout:
        # outside the replay, so that these masks are consumed from the RNG stream and the noise of
        # r's random start, drawn next, does not reuse them
        with torch.no_grad():
            anchors = encoder(**anchor_inputs)["embeddings"][:, 0]
    clean_logits = cosine_logits(all_gather_with_grad(anchors.detach()), candidates.detach(), temperature)

    def perturbed_logits(r):
        with perturbed_word_embeddings(encoder.backbone, r), dropout():
            perturbed = encoder(**anchor_inputs)["embeddings"][:, 0]
        return cosine_logits(all_gather_with_grad(perturbed), candidates, temperature)

    if noise is None:
        width = encoder.backbone.get_input_embeddings().embedding_dim
        noise = torch.randn(*mask.shape, width, device=mask.device)
    r, loss_vadv = vadv_loss(clean_logits, perturbed_logits, noise, mask)
    stats.update(loss_vadv=loss_vadv.detach(), perturbation_norm=r.flatten(1).norm(dim=1).mean())
    return {"vadv": vadv_lambda * loss_vadv.to(loss_cont.dtype)}, stats


class VAdvCSE(Part):
    """V-advCSE's part: lambda * L_vadv (:func:`vadv_term`) added to the loss, and its MLP-BN training
    head on [CLS] (``--head``). All of V-advCSE's state is the model's (encoder, head, BN
    statistics), so checkpoints and resumption are the Trainer's; r is drawn afresh each step from
    the torch RNG, which checkpoints restore."""

    name = "vadvcse"
    display_name = "V-advCSE"
    citation = citations.VADVCSE
    docs = "docs/methods/vadvcse.md"
    equation = (
        "+ lambda L_vadv (Eq. 10): F between the anchor's softmax over the batch's positives, p(j|x_i) = "
        "softmax_j(s(h_i, h_j+)/tau), and the same with x_i's word embeddings perturbed by the r_i that maximises F "
        "in the ball ||r_i|| <= eps (Ko, undated); with an MLP-BN training head on [CLS]"
    )
    Flags = VAdvCSEArguments
    needs = frozenset({"token_inputs"})  # r is one vector per token of the anchors' input_ids
    refuses = {
        "positives": "another encoder of the positives (AdCSE's momentum encoder) would need a copy of V-advCSE's "
        "BatchNorm head, and its positives, encoded without gradient, would be the perturbed prediction's fixed "
        "classes: neither paper defines it"
    }
    notes = {
        "softmax": "V-advCSE's p(j|x_i) is the softmax over the batch's positives without the columns the other part "
        "adds (MixCSE's mixed column: the mixed negative is built from the anchor's own positive behind a "
        "stop-gradient, a per-anchor decoy rather than a class of the prediction, so including it would make p depend "
        "on lambda and put x_i's own positive in two classes).",
        "embedding": "The perturbed forward re-encodes the anchors through the replaced embedding (p is over that "
        "embedding); only the two-view forward's outputs reach the other part's terms (the perturbed one's are the "
        "anchors' embeddings alone), and V-advCSE's `--head` does not apply.",
    }

    def __init__(self, args=None, model_args=None):
        super().__init__(args, model_args)
        lam = self.args.vadv_lambda
        self.vadv_loss = VirtualAdversarialLoss(**self.args.search_options()) if lam else None
        self.shared_dropout = self.args.shared_dropout
        self.temperature = None  # the contrastive logits', the loss's (setup)

    def wrap(self, model, replaced):
        """The model with V-advCSE's training head on [CLS] (``--head``; linear_tanh: SimCSE's, left to
        the build's ``reset_head``). Where another part replaced the embedding (SARCSE's Z), there is no
        [CLS] head to replace: the model is kept, and a ``--head`` other than the default is refused."""
        head = self.args.head
        if head == "linear_tanh":
            return model
        if "embedding" in replaced:
            if head != "mlp_bn":
                raise CSEUsageError(f"--head {head} replaces the [CLS] head, and this run's embedding has none")
            logger.info("V-advCSE's head: none, the embedding (pooler %s) is another part's", model.pooler_type)
            return model
        return MLPHeadEncoder.from_encoder(model, batch_norm=head == "mlp_bn")

    def setup(self, trainer) -> None:
        # ZeRO-3 gathers weights in hooks on every submodule, so the unwrapped model's forwards work too.
        trainer.refuse_sharding("V-advCSE", "the perturbed forwards run the unwrapped model, outside FSDP", zero3=False)
        self.temperature = trainer.loss_fn.temperature
        if self.vadv_loss is not None:
            if any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in trainer.model.modules()):
                refuse_one_sentence_batches(trainer)
            # now, outside the training step that torch.compile may trace
            word_embedding_perturbation(trainer.model.backbone)
        logger.info(
            "virtual adversarial term: lambda %g, %s, %s dropout masks",
            self.args.vadv_lambda,
            self.vadv_loss.get_config_dict() if self.vadv_loss is not None else "off (SimCSE)",
            "shared" if self.shared_dropout else "independent",
        )

    def terms(self, step: Step):
        if not step.encoder.training:
            return {}, {}
        return vadv_term(
            step, self.temperature, self.vadv_loss, self.args.vadv_lambda, shared_dropout=self.shared_dropout
        )

    def term_weights(self) -> dict[str, float]:
        return {"vadv": self.args.vadv_lambda}

    def capture_problem(self) -> str | None:
        if self.shared_dropout and self.vadv_loss is not None:
            return "V-advCSE's --shared_dropout replays the dropout masks by reading and restoring the host's RNG state"
        return None

    def readings(self, trainer, model, inputs) -> dict[str, dict[str, float]]:
        """``vadv``: F (as L_vadv reduces it) with independent and with shared dropout masks, and the
        mean ||r_i|| (``python -m cse.diagnostics``; nothing without the adversarial term)."""
        out = {}
        if self.vadv_loss is None:
            return {}
        shared_dropout = self.shared_dropout
        try:
            for shared in (False, True):
                self.shared_dropout = shared
                stats = trainer.step_terms(model, inputs).statistics
                out["shared" if shared else "independent"] = stats["loss_vadv"].item()
                out["perturbation_norm"] = stats["perturbation_norm"].item()
        finally:
            self.shared_dropout = shared_dropout
        return {"vadv": out}


def refuse_one_sentence_batches(trainer) -> None:
    """The perturbed forward encodes a process's anchors alone, so a BatchNorm head in training mode
    fails on a batch of one sentence; say so now rather than at such a batch."""
    args = trainer.args
    batch = args.per_device_train_batch_size
    fix = "use --head mlp or linear_tanh, or a batch of at least 2 sentences per device"
    if batch < 2:
        raise CSEUsageError(f"the BatchNorm head cannot normalise the perturbed forward's single anchor: {fix}")
    n = len(trainer.train_dataset) if hasattr(trainer.train_dataset, "__len__") else None
    if n is None or args.world_size > 1 or args.dataloader_drop_last or n % batch != 1:
        return
    batches = args.max_steps * args.gradient_accumulation_steps if args.max_steps > 0 else n
    if batches >= -(-n // batch):  # the training reaches the epoch's last batch
        raise CSEUsageError(
            f"{n} training sentences in batches of {batch} leave a last batch of one sentence, which the "
            "BatchNorm head cannot normalise in the perturbed forward: use --dataloader_drop_last true"
        )


RECORD = register(
    MethodRecord(
        part=VAdvCSE,
        bench={
            "vadvcse": BenchShape(
                "run_vadvcse", "configs/vadvcse_bert_base.yaml", "bert", ("--num_steps", "1"), overhead_target=2.3
            )
        },
    )
)
