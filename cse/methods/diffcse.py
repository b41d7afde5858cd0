"""DiffCSE (Chuang et al., "DiffCSE: Difference-based Contrastive Learning for Sentence Embeddings",
NAACL 2022): unsupervised SimCSE plus a conditional replaced-token detection, L = L_contrast +
lambda L_RTD (Sect. 3).

One training step, as the authors' code (voidism/DiffCSE, ``diffcse/models.py`` ``cl_forward``, which
produced the published numbers) orders it:

1. both dropout views of each sentence through the encoder; each view's [CLS] through the BatchNorm
   projector is its embedding h (:class:`cse.encoders.diffcse.DiffCSEEncoder`), which InfoNCE reads;
2. each view's tokens masked on their own (:func:`cse.losses.diffcse.mask_tokens`, 80/10/10 at
   ``--masking_ratio``), and a frozen masked language model G (``--generator_name_or_path``, loaded as
   the backbone is) fills them in, greedily, without gradient (:meth:`DiffCSE.generate`);
3. the discriminator D, a trainable copy of the pretrained backbone, reads the edited view with the
   view's h in place of position 0's embedding and predicts, at every position, whether the token was
   replaced; the cross-entropy of its two classes, weighted by lambda, is the term ``rtd``
   (:func:`cse.losses.diffcse.rtd_loss`), whose gradient reaches the encoder through h.

The generator is held by the part, outside the model and its optimizer, on the run's device: it never
changes, so a resumed run loads it again from ``--generator_name_or_path`` (recorded in
``run_args.json``, which a resume must match). D, its head and the projector are the model's: they are
in every checkpoint and left out of the export. The masks, G's dropout (on, as in the release, where G
is a submodule of the model in training mode) and D's dropout are drawn from the run's torch generator,
which every checkpoint keeps, so a killed run resumes to the same weights.

``--variant`` selects the released code's readings (the default: they produced the published numbers)
or the paper's where the two differ (docs/methods/diffcse.md, flags D1-D5): greedy or sampled
generation, G's output at every position or only at the masked ones, 80/10/10 or [MASK]-only
masking, the loss's mean over the padded batch or sum over real tokens, G's dropout.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch
from transformers import AutoConfig, AutoModelForMaskedLM

from ..encoders.diffcse import DiffCSEEncoder
from ..errors import CSEUsageError
from ..losses.diffcse import (
    CITATION,
    MASKING_RULES,
    POSITIONS,
    REDUCTIONS,
    edited_inputs,
    mask_tokens,
    rtd_loss,
    rtd_statistics,
)
from ..modeling import check_model_path, load_encoder, prepared_attention_mask
from ..parts import EVERY_PART, Part, Step
from ..ranges import RANGE, Range, check_choices, check_fields, flag, non_negative
from ..registry import BACKBONE, BenchShape, MethodRecord, register

logger = logging.getLogger(__name__)

VARIANTS = ("released", "paper")
DECODINGS = ("argmax", "sample")
# what each variant sets where a flag is left out: (decoding, generator positions, masking, reduction, G's dropout)
VARIANT_DEFAULTS = {
    "released": ("argmax", "every", "bert", "padded_mean", True),
    "paper": ("sample", "masked", "mask", "sum", False),
}


@dataclass
class DiffCSEArguments:
    variant: str = flag(
        "released",
        "released: the authors' code, which produced the published numbers (greedy generation at every position, "
        "80/10/10 masking, the RTD loss's mean over the padded batch, the generator's dropout on); paper: the "
        "paper's readings (sampled generation at the masked positions only, [MASK]-only masking, the sum over real "
        "tokens, the generator fixed). Each can be set on its own.",
        choices=list(VARIANTS),
    )
    lambda_weight: float = flag(
        0.005, "lambda, the weight of L_RTD (the released run's and Table A.1's for STS).", **{RANGE: non_negative}
    )
    masking_ratio: float = flag(
        0.30,
        "The share of each view's ordinary tokens selected for masking (BERT-base STS 0.30; RoBERTa-base 0.20).",
        **{RANGE: Range(0, 1, low_open=True)},
    )
    generator_name_or_path: str | None = flag(
        None,
        "G, the frozen masked language model: a directory or a hub name, loaded as the backbone is; its vocabulary "
        "must be the backbone's (the released runs: distilbert-base-uncased for BERT, distilroberta-base for "
        "RoBERTa). Default: the backbone's own checkpoint as a masked language model.",
    )
    generator_decoding: str | None = flag(
        None,
        "How G's output token is chosen: argmax (released) or sample (the paper's 'sampling from'). Default: the "
        "variant's.",
        choices=list(DECODINGS),
    )
    generator_positions: str | None = flag(
        None,
        "Where the edited sentence takes G's token: every position (released: an unmasked position G changes "
        "counts as replaced) or the masked ones only (the paper's x''). Default: the variant's.",
        choices=list(POSITIONS),
    )
    masking_rule: str | None = flag(
        None,
        "bert: a selected token becomes [MASK] (80%), a random id (10%) or stays (10%), as the released collator; "
        "mask: [MASK] always (the paper's x' = m . x). Default: the variant's.",
        choices=list(MASKING_RULES),
    )
    rtd_reduction: str | None = flag(
        None,
        "padded_mean: the mean over every position of the padded batch (released); sum: over each sentence's real "
        "tokens, summed over the batch (the paper's L_RTD; lambda was tuned for the released scale); token_mean: "
        "the mean over real tokens. Default: the variant's.",
        choices=list(REDUCTIONS),
    )
    generator_dropout: bool | None = flag(
        None,
        "Run G with its dropout on (released: G is a submodule of the model in training mode); off: the paper's "
        "fixed G. Default: the variant's.",
    )

    def __post_init__(self):
        check_fields(self)
        if self.variant in VARIANT_DEFAULTS:
            defaults = VARIANT_DEFAULTS[self.variant]
            names = ("generator_decoding", "generator_positions", "masking_rule", "rtd_reduction", "generator_dropout")
            for name, default in zip(names, defaults):
                if getattr(self, name) is None:
                    setattr(self, name, default)
        check_choices(self)


class DiffCSE(Part):
    """DiffCSE's part: its encoder (the BatchNorm projector in training, the discriminator D) replaces
    the sentence embedding; :meth:`terms` adds ``rtd``, lambda L_RTD, from the step's two views."""

    name = "diffcse"
    display_name = "DiffCSE"
    citation = CITATION
    docs = "docs/methods/diffcse.md"
    equation = (
        "+ lambda L_RTD: a frozen masked language model G fills in each view's masked tokens, and a discriminator D, "
        "with the view's embedding h (its [CLS] through a BatchNorm projector) in place of [CLS], predicts which "
        "tokens were replaced (cross-entropy); the gradient reaches the encoder through h (Chuang et al. 2022)"
    )
    Flags = DiffCSEArguments
    replaces = frozenset({"embedding"})
    refuses = {
        "positives": "another encoder of the positives (AdCSE's momentum encoder p) would need a momentum copy of "
        "DiffCSE's BatchNorm projector, and its positives, encoded without gradient, would give the discriminator a "
        "condition no gradient reaches: neither paper defines it",
    }
    notes = {
        "softmax": "L_RTD is added to the replaced softmax's loss (MixCSE's mixed negatives), both over the same "
        "projected embeddings h; D is conditioned on each view's h as alone; MixCSE's model selection through "
        "SimCSE's MLP does not apply (DiffCSE's projector is used in training only).",
        EVERY_PART: "Another part's extra forwards (V-advCSE's perturbed anchors) embed through DiffCSE's projector, "
        "in "
        "training mode (BatchNorm over the rows of that forward); only the two-view forward's embeddings condition D.",
    }

    def __init__(self, args=None, model_args=None):
        super().__init__(args, model_args)
        self.generator = None  # G (encoder)
        self.special_ids: torch.Tensor | None = None  # never masked (encoder)
        self.mask_id = self.cls_id = self.vocab_size = None

    # --- before the build ---------------------------------------------------------------------

    def generator_path(self) -> str:
        return self.args.generator_name_or_path or self.model_args.model_name_or_path

    def prepare_run(self, data_args, training_args) -> list:
        """Refuse, before the corpus is read, a generator that cannot load or reads another vocabulary."""
        model_args = self.model_args
        if (model_args.pooler_type, model_args.mlp_only_train) != ("cls", True):
            raise CSEUsageError(
                "DiffCSE's embedding is [CLS] through its BatchNorm projector in training and [CLS] before it at "
                "evaluation (the released --pooler_type cls --mlp_only_train): other pooler flags do not apply",
                hint="leave --pooler_type and --mlp_only_train out",
            )
        path = check_model_path(self.generator_path(), model_args.cache_dir, flag="--generator_name_or_path")
        try:
            generator = AutoConfig.from_pretrained(path, cache_dir=model_args.cache_dir)
            backbone = AutoConfig.from_pretrained(
                check_model_path(model_args.model_name_or_path, model_args.cache_dir), cache_dir=model_args.cache_dir
            )
        except (OSError, ValueError) as err:
            raise CSEUsageError(
                f"cannot read the generator's configuration ({path}): {str(err).strip().splitlines()[0]}",
                hint="pass a masked language model's directory or hub name with --generator_name_or_path",
            ) from err
        if generator.vocab_size != backbone.vocab_size:
            raise CSEUsageError(
                f"the generator {path} has a vocabulary of {generator.vocab_size} ids, the backbone "
                f"{model_args.model_name_or_path} one of {backbone.vocab_size}: G must read and write the backbone's "
                "token ids",
                hint="pass a generator of the backbone's tokenizer (distilbert-base-uncased for BERT uncased, "
                "distilroberta-base for RoBERTa)",
            )
        return []

    # --- the build ------------------------------------------------------------------------------

    def encoder(self, model_args) -> DiffCSEEncoder:
        """The pretrained backbone with DiffCSE's projector and discriminator; loads G."""
        base = load_encoder(model_args, pooler_type="cls_before_pooler", mlp_only_train=False)
        tokenizer = base.tokenizer
        if tokenizer.mask_token_id is None or tokenizer.cls_token_id is None:
            raise CSEUsageError(
                f"the tokenizer ({type(tokenizer).__name__}) has no mask or [CLS] token, which DiffCSE's masking "
                "and discriminator read",
                hint="pass a masked language model's tokenizer (BERT, RoBERTa)",
            )
        path = self.generator_path()
        try:
            self.generator, loading = AutoModelForMaskedLM.from_pretrained(
                path, cache_dir=model_args.cache_dir, output_loading_info=True
            )
        except (OSError, ValueError) as err:
            raise CSEUsageError(
                f"cannot load the generator {path} as a masked language model: {str(err).strip().splitlines()[0]}",
                hint="pass a masked language model's directory or hub name with --generator_name_or_path",
            ) from err
        if loading["missing_keys"]:
            # an encoder saved without its masked-LM head (an exported sentence encoder) loads with a random
            # one: G's edits would then be random tokens, not a language model's plausible ones
            logger.warning(
                "DiffCSE's generator %s has no trained masked-LM head (%d weights newly initialised: %s): its edits "
                "are random tokens; pass a masked language model with --generator_name_or_path",
                path,
                len(loading["missing_keys"]),
                ", ".join(sorted(loading["missing_keys"])[:3]),
            )
        self.generator.requires_grad_(False)
        logger.info("DiffCSE's generator: %s (%s, frozen)", path, type(self.generator).__name__)
        self.special_ids = torch.tensor(sorted(set(tokenizer.all_special_ids)), dtype=torch.long)
        self.mask_id, self.cls_id, self.vocab_size = tokenizer.mask_token_id, tokenizer.cls_token_id, len(tokenizer)
        return DiffCSEEncoder.from_encoder(base)

    # --- the trainer ----------------------------------------------------------------------------

    def setup(self, trainer) -> None:
        trainer.refuse_sharding(
            "DiffCSE", "the discriminator's forward runs the unwrapped model, outside FSDP", zero3=False
        )
        device = trainer.args.device
        self.generator.to(device).train(self.args.generator_dropout)
        self.special_ids = self.special_ids.to(device)

    def generate(self, masked: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """G's token at every position of the masked ``(rows, length)`` ids, without gradient: the argmax
        of its logits, or a sample from their softmax (Gumbel-max: argmax(logits - log E), E ~ Exp(1))."""
        with torch.no_grad():
            # the 4D mask built from the shape alone: given the 2D one, transformers reads it on the host
            mask = prepared_attention_mask(self.generator, attention_mask)
            logits = self.generator(input_ids=masked, attention_mask=mask).logits
            if self.args.generator_decoding == "sample":
                logits = logits.float() - torch.empty_like(logits, dtype=torch.float32).exponential_().log()
            return logits.argmax(-1)

    def terms(self, step: Step):
        """``rtd``, lambda L_RTD of the step's two views, each conditioned on its own embedding; and the
        released code's accuracies of D. None outside training."""
        if not step.encoder.training:
            return {}, {}
        inputs = step.inputs
        ids = inputs["input_ids"].flatten(0, 1)
        attention = inputs["attention_mask"].flatten(0, 1)
        types = inputs.get("token_type_ids")
        types = None if types is None else types.flatten(0, 1)
        h = step.outputs["embeddings"].flatten(0, 1)
        args = self.args
        masked, selected = mask_tokens(
            ids, self.special_ids, self.mask_id, self.vocab_size, args.masking_ratio, args.masking_rule
        )
        generated = self.generate(masked, attention)
        edited, replaced = edited_inputs(
            ids, generated, attention, self.cls_id, selected if args.generator_positions == "masked" else None
        )
        logits = step.encoder.discriminate(edited, attention, types, h)
        loss = rtd_loss(logits, replaced, attention, args.rtd_reduction)
        statistics = {"loss_rtd": loss.detach(), **rtd_statistics(logits, replaced, attention)}
        return {"rtd": args.lambda_weight * loss}, statistics

    def term_weights(self) -> dict[str, float]:
        return {"rtd": self.args.lambda_weight}


RECORD = register(
    MethodRecord(
        part=DiffCSE,
        # unmeasured on a GPU: D's forward and backward over the 2B edited rows double SimCSE's step, and G's
        # forward (DistilBERT: half of BERT-base's layers, no backward) adds about a sixth. The bench's random
        # backbone is also its generator (BACKBONE): a G of BERT-base's size, so the figure is an upper bound
        bench={
            "diffcse": BenchShape(
                "run_diffcse",
                "configs/diffcse_bert_base.yaml",
                "bert",
                ("--generator_name_or_path", BACKBONE),
                overhead_target=2.5,
            )
        },
        released_flags={
            "--generator_name": "the released flag of the generator (here --generator_name_or_path)",
            "--batchnorm": "the released projector with BatchNorm (always on here; the paper's 'w/o BatchNorm' "
            "ablation is not implemented)",
            "--before_mlp": "the released option to condition D on [CLS] before the projector (not implemented)",
        },
    )
)
