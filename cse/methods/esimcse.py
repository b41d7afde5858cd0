"""ESimCSE (Wu et al., "ESimCSE: Enhanced Sample Building Method for Contrastive Learning of
Unsupervised Sentence Embedding", COLING 2022): SimCSE with two changes.

* **Word repetition** (Sect. 3.1): the positive view (view 1) is the sentence with some of its
  sub-word tokens written twice in place, so that the two views of a positive pair differ in length
  (:meth:`ESimCSE.views`, rules in :mod:`cse.repetition`). View 0, the anchor, is the sentence itself.
* **Momentum contrast** (Sect. 3.2): a queue of the M most recent earlier sentences' embeddings,
  encoded by a momentum copy of the backbone, joins each row's negatives
  (:class:`cse.losses.esimcse.ESimCSELoss`).

One training step t, as the authors' code (caskcsg/sentemb, ``ESimCSE/``, which produced the
published runs) orders it:

1. the loss of the batch's two views, with the queue as it was before this batch;
2. the momentum update theta_m <- m theta_m + (1 - m) theta with the encoder's weights theta before
   this step's optimizer update (the released code runs it inside the forward, before the loss: the
   same weights, as nothing changes theta in between);
3. the momentum encoder's embedding of view 0 (the un-repeated sentence), dropout off, without
   gradient: its [CLS] through the encoder's own head (the online MLP; only the backbone has a
   momentum copy), appended to the queue, of which the newest M rows are kept.

Steps 2 and 3 run in the part's :meth:`ESimCSE.terms`, after the loss and before the backward. The
momentum encoder's weights and the queue are the part's state, saved with every checkpoint
(:meth:`ESimCSE.state_dict`), so a resumed run continues the same queue; the released code resets
the queue at each epoch (its runs are one epoch) and keeps it out of its checkpoints.

``--variant`` selects the released code's readings (the default: they produced the published numbers)
or the paper's where the two differ (docs/methods/esimcse.md): the repetition count, whether the
repeated view is kept within ``--max_seq_length``, and how the momentum encoder starts.
"""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass

import torch
from torch.func import functional_call

from ..distributed import all_gather_with_grad
from ..errors import CSEUsageError
from ..losses.esimcse import CITATION, ESimCSELoss
from ..parts import EVERY_PART, Part
from ..ranges import RANGE, Range, check_choices, check_fields, flag, probability
from ..registry import BenchShape, MethodRecord, register
from ..repetition import REPEATED, RULES, SeededRepetition

logger = logging.getLogger(__name__)

VARIANTS = ("released", "paper")
# what each variant sets where a flag is left out: (repetition rule, kept within --max_seq_length, momentum start)
VARIANT_DEFAULTS = {"released": ("released", False, "random"), "paper": ("paper", True, "pretrained")}
MOMENTUM_STARTS = ("random", "pretrained")
HEAD = "pooler."  # the backbone's pooling layer is the model's head (SimCSE's MLP): online, never copied


@dataclass
class ESimCSEArguments:
    variant: str = flag(
        "released",
        "released: the authors' code, which produced the published runs (repetition count randrange(min(10, "
        "floor(r L))), no length cap, momentum encoder from a random init); paper: the paper's count "
        "U{0..max(2, floor(r n))}, within --max_seq_length, momentum encoder from the pretrained weights. Each of "
        "the three can be set on its own.",
        choices=list(VARIANTS),
    )
    dup_rate: float = flag(
        0.32, "r, the repetition rate of the positive view (0.32: BERT; RoBERTa-base 0.30).", **{RANGE: probability}
    )
    queue_size: int = flag(
        160,
        "M, the momentum queue's rows (the released --neg_size; 0: no momentum contrast, word repetition alone).",
        **{RANGE: Range(0, integer=True)},
    )
    momentum: float = flag(0.995, "m, the momentum of the momentum encoder.", **{RANGE: probability})
    repetition: str | None = flag(
        None,
        "How many tokens view 1 repeats: released, randrange(min(10, floor(r L))) with L counting [CLS] and [SEP]; "
        "paper, U{0..max(2, floor(r n))} over the n real tokens. Default: the variant's.",
        choices=list(RULES),
    )
    cap_repetition: bool | None = flag(
        None,
        "Repeat fewer tokens where view 1 would exceed --max_seq_length (the released code does not: 32 + 9 "
        "tokens). Default: off (released), on (paper).",
    )
    momentum_start: str | None = flag(
        None,
        "The momentum encoder's first weights: random, a fresh random init seeded by --seed (what the released "
        "runs did: their logs list its weights as newly initialized); pretrained, a copy of the pretrained backbone "
        "(MoCo's convention). Default: the variant's.",
        choices=list(MOMENTUM_STARTS),
    )

    def __post_init__(self):
        check_fields(self)
        # set by the user, not filled by the variant below
        start_given = self.momentum_start is not None
        if self.variant in VARIANT_DEFAULTS:
            repetition, cap, start = VARIANT_DEFAULTS[self.variant]
            self.repetition = repetition if self.repetition is None else self.repetition
            self.cap_repetition = cap if self.cap_repetition is None else self.cap_repetition
            self.momentum_start = start if self.momentum_start is None else self.momentum_start
        check_choices(self)
        if self.queue_size == 0:
            given = [
                flag
                for flag, set_ in (("--momentum", self.momentum != 0.995), ("--momentum_start", start_given))
                if set_
            ]
            if given:
                raise ValueError(f"{given[0]} set, but --queue_size 0 leaves no momentum encoder for it to act on")
        elif self.momentum == 1 and self.momentum_start == "random":
            # theta_m <- 1 * theta_m: the encoder never moves from its random start, and the queue holds noise
            raise ValueError(
                "--momentum 1 keeps the momentum encoder at its start, and --momentum_start random starts it random: "
                "the queue would hold a random encoder's embeddings (use --momentum below 1, or --momentum_start "
                "pretrained for a fixed pretrained encoder)"
            )


class ESimCSE(Part):
    """ESimCSE's part: word repetition of view 1 (drawn once per corpus, :meth:`corpus`, and put in
    each batch by :meth:`views`), the queue's
    columns in the softmax (:meth:`loss`: :class:`~cse.losses.esimcse.ESimCSELoss`, around the
    softmax of a part that replaces it), and after each loss the momentum update and the enqueueing
    of view 0's momentum embeddings (:meth:`terms`, which adds no term).

    The momentum encoder is a set of tensors held here, one per weight of the backbone (its head, the
    pooling layer, excluded), outside the model and its optimizer; its forward is the model's own
    forward with those tensors in place of the backbone's weights (``torch.func.functional_call``) in
    eval mode, so it goes through the model's head as it is at this step."""

    name = "esimcse"
    display_name = "ESimCSE"
    citation = CITATION
    docs = "docs/methods/esimcse.md"
    equation = (
        "the positive view repeats some of its tokens in place (word repetition), and each row's denominator gains "
        "e^{s(h_i, q_m)/tau} for the M queue rows q_m: earlier batches' view-0 embeddings by a momentum copy of the "
        "backbone, theta_m <- m theta_m + (1 - m) theta (Wu et al. 2022)"
    )
    Flags = ESimCSEArguments
    replaces = frozenset({"views"})
    refuses = {
        "positives": "another encoder of the positives (AdCSE's momentum encoder p) would encode ESimCSE's repeated "
        "view without gradient, and its adversaries extend the softmax as ESimCSE's queue does, two extensions "
        "this build does not chain: neither paper defines the pair",
        "embedding": "ESimCSE's queue comes from a momentum copy of the backbone and its pooler; a part that "
        "replaces the embedding computes it its own way (an autoencoder after the backbone, a template's [MASK] "
        "state, a projector), whose momentum form no paper defines",
    }
    notes = {
        "softmax": "One softmax: each row's columns are the replaced softmax's (MixCSE's positives and mixed "
        "negatives, over the repeated views) and ESimCSE's M queue rows, cos(row anchor, q_m)/tau "
        "(`ESimCSELoss(base=MixCSELoss(...))`).",
        EVERY_PART: "ESimCSE's queue rows are the run's own training embedding of view 0 with the momentum copy of "
        "the backbone, in eval mode: through whatever head the run puts on [CLS] (V-advCSE's MLP-BN head, with its "
        "running statistics).",
    }

    def __init__(self, args=None, model_args=None):
        super().__init__(args, model_args)
        self.queue_loss: ESimCSELoss | None = None  # the loss that reads the queue (loss)
        self.momentum: dict[str, torch.Tensor] | None = None  # theta_m by the backbone's weight names
        self._pairs = None  # ([theta_m], [theta]) in the same order, built once
        self.width: int | None = None  # the model's embedding size, the queue rows' (setup)

    # --- the build ----------------------------------------------------------------------------------

    def loss(self, loss, model, replaced):
        """The queue's columns in InfoNCE's softmax, or in that of the part that replaces it (``base``:
        MixCSE's); ``loss`` itself with ``--queue_size 0`` (word repetition alone)."""
        if self.args.queue_size == 0:
            return loss
        self.queue_loss = ESimCSELoss(self.model_args.temp, base=loss if "softmax" in replaced else None)
        return self.queue_loss

    # --- the batch -----------------------------------------------------------------------------------

    def repetition(self, tokenizer, data_args, seed: int) -> SeededRepetition:
        """Each sentence's repetition: as many real tokens as ``--repetition`` draws (special tokens are
        never chosen), at most what fits in ``--max_seq_length`` with ``--cap_repetition``, from a
        generator seeded by ``seed`` (the run's ``--seed``) and the sentence
        (:class:`cse.repetition.SeededRepetition`): one repetition per sentence, as the released code
        draws it once in preprocessing, and a resumed run draws what the uninterrupted one did."""
        return SeededRepetition(
            seed=seed,
            rule=self.args.repetition,
            dup_rate=self.args.dup_rate,
            max_length=data_args.max_seq_length if self.args.cap_repetition else None,
            special_ids=frozenset(tokenizer.all_special_ids),
        )

    def corpus(self, tokenized, tokenizer, data_args, training_args):
        """The corpus with each sentence's repeated view (:meth:`repetition`, seeded by ``--seed``),
        drawn once and cached with the corpus (``--preprocessing_num_workers`` processes;
        ``--overwrite_cache`` draws again)."""
        return self.repetition(tokenizer, data_args, training_args.seed).corpus(
            tokenized, data_args.preprocessing_num_workers, load_from_cache_file=not data_args.overwrite_cache
        )

    def views(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """View 1 of each sentence its repeated view, read from the corpus' columns (:meth:`corpus`);
        view 0 the sentence itself; every view as long as the batch's longest (the batch is sliced so),
        token types zero."""
        if REPEATED + "input_ids" not in batch:
            raise RuntimeError("ESimCSE's batches are sliced from a corpus with its repeated views (ESimCSE.corpus)")
        ids, mask = batch.pop(REPEATED + "input_ids"), batch.pop(REPEATED + "attention_mask")
        batch["input_ids"][:, 1], batch["attention_mask"][:, 1] = ids, mask
        if "token_type_ids" in batch:
            batch["token_type_ids"].zero_()
        return batch

    # --- the trainer --------------------------------------------------------------------------------

    def setup(self, trainer) -> None:
        if self.queue_loss is None:
            return
        self.width = trainer.model.embedding_size
        trainer.refuse_sharding(
            "ESimCSE", "the momentum update reads and writes the backbone's whole weights outside the optimizer"
        )
        if self.momentum is None:
            self.momentum = self.start_momentum(trainer.model.backbone, trainer.args.seed)
        self.momentum = {name: t.to(trainer.args.device) for name, t in self.momentum.items()}
        self._pairs = None

    def start_momentum(self, backbone, seed: int) -> dict[str, torch.Tensor]:
        """theta_m's first weights, in float32: a copy of the pretrained backbone, or a fresh random init
        of its architecture (what the released code's runs started from: it copies the backbone before
        the pretrained weights are loaded), drawn from a generator seeded by ``seed`` so that the run's
        own random stream is left as it was."""
        if self.args.momentum_start == "pretrained":
            source = backbone
        else:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed)
                source = type(backbone)(copy.deepcopy(backbone.config))
        return {name: t.detach().float().clone() for name, t in source.named_parameters() if not name.startswith(HEAD)}

    def capture_problem(self) -> str | None:
        if self.queue_loss is None:
            return None
        return (
            "ESimCSE's queue grows over the first steps (a new shape each step until it holds --queue_size rows), "
            "and its momentum forward switches the model to eval mode inside the step"
        )

    def terms(self, step):
        """After the loss, before the backward: the momentum update from the encoder's current weights
        (before this step's optimizer update), then view 0's momentum embeddings enqueued (the newest
        ``--queue_size`` rows kept). No term: the queue's columns are in the loss."""
        if self.queue_loss is None or not step.encoder.training:
            return {}, {}
        self.momentum_update(step.encoder.backbone)
        new = self.momentum_embeddings(step.encoder, step.inputs)
        with torch.no_grad():
            # every process's momentum embeddings, in rank order: the one-GPU run's queue (below)
            new = all_gather_with_grad(new)
            queue = self.queue_loss.queue
            queue = new if queue is None else torch.cat([queue, new.to(queue.dtype)])
            self.queue_loss.queue = queue[-self.args.queue_size :]
        return {}, {}

    @torch.no_grad()
    def momentum_update(self, backbone) -> None:
        """theta_m <- m theta_m + (1 - m) theta, as two multi-tensor kernels (the same two roundings per
        element as ``p.mul_(m).add_(q, alpha=1 - m)``)."""
        if self._pairs is None:
            online = dict(backbone.named_parameters())
            self._pairs = (list(self.momentum.values()), [online[name] for name in self.momentum])
        p, q = self._pairs
        torch._foreach_mul_(p, self.args.momentum)
        torch._foreach_add_(
            p, [t.float() for t in q] if q[0].dtype != p[0].dtype else q, alpha=1.0 - self.args.momentum
        )

    @torch.no_grad()
    def momentum_embeddings(self, encoder, inputs: dict) -> torch.Tensor:
        """The embeddings of view 0 (the sentences as they are) by the momentum encoder: the model's
        training forward with theta_m in place of the backbone's weights, in eval mode (no dropout, as
        the released code switches to ``model.eval()``), its head the model's own."""
        view0 = {name: value[:, :1] for name, value in inputs.items()}
        # in the backbone's dtype (16 bits where DeepSpeed casts the model; theta_m itself stays float32)
        dtype = next(encoder.backbone.parameters()).dtype
        weights = {f"backbone.{name}": t.to(dtype) for name, t in self.momentum.items()}
        training = encoder.training
        encoder.train(False)
        try:
            outputs = functional_call(encoder, weights, args=(), kwargs=view0, strict=False)
        finally:
            encoder.train(training)
        return outputs["embeddings"][:, 0].detach()

    # --- state --------------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The part's resumable state: the momentum encoder's weights (``momentum.<name>``) and the
        queue (``queue``, once a batch has been enqueued); the tensors themselves (the trainer copies
        them to the CPU when it saves them)."""
        state = {f"momentum.{name}": t for name, t in (self.momentum or {}).items()}
        if self.queue_loss is not None and self.queue_loss.queue is not None:
            state["queue"] = self.queue_loss.queue
        return state

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        """Restore :meth:`state_dict`'s tensors into this part (on its device); a state of another
        backbone (weights of other names or shapes, queue rows of another width), one without its
        queue or with keys it does not write, or a queue longer than ``--queue_size``, is refused."""
        if self.queue_loss is None:
            return
        names = {name.removeprefix("momentum.") for name in state if name.startswith("momentum.")}
        if not names:
            raise CSEUsageError(
                "the checkpoint holds no ESimCSE queue and momentum encoder, so resuming would restart them",
                hint="resume from a checkpoint of an ESimCSE run",
            )
        unknown = sorted(name for name in state if name != "queue" and not name.startswith("momentum."))
        if unknown:
            raise CSEUsageError(
                f"the saved ESimCSE state holds keys this version does not write ({', '.join(unknown)})",
                hint="resume from a checkpoint of an ESimCSE run",
            )
        if names != set(self.momentum):
            raise CSEUsageError(
                "the saved ESimCSE state holds the momentum encoder of another backbone "
                f"({len(names)} weights, this run's {len(self.momentum)})",
                hint="resume with the checkpoint's --model_name_or_path",
            )
        shapes = [name for name, t in self.momentum.items() if state[f"momentum.{name}"].shape != t.shape]
        if shapes:
            raise CSEUsageError(
                f"the saved ESimCSE momentum encoder's {shapes[0]} has the shape "
                f"{tuple(state['momentum.' + shapes[0]].shape)}, this run's {tuple(self.momentum[shapes[0]].shape)}",
                hint="resume with the checkpoint's --model_name_or_path",
            )
        # every step enqueues, so a checkpoint, written after one, holds a queue: without it the run
        # would go on from an empty queue, not the one it had
        queue = state.get("queue")
        if queue is None:
            raise CSEUsageError(
                "the checkpoint's ESimCSE state holds a momentum encoder but no queue",
                hint="resume from a complete checkpoint of this run, or start the run anew",
            )
        if queue.dim() != 2 or queue.shape[1] != self.width:
            raise CSEUsageError(
                f"the saved ESimCSE queue has the shape {tuple(queue.shape)}, not (rows, {self.width}) "
                "as this model's embeddings",
                hint="resume with the checkpoint's --model_name_or_path",
            )
        if queue.shape[0] > self.args.queue_size:
            raise CSEUsageError(
                f"the saved ESimCSE queue holds {queue.shape[0]} rows, more than --queue_size {self.args.queue_size}",
                hint="resume with the checkpoint's --queue_size",
            )
        with torch.no_grad():
            for name, t in self.momentum.items():
                t.copy_(state[f"momentum.{name}"])
        device = next(iter(self.momentum.values())).device
        self.queue_loss.queue = queue.to(device)


RECORD = register(
    MethodRecord(
        part=ESimCSE,
        # unmeasured on a GPU: the momentum forward of view 0 (no backward) adds about a third of a
        # SimCSE step's forward-and-backward of two views
        bench={"esimcse": BenchShape("run_esimcse", "configs/esimcse_bert_base.yaml", "bert", overhead_target=1.3)},
        released_flags={
            "--dup_type": "the released train.py's repetition unit (bpe: sub-word tokens)",
            "--neg_size": "the released run.sh's queue size",
        },
    )
)
