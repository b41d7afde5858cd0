"""SARCSE (Liu et al., "Self-Adaptive Reconstruction with Contrastive Learning for Unsupervised
Sentence Embeddings", arXiv 2402.15153): a TextCNN autoencoder after the backbone, whose code Z is
the sentence embedding, trained with a contrastive loss on Z and a frequency-weighted loss for
reconstructing the token states:

    L = alpha L_I + beta L_R + gamma L_R+                           (Eq. 12; 1, 2.5e-4, 2.5e-4)

L_I is the method's contrastive loss on (Z, Z+) (InfoNCE, Eq. 11, in ``run_sarcse.py``); L_R and
L_R+ (Eqs. 9-10, :mod:`cse.losses.reconstruction`) reconstruct the real tokens of each dropout view.

The reconstruction is an add-on, not a fork of SimCSE's path ("plug-and-play", Sect. 1):

* the encoder, :class:`~cse.encoders.autoencoding.SARCSEModel`, is a :class:`~cse.modeling.CSEModel` whose
  pooler is the autoencoder (:mod:`cse.encoders.textcnn`): every forward returns Z, so any contrastive loss
  sees Z; a training forward of two views also returns the tokens, their reconstruction and ids;
* the part (:class:`SARCSE`) replaces the sentence embedding with that encoder, adds L_R and L_R+
  to whatever loss the other parts compute, and weighs all of it by alpha. It counts the token
  frequencies once, on the training sentences, keeps them in every checkpoint's parts' state and
  beside the final model (``sarcse_token_counts.safetensors``), and restores them on resume instead
  of counting again.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field, fields

import torch
from safetensors.torch import save_file

from .. import citations
from ..arguments import CSETrainingArguments, DataArguments, ModelArguments
from ..batches import TokenRows
from ..encoders.autoencoding import SARCSEModel, special_token_ids
from ..encoders.textcnn import TextCNNAutoEncoder
from ..errors import CSEUsageError
from ..losses.reconstruction import REDUCTIONS, SelfAdaptiveReconstructionLoss, count_tokens
from ..modeling import load_encoder
from ..parts import EVERY_PART, Part, total
from ..ranges import RANGE, at_least, check_choices, check_fields, non_negative, positive, probability
from ..registry import BenchShape, MethodRecord, register

logger = logging.getLogger(__name__)

# The token-frequency table beside the exported model.
TOKEN_COUNTS_NAME = "sarcse_token_counts.safetensors"
RECONSTRUCTION_TERMS = ("reconstruction", "reconstruction_positive")


@dataclass
class SARCSEModelArguments(ModelArguments):
    model_name_or_path: str = field(
        default="roberta-base", metadata={"help": "Backbone (the paper: roberta-base, roberta-large)."}
    )


@dataclass
class SARCSETrainingArguments(CSETrainingArguments):
    learning_rate: float = field(default=1e-5, metadata={"help": "AdamW learning rate (the paper: 1e-5)."})


@dataclass
class SARCSEArguments:
    alpha: float = field(
        default=1.0, metadata={"help": "alpha in Eq. 12, the weight of the contrastive loss.", RANGE: positive}
    )
    beta: float = field(default=2.5e-4, metadata={"help": "beta in Eq. 12, the weight of L_R.", RANGE: non_negative})
    gamma: float = field(default=2.5e-4, metadata={"help": "gamma in Eq. 12, the weight of L_R+.", RANGE: non_negative})
    theta: float = field(
        default=0.1, metadata={"help": "theta in Eq. 8, the smallest token weight.", RANGE: probability}
    )
    freq_lambda: float = field(default=50.0, metadata={"help": "lambda in Eq. 8.", RANGE: non_negative})
    kernel_sizes: list[int] = field(
        default_factory=lambda: [3, 4, 5], metadata={"help": "ks of the TextCNN.", RANGE: at_least(1)}
    )
    textcnn_channels: int = field(
        default=500, metadata={"help": "co_t, the TextCNN's output channels.", RANGE: at_least(2)}
    )
    cnn_channels: int = field(
        default=3,
        metadata={"help": "co_c, the CNN's output channels (Z: co_c (co_t - 1)).", RANGE: at_least(1)},
    )
    plain_mse: bool = field(
        default=False, metadata={"help": "Table 1 ablation: every token weighs 1 (no self-adaptive weights)."}
    )
    decoder: bool = field(
        default=True,
        metadata={"help": "Reconstruct the tokens (--no_decoder: Table 1 ablation, backbone + TextCNN encoder only)."},
    )
    detach_target: bool = field(
        default=False,
        metadata={"help": "Stop L_R's gradient through the target X (default: Eq. 9's gradient reaches both sides)."},
    )
    reconstruction_reduction: str = field(
        default="mean",
        metadata={
            "help": "MSE of Eq. 9 over the d hidden dimensions: mean (torch's MSELoss, the default) or sum (d times "
            "larger). docs/diagnostics.md measures both.",
            "choices": REDUCTIONS,
        },
    )

    def __post_init__(self):
        check_fields(self)
        check_choices(self)
        defaults = {f.name: f.default for f in fields(self) if f.name != "kernel_sizes"}
        reconstruction = (
            "alpha", "beta", "gamma", "theta", "freq_lambda", "plain_mse", "detach_target", "reconstruction_reduction"
        )  # fmt: skip
        changed = [name for name in reconstruction if getattr(self, name) != defaults[name]]
        if not self.decoder and changed:
            raise ValueError(f"--{', --'.join(changed)} set, but --no_decoder leaves no reconstruction loss")
        changed = [name for name in ("theta", "freq_lambda") if getattr(self, name) != defaults[name]]
        if self.plain_mse and changed:
            raise ValueError(f"--{', --'.join(changed)} set, but --plain_mse weighs every token 1")


def build_model(model_args: ModelArguments, sarcse_args: SARCSEArguments) -> SARCSEModel:
    """The pretrained backbone and tokenizer ``model_args`` name, with a fresh autoencoder of
    ``sarcse_args``' shape (the backbone's pooling layer is left unused)."""
    encoder = load_encoder(model_args, pooler_type="cls_before_pooler", mlp_only_train=False)
    autoencoder = TextCNNAutoEncoder(
        encoder.config.hidden_size,
        kernel_sizes=tuple(sarcse_args.kernel_sizes),
        textcnn_channels=sarcse_args.textcnn_channels,
        cnn_channels=sarcse_args.cnn_channels,
        decoder=sarcse_args.decoder,
    )
    return SARCSEModel(encoder.backbone, encoder.tokenizer, autoencoder, detach_target=sarcse_args.detach_target)


def reconstruction_loss(model: SARCSEModel, sarcse_args: SARCSEArguments) -> SelfAdaptiveReconstructionLoss:
    return SelfAdaptiveReconstructionLoss(
        len(model.tokenizer),
        special_token_ids(model.tokenizer),
        theta=sarcse_args.theta,
        freq_lambda=sarcse_args.freq_lambda,
        self_adaptive=not sarcse_args.plain_mse,
        reduction=sarcse_args.reconstruction_reduction,
    )


def corpus_token_ids(dataset):
    """Each training sentence's token ids: a :class:`cse.batches.TokenRows`' rows, or a tokenised
    ``datasets.Dataset``'s ``input_ids``."""
    if isinstance(dataset, TokenRows):
        yield from dataset.token_ids()
        return
    for batch in dataset.select_columns(["input_ids"]).iter(batch_size=10_000):
        yield from batch["input_ids"]


class SARCSE(Part):
    """SARCSE's part: the embedding is Z (:meth:`encoder`), and Eq. 12 on top of whatever loss the
    other parts compute: ``alpha`` times all of it (:meth:`weigh`) plus ``beta`` L_R and ``gamma``
    L_R+ of the training forward's reconstruction (:meth:`terms`). With ``--no_decoder`` (Table 1's
    ablation, alone only) it adds nothing to InfoNCE on Z."""

    name = "sarcse"
    display_name = "SARCSE"
    citation = citations.SARCSE
    docs = "docs/methods/sarcse.md"
    equation = (
        "the embedding is Z, the code of a TextCNN autoencoder over the backbone's real tokens (Eq. 4), and L = "
        "alpha L + beta L_R + gamma L_R+ (Eq. 12): alpha scales every other term, L_R and L_R+ reconstruct each "
        "view's tokens with frequency weights (Eqs. 8-10; Liu et al. 2024)"
    )
    Flags = SARCSEArguments
    replaces = frozenset({"embedding"})
    notes = {
        "softmax": "The replaced softmax is over Z vectors (MixCSE's mixtures are of Z).",
        "positives": "The positives' encoder (AdCSE's momentum copy p of the backbone) shares the autoencoder with q, "
        "as the released AdCSE shares its head; Z+ carries no gradient, and L_R+ reconstructs p's tokens with "
        "gradient to the autoencoder only.",
        EVERY_PART: "SARCSE's alpha scales the other part's terms too (Eq. 12).",
    }

    def __init__(self, args=None, model_args=None):
        super().__init__(args, model_args)
        self.reconstruction_loss: SelfAdaptiveReconstructionLoss | None = None  # made with the model (setup)

    def conflict(self, others: list[Part]) -> str | None:
        if others and not self.args.decoder:
            return (
                "--no_decoder leaves SARCSE nothing to add to the other parts (Table 1's ablation is "
                "run_sarcse.py --no_decoder)"
            )
        return None

    def encoder(self, model_args) -> SARCSEModel:
        """:func:`build_model`, once the model arguments are checked: SimCSE's pooler flags do not apply to Z."""
        if (model_args.pooler_type, model_args.mlp_only_train) != ("cls", True):
            raise CSEUsageError(
                "SARCSE's sentence embedding is Z (Eq. 4): --pooler_type and --mlp_only_train do not apply"
            )
        return build_model(model_args, self.args)

    def setup(self, trainer) -> None:
        if not self.args.decoder:
            return
        model = trainer.model
        autoencoder = getattr(model, "autoencoder", None)
        if not getattr(autoencoder, "has_decoder", False):
            raise TypeError(
                f"the reconstruction loss needs a SARCSEModel with a decoder, got {type(model).__name__}"
                + (" without one (--no_decoder)" if autoencoder is not None else "")
            )
        if self.reconstruction_loss is None:
            self.reconstruction_loss = reconstruction_loss(model, self.args)
        self.reconstruction_loss.to(trainer.args.device)
        args = self.args
        logger.info(
            "reconstruction: alpha %s, beta %s, gamma %s, %s",
            args.alpha,
            args.beta,
            args.gamma,
            self.reconstruction_loss.get_config_dict(),
        )

    @property
    def needs_counts(self) -> bool:
        return self.reconstruction_loss is not None and self.reconstruction_loss.needs_counts

    def terms(self, step):
        """beta L_R and gamma L_R+ (Eqs. 9-10) of the training forward's reconstruction of each view."""
        if not self.args.decoder:
            return {}, {}
        batch = step.outputs.get("reconstruction")
        views = step.inputs["input_ids"].shape[1]
        if step.encoder.training and views != 2:
            raise ValueError(f"L_R and L_R+ need two views of each sentence, got {views}")
        if batch is None:
            if step.encoder.training:
                raise RuntimeError("the model's training forward gave no reconstruction")
            return {}, {}
        loss = self.reconstruction_loss(batch.target, batch.reconstruction, batch.token_ids, batch.mask)
        reconstruction, reconstruction_positive = loss.view(-1, views).mean(0)
        terms = {
            "reconstruction": self.args.beta * reconstruction,
            "reconstruction_positive": self.args.gamma * reconstruction_positive,
        }
        statistics = {"reconstruction_loss": reconstruction, "reconstruction_loss_positive": reconstruction_positive}
        return terms, statistics

    def weigh(self, terms: dict) -> tuple[dict, dict]:
        """Eq. 12's alpha L_I: alpha scales every term but the reconstruction's (``contrastive_loss``:
        their sum before it)."""
        if not self.args.decoder:
            return terms, {}
        others = {name: term for name, term in terms.items() if name not in RECONSTRUCTION_TERMS}
        own = {name: term for name, term in terms.items() if name in RECONSTRUCTION_TERMS}
        scaled = {name: self.args.alpha * term for name, term in others.items()}
        return {**scaled, **own}, {"contrastive_loss": total(others)} if others else {}

    def term_weights(self) -> dict[str, float]:
        if not self.args.decoder:
            return {}
        return {"reconstruction": self.args.beta, "reconstruction_positive": self.args.gamma}

    def count_token_frequencies(self, trainer) -> None:
        counts = count_tokens(
            corpus_token_ids(trainer.train_dataset),
            self.reconstruction_loss.token_counts.shape[0],
            self.reconstruction_loss.special_ids,
        )
        self.reconstruction_loss.set_counts(counts.to(trainer.args.device))
        logger.info(
            "token frequencies: %d tokens of %d types in %d training sentences",
            int(counts.sum()),
            int((counts > 0).sum()),
            len(trainer.train_dataset),
        )

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The token-frequency table, counted once on the training sentences (not with ``--plain_mse``)."""
        return {"token_counts": self.reconstruction_loss.token_counts} if self.needs_counts else {}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        if not self.needs_counts:
            return
        if "token_counts" not in state:
            raise ValueError(
                "the checkpoint lacks the token-frequency table of its run (sarcse.token_counts): was it saved "
                "with --plain_mse, or by another method?"
            )
        self.reconstruction_loss.set_counts(state["token_counts"])

    def begin(self, trainer, resumed: bool) -> None:
        if self.needs_counts and not resumed:
            self.count_token_frequencies(trainer)

    def export(self, trainer, directory: str) -> None:
        if self.needs_counts and trainer.args.should_save:
            os.makedirs(directory, exist_ok=True)
            save_file(
                {"token_counts": self.reconstruction_loss.token_counts.cpu()},
                os.path.join(directory, TOKEN_COUNTS_NAME),
            )


RECORD = register(
    MethodRecord(
        part=SARCSE,
        arguments=(SARCSEModelArguments, DataArguments, SARCSETrainingArguments),
        bench={"sarcse": BenchShape("run_sarcse", "configs/sarcse_roberta_base.yaml", "roberta", overhead_target=1.3)},
    )
)
