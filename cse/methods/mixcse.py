"""MixCSE (Zhang et al., "Unsupervised Sentence Representation via Contrastive Learning with Mixing
Negatives", AAAI 2022): SimCSE with a mixed hard negative per anchor, built from the anchor's
positive and another sentence of the batch (the loss is :class:`cse.losses.mixcse.MixCSELoss`).

The method has no state outside the encoder's weights (lambda is fixed and the mixing partner is the
next row of the batch), so checkpoints and resumption are SimCSE's. Its part (:class:`MixCSE`)
replaces the softmax and adds the paper's two training analyses to the logs:

* Fig. 4(a): the batch-mean positive, negative and mixed scores (h_i.h'_i/tau, h_i.h'_j/tau,
  h_i.h~'_{i,j}/tau) on every training log line (``positive_score``, ``negative_score``,
  ``mix_score``; averaged over the steps since the last log);
* Fig. 4(b): at every evaluation, the largest angle (degrees) between any two STS-B dev sentence
  embeddings (``eval_stsb_largest_angle``), from the embeddings the evaluation computes anyway.

The released code evaluates STS-B dev during training with its MLP (it trains without
``mlp_only_train``) and tests the final model on [CLS] before the MLP; ``selection_pooler="cls"``
reproduces that split (``--select_with_mlp``, the default of the released variant).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .. import citations
from ..errors import CSEUsageError
from ..evaluation.analysis import largest_angle
from ..losses.mixcse import LOSS_FORMS, MixCSELoss
from ..parts import Part
from ..ranges import RANGE, Range, check_choices, check_fields
from ..registry import BenchShape, MethodRecord, register


@dataclass
class MixCSEArguments:
    variant: str = field(
        default="released",
        metadata={
            "help": "released: the authors' code (N x 3N logits of raw-embedding mixtures, one anchor direction "
            "per row), which produced the paper's tables; paper: L_mix as printed, both views as anchors.",
            "choices": list(LOSS_FORMS),
        },
    )
    mix_lambda: float = field(
        default=0.2,
        metadata={
            "help": "lambda, the weight of the anchor's positive in its mixed negative.",
            RANGE: Range(0, 1, high_open=True),
        },
    )
    single: bool = field(
        default=False, metadata={"help": "Mixed negatives for h_i only, not for h'_i (MixCSE_single, Table 3)."}
    )
    stop_gradient: bool = field(
        default=True,
        metadata={"help": "Stop the gradient at the mixed negatives (--no_stop_gradient: MixCSE_wo sg, Table 3)."},
    )
    select_with_mlp: bool | None = field(
        default=None,
        metadata={
            "help": "Evaluate STS-B dev (model selection, largest angle) on [CLS] through the MLP, as the released "
            "code does; the final evaluation and the export stay [CLS] before it. Needs the cls pooler with "
            "--mlp_only_train. Default: on for --variant released, off for paper (SimCSE's protocol)."
        },
    )

    def __post_init__(self):
        check_fields(self)
        check_choices(self)

    def selection_pooler(self, model_args) -> str | None:
        """The pooler of the model-selection evaluation, if not the model's evaluation pooler."""
        if self.select_with_mlp and not model_args.mlp_only_train:
            raise ValueError(
                "--select_with_mlp needs --pooler_type cls with --mlp_only_train (without it every evaluation "
                "already uses the training pooler)"
            )
        with_mlp = self.variant == "released" if self.select_with_mlp is None else self.select_with_mlp
        return "cls" if with_mlp and model_args.mlp_only_train else None


class MixCSE(Part):
    """MixCSE's part: its loss replaces InfoNCE's softmax (:class:`~cse.losses.mixcse.MixCSELoss`, whose
    statistics give Fig. 4(a)); at every evaluation it adds the largest angle between the STS-B
    sentence embeddings (Fig. 4(b), ``eval_stsb_largest_angle``), from the embeddings the evaluation
    computes anyway; model selection goes through SimCSE's MLP where the released code's does."""

    name = "mixcse"
    display_name = "MixCSE"
    citation = citations.MIXCSE
    docs = "docs/methods/mixcse.md"
    equation = (
        "each row's denominator gains e^{s(h_i, SG(h~_i))/tau}, h~_i the normalised mixture lambda h_i+ + "
        "(1 - lambda) h_j+ of its positive and the next row's (the `--mixcse_variant` form; Zhang et al. 2022)"
    )
    Flags = MixCSEArguments
    replaces = frozenset({"softmax"})

    def __init__(self, args=None, model_args=None):
        super().__init__(args, model_args)
        self.selection = None  # the model-selection pooler, decided with the model (loss)

    def loss(self, loss, model, replaced):
        """MixCSE's loss in place of InfoNCE; and the model-selection pooler: through SimCSE's MLP as the
        released code evaluates, where the training forward goes through it (pooler ``cls``), none where
        it does not (another part's head or embedding, or another pooler)."""
        if model.pooler_type == "cls":
            try:
                self.selection = self.args.selection_pooler(self.model_args)
            except ValueError as err:
                raise CSEUsageError(str(err), hint="leave --select_with_mlp out") from err
        elif self.args.select_with_mlp:
            raise CSEUsageError(
                f"--select_with_mlp evaluates through SimCSE's MLP head on [CLS], which this run's training forward "
                f"does not use (its pooler is {model.pooler_type})",
                hint="leave --select_with_mlp out",
            )
        return MixCSELoss(
            temperature=self.model_args.temp,
            mix_lambda=self.args.mix_lambda,
            form=self.args.variant,
            single=self.args.single,
            stop_gradient=self.args.stop_gradient,
        )

    def setup(self, trainer) -> None:
        # One process keeps an epoch's last, short batch; a single sentence has no other to mix with,
        # and the loss would refuse it only at the end of the epoch, after the whole run.
        # (Several processes even out the last batch, so the gathered batch is never one sentence.)
        args, data = trainer.args, trainer.train_dataset
        micro_batch = args.per_device_train_batch_size
        if (
            args.world_size == 1
            and not args.dataloader_drop_last
            and hasattr(data, "__len__")
            and len(data) % micro_batch == 1
        ):
            raise CSEUsageError(
                f"{len(data)} training sentences in batches of {micro_batch} leave a last batch of one sentence, "
                "which MixCSE cannot mix: pass --dataloader_drop_last true or change --max_train_samples"
            )

    def selection_pooler(self) -> str | None:
        return self.selection

    def analysis(self, suite, embeddings: dict) -> dict[str, float]:
        """The largest angle between the suite's STS-B sentences, from the evaluation's embeddings."""
        stsb = getattr(suite, "datasets", {}).get("STSBenchmark")
        if stsb is None:
            return {}
        sentences = dict.fromkeys(s for pairs in stsb.values() for s in pairs.sentences1 + pairs.sentences2)
        return {"stsb_largest_angle": largest_angle(np.stack([embeddings[s] for s in sentences]))}


RECORD = register(
    MethodRecord(
        part=MixCSE,
        bench={"mixcse": BenchShape("run_mixcse", "configs/mixcse_bert_base.yaml", "bert", overhead_target=1.05)},
        released_flags={"--lambdas": "the released training script's mixing weight, the setting we do not use"},
    )
)
