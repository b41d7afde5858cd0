"""SARCSE (Liu et al., "Self-Adaptive Reconstruction with Contrastive Learning for Unsupervised
Sentence Embeddings", arXiv 2402.15153): a TextCNN autoencoder after the backbone, whose code Z is
the sentence embedding, trained with a contrastive loss on Z and a frequency-weighted loss for
reconstructing the token states:

    L = alpha L_I + beta L_R + gamma L_R+                           (Eq. 12; 1, 2.5e-4, 2.5e-4)

L_I is the method's contrastive loss on (Z, Z+) (InfoNCE, Eq. 11, in ``run_sarcse.py``); L_R and
L_R+ (Eqs. 9-10, :mod:`cse.losses.reconstruction`) reconstruct the real tokens of each dropout view.

The reconstruction is an add-on, not a fork of SimCSE's path ("plug-and-play", Sect. 1):

* :class:`SARCSEModel` is a :class:`~cse.modeling.CSEModel` whose pooler is the autoencoder
  (:mod:`cse.textcnn`): every forward returns Z, so any contrastive loss sees Z; a training forward
  also keeps the tokens, their reconstruction and ids for the trainer (:meth:`pop_reconstruction`).
* :class:`ReconstructionMixin` goes before any ``CSETrainer`` subclass in the bases
  (``class T(ReconstructionMixin, SomeMethodTrainer)``): it lets that trainer compute its own loss,
  then adds the reconstruction terms. It counts the token frequencies once, on the training
  sentences, saves them with every checkpoint and the final model (``sarcse_token_counts.safetensors``)
  and restores them on resume instead of counting again; it refuses to resume a checkpoint of
  another model layout (another ablation or autoencoder shape).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field, fields

import torch
from safetensors.torch import load_file, save_file

from .. import citations
from ..arguments import CSETrainingArguments, DataArguments, ModelArguments
from ..composition import EVERY_PART, Part
from ..errors import CSEUsageError
from ..losses import InfoNCELoss
from ..losses.reconstruction import REDUCTIONS, SelfAdaptiveReconstructionLoss, count_tokens
from ..modeling import CSEModel, read_cse_config
from ..ranges import RANGE, at_least, check_fields, non_negative, positive, probability
from ..registry import BenchShape, MethodRecord, register
from ..resume import resolve_checkpoint
from ..textcnn import TextCNNAutoEncoder
from ..trainer import CSETrainer, StepLoss, total
from .adcse import MomentumDualEncoder

logger = logging.getLogger(__name__)

AUTOENCODER_WEIGHTS_NAME = "sarcse_autoencoder.safetensors"
TOKEN_COUNTS_NAME = "sarcse_token_counts.safetensors"


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
        defaults = {f.name: f.default for f in fields(self) if f.name != "kernel_sizes"}
        if self.reconstruction_reduction not in REDUCTIONS:
            raise ValueError(
                f"--reconstruction_reduction must be one of {', '.join(REDUCTIONS)}, "
                f"got {self.reconstruction_reduction!r}"
            )
        reconstruction = (
            "alpha", "beta", "gamma", "theta", "freq_lambda", "plain_mse", "detach_target", "reconstruction_reduction"
        )  # fmt: skip
        changed = [name for name in reconstruction if getattr(self, name) != defaults[name]]
        if not self.decoder and changed:
            raise ValueError(f"--{', --'.join(changed)} set, but --no_decoder leaves no reconstruction loss")
        changed = [name for name in ("theta", "freq_lambda") if getattr(self, name) != defaults[name]]
        if self.plain_mse and changed:
            raise ValueError(f"--{', --'.join(changed)} set, but --plain_mse weighs every token 1")


@dataclass
class ReconstructionBatch:
    """What a training forward leaves for the reconstruction loss: per encoded row (both views)."""

    target: torch.Tensor  # X, (rows, L, d)
    reconstruction: torch.Tensor  # X', (rows, L, d)
    token_ids: torch.Tensor  # (rows, L)
    mask: torch.Tensor  # (rows, L), 1 at real tokens


def special_token_ids(tokenizer) -> list[int]:
    """The ids never reconstructed: ``<s>``/``</s>`` ([CLS]/[SEP]) and padding."""
    ids = (tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.cls_token_id, tokenizer.sep_token_id)
    return sorted({i for i in (*ids, tokenizer.pad_token_id) if i is not None})


class SARCSEModel(CSEModel):
    """A backbone whose sentence embedding is Z, the code of a TextCNN autoencoder over its last
    layer's real tokens (``<s>``, ``</s>`` and padding removed, Sect. 2.1).

    Args:
        backbone, tokenizer: as :class:`CSEModel`'s (the backbone's pooling layer is unused).
        autoencoder: the :class:`~cse.textcnn.TextCNNAutoEncoder`.
        detach_target: keep L_R's gradient off the target X (it still reaches the backbone through Z).
    """

    def __init__(self, backbone, tokenizer, autoencoder: TextCNNAutoEncoder, detach_target: bool = False):
        super().__init__(backbone, tokenizer, pooler_type="cls_before_pooler")
        if autoencoder.hidden_size != backbone.config.hidden_size:
            raise ValueError(
                f"autoencoder built for states of {autoencoder.hidden_size}, "
                f"the backbone gives {backbone.config.hidden_size}"
            )
        self.pooler_type = "textcnn"  # recorded in cse_config.json and result JSONs: Z, Eq. 4
        self.autoencoder = autoencoder
        self.detach_target = detach_target
        self.register_buffer("special_ids", torch.tensor(special_token_ids(tokenizer)), persistent=False)
        self._reconstruction: ReconstructionBatch | None = None

    @property
    def embedding_size(self) -> int:
        return self.autoencoder.embedding_size

    def content_tokens(self, states, input_ids, attention_mask):
        """The real tokens of each row, moved to the front in their order: states (B, L, d), ids and
        mask (B, L), L the input's length. (Cropping to the longest row's count of real tokens would
        change no embedding and no reconstructed token, the autoencoder masking what lies beyond each
        row's count, but that count is data that the host would wait for the GPU to read.)"""
        mask = attention_mask.bool() & ~torch.isin(input_ids, self.special_ids)
        order = torch.sort((~mask).to(torch.int8), dim=1, stable=True).indices
        states = states.gather(1, order[..., None].expand(-1, -1, states.shape[-1]))
        return states, input_ids.gather(1, order), mask.gather(1, order)

    def autoencode(self, states, input_ids, attention_mask, reconstruct: bool = False):
        """``(Z, batch)``: the code of each row's real tokens among ``states`` (B, L, d) and, with
        ``reconstruct``, their :class:`ReconstructionBatch` (else None)."""
        tokens, token_ids, mask = self.content_tokens(states, input_ids, attention_mask)
        out = self.autoencoder(tokens, mask, reconstruct=reconstruct)
        if not reconstruct:
            return out.embedding, None
        target = tokens.detach() if self.detach_target else tokens
        return out.embedding, ReconstructionBatch(target, out.reconstruction, token_ids, mask)

    def encode_tokens(self, input_ids, attention_mask, token_type_ids=None, backbone=None, reconstruct=False):
        """:meth:`autoencode` of ``backbone``'s (default: this model's) last layer."""
        states = self._backbone_outputs(input_ids, attention_mask, token_type_ids, backbone).last_hidden_state
        return self.autoencode(states, input_ids, attention_mask, reconstruct)

    def _pooled(self, pooler_type, input_ids, attention_mask, token_type_ids=None, backbone=None):
        return self.encode_tokens(input_ids, attention_mask, token_type_ids, backbone)[0]

    def forward(self, input_ids, attention_mask, token_type_ids=None) -> torch.Tensor:
        """:class:`CSEModel`'s training forward (Z of each view). A training forward of two views also
        keeps their reconstruction for the trainer (:meth:`pop_reconstruction`; rows alternate view 0
        and view 1 of each sentence); a forward of one view (V-advCSE's re-encoding of the perturbed
        anchors) leaves the kept one as it is."""
        batch, views, length = input_ids.shape
        if not (self.training and self.autoencoder.has_decoder and views == 2):
            return super().forward(input_ids, attention_mask, token_type_ids)
        flat = lambda t: None if t is None else t.reshape(batch * views, length)  # noqa: E731
        embedding, self._reconstruction = self.encode_tokens(
            flat(input_ids), flat(attention_mask), flat(token_type_ids), reconstruct=True
        )
        return embedding.view(batch, views, -1)

    def pop_reconstruction(self) -> ReconstructionBatch | None:
        """The last two-view training forward's reconstruction, handed over once."""
        batch, self._reconstruction = self._reconstruction, None
        return batch

    def cse_config(self) -> dict:
        return {
            "model_kind": "sarcse",
            "pooler": self.pooler_type,
            "autoencoder": self.autoencoder.get_config_dict(),
            "detach_target": self.detach_target,
        }

    def write_export(self, directory: str, state_dict: dict | None = None) -> None:
        """The backbone as a plain Hugging Face model (``AutoModel`` loads its token states), the
        autoencoder beside it (``sarcse_autoencoder.safetensors``); :func:`cse.modeling.load_model`
        or :meth:`from_pretrained` load both and embed with Z."""
        super().write_export(directory, state_dict=state_dict)
        state = state_dict if state_dict is not None else self.state_dict()
        prefix = "autoencoder."
        weights = {k[len(prefix) :]: v.detach().contiguous().cpu() for k, v in state.items() if k.startswith(prefix)}
        save_file(weights, os.path.join(directory, AUTOENCODER_WEIGHTS_NAME))

    @classmethod
    def from_pretrained(cls, model_name_or_path: str, pooler_type: str | None = None, **backbone_kwargs):
        if pooler_type not in (None, "textcnn"):
            raise CSEUsageError(
                f"{model_name_or_path} is a SARCSE model: its embedding is Z, not pooler {pooler_type!r}"
            )
        config = read_cse_config(model_name_or_path)
        weights = os.path.join(model_name_or_path, AUTOENCODER_WEIGHTS_NAME)
        if "autoencoder" not in config or not os.path.isfile(weights):
            raise FileNotFoundError(f"{model_name_or_path} lacks the autoencoder's shape or weights ({weights})")
        encoder = CSEModel.from_pretrained(model_name_or_path, pooler_type="cls_before_pooler", **backbone_kwargs)
        autoencoder = TextCNNAutoEncoder(**config["autoencoder"])
        autoencoder.load_state_dict(load_file(weights))
        return cls(encoder.backbone, encoder.tokenizer, autoencoder, detach_target=config["detach_target"])


def interleaved(first: ReconstructionBatch, second: ReconstructionBatch) -> ReconstructionBatch:
    """Rows alternating ``first``'s and ``second``'s, sentence by sentence: the layout of a two-view
    training forward (view 0, view 1 of each sentence)."""
    return ReconstructionBatch(
        *(torch.stack([getattr(first, f.name), getattr(second, f.name)], dim=1).flatten(0, 1) for f in fields(first))
    )


class MomentumSARCSEModel(MomentumDualEncoder, SARCSEModel):
    """SARCSE's model as AdCSE's untied dual encoder (:class:`~cse.methods.adcse.MomentumDualEncoder`):
    encoder q (``backbone``, trained by gradient) encodes view 0, encoder p (``momentum_backbone``,
    theta_p <- m theta_p + (1 - m) theta_q after each optimizer step, AdCSE's Eq. 4, taken by
    :class:`~cse.methods.adcse.AdCSETrainer`) encodes view 1, and one TextCNN autoencoder serves both,
    as the released AdCSE code applies q's head to p's [CLS]:

    * Z = AE(X), X the real tokens of q's last layer: the anchor, the sentence embedding.
    * Z+ = AE(X+), X+ those of p's: the positive, without gradient (AdCSE's h_i+; p has none).
    * L_R (view 0, beta) is SARCSE's: X against the decoder's X' = Dec(Z), gradient to q and the
      autoencoder (to X too unless ``detach_target``).
    * L_R+ (view 1, gamma): X+ (a constant, p having no gradient) against Dec(AE(X+)), with gradient
      to the autoencoder (its encoder and decoder), so that gamma's term trains it as in SARCSE; cut
      there too, it would be a constant. It reaches neither q nor p.

    :meth:`pop_reconstruction` gives both views' rows alternating view 0, view 1 of each sentence,
    the layout of :class:`SARCSEModel`'s, so ``class T(ReconstructionMixin, AdCSETrainer)`` trains it
    unchanged (L = alpha L_I + beta L_R + gamma L_R+, SARCSE's Eq. 12, with AdCSE's L_I). Training
    checkpoints hold p (in the state dict); the export is SARCSE's (``model_kind`` ``"sarcse"``: q's
    backbone and the autoencoder, which :func:`cse.modeling.load_model` reads as a
    :class:`SARCSEModel`), without p.

    Args: those of :class:`SARCSEModel`, and ``momentum``, m.
    """

    def __init__(self, backbone, tokenizer, autoencoder: TextCNNAutoEncoder, detach_target=False, momentum=0.995):
        super().__init__(backbone, tokenizer, autoencoder, detach_target=detach_target, momentum=momentum)
        # Z+ comes from the shared autoencoder: p's pooling layer would be as unused as q's
        self.momentum_backbone.pooler = None

    @classmethod
    def from_encoder(cls, encoder: SARCSEModel, momentum: float = 0.995):
        """Pair ``encoder`` (as q, its backbone and autoencoder shared, not copied) with a momentum
        copy of its backbone as p."""
        if type(encoder) is not SARCSEModel:
            raise TypeError(f"expected a SARCSEModel, got {type(encoder).__name__}")
        return cls(encoder.backbone, encoder.tokenizer, encoder.autoencoder, encoder.detach_target, momentum)

    def forward(self, input_ids, attention_mask, token_type_ids=None) -> torch.Tensor:
        """``(batch, 2, length)`` -> ``(batch, 2, Z's size)``: Z from q, Z+ from p (no gradient)."""
        view = lambda t, v: None if t is None else t[:, v]  # noqa: E731
        reconstruct = self.training and self.autoencoder.has_decoder
        anchors, anchor_batch = self.encode_tokens(
            view(input_ids, 0), view(attention_mask, 0), view(token_type_ids, 0), reconstruct=reconstruct
        )
        positive_view = (view(input_ids, 1), view(attention_mask, 1))
        with torch.no_grad():
            states = self._backbone_outputs(*positive_view, view(token_type_ids, 1), self.momentum_backbone)
        # the autoencoder's graph over p's tokens only where L_R+ trains it
        with torch.set_grad_enabled(reconstruct and torch.is_grad_enabled()):
            positives, positive_batch = self.autoencode(states.last_hidden_state, *positive_view, reconstruct)
        if reconstruct:
            self._reconstruction = interleaved(anchor_batch, positive_batch)
        return torch.stack([anchors, positives.detach()], dim=1)


# AdCSE's momentum encoder pairs a SARCSE model by this class (cse.methods.adcse.momentum_encoder)
SARCSEModel.momentum_class = MomentumSARCSEModel


def corpus_token_ids(dataset):
    for batch in dataset.select_columns(["input_ids"]).iter(batch_size=10_000):
        yield from batch["input_ids"]


class ReconstructionMixin:
    """Eq. 12 on top of any ``CSETrainer`` subclass: ``alpha`` times its loss plus ``beta`` L_R and
    ``gamma`` L_R+ of the model's reconstruction (the model must be a :class:`SARCSEModel` with a
    decoder, encoding both views in one forward, as ``CSEModel.forward`` does).

    Args (besides the trainer's): ``reconstruction_loss`` (a
    :class:`~cse.losses.reconstruction.SelfAdaptiveReconstructionLoss`), ``alpha``, ``beta``, ``gamma``.
    """

    citation = citations.SARCSE

    def __init__(
        self, *args, reconstruction_loss: SelfAdaptiveReconstructionLoss, alpha=1.0, beta=2.5e-4, gamma=2.5e-4, **kwargs
    ):
        super().__init__(*args, **kwargs)
        if not isinstance(self.model, SARCSEModel) or not self.model.autoencoder.has_decoder:
            raise TypeError(
                f"the reconstruction loss needs a SARCSEModel with a decoder, got {type(self.model).__name__}"
                + (" without one (--no_decoder)" if isinstance(self.model, SARCSEModel) else "")
            )
        self.reconstruction_loss = reconstruction_loss.to(self.args.device)
        self.alpha, self.beta, self.gamma = alpha, beta, gamma
        logger.info(
            "reconstruction: alpha %s, beta %s, gamma %s, %s",
            alpha,
            beta,
            gamma,
            reconstruction_loss.get_config_dict(),
        )

    def step_terms(self, model, inputs, separate=False):
        step = super().step_terms(model, inputs, separate)
        batch = self.encoder.pop_reconstruction()
        # Eq. 12's alpha L_I: alpha scales the trainer's own terms
        terms = {name: self.alpha * term for name, term in step.terms.items()}
        views = inputs["input_ids"].shape[1]
        if model.training and views != 2:
            raise ValueError(f"L_R and L_R+ need two views of each sentence, got {views}")
        if batch is None:
            if model.training:
                raise RuntimeError("the model's training forward left no reconstruction")
            return StepLoss(terms, step.statistics, step.outputs)
        per_sentence = self.reconstruction_loss(batch.target, batch.reconstruction, batch.token_ids, batch.mask)
        reconstruction, reconstruction_positive = per_sentence.view(-1, views).mean(0)
        terms.update(
            reconstruction=self.beta * reconstruction, reconstruction_positive=self.gamma * reconstruction_positive
        )
        statistics = {
            **step.statistics,
            "contrastive_loss": total(step.terms),
            "reconstruction_loss": reconstruction,
            "reconstruction_loss_positive": reconstruction_positive,
        }
        return StepLoss(terms, statistics, step.outputs)

    def term_weights(self):
        # Eq. 12's alpha scales every term the other parts give
        scaled = {name: self.alpha * weight for name, weight in super().term_weights().items()}
        return {**scaled, "reconstruction": self.beta, "reconstruction_positive": self.gamma}

    def checkpoint_files(self) -> tuple[str, ...]:
        return super().checkpoint_files() + ((TOKEN_COUNTS_NAME,) if self.reconstruction_loss.needs_counts else ())

    def count_token_frequencies(self) -> None:
        counts = count_tokens(
            corpus_token_ids(self.train_dataset),
            self.reconstruction_loss.token_counts.shape[0],
            self.reconstruction_loss.special_ids,
        )
        self.reconstruction_loss.set_counts(counts.to(self.args.device))
        logger.info(
            "token frequencies: %d tokens of %d types in %d training sentences",
            int(counts.sum()),
            int((counts > 0).sum()),
            len(self.train_dataset),
        )

    def load_token_counts(self, directory: str) -> None:
        path = os.path.join(directory, TOKEN_COUNTS_NAME)
        if not os.path.isfile(path):
            raise FileNotFoundError(
                f"{path} is missing: this checkpoint lacks the token-frequency table of its run (was it saved "
                "with --plain_mse, or by another method?)"
            )
        self.reconstruction_loss.set_counts(load_file(path)["token_counts"].to(self.args.device))
        logger.info("token frequencies restored from %s", path)

    def save_token_counts(self, directory: str) -> None:
        if self.reconstruction_loss.needs_counts and self.args.should_save:
            os.makedirs(directory, exist_ok=True)
            save_file(
                {"token_counts": self.reconstruction_loss.token_counts.cpu()},
                os.path.join(directory, TOKEN_COUNTS_NAME),
            )

    def train(self, resume_from_checkpoint=None, **kwargs):
        resume_from_checkpoint = resolve_checkpoint(self, resume_from_checkpoint)
        if self.reconstruction_loss.needs_counts:
            if resume_from_checkpoint:
                self.load_token_counts(resume_from_checkpoint)
            else:
                self.count_token_frequencies()
        return super().train(resume_from_checkpoint=resume_from_checkpoint, **kwargs)

    def restore_trained(self, checkpoint: str) -> None:
        super().restore_trained(checkpoint)
        if self.reconstruction_loss.needs_counts:
            self.load_token_counts(checkpoint)  # exported beside the model (save_encoder)

    def save_model(self, output_dir: str | None = None, _internal_call: bool = False):
        super().save_model(output_dir, _internal_call=_internal_call)
        # With the weights, before the optimizer and Trainer state: no complete-looking checkpoint lacks it.
        self.save_token_counts(output_dir or self.args.output_dir)

    def save_encoder(self, output_dir: str | None = None) -> None:
        super().save_encoder(output_dir)
        self.save_token_counts(output_dir or self.args.output_dir)


class SARCSETrainer(ReconstructionMixin, CSETrainer):
    """SARCSE as the paper trains it: InfoNCE on Z (the trainer's ``loss``) plus the reconstruction."""


def build_model(model_args: ModelArguments, sarcse_args: SARCSEArguments) -> SARCSEModel:
    """The pretrained backbone and tokenizer ``model_args`` name, with a fresh autoencoder of
    ``sarcse_args``' shape (the backbone's pooling layer is left unused)."""
    encoder = CSEModel.from_pretrained(
        model_args.model_name_or_path,
        pooler_type="cls_before_pooler",
        tokenizer_name_or_path=model_args.tokenizer_name,
        cache_dir=model_args.cache_dir,
        attn_implementation=model_args.attn_implementation,
    )
    autoencoder = TextCNNAutoEncoder(
        encoder.config.hidden_size,
        kernel_sizes=tuple(sarcse_args.kernel_sizes),
        textcnn_channels=sarcse_args.textcnn_channels,
        cnn_channels=sarcse_args.cnn_channels,
        decoder=sarcse_args.decoder,
    )
    return SARCSEModel(encoder.backbone, encoder.tokenizer, autoencoder, detach_target=sarcse_args.detach_target)


def embedding_encoder(model_args: ModelArguments, sarcse_args: SARCSEArguments) -> SARCSEModel:
    """:func:`build_model`, once the model arguments are checked: SimCSE's pooler flags do not apply to Z."""
    if (model_args.pooler_type, model_args.mlp_only_train) != ("cls", True):
        raise CSEUsageError("SARCSE's sentence embedding is Z (Eq. 4): --pooler_type and --mlp_only_train do not apply")
    return build_model(model_args, sarcse_args)


def trainer_kwargs(model: SARCSEModel, model_args, sarcse_args: SARCSEArguments) -> dict:
    """:class:`ReconstructionMixin`'s arguments (Eq. 12)."""
    if not sarcse_args.decoder:
        raise CSEUsageError(
            "--no_decoder leaves SARCSE nothing to add to the other parts (Table 1's ablation is run_sarcse.py "
            "--no_decoder)"
        )
    return {
        "reconstruction_loss": reconstruction_loss(model, sarcse_args),
        "alpha": sarcse_args.alpha,
        "beta": sarcse_args.beta,
        "gamma": sarcse_args.gamma,
    }


def build(model_args: ModelArguments, sarcse_args: SARCSEArguments):
    """SARCSE's model and losses as ``run_sarcse.py`` trains them: ``(model, loss, trainer_class,
    trainer_kwargs)``; with ``--no_decoder`` (Table 1), InfoNCE on Z alone and the plain trainer."""
    model = embedding_encoder(model_args, sarcse_args)
    loss = InfoNCELoss(temperature=model_args.temp)  # Eq. 11 on Z
    if not sarcse_args.decoder:
        return model, loss, CSETrainer, {}
    return model, loss, SARCSETrainer, trainer_kwargs(model, model_args, sarcse_args)


def reconstruction_loss(model: SARCSEModel, sarcse_args: SARCSEArguments) -> SelfAdaptiveReconstructionLoss:
    return SelfAdaptiveReconstructionLoss(
        len(model.tokenizer),
        special_token_ids(model.tokenizer),
        theta=sarcse_args.theta,
        freq_lambda=sarcse_args.freq_lambda,
        self_adaptive=not sarcse_args.plain_mse,
        reduction=sarcse_args.reconstruction_reduction,
    )


RECORD = register(
    MethodRecord(
        name="sarcse",
        display_name="SARCSE",
        citation=citations.SARCSE,
        build=build,
        docs="docs/methods/sarcse.md",
        method_arguments=SARCSEArguments,
        arguments=(SARCSEModelArguments, DataArguments, SARCSETrainingArguments),
        bench={"sarcse": BenchShape("run_sarcse", "configs/sarcse_roberta_base.yaml", "roberta", overhead_target=1.3)},
        tiny_args=("--textcnn_channels", "16", "--cnn_channels", "2"),
        model_kinds={"sarcse": SARCSEModel},
        part=Part(
            trainer=ReconstructionMixin,
            equation="the embedding is Z, the code of a TextCNN autoencoder over the backbone's real tokens (Eq. 4), "
            "and L = alpha L + beta L_R + gamma L_R+ (Eq. 12): alpha scales every other term, L_R and L_R+ "
            "reconstruct each view's tokens with frequency weights (Eqs. 8-10; Liu et al. 2024)",
            replaces=frozenset({"embedding"}),
            encoder=embedding_encoder,
            trainer_kwargs=trainer_kwargs,
            notes={
                "softmax": "The replaced softmax is over Z vectors (MixCSE's mixtures are of Z).",
                "positives": "The positives' encoder (AdCSE's momentum copy p of the backbone) shares the "
                "autoencoder with q, as the released AdCSE shares its head; Z+ carries no gradient, and L_R+ "
                "reconstructs p's tokens with gradient to the autoencoder only.",
                EVERY_PART: "SARCSE's alpha scales the other part's terms too (Eq. 12; its mixin comes first).",
            },
            order=0,
        ),
    )
)

__all__ = [
    "SARCSEArguments",
    "SARCSEModel",
    "SARCSEModelArguments",
    "SARCSETrainer",
    "SARCSETrainingArguments",
    "RECORD",
    "MomentumSARCSEModel",
    "ReconstructionMixin",
    "build",
    "build_model",
    "reconstruction_loss",
]
