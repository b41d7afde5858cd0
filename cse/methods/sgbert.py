"""SG-BERT (Kim, Yoo and Lee, "Self-Guided Contrastive Learning for BERT Sentence Representations",
ACL 2021): BERT is cloned into BERT_F (fixed) and BERT_T (tuned); the views h_{i,k} = p(H_{i,k}) that
BERT_F's layers k = 0..l give of sentence s_i (p: max pooling over real tokens) guide BERT_T's
last-layer [CLS], c_i, through the contrastive objectives of :mod:`cse.losses.sgbert`, and
L_reg = ||theta_F - theta_T||^2 keeps BERT_T near BERT_F. BERT_T's embedding layer (layer 0) is frozen
(footnote 5). After training only BERT_T is kept; the sentence embedding is c_i, without the head.

The paper and the authors' released code (sentence-transformers 0.3.9) differ in two defaults, and we
take the paper's:

* token pooling p: max in the paper ("we employ max pooling as p"), mean in the code
  (``--pooling2 mean``): ``--token_pooling mean`` for the code's.
* BERT_F's dropout: the code puts its copy in eval mode once, but the copy lives inside the loss
  module, which sentence-transformers' ``fit`` switches back to training mode, so its dropout is
  active. The paper calls BERT_F "fixed" and wants its signal not to drift; we run it in eval mode
  (deterministic views): ``--fixed_encoder_dropout`` for the code's behaviour.

The regulariser's scope is the same in both: every parameter of BERT. The frozen embedding layer and
the unused pooling layer never move, so summing over BERT_T's trainable parameters gives exactly the
released code's sum over all of them.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field

from transformers import EarlyStoppingCallback

from .. import citations
from ..arguments import CSETrainingArguments, DataArguments, ModelArguments
from ..encoders.self_guided import SAMPLERS, TOKEN_POOLINGS, SelfGuidedEncoder
from ..errors import CSEUsageError
from ..losses.sgbert import LOSS_VARIANTS, SelfGuidedLoss
from ..modeling import load_encoder
from ..parts import EVERY_PART, SLOTS, Part
from ..ranges import RANGE, at_least, check_choices, check_fields, non_negative
from ..registry import BenchShape, MethodRecord, register
from ..run_names import STSB_CORPUS_NAME
from ..stsb_corpus import write_stsb_corpus

logger = logging.getLogger(__name__)


# SG-BERT's defaults for the shared arguments, so that a run without a config file is the paper's
# (configs/sgbert_bert_base.yaml writes the same values out). The other methods keep SimCSE's.


@dataclass
class SGModelArguments(ModelArguments):
    pooler_type: str = field(
        default="cls_before_pooler",
        metadata={"help": "c_i, and the embedding after training: BERT_T's last-layer [CLS] with no head (Sect. 3.1)."},
    )
    temp: float = field(default=0.01, metadata={"help": "tau of phi (Table 8: 0.01)."})

    def __post_init__(self):
        if self.pooler_type != "cls_before_pooler":
            raise ValueError(
                f"SG-BERT's sentence embedding is BERT_T's last-layer [CLS] (c_i): --pooler_type must be "
                f"cls_before_pooler, got {self.pooler_type!r}"
            )
        super().__post_init__()


@dataclass
class SGDataArguments(DataArguments):
    train_file: str | None = field(
        default=None,
        metadata={
            "help": "A .txt (one sentence a line) or .csv corpus; default: every STS-B train, dev and test sentence, "
            "unlabelled, written to OUTPUT_DIR/stsb_sentences.txt (the paper's corpus)."
        },
    )
    max_seq_length: int = field(
        default=128, metadata={"help": "Training sentences are truncated to this many tokens (the released code's)."}
    )


@dataclass
class SGTrainingArguments(CSETrainingArguments):
    """Table 8: batch 16, lr 5e-5, AdamW betas (0.9, 0.9), STS-B dev every 50 steps, the first of its
    seeds; warm-up over 10% of the steps as the released code does (the paper is silent). A resumed
    run also gets back early stopping's patience count (the Trainer's default would reset it)."""

    per_device_train_batch_size: int = field(
        default=16, metadata={"help": "Sentences per device and step (Table 8: 16 in all; on N devices pass 16 / N)."}
    )
    learning_rate: float = field(default=5e-5, metadata={"help": "Peak learning rate (Table 8), linear decay."})
    adam_beta2: float = field(default=0.9, metadata={"help": "AdamW's beta2 (Table 8: betas (0.9, 0.9))."})
    warmup_steps: float = field(
        default=0.1, metadata={"help": "Warm-up steps, or a fraction of the steps if < 1 (released code: a tenth)."}
    )
    eval_steps: float | None = field(default=50, metadata={"help": "Steps between STS-B dev evaluations (Table 8)."})
    logging_steps: float = field(default=50, metadata={"help": "Steps between loss logs."})
    restore_callback_states_from_checkpoint: bool = field(
        default=True,
        metadata={"help": "On resume, restore early stopping's count of evaluations without improvement."},
    )
    seed: int = field(
        default=1, metadata={"help": "Random seed (the paper averages 1, 2, 3, 4, 1234, 2345, 3456, 7890)."}
    )


@dataclass
class SGBERTArguments:
    loss_variant: str = field(
        default="opt3",
        metadata={"help": "base (SG), opt1, opt2 or opt3 (SG-OPT, the paper's final loss).", "choices": LOSS_VARIANTS},
    )
    reg_lambda: float = field(
        default=0.1,
        metadata={"help": "lambda, the weight of L_reg = ||theta_F - theta_T||^2.", RANGE: non_negative},
    )
    token_pooling: str = field(
        default="max",
        metadata={
            "help": "p, pooling over the tokens of each BERT_F layer (padding masked): max (the paper), mean (the "
            "released code) or cls.",
            "choices": TOKEN_POOLINGS,
        },
    )
    layers: list[int] | None = field(
        default=None,
        metadata={
            "help": "BERT_F layers whose views are used (0: embedding layer); default all, 0..l.",
            RANGE: at_least(0),
        },
    )
    sampler: str = field(
        default="uniform",
        metadata={
            "help": "sigma, the view each sentence gets for base/opt1/opt2: uniform (each sentence draws its own "
            "layer, the paper) or uniform_per_batch (one draw for the whole batch).",
            "choices": SAMPLERS,
        },
    )
    projection_size: int = field(
        default=4096,
        metadata={"help": "Width of the projection head f (two linear+GELU layers).", RANGE: at_least(1)},
    )
    projection_head: bool = field(
        default=True, metadata={"help": "Use the projection head f (--no_projection_head: Table 5 ablation)."}
    )
    fixed_encoder_dropout: bool = field(
        default=False,
        metadata={"help": "Run BERT_F with dropout active, as the released code does (default: eval mode)."},
    )
    early_stopping_patience: int = field(
        default=10,
        metadata={
            "help": "Stop after this many evaluations without a better STS-B dev score (Table 8: 10); 0: train "
            "the whole epoch.",
            RANGE: at_least(0),
        },
    )

    def __post_init__(self):
        check_fields(self)
        check_choices(self)
        if self.loss_variant == "opt3" and self.sampler != "uniform":
            raise ValueError("--sampler set, but --loss_variant opt3 uses every layer's view and samples none")
        if not self.projection_head and self.projection_size != 4096:
            raise ValueError("--projection_size set, but --no_projection_head leaves no head")
        if self.layers is not None and (not self.layers or len(set(self.layers)) != len(self.layers)):
            raise ValueError(f"--layers must name distinct layers, got {self.layers}")


class SGBERT(Part):
    """SG-BERT's part, which replaces the base itself: the encoder is BERT_T with the frozen copy
    BERT_F (:class:`SelfGuidedEncoder`), there is no pairwise loss, and its objective, the
    contrastive term over BERT_F's views plus lambda L_reg, is its terms (:meth:`terms`). BERT_F and
    BERT_T's embedding layer have no gradient, so the Trainer's optimizer never sees them; checkpoints
    hold BERT_F and the head with BERT_T (in the model's weights), so a resumed run restores all
    three, and a checkpoint without them is refused. Its runs read the paper's corpus by default and
    stop early (:meth:`prepare_run`)."""

    name = "sgbert"
    display_name = "SG-BERT"
    citation = citations.SGBERT
    docs = "docs/methods/sgbert.md"
    equation = (
        "replaces the base: BERT_T's [CLS] c_i against the views of a fixed copy BERT_F's layers, NT-Xent (SG) or "
        "its optimised form (SG-OPT), plus lambda ||theta_F - theta_T||^2 (Kim et al. 2021)"
    )
    Flags = SGBERTArguments
    replaces = frozenset(SLOTS)
    refuses = {
        EVERY_PART: "SG-BERT replaces the base itself: one view per sentence, its positives are a fixed copy's hidden "
        "layers and its loss is not InfoNCE over two dropout views, which every other part extends"
    }

    def __init__(self, args=None, model_args=None):
        super().__init__(args, model_args)
        self.objective = (
            None
            if model_args is None
            else SelfGuidedLoss(self.args.loss_variant, temperature=model_args.temp, reg_lambda=self.args.reg_lambda)
        )

    def prepare_run(self, data_args, training_args) -> list:
        """Early stopping on STS-B dev (Table 8: patience 10), and the paper's corpus unless another is
        named: every STS-B train, dev and test sentence, unlabelled, written to
        ``OUTPUT_DIR/stsb_sentences.txt`` (:mod:`cse.stsb_corpus`), where a file of other content is
        refused rather than replaced."""
        patience = self.args.early_stopping_patience
        if patience and training_args.eval_strategy == "no":
            raise CSEUsageError("--early_stopping_patience needs evaluations: set --eval_strategy steps, or pass 0")
        if patience and training_args.metric_for_best_model is None:
            raise CSEUsageError("--early_stopping_patience needs --metric_for_best_model (stsb_spearman), or pass 0")
        if data_args.train_file is None and data_args.dataset_name is None:
            data_args.train_file = os.path.join(training_args.output_dir, STSB_CORPUS_NAME)
            with training_args.main_process_first(desc="STS-B sentence corpus"):
                if training_args.local_process_index == 0:
                    write_stsb_corpus(data_args.train_file, data_args.senteval_data_dir, replace=False)
        return [EarlyStoppingCallback(early_stopping_patience=patience)] if patience else []

    def encoder(self, model_args) -> SelfGuidedEncoder:
        encoder = load_encoder(model_args)
        return SelfGuidedEncoder(
            encoder.backbone,
            encoder.tokenizer,
            token_pooling=self.args.token_pooling,
            layers=self.args.layers,
            sample_views=not self.objective.uses_all_views,
            sampler=self.args.sampler,
            projection_size=self.args.projection_size if self.args.projection_head else None,
            fixed_encoder_dropout=self.args.fixed_encoder_dropout,
        )

    def loss(self, loss, model, replaced):
        return None  # the objective is the part's terms: no pairwise loss of two views

    def setup(self, trainer) -> None:
        # ZeRO-2 keeps whole weights on every process (it shards the optimizer state and gradients).
        reason = "L_reg reads every weight of BERT_T and BERT_F whole, outside their forwards"
        trainer.refuse_sharding("SG-BERT", reason)

    def terms(self, step):
        # The model's training forward is BERT_T's c_i and BERT_F's views, not two views of the batch.
        outputs = step.outputs
        terms = self.objective.terms(outputs["embeddings"], outputs["views"], outputs["parameter_distance"])
        return terms, {"parameter_distance": outputs["parameter_distance"]}

    def term_weights(self) -> dict[str, float]:
        return {"contrastive": 1.0, **self.objective.term_weights()}


# Early stopping needs evaluations, which the benchmark's timed loop leaves out.
_BENCH_FLAGS = ("--early_stopping_patience", "0")
RECORD = register(
    MethodRecord(
        part=SGBERT,
        arguments=(SGModelArguments, SGDataArguments, SGTrainingArguments),
        bench={
            "sgbert-sg": BenchShape(
                "run_sgbert", "configs/sgbert_bert_base.yaml", "bert", ("--loss_variant", "base", *_BENCH_FLAGS)
            ),
            "sgbert-opt": BenchShape(
                "run_sgbert",
                "configs/sgbert_bert_base.yaml",
                "bert",
                ("--loss_variant", "opt3", *_BENCH_FLAGS),
                overhead_target=1.6,
            ),
        },
        variants={"sg": ("--loss_variant", "base"), "sg-opt": ("--loss_variant", "opt3")},
        released_flags={"--pooling2": "the released code's token pooling (sentence-transformers 0.3.9)"},
    )
)
