"""PromptBERT (Jiang et al., "PromptBERT: Improving BERT Sentence Embeddings with Prompts", EMNLP 2022),
unsupervised: SimCSE whose sentence embedding is the last hidden state at a prompt template's
``[MASK]``, with three changes to SimCSE's step.

* **Two templates as the two views** (:meth:`PromptBERT.views`): view 0 is the sentence inside
  template 1, view 1 inside template 2 (released run.sh l.80-81, 98-99: BERT ``This sentence of
  "[X]" means [MASK].`` and ``This sentence : "[X]" means [MASK].``; RoBERTa ``This sentence : ' [X] '
  means <mask>.`` and ``The sentence : ' [X] ' means <mask>.``). Dropout differs between the views
  as in SimCSE; the templates make them differ further.
* **The [MASK] embedding with template denoising** (:class:`cse.encoders.prompt.PromptEncoder`):
  h - b(k), b(k) the [MASK] state of the same template with the sentence left out, at the position
  ids its tokens have around a sentence of k tokens; then SimCSE's training MLP (dense + tanh).
* **The evaluation** reads the raw [MASK] state of template 1 with a period appended to the
  sentence (the released evaluation.py, which produced the published numbers; ``--test_embedding``).

``--variant`` selects the released code's readings (the default: they produced the published numbers)
or the paper's where the two differ (docs/methods/promptbert.md): the test embedding (raw, or
denoised as the paper's "denoised sentence representation") and RoBERTa's bias position ids.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..encoders.prompt import DENOISED_POOLER, RAW_POOLER, PromptEncoder, position_start
from ..errors import CSEUsageError
from ..modeling import load_encoder
from ..parts import Part
from ..prompts import TemplateTokens, template_problem
from ..ranges import check_choices, check_fields, flag
from ..registry import BenchShape, MethodRecord, register
from ..template_views import TemplateViews

CITATION = (  # one field a line (the model card's reader); the author line split in the source only
    "@inproceedings{jiang2022promptbert,\n"
    "  title = {{PromptBERT}: Improving {BERT} Sentence Embeddings with Prompts},\n"
    "  author = {Jiang, Ting and Jiao, Jian and Huang, Shaohan and Zhang, Zihan and Wang, Deqing and Zhuang, Fuzhen "
    "and Wei, Furu and Huang, Haizhen and Deng, Denvy and Zhang, Qi},\n"
    "  booktitle = {Proceedings of the 2022 Conference on Empirical Methods in Natural Language Processing},\n"
    "  pages = {8826--8837},\n"
    "  year = {2022},\n"
    "}"
)

# The released run.sh's templates (view 0, the evaluation's; view 1), by backbone family
TEMPLATES = {
    "bert": (
        '*cls*_This_sentence_of_"*sent_0*"_means*mask*.*sep+*',
        '*cls*_This_sentence_:_"*sent_0*"_means*mask*.*sep+*',
    ),
    "roberta": (
        "*cls*_This_sentence_:_'_*sent_0*_'_means*mask*.*sep+*",
        "*cls*_The_sentence_:_'_*sent_0*_'_means*mask*.*sep+*",
    ),
}
ROBERTA_TYPES = ("roberta", "xlm-roberta", "camembert")
VARIANTS = ("released", "paper")
# what each variant sets where a flag is left out: (bias positions, test embedding)
VARIANT_DEFAULTS = {"released": ("released", "raw"), "paper": ("model", "denoised")}
BIAS_POSITIONS = ("released", "model")
EMBEDDINGS = ("raw", "denoised")


@dataclass
class PromptBERTArguments:
    variant: str = flag(
        "released",
        "released: the authors' code, which produced the published numbers (the raw [MASK] state at test, the "
        "template bias at position ids from 0); paper: the denoised [MASK] state at test, the bias at the sentence "
        "forward's own position ids (RoBERTa's start after its padding index). Each can be set on its own.",
        choices=list(VARIANTS),
    )
    template: str | None = flag(
        None,
        "View 0's template, also the evaluation's, in the released syntax (*cls*, *sent_0*, *mask*, *sep+*, _ for "
        "a space). Default: the released run.sh's for the backbone.",
    )
    positive_template: str | None = flag(
        None, "View 1's template (the released --mask_embedding_sentence_different_template). Default: run.sh's."
    )
    denoise: bool = flag(True, "Template denoising in training: subtract each view's template bias.")
    bias_positions: str | None = flag(
        None,
        "The bias forward's position ids: released, explicit ids from 0 (BERT's own; RoBERTa's sentence forward "
        "starts at 2); model, the ids the sentence's own forward has. Default: the variant's.",
        choices=list(BIAS_POSITIONS),
    )
    bias_gradient: bool = flag(
        True, "Let the loss's gradient reach the encoder through the template bias (the released code does)."
    )
    test_embedding: str | None = flag(
        None,
        "The embedding evaluated and exported: raw, the [MASK] state (released evaluation.py); denoised, less "
        "template 1's bias. Default: the variant's.",
        choices=list(EMBEDDINGS),
    )
    selection_embedding: str = flag(
        "denoised",
        "The model selection's embedding (STS-B dev): denoised, as the released trainer's evaluation computes it "
        "(its training flags include --mask_embedding_sentence_delta); raw.",
        choices=list(EMBEDDINGS),
    )

    def __post_init__(self):
        check_fields(self)
        if self.variant in VARIANT_DEFAULTS:
            positions, embedding = VARIANT_DEFAULTS[self.variant]
            self.bias_positions = positions if self.bias_positions is None else self.bias_positions
            self.test_embedding = embedding if self.test_embedding is None else self.test_embedding
        check_choices(self)
        for name in ("template", "positive_template"):
            value = getattr(self, name)
            problem = None if value is None else template_problem(value)
            if problem is not None:
                raise ValueError(f"--{name} {value!r}: {problem}")


class PromptBERT(Part):
    """PromptBERT's part: the two views inside two templates (:meth:`views`, in the data loader), the
    [MASK] embedding with template denoising (:meth:`encoder`: :class:`~cse.encoders.prompt.PromptEncoder`),
    and the model selection's embedding (:meth:`selection_pooler`)."""

    name = "promptbert"
    display_name = "PromptBERT"
    citation = CITATION
    docs = "docs/methods/promptbert.md"
    equation = (
        "view v is the sentence inside template v, its embedding h - b: the last hidden state at the template's "
        "[MASK] less that of the same template with the sentence left out at the same position ids (template "
        "denoising), through SimCSE's MLP in training; evaluated as the raw [MASK] state (Jiang et al. 2022)"
    )
    Flags = PromptBERTArguments
    replaces = frozenset({"views", "embedding"})
    changes = frozenset({"token_inputs"})  # the template's tokens around each sentence
    refuses = {
        "positives": "another encoder of the positives (AdCSE's momentum encoder p) would encode the template-2 view "
        "by its own pooler, while PromptBERT's positive is a [MASK] state less a template bias that a second forward "
        "computes: neither paper defines p's form of it",
    }
    notes = {
        "softmax": "The replaced softmax (MixCSE's mixed negatives) runs over PromptBERT's denoised [MASK] embeddings "
        "of the two templates' views, after the training MLP; its model selection's pooler through SimCSE's MLP "
        "does not apply to the [MASK] embedding: the model selection reads the raw [MASK] state of template 1.",
    }

    def __init__(self, args=None, model_args=None):
        super().__init__(args, model_args)
        self.tokens: list[TemplateTokens] = []  # the two views' templates (encoder)
        self.special_ids: tuple[int, ...] = ()  # the tokenizer's (keep_templates)
        self.pad_id = 0
        self.template_views: TemplateViews | None = None  # the views of the corpus' sentences (corpus)

    # --- the build ------------------------------------------------------------------------------

    def prompt_backbone(self, model_args):
        """``(backbone, tokenizer)`` of the pretrained model, refused where SimCSE's pooler flags are
        set (they do not apply) or the tokenizer has no mask token (CoT-BERT's part shares this)."""
        if (model_args.pooler_type, model_args.mlp_only_train) != ("cls", True):
            raise CSEUsageError(
                f"{self.display_name}'s sentence embedding is the [MASK] state of its template: --pooler_type and "
                "--mlp_only_train do not apply",
                hint="leave them out (the MLP trains and is never evaluated, as --mlp_only_train)",
            )
        base = load_encoder(model_args, pooler_type="cls_before_pooler", mlp_only_train=False)
        backbone, tokenizer = base.backbone, base.tokenizer
        if tokenizer.mask_token is None:
            raise CSEUsageError(
                f"the tokenizer ({type(tokenizer).__name__}) has no mask token, which {self.display_name}'s "
                "template reads",
                hint="pass a masked language model's tokenizer (BERT, RoBERTa)",
            )
        return backbone, tokenizer

    def encoder(self, model_args) -> PromptEncoder:
        """The pretrained backbone read at the template's [MASK]; SimCSE's pooler flags do not apply."""
        backbone, tokenizer = self.prompt_backbone(model_args)
        defaults = TEMPLATES["roberta" if backbone.config.model_type in ROBERTA_TYPES else "bert"]
        templates = (self.args.template or defaults[0], self.args.positive_template or defaults[1])
        try:
            encoder = PromptEncoder(
                backbone,
                tokenizer,
                templates,
                denoise=self.args.denoise,
                bias_start=0 if self.args.bias_positions == "released" else position_start(backbone),
                bias_gradient=self.args.bias_gradient,
                test_embedding=self.args.test_embedding,
            )
        except ValueError as err:
            raise CSEUsageError(str(err), hint="write the template as the released run.sh does") from err
        return self.keep_templates(encoder)

    def keep_templates(self, encoder):
        """``encoder``, its templates and its tokenizer's special and padding ids kept for :meth:`views`."""
        self.tokens = encoder.tokens
        self.special_ids = tuple(sorted(set(encoder.tokenizer.all_special_ids)))
        self.pad_id = encoder.tokenizer.pad_token_id
        return encoder

    # --- the batch ------------------------------------------------------------------------------

    def corpus(self, tokenized, tokenizer, data_args, training_args):
        """The corpus with each sentence inside each template (:class:`cse.template_views.TemplateViews`)
        in place of the sentence's own columns, made once and cached with the corpus
        (``--preprocessing_num_workers`` processes; ``--overwrite_cache`` makes them again)."""
        if not self.tokens:
            raise RuntimeError(f"{self.display_name}'s views are made with the templates its encoder reads")
        max_length = data_args.max_seq_length if data_args.pad_to_max_length else None
        self.template_views = TemplateViews(
            tuple(self.tokens),
            self.special_ids,
            self.pad_id,
            token_types="token_type_ids" in tokenized.column_names,
            width=TemplateViews.static_width(self.tokens, max_length),
        )
        return self.template_views.corpus(
            tokenized, data_args.preprocessing_num_workers, load_from_cache_file=not data_args.overwrite_cache
        )

    def views(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """View v of each sentence inside template v (``prefix + sentence + suffix``,
        :func:`cse.prompts.wrapped_views`), read from the corpus' columns (:meth:`corpus`), padded
        right to the longest, at least the batch's length less its two special tokens plus the longest
        template (a batch of static shapes keeps a static shape); attention masks exactly the tokens,
        token types zero."""
        if self.template_views is None:
            raise RuntimeError(f"{self.display_name}'s batches are sliced from a corpus with its views (corpus)")
        return self.template_views.views(batch)

    # --- evaluation -----------------------------------------------------------------------------

    def selection_pooler(self) -> str | None:
        return DENOISED_POOLER if self.args.selection_embedding == "denoised" else RAW_POOLER


RECORD = register(
    MethodRecord(
        part=PromptBERT,
        # timed at SimCSE's shapes (64 x 32), against which the target is stated: the paper's batch 256 has no
        # SimCSE run of its own. Unmeasured on a GPU: the template's 8 tokens lengthen each view (30 -> 38 at
        # most), and the bias forwards (both templates, L - 9 rows of 10 tokens) add about half of a view's
        # tokens, with backward.
        bench={
            "promptbert": BenchShape(
                "run_promptbert",
                "configs/promptbert_bert_base.yaml",
                "bert",
                ("--per_device_train_batch_size", "64", "--max_seq_length", "32"),
                overhead_target=1.6,
            )
        },
        released_flags={
            "--mask_embedding_sentence_template": "the released run.sh's template of view 0 and of the evaluation",
            "--mask_embedding_sentence_different_template": "the released run.sh's template of view 1",
            "--mask_embedding_sentence_delta": "the released template denoising",
            "--mask_embedding_sentence_org_mlp": "the released supervised setting's MLP (not implemented)",
            "--mask_embedding_sentence_autoprompt": "the released auto-prompt (not implemented)",
        },
    )
)
