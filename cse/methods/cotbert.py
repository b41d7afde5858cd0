"""CoT-BERT (Zhang, Chang and Li, "CoT-BERT: Enhancing Unsupervised Sentence Representation through
Chain-of-Thought", ICANN 2024): PromptBERT's prompt-based contrastive learning with three changes.

* **Three templates, two [MASK]s each** (PromptBERT's views hook, with a third view):
  view 0 is the sentence inside the anchor template ``The sentence of "[X]" means [MASK] , so it can be
  summarized as [MASK] .``, view 1 inside the positive one (``The sentence : "[X]" ...``), view 2 inside
  the hard-negative one (``... does not mean [MASK] , so it cannot be summarized as [MASK] .``); the
  embedding is the last [MASK]'s state (:class:`cse.encoders.cotbert.CoTBERTEncoder`).
* **[PAD] template denoising** (Sect. 3.3): each view's state less that of its template whose sentence
  slot holds as many attended [PAD]s as the sentence has tokens; then SimCSE's training MLP.
* **The extended InfoNCE** (Eq. 2-3, :class:`cse.losses.cotbert.CoTBERTLoss`): each anchor's
  denominator holds every positive, every negative, and every (positive i, negative j) similarity.

Each flag's default is the released code's reading (ZBWpro/CoT-BERT, which produced the published
numbers); docs/methods/cotbert.md lists where the paper reads otherwise (flags C1-C7).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..encoders.cotbert import DENOISINGS, CoTBERTEncoder
from ..encoders.prompt import position_start
from ..errors import CSEUsageError
from ..losses.cotbert import CITATION, CoTBERTLoss
from ..prompts import template_problem
from ..ranges import RANGE, Range, check_choices, check_fields, flag
from ..registry import BenchShape, MethodRecord, register
from . import promptbert

# The released train.py's templates (anchor, also the evaluation's; positive; hard negative), by backbone
# family: code-for-BERT/train.py l.507-509, code-for-RoBERTa/train.py l.503-505.
TEMPLATES = {
    "bert": (
        '*cls*_The_sentence_of_"*sent_0*"_means_*mask*_,_so_it_can_be_summarized_as_*mask*_._*sep+*',
        '*cls*_The_sentence_:_"*sent_0*"_means_*mask*_,_so_it_can_be_summarized_as_*mask*_._*sep+*',
        '*cls*_The_sentence_:_"*sent_0*"_does_not_mean_*mask*_,_so_it_cannot_be_summarized_as_*mask*_._*sep+*',
    ),
    "roberta": (
        "*cls*_The_sentence_of_'_*sent_0*_'_means_*mask*_,_so_it_can_be_summarized_as_*mask*_._*sep+*",
        "*cls*_The_sentence_:_'_*sent_0*_'_means_*mask*_,_so_it_can_be_summarized_as_*mask*_._*sep+*",
        "*cls*_The_sentence_:_'_*sent_0*_'_does_not_mean_*mask*_,_so_it_cannot_be_summarized_as_*mask*_._*sep+*",
    ),
}
TEMPLATE_FLAGS = ("template", "positive_template", "negative_template")


@dataclass
class CoTBERTArguments:
    template: str | None = flag(
        None,
        "The anchor's template (view 0, also the evaluation's), in the released syntax (*cls*, *sent_0*, two "
        "*mask*, *sep+*, _ for a space). Default: the released train.py's for the backbone.",
    )
    positive_template: str | None = flag(None, "The positive's template (view 1). Default: the released train.py's.")
    negative_template: str | None = flag(
        None, "The hard negative's template (view 2). Default: the released train.py's."
    )
    denoise: str = flag(
        "pad",
        "Template denoising in training: pad, the state of the template holding as many attended [PAD]s as the "
        "sentence has tokens (the paper's and the released code's); position, PromptBERT's (the paper's Table 6 "
        "ablation, not in the release); none.",
        choices=list(DENOISINGS),
    )
    bias_gradient: bool = flag(
        True, "Let the loss's gradient reach the encoder through the template noise (the released code does)."
    )
    mlp: bool = flag(True, "SimCSE's dense + tanh MLP after the denoising, in training only (the released code's).")
    pair_negatives: bool = flag(
        True, "The a_i+j- block of Eq. 3, sim(positive i, negative j) in each denominator (false: Table 4's ablation)."
    )
    loss_group_size: int = flag(
        128,
        "Sentences per loss: the batch is cut into groups of this many, each its own Eq. 3 over its own sentences, "
        "the losses averaged; 128 as each of the released run's two DataParallel replicas (global batch 256). 0: "
        "one loss over the whole (global) batch.",
        **{RANGE: Range(0, integer=True)},
    )

    def __post_init__(self):
        check_fields(self)
        check_choices(self)
        for name in TEMPLATE_FLAGS:
            value = getattr(self, name)
            problem = None if value is None else template_problem(value, masks=2)
            if problem is not None:
                raise ValueError(f"--{name} {value!r}: {problem}")


class CoTBERT(promptbert.PromptBERT):
    """CoT-BERT's part: PromptBERT's part (its backbone's checks and its views hook, here with a third
    view) with CoT-BERT's encoder (:meth:`encoder`) and its extended InfoNCE as the whole objective
    (:meth:`terms`)."""

    name = "cotbert"
    display_name = "CoT-BERT"
    citation = CITATION
    docs = "docs/methods/cotbert.md"
    equation = (
        "three views: the sentence inside an anchor, a positive and a hard-negative template of two [MASK]s, each "
        "embedded as the last [MASK]'s state less that of its template holding as many [PAD]s as the sentence has "
        "tokens; l_i = -log( e^{s(r_i, r+_i)/tau} / sum_j (e^{s(r_i, r+_j)/tau} + e^{s(r_i, r-_j)/tau} + "
        "e^{s(r+_i, r-_j)/tau}) ) (Zhang et al. 2024)"
    )
    Flags = CoTBERTArguments
    replaces = frozenset({"views", "embedding", "softmax"})
    changes = frozenset({"token_inputs"})  # the templates' tokens around each sentence
    refuses = {
        "positives": "another encoder of the positives (AdCSE's momentum encoder p) would encode the positive "
        "template's view by its own pooler, while CoT-BERT's positive is a [MASK] state less a template noise that "
        "a second forward computes, and its loss reads a third view that p does not encode: neither paper defines "
        "the pair",
    }
    notes = {}

    def __init__(self, args=None, model_args=None):
        super().__init__(args, model_args)
        self.contrastive: CoTBERTLoss | None = None  # the extended InfoNCE (loss)

    # --- the build ------------------------------------------------------------------------------

    def encoder(self, model_args) -> CoTBERTEncoder:
        """The pretrained backbone read at the last [MASK] of the three templates."""
        backbone, tokenizer = self.prompt_backbone(model_args)
        family = "roberta" if backbone.config.model_type in promptbert.ROBERTA_TYPES else "bert"
        templates = [getattr(self.args, name) or TEMPLATES[family][i] for i, name in enumerate(TEMPLATE_FLAGS)]
        try:
            encoder = CoTBERTEncoder(
                backbone,
                tokenizer,
                templates,
                denoise=self.args.denoise,
                bias_gradient=self.args.bias_gradient,
                mlp=self.args.mlp,
                # PromptBERT's denoising at the sentence forward's own position ids (not in the release)
                bias_start=position_start(backbone),
            )
        except ValueError as err:
            raise CSEUsageError(str(err), hint="write the template as the released train.py does") from err
        return self.keep_templates(encoder)

    def loss(self, loss, model, replaced):
        """None: the extended InfoNCE of the three views is the whole objective (:meth:`terms`)."""
        group = self.args.loss_group_size or None
        self.contrastive = CoTBERTLoss(self.model_args.temp, self.args.pair_negatives, group_size=group)
        return None

    # --- the step -------------------------------------------------------------------------------

    def terms(self, step):
        views = step.outputs["embeddings"]
        return {"contrastive": self.contrastive(views[:, 0], views[:, 1], views[:, 2])}, {}

    def term_weights(self) -> dict[str, float]:
        return {"contrastive": 1.0}

    # --- evaluation -----------------------------------------------------------------------------

    def selection_pooler(self) -> str | None:
        """None: the model selection reads the evaluation's embedding, the raw last-[MASK] state (the
        released training passes --mask_embedding_sentence_delta_no_delta_eval)."""
        return None


RECORD = register(
    MethodRecord(
        part=CoTBERT,
        # timed at SimCSE's shapes (64 x 32), against which the target is stated, as PromptBERT's. Unmeasured on a
        # GPU: three views of up to 30 + 20 tokens against SimCSE's two of 32 (about 2.3 times the tokens), and
        # the noise rows (up to 31 per template, of the batch's length: about half as many rows again at batch
        # 64), all with backward.
        bench={
            "cotbert": BenchShape(
                "run_cotbert",
                "configs/cotbert_bert_base.yaml",
                "bert",
                ("--per_device_train_batch_size", "64", "--max_seq_length", "32", "--loss_group_size", "0"),
                overhead_target=3.5,
            )
        },
        released_flags={
            "--mask_embedding_sentence_template": "the released train.py's anchor template (also the evaluation's)",
            "--mask_embedding_sentence_different_template": "the released train.py's positive template",
            "--mask_embedding_sentence_negative_template": "the released train.py's hard-negative template",
            "--mask_embedding_sentence_delta": "the released [PAD] template denoising",
            "--mask_embedding_sentence_delta_no_delta_eval": "the released dev selection without the denoising",
            "--mask_num": "the released number of [MASK]s per template (2; the last one's state is the embedding)",
        },
    )
)
