"""AdCSE (Li et al., "AdCSE: An Adversarial Method for Contrastive Learning of Sentence Embeddings",
DASFAA 2022): an untied dual encoder whose second encoder follows the first by momentum, and a bank
of negative adversaries trained by gradient ascent on the contrastive loss (the loss itself is
:class:`cse.losses.adcse.AdversarialInfoNCELoss`).

One optimizer step of a run with AdCSE's part (:class:`AdCSE`) is, for encoder q (theta_q), momentum
encoder p (theta_p) and adversaries theta_n:

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

import logging
from dataclasses import dataclass, field, fields

import torch
import torch.distributed as dist

from .. import citations
from ..distributed import world_size
from ..errors import CSEUsageError
from ..losses.adcse import LOSS_FORMS, AdversarialInfoNCELoss
from ..parts import Part
from ..ranges import RANGE, Range, at_least, check_choices, check_fields, non_negative, positive, probability
from ..registry import BenchShape, MethodRecord, register

logger = logging.getLogger(__name__)

# The state_dict keys of p's fp32 master weights (those of the model's p, under this prefix).
MOMENTUM_PREFIX = "momentum_backbone."


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
        check_choices(self)
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


class AdCSE(Part):
    """AdCSE's part: p, a momentum copy of the backbone, encodes the positives (it replaces the
    ``positives`` slot: :meth:`cse.modeling.CSEModel.attach_momentum_backbone`), and M adversaries add
    columns to the softmax (:class:`~cse.losses.adcse.AdversarialInfoNCELoss`, around the softmax of
    a part that replaces it). Once per optimizer step (after gradient accumulation, whatever the
    number of micro-batches) it takes the adversaries' ascent step and then the momentum update of
    p (:meth:`after_step`).

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

    Every checkpoint holds p (in the model's weights) and, in the parts' state (:meth:`state_dict`,
    :mod:`cse.parts_state`), the adversaries with their SGD momentum and p's fp32 master, if any; a
    resumed run restores all of them, and refuses a checkpoint of another model layout or number of
    adversaries.
    """

    name = "adcse"
    display_name = "AdCSE"
    citation = citations.ADCSE
    docs = "docs/methods/adcse.md"
    equation = (
        "h_i+ from momentum encoder p, theta_p <- m theta_p + (1 - m) theta_q after each step (Eq. 4), and M "
        "learnable adversaries n_j as extra columns e^{s(h_i, n_j)/tau} of the softmax (Eq. 5, the released "
        "form's in-batch negatives kept), ascending the loss that q descends (Eqs. 6-7; Li et al. 2022)"
    )
    Flags = AdCSEArguments
    replaces = frozenset({"positives"})
    notes = {
        "softmax": "One softmax: each row's columns are the batch's positives, the replaced softmax's columns "
        "(MixCSE's mixed negatives) and AdCSE's M adversaries (cos(row anchor, n_j)/tau; "
        "`AdversarialInfoNCELoss(base=MixCSELoss(...))`, AdCSE's released form only); the positives come from p."
    }

    def __init__(self, args=None, model_args=None):
        super().__init__(args, model_args)
        self.adversaries = None
        self.adversary_optimizer = None
        self.model = None  # the model whose momentum backbone p follows q, if it has one
        self._parameter_lists = None
        self.momentum_master: dict[str, torch.Tensor] | None = None
        self._saved_momentum_master: dict[str, torch.Tensor] | None = None
        self._resuming = False
        self._step_loss_scale = 1.0

    def conflict(self, others: list[Part]) -> str | None:
        """Why ``--adcse_variant paper`` does not combine with the other parts, if it does not: its Eq. 5
        has no in-batch negatives, which a replaced softmax's columns are (MixCSE's mixtures), and its p
        has a head of its own, where a replaced embedding is shared by q and p (SARCSE's autoencoder)."""
        if self.args.variant != "paper":
            return None
        for other in others:
            if "softmax" in other.replaces and self.args.adversaries:
                return (
                    f"--adcse_variant paper has no in-batch negatives, and {other.display_name}'s softmax "
                    "is over in-batch ones: use released"
                )
            if "embedding" in other.replaces and self.args.untied_dual_encoder:
                return (
                    f"--adcse_variant paper gives p its own head, and {other.display_name}'s embedding is shared "
                    "by q and p: use released"
                )
        return None

    def wrap(self, model, replaced):
        """p for the positives (``--untied_dual_encoder``, the default): a momentum copy of the backbone,
        its [CLS] through q's head in the released form (the paper's g_p: its own copy of the head), and
        through the shared autoencoder where another part replaced the embedding (SARCSE's Z)."""
        if self.args.untied_dual_encoder:
            shared = "embedding" in replaced or (self.args.variant == "released" and model.pooler_type == "cls")
            model.attach_momentum_backbone(shared_head=shared)
        return model

    def loss(self, loss, model, replaced):
        """``loss`` with the negative adversaries' columns (Eq. 5): InfoNCE's, computed by the adversarial
        loss itself, or those of the softmax another part made (``base``: MixCSE's); ``loss`` itself with
        ``--no_adversaries`` (in-batch negatives only, whichever the variant: Eq. 5 without adversaries
        has no negatives)."""
        if not self.args.adversaries:
            return loss
        return AdversarialInfoNCELoss(
            model.embedding_size,
            self.args.num_adversaries,
            self.model_args.temp,
            form=self.args.variant,
            adversary_temperature=self.args.adversary_temperature,
            base=loss if "softmax" in replaced else None,
        )

    def setup(self, trainer) -> None:
        trainer.refuse_sharding(
            "AdCSE", "the momentum update of p (Eq. 4) reads and writes whole weights outside the optimizer"
        )
        trainer.loss_fn.to(trainer.args.device)
        model = trainer.accelerator.unwrap_model(trainer.model)
        self.model = model if getattr(model, "momentum_backbone", None) is not None else None
        self.adversaries = getattr(trainer.loss_fn, "adversaries", None)
        if self.adversaries is not None:
            self.adversary_optimizer = torch.optim.SGD(
                [self.adversaries],
                lr=self.args.adversary_learning_rate,
                momentum=self.args.adversary_momentum,
                weight_decay=self.args.adversary_weight_decay,
                maximize=True,
                foreach=True,
            )
            if world_size() > 1:
                # Seeded alike on every process; made bit-identical so that they stay so.
                dist.broadcast(self.adversaries.data, src=0)

    def parameters(self) -> list[torch.Tensor]:
        return [] if self.adversaries is None else [self.adversaries]

    def loss_scale(self, trainer) -> float:
        """The factor by which the backward multiplies every gradient (fp16's dynamic loss scale)."""
        if trainer.is_deepspeed_enabled:
            engine = trainer.model_wrapped
            return float(engine.optimizer.loss_scale) if engine.fp16_enabled() else 1.0
        scaler = trainer.accelerator.scaler
        return scaler.get_scale() if scaler is not None and scaler.is_enabled() else 1.0

    def step_begin(self, trainer) -> None:
        # Read before the step's backwards: the fp16 scale changes only at the optimizer step, which
        # DeepSpeed takes inside the last micro-batch's backward. Only the adversaries' gradient is
        # unscaled by it, and reading the scaler's scale waits for the GPU: without them it is not read.
        if self.adversaries is not None:
            self._step_loss_scale = self.loss_scale(trainer)

    def after_step(self, trainer) -> None:
        """AdCSE's step, right after the Trainer's optimizer has updated q (Eq. 6): the adversaries'
        ascent on the same backward's gradient (Eq. 7), then p's momentum update from the new q
        (Eq. 4, which reads q after its step). Neither is the Trainer's optimizer's business: the
        adversaries ascend where q descends, and p has no gradient.

        After an fp16 overflow the scaler skipped q's step, so the adversaries and p stay too."""
        adversaries = self.adversaries
        if trainer.accelerator.optimizer_step_was_skipped:
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
            master_momentum_update(self.model, self.momentum_master, self.args.momentum, trainer.is_deepspeed_enabled)
        elif self.model is not None:
            self.momentum_update()

    @torch.no_grad()
    def momentum_update(self) -> None:
        """Eq. 4: theta_p <- m * theta_p + (1 - m) * theta_q, as two multi-tensor kernels over all
        parameters (the same two roundings per element as ``p.mul_(m).add_(q, alpha=1 - m)``). The
        parameter lists are built once: moving or loading the module keeps its parameter objects, and
        walking the modules of two encoders costs a millisecond a step."""
        if self._parameter_lists is None:
            self._parameter_lists = self.model.momentum_parameters()
        p, q = self._parameter_lists
        torch._foreach_mul_(p, self.args.momentum)
        torch._foreach_add_(p, q, alpha=1.0 - self.args.momentum)

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The adversaries and their SGD momentum, and p's fp32 master where p is in 16 bits
        (``momentum_backbone.<name>``; p itself is in the model's weights)."""
        state = {}
        if self.adversaries is not None:
            state["adversaries"] = self.adversaries.detach()
            buffer = self.adversary_optimizer.state.get(self.adversaries, {}).get("momentum_buffer")
            if buffer is not None:
                state["momentum_buffer"] = buffer
        if self.momentum_master is not None:
            state.update({f"{MOMENTUM_PREFIX}{name}": t for name, t in self.momentum_master.items()})
        return state

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        """Resume the adversaries and their SGD momentum; p's fp32 master is taken once the model is
        loaded and cast (:meth:`train_begin`)."""
        state = dict(state)
        if self.adversaries is not None:
            if "adversaries" not in state:
                raise ValueError(
                    "the checkpoint does not hold the adversaries' state (adcse.adversaries), so resuming would "
                    "restart them from scratch"
                )
            adversaries = state.pop("adversaries")
            if adversaries.shape != self.adversaries.shape:
                raise CSEUsageError(
                    f"the checkpoint holds {tuple(adversaries.shape)} adversaries, this run "
                    f"{tuple(self.adversaries.shape)} (M x d): resume with the checkpoint's --num_adversaries"
                )
            with torch.no_grad():
                self.adversaries.copy_(adversaries)
            if "momentum_buffer" in state:
                self.adversary_optimizer.state[self.adversaries]["momentum_buffer"] = state.pop("momentum_buffer")
        master = {
            name.removeprefix(MOMENTUM_PREFIX): state.pop(name)
            for name in list(state)
            if name.startswith(MOMENTUM_PREFIX)
        }
        if state:
            raise ValueError(f"the checkpoint holds AdCSE state this run does not keep: {', '.join(sorted(state))}")
        self._saved_momentum_master = master if master and self.model is not None else None

    def begin(self, trainer, resumed: bool) -> None:
        self._resuming = resumed
        if not resumed:
            self._saved_momentum_master = None

    def train_begin(self, trainer) -> None:
        """Once the model is wrapped (and cast, and a checkpoint loaded): p's fp32 master where p is
        in 16 bits (:func:`momentum_master`)."""
        saved, self._saved_momentum_master = self._saved_momentum_master, None
        self.momentum_master = None if self.model is None else momentum_master(self.model, saved, self._resuming)


def momentum_master(model, saved: dict | None, resuming: bool) -> dict | None:
    """p's fp32 master weights where DeepSpeed's engine has cast p to 16 bits (restored from the
    checkpoint's ``saved`` when resuming, else p's own weights), copied into p; ``None`` for fp32 p,
    which then takes the checkpoint's master if there is one (it is p, exactly, where the
    checkpoint's p was rounded)."""
    p = dict(model.momentum_backbone.named_parameters())
    if saved is not None and saved.keys() != p.keys():
        raise ValueError("the checkpoint's fp32 master of p (adcse.momentum_backbone.*) is not this model's encoder p")
    if all(t.dtype == torch.float32 for t in p.values()):
        if saved is not None:
            with torch.no_grad():
                for name, t in p.items():
                    t.copy_(saved[name])
        return None
    if saved is None and resuming:
        raise ValueError(
            "the checkpoint holds no fp32 master of p (adcse.momentum_backbone.*): its p was saved without one, so "
            "resuming in 16 bits would continue from a rounded p; resume with the precision it was saved with"
        )
    if saved is None:  # a fresh start: p is still q's (16-bit) copy, as is q's fp32 master
        saved = {name: t.detach().float().clone() for name, t in p.items()}
    with torch.no_grad():
        for name, t in p.items():
            t.copy_(saved[name])
    logger.info("momentum encoder p is %s: Eq. 4 runs on an fp32 master copy", next(iter(p.values())).dtype)
    return saved


@torch.no_grad()
def master_momentum_update(model, master: dict, m: float, deepspeed: bool) -> None:
    """Eq. 4 on p's fp32 ``master``, from q's fp32 weights (the optimizer's master under DeepSpeed),
    copied into the 16-bit p."""
    q = dict(model.backbone.named_parameters())
    if deepspeed:
        from deepspeed.utils import safe_get_full_fp32_param
    for name, p in model.momentum_backbone.named_parameters():
        q_fp32 = safe_get_full_fp32_param(q[name]) if deepspeed else None
        q_fp32 = q[name].float() if q_fp32 is None else q_fp32
        master[name].mul_(m).add_(q_fp32.to(master[name].device), alpha=1.0 - m)
        p.copy_(master[name])


RECORD = register(
    MethodRecord(
        part=AdCSE,
        bench={"adcse": BenchShape("run_adcse", "configs/adcse_bert_base.yaml", "bert", overhead_target=1.5)},
    )
)
