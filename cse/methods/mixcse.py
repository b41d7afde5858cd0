"""MixCSE (Zhang et al., "Unsupervised Sentence Representation via Contrastive Learning with Mixing
Negatives", AAAI 2022): SimCSE with a mixed hard negative per anchor, built from the anchor's
positive and another sentence of the batch (the loss is :class:`cse.losses.mixcse.MixCSELoss`).

The method has no state outside the encoder's weights (lambda is fixed and the mixing partner is the
next row of the batch), so checkpoints and resumption are SimCSE's. :class:`MixCSETrainer` adds the
paper's two training analyses to the logs:

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
from ..composition import Part
from ..errors import CSEUsageError
from ..evaluation.analysis import largest_angle
from ..losses.mixcse import LOSS_FORMS, MixCSELoss
from ..modeling import CSEModel
from ..pipeline import load_encoder
from ..ranges import RANGE, Range, check_fields
from ..registry import BenchShape, MethodRecord, register
from ..trainer import CSETrainer


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
        if self.variant not in LOSS_FORMS:
            raise ValueError(f"--variant must be one of {', '.join(LOSS_FORMS)}, got {self.variant!r}")

    def selection_pooler(self, model_args) -> str | None:
        """The pooler of the model-selection evaluation, if not the model's evaluation pooler."""
        if self.select_with_mlp and not model_args.mlp_only_train:
            raise ValueError(
                "--select_with_mlp needs --pooler_type cls with --mlp_only_train (without it every evaluation "
                "already uses the training pooler)"
            )
        with_mlp = self.variant == "released" if self.select_with_mlp is None else self.select_with_mlp
        return "cls" if with_mlp and model_args.mlp_only_train else None


class MixCSETrainer(CSETrainer):
    """``CSETrainer`` that logs the loss's scores every logging step and the largest angle between
    STS-B sentence embeddings at every evaluation.

    Args (besides ``CSETrainer``'s):
        selection_pooler: the pooler of the model-selection evaluation (the ``eval_dataset`` suite),
            ``None`` for the model's evaluation pooler; other suites (the final test) always use the latter.
    """

    citation = citations.MIXCSE

    def __init__(self, *args, selection_pooler: str | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.selection_pooler = selection_pooler
        # One process keeps an epoch's last, short batch; a single sentence has no other to mix with,
        # and the loss would refuse it only at the end of the epoch, after the whole run.
        # (Several processes even out the last batch, so the gathered batch is never one sentence.)
        micro_batch = self.args.per_device_train_batch_size
        if (
            self.args.world_size == 1
            and not self.args.dataloader_drop_last
            and hasattr(self.train_dataset, "__len__")
            and len(self.train_dataset) % micro_batch == 1
        ):
            raise CSEUsageError(
                f"{len(self.train_dataset)} training sentences in batches of {micro_batch} leave a last batch of one "
                "sentence, which MixCSE cannot mix: pass --dataloader_drop_last true or change --max_train_samples"
            )

    def run_suite(self, suite) -> dict:
        """The report, with the largest angle between the suite's STS-B sentences under ``"analysis"``
        (from the same single encoding pass)."""
        encoded = {}
        pooler_type = self.selection_pooler if suite is self.eval_dataset else None

        def encode(sentences):
            vectors = self.encode(sentences, pooler_type=pooler_type)
            encoded.update(zip(sentences, vectors))
            return vectors

        report = suite.run(encode)
        stsb = getattr(suite, "datasets", {}).get("STSBenchmark")
        if stsb is not None:
            sentences = dict.fromkeys(s for pairs in stsb.values() for s in pairs.sentences1 + pairs.sentences2)
            angle = largest_angle(np.stack([encoded[s] for s in sentences]))
            report["analysis"] = {**report.get("analysis", {}), "stsb_largest_angle": angle}
        return report


def mixed_negatives_loss(loss, model, model_args, mixcse_args: MixCSEArguments) -> MixCSELoss:
    """MixCSE's loss in place of InfoNCE ``loss``: InfoNCE's softmax with the mixed negatives."""
    return MixCSELoss(
        temperature=model_args.temp,
        mix_lambda=mixcse_args.mix_lambda,
        form=mixcse_args.variant,
        single=mixcse_args.single,
        stop_gradient=mixcse_args.stop_gradient,
    )


def trainer_kwargs(model, model_args, mixcse_args: MixCSEArguments) -> dict:
    """The model-selection pooler: through SimCSE's MLP as the released code evaluates, where the
    model has SimCSE's pooling; none where another part replaced it (V-advCSE's head, SARCSE's Z)."""
    if model.pooler_type == "cls" or type(model) is CSEModel:
        return {"selection_pooler": mixcse_args.selection_pooler(model_args)}
    if mixcse_args.select_with_mlp:
        raise CSEUsageError(
            "--select_with_mlp evaluates through SimCSE's MLP head, which another part of this run replaces"
        )
    return {"selection_pooler": None}


def build(model_args, mixcse_args: MixCSEArguments):
    """MixCSE's model and loss as ``run_mixcse.py`` trains them: ``(model, loss, trainer_class, trainer_kwargs)``."""
    model = load_encoder(model_args)
    if model.pooler_type == "cls":
        model.reset_head()
    loss = mixed_negatives_loss(None, model, model_args, mixcse_args)
    return model, loss, MixCSETrainer, trainer_kwargs(model, model_args, mixcse_args)


RECORD = register(
    MethodRecord(
        name="mixcse",
        display_name="MixCSE",
        citation=citations.MIXCSE,
        build=build,
        docs="docs/methods/mixcse.md",
        method_arguments=MixCSEArguments,
        bench={"mixcse": BenchShape("run_mixcse", "configs/mixcse_bert_base.yaml", "bert", overhead_target=1.05)},
        tiny_args=(),
        part=Part(
            trainer=MixCSETrainer,
            equation="each row's denominator gains e^{s(h_i, SG(h~_i))/tau}, h~_i the normalised mixture "
            "lambda h_i+ + (1 - lambda) h_j+ of its positive and the next row's (the `--mixcse_variant` form; "
            "Zhang et al. 2022)",
            replaces=frozenset({"softmax"}),
            loss=mixed_negatives_loss,
            trainer_kwargs=trainer_kwargs,
            order=3,
        ),
    )
)
