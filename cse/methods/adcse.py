"""AdCSE (Li et al., "AdCSE: An Adversarial Method for Contrastive Learning of Sentence Embeddings",
DASFAA 2022): an untied dual encoder whose second encoder follows the first by momentum, and a bank
of negative adversaries trained by gradient ascent on the contrastive loss (the loss itself is
:class:`cse.losses.adcse.AdversarialInfoNCELoss`).

One optimizer step of :class:`AdCSETrainer` is, for encoder q (theta_q), momentum encoder p
(theta_p) and adversaries theta_n:

    theta_q <- theta_q - alpha_q * dL/dtheta_q          (Eq. 6; the Trainer's AdamW, lr 3e-5)
    theta_n <- theta_n + alpha_n * dL/dtheta_n          (Eq. 7; SGD, lr 3e-3, momentum 0.9)
    theta_p <- m * theta_p + (1 - m) * theta_q          (Eq. 4; m = 0.995, after q's update)

Both gradients come from the same forward pass. ``variant="released"`` (the default) follows the
authors' code, which produced the published tables: in-batch negatives in the loss, one shared
linear+tanh head applied to both encoders' [CLS], and weight decay 1e-4 on the adversaries.
``variant="paper"`` follows the text: Eq. 5 as printed, and p with its own head g_p, part of theta_p.
Two accidents of that code are not reproduced: its p starts from random weights (the copy is taken
before the pretrained weights are loaded) and its token-type ids are the attention mask; here p
starts as an exact copy of the pretrained q and token types are zero.
"""

from __future__ import annotations

import copy
import logging
import os
from dataclasses import dataclass, field, fields

import torch
import torch.distributed as dist
from safetensors.torch import load_file, save_file
from transformers import TrainerCallback

from .. import citations
from ..composition import Part
from ..distributed import world_size
from ..errors import CSEUsageError
from ..losses import InfoNCELoss
from ..losses.adcse import LOSS_FORMS, AdversarialInfoNCELoss
from ..modeling import CSEModel
from ..pipeline import load_encoder
from ..ranges import RANGE, Range, at_least, check_fields, non_negative, positive, probability
from ..registry import BenchShape, MethodRecord, register
from ..resume import resolve_checkpoint
from ..trainer import CSETrainer

logger = logging.getLogger(__name__)

ADVERSARY_STATE_NAME = "adcse_adversaries.safetensors"
MOMENTUM_MASTER_NAME = "adcse_momentum_master.safetensors"


@dataclass
class AdCSEArguments:
    variant: str = field(
        default="released",
        metadata={
            "help": "released: the authors' code (in-batch negatives in the loss, shared head, adversary weight "
            "decay 1e-4), which produced the paper's tables; paper: Eq. 5 as printed, p with its own head.",
            "choices": list(LOSS_FORMS),
        },
    )
    num_adversaries: int = field(
        default=64,
        metadata={
            "help": "M, the number of negative adversaries.",
            RANGE: at_least(1, hint="M >= 1 adversaries (the paper: 64), or --no_adversaries for none"),
        },
    )
    momentum: float = field(
        default=0.995, metadata={"help": "m in Eq. 4, the momentum of encoder p.", RANGE: probability}
    )
    adversary_learning_rate: float = field(default=3e-3, metadata={"help": "alpha_n in Eq. 7.", RANGE: non_negative})
    adversary_momentum: float = field(
        default=0.9, metadata={"help": "SGD momentum of the adversaries.", RANGE: Range(0, 1, high_open=True)}
    )
    adversary_weight_decay: float | None = field(
        default=None,
        metadata={
            "help": "Weight decay of the adversaries; default 1e-4 (released) or 0 (paper).",
            RANGE: non_negative,
        },
    )
    adversary_temperature: float | None = field(
        default=None,
        metadata={
            "help": "Temperature of the adversaries' gradient (the released code's mem_t); default 0.05 (released) "
            "or tau (paper).",
            RANGE: positive,
        },
    )
    adversaries: bool = field(
        default=True, metadata={"help": "Use negative adversaries (--no_adversaries: Table 2 ablation)."}
    )
    untied_dual_encoder: bool = field(
        default=True,
        metadata={
            "help": "Encode the positive with momentum encoder p (--no_untied_dual_encoder: one shared encoder "
            "with dropout positives, Table 2 ablation)."
        },
    )

    def __post_init__(self):
        check_fields(self)
        if self.variant not in LOSS_FORMS:
            raise ValueError(f"--variant must be one of {', '.join(LOSS_FORMS)}, got {self.variant!r}")
        if not self.adversaries and (self.adversary_weight_decay, self.adversary_temperature) != (None, None):
            raise ValueError("--adversary_weight_decay/--adversary_temperature set, but --no_adversaries")
        if self.adversary_weight_decay is None:
            self.adversary_weight_decay = 1e-4 if self.variant == "released" else 0.0
        if self.adversary_temperature is None and self.variant == "released":
            self.adversary_temperature = 0.05
        unused = {
            "adversaries": ("num_adversaries", "adversary_learning_rate", "adversary_momentum"),
            "untied_dual_encoder": ("momentum",),
        }
        defaults = {f.name: f.default for f in fields(self)}
        for switch, names in unused.items():
            changed = [name for name in names if getattr(self, name) != defaults[name]]
            if not getattr(self, switch) and changed:
                raise ValueError(f"--{', --'.join(changed)} set, but --no_{switch} leaves nothing for it to act on")


class MomentumDualEncoder(CSEModel):
    """Encoder q (``backbone``, trained by gradient) and encoder p (``momentum_backbone``, following
    q by Eq. 4). The training forward encodes view 0 with q and view 1 with p, without gradient; the
    embedding forward, ``encode`` and ``save_pretrained`` are q's alone.

    Args (besides those of :class:`CSEModel`, or of the encoder class it is combined with: see
    :class:`cse.methods.sarcse.MomentumSARCSEModel`):
        momentum: m in Eq. 4.
        shared_head: apply q's head to p's [CLS] (the released code) instead of p's own momentum
            copy of it (the paper's g_p). Only meaningful with the ``cls`` pooler.
    """

    def __init__(self, *args, momentum: float = 0.995, shared_head: bool = True, **kwargs):
        super().__init__(*args, **kwargs)
        self.momentum = momentum
        self.shared_head = shared_head and self.pooler_type == "cls"
        self.momentum_backbone = copy.deepcopy(self.backbone).requires_grad_(False)
        if self.shared_head:
            self.momentum_backbone.pooler = None  # p's [CLS] goes through q's head instead
        self._parameter_cache = None

    @classmethod
    def from_encoder(cls, encoder: CSEModel, momentum: float = 0.995, shared_head: bool = True):
        """Pair ``encoder`` (as q, weights shared, not copied) with a momentum copy of it as p. A
        backbone and pooler only: an encoder with more to its embedding (a subclass of
        :class:`CSEModel`) is refused rather than stripped."""
        if type(encoder) is not CSEModel:
            raise TypeError(
                f"{type(encoder).__name__} is more than a backbone and a pooler, which is all this momentum encoder "
                "would keep: pair it by its own class (a SARCSEModel: cse.methods.sarcse.MomentumSARCSEModel)"
            )
        return cls(
            encoder.backbone,
            encoder.tokenizer,
            pooler_type=encoder.pooler_type,
            mlp_only_train=encoder.mlp_only_train,
            momentum=momentum,
            shared_head=shared_head,
        )

    def _parameter_lists(self) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """([theta_p], [theta_q]), matched by name. Built once: moving or loading the module keeps its
        parameter objects, and walking the modules of two encoders costs a millisecond a step."""
        if self._parameter_cache is None:
            q = dict(self.backbone.named_parameters())
            p = list(self.momentum_backbone.named_parameters())
            self._parameter_cache = ([t for _, t in p], [q[name] for name, _ in p])
        return self._parameter_cache

    @torch.no_grad()
    def copy_to_momentum_encoder(self) -> None:
        """theta_p <- theta_q (step 0: p is an exact copy of q)."""
        torch._foreach_copy_(*self._parameter_lists())

    def reset_head(self) -> None:
        super().reset_head()
        self.copy_to_momentum_encoder()

    @torch.no_grad()
    def momentum_update(self) -> None:
        """Eq. 4: theta_p <- m * theta_p + (1 - m) * theta_q, as two multi-tensor kernels over all
        parameters (the same two roundings per element as ``p.mul_(m).add_(q, alpha=1 - m)``)."""
        p, q = self._parameter_lists()
        torch._foreach_mul_(p, self.momentum)
        torch._foreach_add_(p, q, alpha=1.0 - self.momentum)

    def forward(self, input_ids, attention_mask, token_type_ids=None) -> torch.Tensor:
        """``(batch, 2, length)`` -> ``(batch, 2, hidden)``: h_i from q, h_i+ from p."""
        view = lambda t, v: None if t is None else t[:, v]  # noqa: E731
        anchors = self._pooled(self.pooler_type, view(input_ids, 0), view(attention_mask, 0), view(token_type_ids, 0))
        positive_view = (view(input_ids, 1), view(attention_mask, 1), view(token_type_ids, 1))
        with torch.no_grad():
            if self.shared_head:
                cls = self._pooled("cls_before_pooler", *positive_view, backbone=self.momentum_backbone)
                # The head reads position 0 of a sequence of hidden states.
                positives = self.backbone.pooler(cls[:, None])
            else:
                positives = self._pooled(self.pooler_type, *positive_view, backbone=self.momentum_backbone)
        return torch.stack([anchors, positives], dim=1)


class AdCSETrainer(CSETrainer):
    """``CSETrainer`` that, once per optimizer step (after gradient accumulation, whatever the number
    of micro-batches), takes the adversaries' ascent step and then the momentum update of p
    (:meth:`after_optimizer_step`).

    The adversaries live in the loss, outside the model: the Trainer's optimizer, gradient clipping,
    loss scaling, DDP and DeepSpeed never see them. Their gradient is unscaled here (fp16: the
    scale of the step's backward, read at its start, because DeepSpeed updates its scale inside
    the backward of the step's last micro-batch), averaged over processes and fed to
    ``SGD(maximize=True)``, whose weight decay is added to the negated gradient as the released code
    does. p has no gradient, so it is outside the optimizer too.

    Under DeepSpeed with bf16 or fp16, the engine casts the whole model, p included, to 16 bits, where
    Eq. 4 with m = 0.995 would round most of each update away (bf16 keeps 8 significant bits). p
    then has an fp32 master copy here, updated from q's fp32 master weights in the optimizer
    (gathered from the ZeRO-2 partitions, one all-reduce per weight tensor of q each step) and
    copied into the 16-bit p for its forward. ZeRO-3 (p and q partitioned) and FSDP are refused.

    Every checkpoint holds p (in the model's weights; its fp32 master, if any, in
    ``adcse_momentum_master.safetensors``) and the adversaries with their SGD momentum (in
    ``adcse_adversaries.safetensors``); ``train(resume_from_checkpoint=...)`` restores all of them,
    and refuses a checkpoint of another model layout or number of adversaries.

    Args (besides ``CSETrainer``'s): the adversaries' ``adversary_learning_rate``,
    ``adversary_momentum`` and ``adversary_weight_decay``.
    """

    citation = citations.ADCSE

    def __init__(
        self,
        *args,
        adversary_learning_rate: float = 3e-3,
        adversary_momentum: float = 0.9,
        adversary_weight_decay: float = 1e-4,
        **kwargs,
    ):
        super().__init__(*args, **kwargs)
        self.refuse_sharding(
            "AdCSE", "the momentum update of p (Eq. 4) reads and writes whole weights outside the optimizer"
        )
        self.loss_fn.to(self.args.device)
        self.momentum_master: dict[str, torch.Tensor] | None = None
        self._saved_momentum_master: dict[str, torch.Tensor] | None = None
        self._resuming = False
        self._step_loss_scale = 1.0
        self.adversaries = getattr(self.loss_fn, "adversaries", None)
        self.adversary_optimizer = None
        if self.adversaries is not None:
            self.adversary_optimizer = torch.optim.SGD(
                [self.adversaries],
                lr=adversary_learning_rate,
                momentum=adversary_momentum,
                weight_decay=adversary_weight_decay,
                maximize=True,
                foreach=True,
            )
            if world_size() > 1:
                # Seeded alike on every process; made bit-identical so that they stay so.
                dist.broadcast(self.adversaries.data, src=0)
        self.add_callback(_AfterOptimizerStep(self))

    def checkpoint_files(self) -> tuple[str, ...]:
        files = () if self.adversaries is None else (ADVERSARY_STATE_NAME,)
        # p is cast to 16 bits only by DeepSpeed's engine; then its fp32 master is saved (prepare_momentum_master)
        if self.dual_encoder is not None and self.is_deepspeed_enabled and (self.args.bf16 or self.args.fp16):
            files += (MOMENTUM_MASTER_NAME,)
        return files

    @property
    def dual_encoder(self) -> MomentumDualEncoder | None:
        model = self.accelerator.unwrap_model(self.model)
        return model if isinstance(model, MomentumDualEncoder) else None

    def loss_scale(self) -> float:
        """The factor by which the backward multiplies every gradient (fp16's dynamic loss scale)."""
        if self.is_deepspeed_enabled:
            engine = self.model_wrapped
            return float(engine.optimizer.loss_scale) if engine.fp16_enabled() else 1.0
        scaler = self.accelerator.scaler
        return scaler.get_scale() if scaler is not None and scaler.is_enabled() else 1.0

    def after_optimizer_step(self) -> None:
        """AdCSE's step, right after the Trainer's optimizer has updated q (Eq. 6): the adversaries'
        ascent on the same backward's gradient (Eq. 7), then p's momentum update from the new q
        (Eq. 4, which reads q after its step). Neither is the Trainer's optimizer's business: the
        adversaries ascend where q descends, and p has no gradient.

        After an fp16 overflow the scaler skipped q's step, so the adversaries and p stay too."""
        adversaries = self.adversaries
        if self.accelerator.optimizer_step_was_skipped:
            if adversaries is not None:
                self.adversary_optimizer.zero_grad(set_to_none=True)
            return
        if adversaries is not None:
            grad = adversaries.grad
            if grad is None:
                raise RuntimeError("the adversaries received no gradient: the loss does not use them")
            # The backward scaled the gradient by fp16's loss scale, and no DDP or DeepSpeed hook saw
            # it: unscale it and average it over the processes here.
            if self._step_loss_scale != 1.0:
                grad.div_(self._step_loss_scale)
            if world_size() > 1:
                dist.all_reduce(grad)
                grad.div_(world_size())
            self.adversary_optimizer.step()
            self.adversary_optimizer.zero_grad(set_to_none=True)
        if self.momentum_master is not None:
            master_momentum_update(self.dual_encoder, self.momentum_master, self.is_deepspeed_enabled)
        elif self.dual_encoder is not None:
            self.dual_encoder.momentum_update()

    def adversary_state(self) -> dict[str, torch.Tensor]:
        state = {"adversaries": self.adversaries.detach()}
        buffer = self.adversary_optimizer.state.get(self.adversaries, {}).get("momentum_buffer")
        if buffer is not None:
            state["momentum_buffer"] = buffer
        return {name: tensor.contiguous().cpu() for name, tensor in state.items()}

    def load_adversary_state(self, checkpoint: str) -> None:
        path = os.path.join(checkpoint, ADVERSARY_STATE_NAME)
        if not os.path.isfile(path):
            raise FileNotFoundError(
                f"{path} is missing: {checkpoint} does not hold the adversaries' state, so resuming would restart "
                "them from scratch"
            )
        # read on the CPU: safetensors refuses device names such as DeepSpeed's "cpu:0"
        state = {name: t.to(self.args.device) for name, t in load_file(path).items()}
        if state["adversaries"].shape != self.adversaries.shape:
            raise CSEUsageError(
                f"{path} holds {tuple(state['adversaries'].shape)} adversaries, this run "
                f"{tuple(self.adversaries.shape)} (M x d): resume with the checkpoint's --num_adversaries"
            )
        with torch.no_grad():
            self.adversaries.copy_(state["adversaries"])
        if "momentum_buffer" in state:
            self.adversary_optimizer.state[self.adversaries]["momentum_buffer"] = state["momentum_buffer"]
        logger.info("adversaries and their optimizer state restored from %s", path)

    def prepare_momentum_master(self) -> None:
        """Once the model is wrapped (and cast, and a checkpoint loaded): p's fp32 master where p is
        in 16 bits (:func:`momentum_master`)."""
        encoder, saved = self.dual_encoder, self._saved_momentum_master
        self._saved_momentum_master = None
        self.momentum_master = None if encoder is None else momentum_master(encoder, saved, self._resuming)

    def train(self, resume_from_checkpoint=None, **kwargs):
        resume_from_checkpoint = resolve_checkpoint(self, resume_from_checkpoint)
        self._resuming = bool(resume_from_checkpoint)
        if resume_from_checkpoint and self.adversaries is not None:
            self.load_adversary_state(resume_from_checkpoint)
        master = os.path.join(resume_from_checkpoint or "", MOMENTUM_MASTER_NAME)
        if resume_from_checkpoint and self.dual_encoder is not None and os.path.isfile(master):
            prefix = "momentum_backbone."
            self._saved_momentum_master = {
                name.removeprefix(prefix): t.to(self.args.device) for name, t in load_file(master).items()
            }
        return super().train(resume_from_checkpoint=resume_from_checkpoint, **kwargs)

    def save_model(self, output_dir: str | None = None, _internal_call: bool = False):
        super().save_model(output_dir, _internal_call=_internal_call)
        # A checkpoint's model is saved first, before its optimizer and Trainer state: writing the
        # adversaries here, not after the checkpoint (on_save), leaves no complete-looking
        # checkpoint without them.
        output_dir = output_dir or self.args.output_dir
        if self.adversaries is not None and self.args.should_save:
            save_file(self.adversary_state(), os.path.join(output_dir, ADVERSARY_STATE_NAME))
        if self.momentum_master is not None and self.args.should_save:
            master = {f"momentum_backbone.{name}": t.contiguous().cpu() for name, t in self.momentum_master.items()}
            save_file(master, os.path.join(output_dir, MOMENTUM_MASTER_NAME))


def momentum_master(encoder: MomentumDualEncoder, saved: dict | None, resuming: bool) -> dict | None:
    """p's fp32 master weights where DeepSpeed's engine has cast p to 16 bits (restored from the
    checkpoint's ``saved`` when resuming, else p's own weights), copied into p; ``None`` for fp32 p,
    which then takes the checkpoint's master if there is one (it is p, exactly, where the
    checkpoint's p was rounded)."""
    p = dict(encoder.momentum_backbone.named_parameters())
    if saved is not None and saved.keys() != p.keys():
        raise ValueError(f"{MOMENTUM_MASTER_NAME} does not hold this model's encoder p")
    if all(t.dtype == torch.float32 for t in p.values()):
        if saved is not None:
            with torch.no_grad():
                for name, t in p.items():
                    t.copy_(saved[name])
        return None
    if saved is None and resuming:
        raise FileNotFoundError(
            f"the checkpoint lacks {MOMENTUM_MASTER_NAME}: its p was saved without an fp32 master, so resuming "
            "in 16 bits would continue from a rounded p; resume with the precision it was saved with"
        )
    if saved is None:  # a fresh start: p is still q's (16-bit) copy, as is q's fp32 master
        saved = {name: t.detach().float().clone() for name, t in p.items()}
    with torch.no_grad():
        for name, t in p.items():
            t.copy_(saved[name])
    logger.info("momentum encoder p is %s: Eq. 4 runs on an fp32 master copy", next(iter(p.values())).dtype)
    return saved


@torch.no_grad()
def master_momentum_update(encoder: MomentumDualEncoder, master: dict, deepspeed: bool) -> None:
    """Eq. 4 on p's fp32 ``master``, from q's fp32 weights (the optimizer's master under DeepSpeed),
    copied into the 16-bit p."""
    m, q = encoder.momentum, dict(encoder.backbone.named_parameters())
    if deepspeed:
        from deepspeed.utils import safe_get_full_fp32_param
    for name, p in encoder.momentum_backbone.named_parameters():
        q_fp32 = safe_get_full_fp32_param(q[name]) if deepspeed else None
        q_fp32 = q[name].float() if q_fp32 is None else q_fp32
        master[name].mul_(m).add_(q_fp32.to(master[name].device), alpha=1.0 - m)
        p.copy_(master[name])


class _AfterOptimizerStep(TrainerCallback):
    """Runs :meth:`AdCSETrainer.after_optimizer_step` at the Trainer's optimizer-step event, the
    public hook after ``optimizer.step()``."""

    def __init__(self, trainer: AdCSETrainer):
        self.trainer = trainer

    def on_train_begin(self, args, state, control, **kwargs):
        self.trainer.prepare_momentum_master()

    def on_step_begin(self, args, state, control, **kwargs):
        # Read before the step's backwards: the fp16 scale changes only at the optimizer step, which
        # DeepSpeed takes inside the last micro-batch's backward.
        self.trainer._step_loss_scale = self.trainer.loss_scale()

    def on_optimizer_step(self, args, state, control, **kwargs):
        self.trainer.after_optimizer_step()


def momentum_encoder(model, model_args, adcse_args: AdCSEArguments):
    """The model with momentum encoder p for the positives (``--untied_dual_encoder``, the default): a
    :class:`MomentumDualEncoder`, or the momentum class an encoder with more to its embedding names
    (``momentum_class``: SARCSE's :class:`~cse.methods.sarcse.MomentumSARCSEModel`, whose shared
    head is its autoencoder)."""
    if not adcse_args.untied_dual_encoder:
        return model
    paired = getattr(model, "momentum_class", None)
    if paired is not None:
        if adcse_args.variant == "paper":
            raise CSEUsageError(
                f"--adcse_variant paper gives p its own head, and {type(model).__name__}'s head is shared by q and p"
            )
        return paired.from_encoder(model, momentum=adcse_args.momentum)
    shared_head = adcse_args.variant == "released"
    return MomentumDualEncoder.from_encoder(model, momentum=adcse_args.momentum, shared_head=shared_head)


def adversarial_loss(loss, model, model_args, adcse_args: AdCSEArguments):
    """``loss`` with the negative adversaries' columns (Eq. 5): InfoNCE's, or those of the softmax
    another part made (``base``: MixCSE's); ``loss`` itself with ``--no_adversaries`` (in-batch
    negatives only, whichever the variant: Eq. 5 without adversaries has no negatives)."""
    if not adcse_args.adversaries:
        return loss
    return AdversarialInfoNCELoss(
        model.embedding_size,
        adcse_args.num_adversaries,
        model_args.temp,
        form=adcse_args.variant,
        adversary_temperature=adcse_args.adversary_temperature,
        base=None if type(loss) is InfoNCELoss else loss,
    )


def paper_variant_conflict(adcse_args: AdCSEArguments, others: list) -> str | None:
    """Why ``--adcse_variant paper`` does not combine with the other parts (their records), if it does
    not: its Eq. 5 has no in-batch negatives, which a replaced softmax's columns are (MixCSE's
    mixtures), and its p has a head of its own, where a replaced embedding is shared by q and p
    (SARCSE's autoencoder)."""
    if adcse_args.variant != "paper":
        return None
    for other in others:
        if "softmax" in other.part.replaces and adcse_args.adversaries:
            return (
                f"--adcse_variant paper has no in-batch negatives, and {other.display_name}'s softmax "
                "is over in-batch ones: use released"
            )
        if "embedding" in other.part.replaces and adcse_args.untied_dual_encoder:
            return (
                f"--adcse_variant paper gives p its own head, and {other.display_name}'s embedding is shared "
                "by q and p: use released"
            )
    return None


def trainer_kwargs(model, model_args, adcse_args: AdCSEArguments) -> dict:
    return {
        "adversary_learning_rate": adcse_args.adversary_learning_rate,
        "adversary_momentum": adcse_args.adversary_momentum,
        "adversary_weight_decay": adcse_args.adversary_weight_decay,
    }


def build(model_args, adcse_args: AdCSEArguments):
    """AdCSE's model and loss as ``run_adcse.py`` trains them: ``(model, loss, trainer_class, trainer_kwargs)``."""
    model = momentum_encoder(load_encoder(model_args), model_args, adcse_args)
    if model.pooler_type == "cls":
        model.reset_head()
    loss = adversarial_loss(InfoNCELoss(temperature=model_args.temp), model, model_args, adcse_args)
    return model, loss, AdCSETrainer, trainer_kwargs(model, model_args, adcse_args)


RECORD = register(
    MethodRecord(
        name="adcse",
        display_name="AdCSE",
        citation=citations.ADCSE,
        build=build,
        docs="docs/methods/adcse.md",
        method_arguments=AdCSEArguments,
        bench={"adcse": BenchShape("run_adcse", "configs/adcse_bert_base.yaml", "bert", overhead_target=1.5)},
        # at the paper's m = 0.995 p would barely leave q's initial weights within a few steps
        tiny_args=("--num_adversaries", "8", "--momentum", "0.9"),
        part=Part(
            trainer=AdCSETrainer,
            equation="h_i+ from momentum encoder p, theta_p <- m theta_p + (1 - m) theta_q after each step (Eq. 4), "
            "and M learnable adversaries n_j as extra columns e^{s(h_i, n_j)/tau} of the softmax (Eq. 5, the "
            "released form's in-batch negatives kept), ascending the loss that q descends (Eqs. 6-7; "
            "Li et al. 2022)",
            replaces=frozenset({"positives"}),
            wrap=momentum_encoder,
            loss=adversarial_loss,
            trainer_kwargs=trainer_kwargs,
            notes={
                "softmax": "One softmax: each row's columns are the batch's positives, the replaced softmax's "
                "columns (MixCSE's mixed negatives) and AdCSE's M adversaries (cos(row anchor, n_j)/tau; "
                "`AdversarialInfoNCELoss(base=MixCSELoss(...))`, AdCSE's released form only); the positives "
                "come from p."
            },
            conflict=paper_variant_conflict,
            order=2,
        ),
    )
)
