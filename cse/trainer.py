"""``CSETrainer``: the Hugging Face Trainer with a contrastive ``compute_loss`` and an ``evaluate``
that scores STS-B dev and SICK-R trial under the SentEval protocol.

Only public hooks are overridden, so checkpointing, best-model selection
(``load_best_model_at_end`` with ``metric_for_best_model="stsb_spearman"``), resumption, logging,
mixed precision and accelerate/DeepSpeed launching are the stock Trainer's.
"""

from __future__ import annotations

import logging

import torch
from accelerate.utils import broadcast_object_list
from torch import nn
from transformers import Trainer

from .evaluation import SentEvalSuite
from .reliability import NonFiniteGuard, check_finite_weights

logger = logging.getLogger(__name__)

# Trainer metric names (SimCSE's), Spearman on a 0-1 scale.
DEV_METRICS = {"STS-B": "stsb_spearman", "SICK-R": "sickr_spearman", "Avg.": "avg_sts"}


class CSETrainer(Trainer):
    """Args (besides the Trainer's):
    loss: module mapping the two views' embeddings ``(anchors, positives)`` to a scalar.
    senteval_data_dir: SentEval data for model selection (default ``$CSE_DATA_DIR/senteval``).
    """

    # The loss is a per-batch mean, so the Trainer must divide it by the accumulation steps.
    loss_is_scaled_for_ga = False

    def __init__(self, *args, loss: nn.Module, senteval_data_dir: str | None = None, eval_dataset=None, **kwargs):
        if eval_dataset is None:
            eval_dataset = SentEvalSuite("sts", "dev", senteval_data_dir)
        super().__init__(*args, eval_dataset=eval_dataset, **kwargs)
        self.loss_fn = loss
        self._recorded: dict[str, list[torch.Tensor]] = {}
        self.add_callback(NonFiniteGuard())
        global_batch = self.args.per_device_train_batch_size * self.args.world_size
        if global_batch < 2:
            raise ValueError(
                f"the global batch is {global_batch} sentence(s): in-batch contrastive learning needs at least 2 "
                "(each sentence's negatives are the other sentences of the batch)"
            )
        # Gradient accumulation enlarges the optimizer's batch, not the negatives: each micro-batch's
        # loss only sees the sentences gathered in that micro-batch.
        logger.info(
            "contrastive batch: %d sentences per step across %d process(es), %d in-batch negatives per anchor; "
            "optimizer batch %d sentences (x %d accumulation steps); %s; loss %s",
            global_batch,
            self.args.world_size,
            global_batch - 1 if getattr(loss, "in_batch_negatives", True) else 0,
            global_batch * self.args.gradient_accumulation_steps,
            self.args.gradient_accumulation_steps,
            f"DeepSpeed ZeRO-{self.zero_stage}" if self.is_deepspeed_enabled else "no DeepSpeed",
            getattr(loss, "get_config_dict", dict)(),
        )

    def checkpoint_files(self) -> tuple[str, ...]:
        """The state files this trainer adds to every checkpoint, without which a resume would not
        continue the same run (:func:`cse.resume.checkpoint_problem`)."""
        return ()

    @property
    def zero_stage(self) -> int | None:
        """The DeepSpeed ZeRO stage, or None without DeepSpeed."""
        return self.accelerator.state.deepspeed_plugin.zero_stage if self.is_deepspeed_enabled else None

    def refuse_sharding(self, method: str, reason: str, zero3: bool = True) -> None:
        """Stop a method at construction under FSDP (and, with ``zero3``, DeepSpeed ZeRO-3), whose
        sharded weights ``reason`` explains it cannot use."""
        if self.is_fsdp_enabled or (zero3 and self.zero_stage == 3):
            raise ValueError(
                f"{method} does not support {'FSDP' if self.is_fsdp_enabled else 'DeepSpeed ZeRO-3'}: {reason}. "
                "Use DDP or DeepSpeed ZeRO-2 (configs/accelerate/)"
            )

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        views = model(**inputs)
        loss = self.loss_fn(views[:, 0], views[:, 1])
        return (loss, {"embeddings": views}) if return_outputs else loss

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

    def save_encoder(self, output_dir: str | None = None) -> None:
        """Save the current (after ``load_best_model_at_end``: the best) model as a plain Hugging
        Face directory with its tokenizer and ``cse_config.json``."""
        output_dir = output_dir or self.args.output_dir
        state_dict = self.accelerator.get_state_dict(self.deepspeed) if self.is_deepspeed_enabled else None
        if self.args.should_save:
            check_finite_weights(state_dict or self.accelerator.unwrap_model(self.model).state_dict(), output_dir)
            self.accelerator.unwrap_model(self.model).save_pretrained(output_dir, state_dict=state_dict)
            logger.info("encoder saved to %s", output_dir)
