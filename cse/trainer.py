"""``CSETrainer``: the Hugging Face Trainer with a contrastive ``compute_loss`` and an ``evaluate``
that scores STS-B dev and SICK-R trial under the SentEval protocol.

Only public hooks are overridden, so checkpointing, best-model selection
(``load_best_model_at_end`` with ``metric_for_best_model="stsb_spearman"``), resumption, logging,
mixed precision and accelerate/DeepSpeed launching are the stock Trainer's.
"""

from __future__ import annotations

import functools
import logging
import operator
import os
from collections.abc import Sized
from typing import NamedTuple

import torch
from accelerate.utils import broadcast_object_list
from safetensors.torch import load_file
from torch import nn
from transformers import PreTrainedModel, Trainer
from transformers.trainer_callback import TrainerState
from transformers.trainer_utils import IntervalStrategy
from transformers.utils import SAFE_WEIGHTS_NAME
from transformers.utils.output_capturing import maybe_install_capturing_hooks

from . import citations
from .data import CorpusStatistics
from .errors import CSEUsageError
from .evaluation import SentEvalSuite
from .registry import MethodRecord
from .reliability import PROGRESS, NonFiniteGuard, check_finite_weights
from .resume import TRAINER_STATE_NAME, check_checkpoint_matches

logger = logging.getLogger(__name__)

# Trainer metric names (SimCSE's), Spearman on a 0-1 scale.
DEV_METRICS = {"STS-B": "stsb_spearman", "SICK-R": "sickr_spearman", "Avg.": "avg_sts"}


def total(terms: dict[str, torch.Tensor]) -> torch.Tensor:
    """The sum of the terms, left to right, with no operator beyond the additions."""
    return functools.reduce(operator.add, terms.values())


class StepLoss(NamedTuple):
    """A batch's loss as :meth:`CSETrainer.training_loss` gives it: ``terms``, the weighted terms by
    name (``term_<t>`` in the log), whose sum (:func:`total`) is the loss; ``statistics``, scalars for
    the training log (:meth:`CSETrainer.record_training_metrics`); ``outputs``, the model's
    (``embeddings``: the two views')."""

    terms: dict[str, torch.Tensor]
    statistics: dict[str, torch.Tensor]
    outputs: dict


def pair_loss_terms(loss: nn.Module, anchors, positives, separate: bool = False):
    """``(terms, statistics)`` of a loss of the two views' embeddings: its own ``terms`` where it has
    them (:mod:`cse.losses`' with statistics or separable terms), else its value as the one term
    ``contrastive``. ``separate``: split the terms as finely as the loss can, at the cost of operators
    (the logging steps of ``--log_term_gradients`` only)."""
    terms = getattr(loss, "terms", None)
    if terms is None:
        return {"contrastive": loss(anchors, positives)}, {}
    return terms(anchors, positives, separate=separate)


def term_gradients(terms: dict[str, torch.Tensor], parameters: list[torch.Tensor]) -> dict[str, torch.Tensor]:
    """For each weighted term t of a loss: its value (``term_<t>``), ||g_t||, the L2 norm over all
    ``parameters`` of its own gradient (``term_grad_norm_<t>``; one ``autograd.grad`` per term, which
    keeps the graph for the loss's backward), and its share ||g_t|| / sum_s ||g_s||
    (``term_share_<t>``; the shares sum to 1, or are 0 if no term moves the parameters). A share is a
    ratio of norms, not of the loss's gradient norm: terms whose gradients cancel each other still
    add up."""
    norms = []
    for value in terms.values():
        grads = torch.autograd.grad(value, parameters, retain_graph=True, allow_unused=True)
        grads = [g for g in grads if g is not None]
        norms.append(torch.stack(torch._foreach_norm(grads)).norm() if grads else value.new_zeros(()).detach())
    norms = torch.stack([n.to(norms[0].dtype) for n in norms])
    shares = norms / norms.sum().clamp_min(torch.finfo(norms.dtype).tiny)
    stats = {}
    for (name, value), norm, share in zip(terms.items(), norms, shares):
        stats.update({f"term_{name}": value.detach(), f"term_grad_norm_{name}": norm, f"term_share_{name}": share})
    return stats


class CSETrainer(Trainer):
    """Args (besides the Trainer's):
    loss: module mapping the two views' embeddings ``(anchors, positives)`` to a scalar.
    senteval_data_dir: SentEval data for model selection (default ``$CSE_DATA_DIR/senteval``).
    corpus_statistics: the training corpus' :class:`cse.data.CorpusStatistics`, recorded in
        ``run_args.json`` and the model card (None: not counted).
    method: the record of the method trained (:mod:`cse.registry`), which names it in the model card.
    """

    citation = citations.SIMCSE
    # The loss is a per-batch mean, so the Trainer must divide it by the accumulation steps.
    loss_is_scaled_for_ga = False

    def __init__(
        self,
        *args,
        loss: nn.Module,
        senteval_data_dir: str | None = None,
        eval_dataset=None,
        corpus_statistics: CorpusStatistics | None = None,
        method: MethodRecord | None = None,
        **kwargs,
    ):
        if eval_dataset is None:
            eval_dataset = SentEvalSuite("sts", "dev", senteval_data_dir)
        super().__init__(*args, eval_dataset=eval_dataset, **kwargs)
        self.loss_fn = loss
        self.corpus_statistics = corpus_statistics
        self.method = method
        self._recorded: dict[str, list[torch.Tensor]] = {}
        self._compiled_training_loss = None
        if self.args.torch_compile:
            # transformers hooks the layers whose outputs it can return (hidden states, attentions) at
            # the first forward that asks for them: traced, that registration is a graph break and
            # recompiles; done now, the compiled step finds the hooks in place.
            for module in self.model.modules():
                if isinstance(module, PreTrainedModel):
                    maybe_install_capturing_hooks(module)
        self.add_callback(NonFiniteGuard())
        self.add_callback(PROGRESS)
        global_batch = self.args.per_device_train_batch_size * self.args.world_size
        if global_batch < 2:
            raise CSEUsageError(
                f"the global batch is {global_batch} sentence(s): in-batch contrastive learning needs at least 2 "
                "(each sentence's negatives are the other sentences of the batch)"
            )
        batch, accumulation = global_batch, self.args.gradient_accumulation_steps
        if isinstance(self.train_dataset, Sized) and len(self.train_dataset) < global_batch:
            # One batch an epoch, and the Trainer steps the optimizer at an epoch's end whatever the accumulation.
            batch, accumulation = len(self.train_dataset), 1
            logger.warning(
                "the training corpus holds %d sentences, fewer than the global batch of %d: each batch holds these %d "
                "sentences%s",
                batch,
                global_batch,
                batch,
                ", some of them repeated by the processes' samplers to fill their batches (false negatives)"
                if self.args.world_size > 1
                else "",
            )
        # Gradient accumulation enlarges the optimizer's batch, not the negatives: each micro-batch's
        # loss only sees the sentences gathered in that micro-batch.
        logger.info(
            "contrastive batch: %d sentences per step across %d process(es), %d in-batch negatives per anchor; "
            "optimizer batch %d sentences (x %d accumulation steps); %s; loss %s",
            batch,
            self.args.world_size,
            batch - 1 if getattr(loss, "in_batch_negatives", True) else 0,
            batch * accumulation,
            accumulation,
            f"DeepSpeed ZeRO-{self.zero_stage}" if self.is_deepspeed_enabled else "no DeepSpeed",
            getattr(loss, "get_config_dict", dict)(),
        )

    def checkpoint_files(self) -> tuple[str, ...]:
        """The state files this trainer adds to every checkpoint, without which a resume would not
        continue the same run (:func:`cse.resume.checkpoint_problem`)."""
        return ()

    @property
    def citations(self) -> list[str]:
        """BibTeX entries of this trainer's method and of every loss it holds, and every loss those hold
        (``AdversarialInfoNCELoss(base=MixCSELoss(...))`` cites both papers), each once, the method's
        first: what the model card cites."""
        held = [m for value in vars(self).values() if isinstance(value, nn.Module) for m in value.modules()]
        return list(dict.fromkeys([self.citation, *(m.citation for m in held if hasattr(m, "citation"))]))

    @property
    def zero_stage(self) -> int | None:
        """The DeepSpeed ZeRO stage, or None without DeepSpeed."""
        return self.accelerator.state.deepspeed_plugin.zero_stage if self.is_deepspeed_enabled else None

    def refuse_sharding(self, method: str, reason: str, zero3: bool = True) -> None:
        """Stop a method at construction under FSDP (and, with ``zero3``, DeepSpeed ZeRO-3), whose
        sharded weights ``reason`` explains it cannot use."""
        if self.is_fsdp_enabled or (zero3 and self.zero_stage == 3):
            raise CSEUsageError(
                f"{method} does not support {'FSDP' if self.is_fsdp_enabled else 'DeepSpeed ZeRO-3'}: {reason}. "
                "Use DDP or DeepSpeed ZeRO-2 (configs/accelerate/)"
            )

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        if self.is_term_logging_step(model):
            # Eager, and with the terms separated as finely as the losses can: only the logging steps
            # of --log_term_gradients take this path, which costs one backward per term.
            loss, step = self.training_loss(model, inputs, separate=True)
            self.record_training_metrics(**term_gradients(step.terms, self.encoder_parameters()))
        else:
            loss, step = self._training_loss(model, inputs)
        if model.training:
            self.record_training_metrics(**step.statistics)
        return (loss, step.outputs) if return_outputs else loss

    @property
    def _training_loss(self):
        """:meth:`training_loss`, compiled under ``--torch_compile``. The Trainer compiles the model's
        forward alone; compiling the forward with the loss (and a method's extra forwards) gives one
        graph per step. The statistics are recorded outside it: that is Python bookkeeping (lists that
        grow between log lines), not tensor work to trace."""
        if not self.args.torch_compile:
            return self.training_loss
        if self._compiled_training_loss is None:
            self._compiled_training_loss = torch.compile(
                self.training_loss, backend=self.args.torch_compile_backend, mode=self.args.torch_compile_mode
            )
        return self._compiled_training_loss

    def training_loss(self, model, inputs, separate: bool = False) -> tuple[torch.Tensor, StepLoss]:
        """``(loss, step)`` of a batch: :meth:`step_terms` and the sum of its terms, free of side
        effects outside the model and the loss so that ``torch.compile`` traces it as one graph."""
        step = self.step_terms(model, inputs, separate)
        return total(step.terms), step

    def step_terms(self, model, inputs, separate: bool = False) -> StepLoss:
        """The batch's :class:`StepLoss`: the model's forward and the loss's terms. A method that adds
        a term overrides this, calls ``super().step_terms`` first and adds its terms and statistics
        to those it gets, so that methods combine by inheritance (``class T(VAdvCSETrainer,
        MixCSETrainer)`` keeps both methods' terms and statistics). ``separate``: see
        :func:`pair_loss_terms`."""
        views = model(**inputs)
        terms, statistics = pair_loss_terms(self.loss_fn, views[:, 0], views[:, 1], separate)
        return StepLoss(terms, statistics, {"embeddings": views})

    def term_weights(self) -> dict[str, float]:
        """The weight of each term :meth:`step_terms` can give: a term is its weight times its raw value
        (``python -m cse.diagnostics`` divides the weight out). A method that adds a weighted term
        extends this through ``super()``, as it extends ``step_terms``; the loss weighs its own terms
        (its ``term_weights()``: SG-BERT's lambda, AdCSE's split of its softmax)."""
        own = getattr(self.loss_fn, "term_weights", None)
        return {"contrastive": 1.0, **(own() if own is not None else {})}

    def is_term_logging_step(self, model) -> bool:
        """Whether the training step under way ends in a log line (``--log_term_gradients``), from the
        step count alone (no host sync): the Trainer logs after the step that makes ``global_step`` a
        multiple of ``logging_steps`` (and after the first, with ``logging_first_step``)."""
        if not (self.args.log_term_gradients and model.training):
            return False
        step = self.state.global_step + 1
        return (step == 1 and self.args.logging_first_step) or (
            self.args.logging_strategy == IntervalStrategy.STEPS and step % self.state.logging_steps == 0
        )

    def encoder_parameters(self) -> list[torch.Tensor]:
        """The trainable weights of the encoder that every term of the loss reaches (the backbone;
        not the heads, adversaries or decoders of single terms): where term gradients are measured."""
        return [p for p in self.encoder.backbone.parameters() if p.requires_grad]

    @property
    def encoder(self) -> nn.Module:
        """The model unwrapped from DDP, DeepSpeed and ``torch.compile``: the Trainer keeps it as
        ``self.model`` except under FSDP. (accelerate's ``unwrap_model`` is a graph break inside a
        compiled training step, so it is only asked under FSDP.)"""
        return self.accelerator.unwrap_model(self.model) if self.is_fsdp_enabled else self.model

    def record_training_metrics(self, **values: torch.Tensor) -> None:
        """Add method-specific scalars (e.g. mean positive score) to the next training log line; each
        is averaged over the micro-batches since the last log and over processes."""
        for name, value in values.items():
            self._recorded.setdefault(name, []).append(value.detach().float().mean())

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        # Training log lines carry "loss"; evaluation lines do not.
        if "loss" in logs and self._recorded:
            names = sorted(self._recorded)
            means = torch.stack([torch.stack(self._recorded[name]).mean() for name in names])
            means = self.accelerator.reduce(means, reduction="mean")
            logs.update(dict(zip(names, means.tolist())))
            self._recorded.clear()
        super().log(logs, start_time)

    @property
    def autocast_dtype(self) -> torch.dtype | None:
        """The training's mixed-precision dtype (``--bf16``, ``--fp16``), None in float32."""
        return torch.bfloat16 if self.args.bf16 else torch.float16 if self.args.fp16 else None

    def encode(self, sentences, autocast_dtype: torch.dtype | None = None, pooler_type: str | None = None):
        """Embed ``sentences`` with the current model, under the training's autocast unless
        ``autocast_dtype`` says otherwise."""
        return self.model.encode(
            sentences,
            batch_size=self.args.per_device_eval_batch_size,
            autocast_dtype=autocast_dtype or self.autocast_dtype,
            pooler_type=pooler_type,
        ).numpy()

    def senteval(self, suite: SentEvalSuite) -> dict:
        """Run a SentEval suite on the current model in the main process (in every process under
        ZeRO-3) and hand the main process's report to every process, so that all of them take the
        same best-checkpoint decision."""
        # Under ZeRO-3 every process holds a shard of the weights and must take part in each forward.
        everywhere = self.zero_stage == 3
        report = self.run_suite(suite) if everywhere or self.is_world_process_zero() else None
        if self.args.world_size > 1:
            report = broadcast_object_list([report])[0]
        return report

    def run_suite(self, suite: SentEvalSuite) -> dict:
        """The suite's report on the current model (main process). A subclass may add scalars computed
        from the same embeddings under ``report["analysis"]``; ``evaluate`` logs them beside the scores."""
        return suite.run(self.encode)

    def evaluate(self, eval_dataset=None, ignore_keys=None, metric_key_prefix: str = "eval") -> dict[str, float]:
        suite = eval_dataset if eval_dataset is not None else self.eval_dataset
        report = self.senteval(suite)
        metrics = {
            f"{metric_key_prefix}_{DEV_METRICS[column]}": score / 100.0
            for column, score in report["scores"].items()
            if column in DEV_METRICS
        }
        metrics.update({f"{metric_key_prefix}_{name}": value for name, value in report.get("analysis", {}).items()})
        self.log(metrics)
        self.control = self.callback_handler.on_evaluate(self.args, self.state, self.control, metrics)
        return metrics

    def restore_trained(self, checkpoint: str) -> None:
        """Leave this trainer as ``train()`` leaves it at the end of a run whose training ended at
        ``checkpoint`` (saved at ``max_steps``), without training: the Trainer's state and the weights
        of the best checkpoint (``--load_best_model_at_end``) or of ``checkpoint``. Resumed from such
        a checkpoint, ``train()`` itself would run one more step unless ``max_steps`` ends an epoch
        (transformers 5.24). A method that exports more than its model's weights restores it here too.

        Under DeepSpeed the checkpoint's ``model.safetensors`` holds the state dict the engine
        exports (the Trainer saves it with ``Accelerator.get_state_dict``, as :meth:`save_encoder`
        does; under ZeRO-3 gathered, ``stage3_gather_16bit_weights_on_model_save``), in the engine's
        dtypes: with bf16/fp16 the parameters in 16 bits, the buffers as they were. Its tensors are
        taken as they are, and the model moved to the engine's device, so that it is exported and
        evaluated as the engine's model would be."""
        self.state = TrainerState.load_from_json(os.path.join(checkpoint, TRAINER_STATE_NAME))
        best = self.state.best_model_checkpoint if self.args.load_best_model_at_end else None
        source = best or checkpoint
        path = os.path.join(source, SAFE_WEIGHTS_NAME)
        stopped = f"training ended at {checkpoint}, but the run was stopped before its export"
        hint = "train again into another --output_dir"
        if self.is_fsdp_enabled:
            raise CSEUsageError(f"{stopped}, which is not completed under FSDP", hint=hint)
        if not os.path.isfile(path):
            raise CSEUsageError(f"{stopped}, and {source} holds no {SAFE_WEIGHTS_NAME} to export", hint=hint)
        check_checkpoint_matches(self.model, source)
        weights = load_file(path)  # on the CPU (safetensors takes no "cpu:0", the device of DeepSpeed on a CPU)
        if self.is_deepspeed_enabled:  # the engine's dtypes and device (the model reaches them in train())
            self.model.load_state_dict(weights, assign=True)
            self.model.to(self.args.device)
        else:
            self.model.load_state_dict(weights)
        logger.warning("training had ended at step %d: exporting the model of %s", self.state.global_step, source)

    def save_encoder(self, output_dir: str | None = None) -> None:
        """Save the current (after ``load_best_model_at_end``: the best) model as a plain Hugging
        Face directory with its tokenizer and ``cse_config.json``."""
        output_dir = output_dir or self.args.output_dir
        # No engine when the run restored its trained model from a checkpoint (restore_trained): the model holds it.
        state_dict = self.accelerator.get_state_dict(self.deepspeed) if self.deepspeed is not None else None
        if self.args.should_save:
            model = self.accelerator.unwrap_model(self.model)
            check_finite_weights(state_dict or model.state_dict(), output_dir)
            model.save_pretrained(output_dir, state_dict=state_dict)
            logger.debug("encoder saved to %s", output_dir)  # the export's staging directory, in a run
