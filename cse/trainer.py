"""``CSETrainer``: the Hugging Face Trainer running the step program of a list of parts
(:mod:`cse.parts`) in ``compute_loss``, and an ``evaluate`` that scores STS-B dev and SICK-R trial
under the SentEval protocol.

Only public hooks are overridden, so checkpointing, best-model selection
(``load_best_model_at_end`` with ``metric_for_best_model="stsb_spearman"``), resumption, logging,
mixed precision and accelerate/DeepSpeed launching are the stock Trainer's.
"""

from __future__ import annotations

import functools
import logging
import os

import accelerate.optimizer
import torch
from accelerate.utils import AutocastKwargs, broadcast_object_list
from safetensors.torch import load_file
from torch import nn
from transformers import PreTrainedModel, Trainer, TrainerCallback
from transformers.trainer_callback import TrainerState
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, IntervalStrategy
from transformers.utils import SAFE_WEIGHTS_NAME
from transformers.utils.output_capturing import maybe_install_capturing_hooks

from .arguments import check_global_batch, global_batch
from .data import CorpusStatistics
from .encoding import BucketedEncoder
from .errors import CSEUsageError
from .evaluation import SentEvalSuite
from .parts import Part, Step, StepLoss, total
from .parts_state import load_parts_state, parts_state, save_parts_state
from .reliability import PROGRESS, NonFiniteGuard, check_finite_weights
from .resume import check_checkpoint_matches, resolve_checkpoint, trainer_state
from .run_dir import begin_checkpoint
from .run_names import PARTS_STATE_NAME, TRAINER_STATE_NAME
from .step_graph import StepGraphs, TensorLearningRate, WholeStep

logger = logging.getLogger(__name__)

# Trainer metric names (SimCSE's), Spearman on a 0-1 scale.
DEV_METRICS = {"STS-B": "stsb_spearman", "SICK-R": "sickr_spearman", "Avg.": "avg_sts"}


def base_terms(loss: nn.Module | None, outputs: dict, separate: bool = False):
    """``(terms, statistics)`` of the loss of the training forward's two views (``outputs["embeddings"]``,
    ``(batch, 2, d)``): the loss's own ``terms`` where it has them (:mod:`cse.losses`' with statistics
    or separable terms), else its value as the one term ``contrastive``; none without a loss (a part
    gives the whole objective). ``separate``: split the terms as finely as the loss can, at the cost
    of operators (the logging steps of ``--log_term_gradients`` only)."""
    if loss is None:
        return {}, {}
    views = outputs["embeddings"]
    terms = getattr(loss, "terms", None)
    if terms is None:
        return {"contrastive": loss(views[:, 0], views[:, 1])}, {}
    return terms(views[:, 0], views[:, 1], separate=separate)


def merged(into: dict, added: dict, what: str, part: Part) -> None:
    """``into`` updated with ``added``, refusing a name twice: two parts' terms never overwrite each other."""
    clash = sorted(into.keys() & added.keys())
    if clash:
        raise ValueError(f"part {part.name!r} adds the {what} {clash[0]!r}, which the loss or another part gives")
    into.update(added)


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


def ask_for_lomo_once() -> None:
    """Ask once per process whether the LOMO optimizers' package is installed. accelerate's optimizer
    wrapper asks at every optimizer step, twice (``accelerate.optimizer.is_lomo_available``: an
    ``importlib`` search of ``sys.path``, about half a millisecond of a step on a CPU, more than the
    rest of the Trainer's own work); a package does not appear while a process trains, so the first
    answer is kept. Where accelerate no longer asks so, nothing is changed."""
    ask = getattr(accelerate.optimizer, "is_lomo_available", None)
    if callable(ask) and not hasattr(ask, "cache_info"):
        accelerate.optimizer.is_lomo_available = functools.cache(ask)


class CSETrainer(Trainer):
    """The Trainer of a list of parts (:mod:`cse.parts`): each step runs their step program
    (:meth:`step_terms`), each optimizer step their :meth:`~cse.parts.Part.after_step`, each
    checkpoint holds their state.

    Args (besides the Trainer's):
    loss: module mapping the two views' embeddings ``(anchors, positives)`` to a scalar, or None
        where a part gives the whole objective (:func:`cse.build.build` makes both).
    parts: the run's parts, in the order their hooks run (``[]``: SimCSE).
    senteval_data_dir: SentEval data for model selection (default ``$CSE_DATA_DIR/senteval``).
    corpus_statistics: the training corpus' :class:`cse.data.CorpusStatistics`, recorded in
        ``run_args.json`` and the model card (None: not counted).
    """

    # The loss is a per-batch mean, so the Trainer must divide it by the accumulation steps.
    loss_is_scaled_for_ga = False

    def __init__(
        self,
        *args,
        loss: nn.Module | None,
        parts: list[Part] = (),
        senteval_data_dir: str | None = None,
        eval_dataset=None,
        corpus_statistics: CorpusStatistics | None = None,
        **kwargs,
    ):
        if eval_dataset is None:
            eval_dataset = SentEvalSuite("sts", "dev", senteval_data_dir)
        super().__init__(*args, eval_dataset=eval_dataset, **kwargs)
        ask_for_lomo_once()
        self.loss_fn = loss
        self.parts = list(parts)
        self.corpus_statistics = corpus_statistics
        self._recorded: dict[str, list[torch.Tensor]] = {}
        self._compiled_training_loss = None
        self._bucketed: tuple[tuple, BucketedEncoder] | None = None  # see encode
        if self.args.torch_compile:
            # transformers hooks the layers whose outputs it can return (hidden states, attentions) at
            # the first forward that asks for them: traced, that registration is a graph break and
            # recompiles; done now, the compiled step finds the hooks in place.
            for module in self.model.modules():
                if isinstance(module, PreTrainedModel):
                    maybe_install_capturing_hooks(module)
        self.add_callback(NonFiniteGuard())
        self.add_callback(PROGRESS)
        check_global_batch(self.args)
        # A corpus smaller than the global batch is refused before tokenisation (cse.data.check_corpus).
        batch, accumulation = global_batch(self.args), self.args.gradient_accumulation_steps
        # Gradient accumulation enlarges the optimizer's batch, not the negatives: each micro-batch's
        # loss only sees the sentences gathered in that micro-batch.
        logger.info(
            "contrastive batch: %d sentences per step across %d process(es), %s; "
            "optimizer batch %d sentences (x %d accumulation steps); %s; loss %s",
            batch,
            self.args.world_size,
            # with no loss, the parts' terms are the whole objective and say what each anchor is compared with
            "the parts' own objective"
            if loss is None
            else f"{batch - 1 if getattr(loss, 'in_batch_negatives', True) else 0} in-batch negatives per anchor",
            batch * accumulation,
            accumulation,
            f"DeepSpeed ZeRO-{self.zero_stage}" if self.is_deepspeed_enabled else "no DeepSpeed",
            getattr(loss, "get_config_dict", dict)(),
        )
        for part in self.parts:
            part.setup(self)
        self.add_callback(PartHooks(self))
        self.check_term_names()
        # The whole step as one function (cse.step_graph): "captured" under --cuda_graphs, else None, the
        # Trainer's own step ("eager" runs the same function without a graph: the CPU's check of it).
        self.whole_step = None
        self.step_graphs: StepGraphs | None = None
        self.whole_step_ran = False
        self.last_grad_norm: torch.Tensor | None = None
        self.step_path = "eager"
        if self.args.cuda_graphs:
            problem = next((p for part in self.parts if (p := part.capture_problem())), None)
            if problem is not None:
                logger.warning("--cuda_graphs: the training step runs eagerly, uncaptured: %s", problem)
                self.step_path = f"eager ({problem})"
            else:
                self.whole_step, self.step_path = "captured", "cuda graphs"
                # a cast weight cached by autocast would be a tensor of the capture's that no replay recomputes
                self.accelerator.autocast_handler = AutocastKwargs(cache_enabled=False)

    def check_term_names(self) -> None:
        """Refuse two parts that would add a term of the same name (one would replace the other's),
        when the trainer is built rather than at the first step."""
        seen = dict.fromkeys(self.loss_term_weights(), "the loss")
        for part in self.parts:
            for name in part.term_weights():
                if name in seen:
                    raise CSEUsageError(f"part {part.name!r} adds the term {name!r}, which {seen[name]} gives too")
                seen[name] = f"part {part.name!r}"

    def part(self, name: str) -> Part:
        """The run's part named ``name`` (for code that inspects a run; parts never ask for each other)."""
        for part in self.parts:
            if part.name == name:
                return part
        raise KeyError(f"this run has no part {name!r}; its parts: {', '.join(p.name for p in self.parts) or 'none'}")

    def checkpoint_files(self) -> tuple[str, ...]:
        """The files the parts add to every checkpoint, without which a resume would not continue the
        same run (:func:`cse.resume.checkpoint_problem`): the one file of their state, if they keep any."""
        return (PARTS_STATE_NAME,) if parts_state(self.parts) else ()

    @property
    def citations(self) -> list[str]:
        """BibTeX entries of every loss the trainer and its parts hold, and every loss those hold
        (``AdversarialInfoNCELoss(base=MixCSELoss(...))`` cites both papers), each once: what the model
        card cites after the method's own and its parts' (:attr:`cse.registry.MethodRecord.citations`)."""
        values = [value for holder in [self, *self.parts] for value in vars(holder).values()]
        held = [m for value in values if isinstance(value, nn.Module) for m in value.modules()]
        return list(dict.fromkeys(m.citation for m in held if hasattr(m, "citation")))

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

    def training_step(self, model, inputs, num_items_in_batch=None):
        """The Trainer's step, or the whole step as one function (captured as a CUDA graph under
        ``--cuda_graphs``): then it also clips, steps the optimizer and runs the parts' after-step
        updates, and the Trainer's own clipping, optimizer step and ``zero_grad`` that follow find no
        gradient and do nothing (:mod:`cse.step_graph`). The logging steps of ``--log_term_gradients``
        take the Trainer's step."""
        # Every module in training mode (a walk over them all, which the Trainer's own step does again: here
        # only what is_term_logging_step reads when the model is not in it, and for the whole step).
        if not model.training:
            model.train()
        self.whole_step_ran = False
        if self.whole_step is None or self.is_term_logging_step(model):
            return super().training_step(model, inputs, num_items_in_batch)
        model.train()
        if self.step_graphs is None:
            self.step_graphs = self.start_whole_step(model)
        loss, self.last_grad_norm, statistics = self.step_graphs.step(
            {k: v.to(self.args.device, non_blocking=True) for k, v in inputs.items()}
        )
        self.whole_step_ran = True
        self.record_training_metrics(**statistics)
        return loss

    def start_whole_step(self, model) -> StepGraphs:
        """The whole step of ``model``, set up once the optimizer's and the scheduler's state is loaded
        (a resumed run's): the learning rates in device tensors, the optimizer the Trainer's."""
        optimizer = getattr(self.optimizer, "optimizer", self.optimizer)  # accelerate's wrapper holds it
        if not (optimizer.defaults.get("fused") or optimizer.defaults.get("capturable")):
            raise CSEUsageError(
                f"the whole step needs a fused or capturable optimizer, got {type(optimizer).__name__}",
                hint="pass --optim adamw_torch_fused",
            )
        self.lr_scheduler = TensorLearningRate(self.lr_scheduler, optimizer, self.args.device)
        capture = self.whole_step == "captured"
        if capture:  # its step reads the step counts and learning rates on the device alone
            for group in optimizer.param_groups:
                group["capturable"] = True
        return StepGraphs(WholeStep(self, model, optimizer), capture=capture)

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        if self.is_term_logging_step(model):
            # Eager, and with the terms separated as finely as the losses can: only the logging steps
            # of --log_term_gradients take this path, which costs one backward per term.
            loss, step = self.training_loss(model, inputs, separate=True)
            self.record_training_metrics(**term_gradients(step.terms, self.encoder_parameters()))
        else:
            loss, step = self.step_loss_function(model, inputs)
        if model.training:
            self.record_training_metrics(**step.statistics)
        return (loss, step.outputs) if return_outputs else loss

    @property
    def step_loss_function(self):
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
        """The batch's :class:`~cse.parts.StepLoss`, the step program up to the loss: the model's
        forward, the loss's terms of the two views, each part's terms and statistics, then each part's
        weighing of them (:mod:`cse.parts`). ``separate``: see :func:`base_terms`."""
        outputs = model(**inputs)
        terms, statistics = base_terms(self.loss_fn, outputs, separate)
        step = Step(model, self.encoder, inputs, outputs, dict(terms), dict(statistics))
        for part in self.parts:
            added, stats = part.terms(step)
            merged(step.terms, added, "term", part)
            merged(step.statistics, stats, "statistic", part)
        for part in self.parts:
            step.terms, stats = part.weigh(step.terms)
            merged(step.statistics, stats, "statistic", part)
        return StepLoss(step.terms, step.statistics, outputs)

    def loss_term_weights(self) -> dict[str, float]:
        """The weight of each term the contrastive loss gives: InfoNCE's ``contrastive``, and its own
        ``term_weights()`` where it has them (AdCSE's split of its softmax); none without a loss."""
        if self.loss_fn is None:
            return {}
        own = getattr(self.loss_fn, "term_weights", None)
        return {"contrastive": 1.0, **(own() if own is not None else {})}

    def term_weights(self) -> dict[str, float]:
        """The weight of each term :meth:`step_terms` can give: a term is its weight times its raw value
        (``python -m cse.diagnostics`` divides the weight out): the loss's (its ``term_weights()``:
        AdCSE's split of its softmax), the parts' own, each part's weighing of them."""
        weights = self.loss_term_weights()
        for part in self.parts:
            weights.update(part.term_weights())
        for part in self.parts:
            weights, _ = part.weigh(weights)
        return weights

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
        # The whole step clipped the gradients itself: the Trainer's clipping found none to measure.
        if "grad_norm" in logs and self.whole_step_ran:
            logs["grad_norm"] = self.last_grad_norm.item()
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
        ``autocast_dtype`` says otherwise. Under ``--cuda_graphs``, through a :class:`BucketedEncoder`
        that captures its batches' shapes, kept for the next call with the same sentences (the dev
        suite of every evaluation: tokenised and captured once)."""
        autocast_dtype = autocast_dtype or self.autocast_dtype
        batch_size = self.args.per_device_eval_batch_size
        if not self.args.cuda_graphs:
            return self.model.encode(
                sentences, batch_size=batch_size, autocast_dtype=autocast_dtype, pooler_type=pooler_type
            ).numpy()
        key = (tuple(sentences), autocast_dtype, pooler_type)
        if self._bucketed is None or self._bucketed[0] != key:
            encoder = BucketedEncoder(self.model, sentences, batch_size, autocast_dtype, pooler_type, capture=True)
            self._bucketed = (key, encoder)
        return self._bucketed[1]().cpu().numpy()

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
        """The suite's report on the current model (main process): the model selection's suite through
        a part's selection pooler, if one has it; the parts' analyses of the same embeddings under
        ``report["analysis"]``, which ``evaluate`` logs beside the scores."""
        selection = suite is self.eval_dataset
        pooler = next((p for part in self.parts if selection and (p := part.selection_pooler())), None)
        encoded = {}

        def encode(sentences):
            vectors = self.encode(sentences, pooler_type=pooler)
            encoded.update(zip(sentences, vectors))
            return vectors

        report = suite.run(encode)
        analysis = {key: value for part in self.parts for key, value in part.analysis(suite, encoded).items()}
        if analysis:
            report["analysis"] = {**report.get("analysis", {}), **analysis}
        return report

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
        (transformers 5.24). The parts take their state from ``checkpoint`` too (what they export:
        SARCSE's token frequencies).

        Under DeepSpeed the checkpoint's ``model.safetensors`` holds the state dict the engine
        exports (the Trainer saves it with ``Accelerator.get_state_dict``, as :meth:`save_encoder`
        does; under ZeRO-3 gathered, ``stage3_gather_16bit_weights_on_model_save``), in the engine's
        dtypes: with bf16/fp16 the parameters in 16 bits, the buffers as they were. Its tensors are
        taken as they are, and the model moved to the engine's device, so that it is exported and
        evaluated as the engine's model would be."""
        self.state = TrainerState.load_from_json(os.path.join(checkpoint, TRAINER_STATE_NAME))
        source = self.check_restorable(checkpoint)
        # on the CPU (safetensors takes no "cpu:0", the device of DeepSpeed on a CPU)
        weights = load_file(os.path.join(source, SAFE_WEIGHTS_NAME))
        if self.is_deepspeed_enabled:  # the engine's dtypes and device (the model reaches them in train())
            self.model.load_state_dict(weights, assign=True)
            self.model.to(self.args.device)
        else:
            self.model.load_state_dict(weights)
        load_parts_state(self.parts, checkpoint, self.args.device)
        logger.warning("training had ended at step %d: exporting the model of %s", self.state.global_step, source)

    def check_restorable(self, checkpoint: str) -> str:
        """Refuse what :meth:`restore_trained` cannot restore from ``checkpoint`` (saved at the last
        step): a run under FSDP, weights missing or of another model layout. Returns the checkpoint
        whose weights are exported: the best one (``--load_best_model_at_end``) or ``checkpoint``."""
        best = trainer_state(checkpoint).get("best_model_checkpoint") if self.args.load_best_model_at_end else None
        source = best or checkpoint
        stopped = f"training ended at {checkpoint}, but the run was stopped before its export"
        hint = "train again into another --output_dir"
        if self.is_fsdp_enabled:
            raise CSEUsageError(f"{stopped}, which is not completed under FSDP", hint=hint)
        if not os.path.isfile(os.path.join(source, SAFE_WEIGHTS_NAME)):
            raise CSEUsageError(f"{stopped}, and {source} holds no {SAFE_WEIGHTS_NAME} to export", hint=hint)
        check_checkpoint_matches(self.model, source)
        return source

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
        for part in self.parts:
            part.export(self, output_dir)

    def train(self, resume_from_checkpoint=None, **kwargs):
        """The Trainer's ``train``, after each part has taken its state from the checkpoint it resumes
        (``True``: the last complete one in ``output_dir``; another model layout's is refused) and begun."""
        checkpoint = resolve_checkpoint(self, resume_from_checkpoint)
        if checkpoint:
            load_parts_state(self.parts, checkpoint, self.args.device)
        for part in self.parts:
            part.begin(self, resumed=bool(checkpoint))
        self.step_graphs = None  # the Trainer makes a new optimizer and scheduler
        return super().train(resume_from_checkpoint=checkpoint, **kwargs)

    def save_model(self, output_dir: str | None = None, _internal_call: bool = False):
        # A checkpoint's model is its first file: its folder appears marked as this run's
        # (cse.run_dir.begin_checkpoint), so that a write cut short is still known for the run's own.
        checkpoint = os.path.join(self.args.output_dir, f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}")
        if _internal_call and output_dir == checkpoint and self.args.should_save:
            begin_checkpoint(checkpoint)
        super().save_model(output_dir, _internal_call=_internal_call)
        # A checkpoint's model is saved first, before its optimizer and Trainer state: the parts' state
        # written here, not after the checkpoint (on_save), leaves no complete-looking checkpoint without it.
        if self.args.should_save:
            save_parts_state(self.parts, output_dir or self.args.output_dir)


class PartHooks(TrainerCallback):
    """The parts' hooks around the step, at the Trainer's public events: ``on_train_begin`` (the model
    wrapped, cast and loaded), ``on_step_begin`` (before an optimizer step's first forward) and
    ``on_optimizer_step`` (right after ``optimizer.step()``)."""

    def __init__(self, trainer: CSETrainer):
        self.trainer = trainer

    def on_train_begin(self, args, state, control, **kwargs):
        for part in self.trainer.parts:
            part.train_begin(self.trainer)

    def on_step_begin(self, args, state, control, **kwargs):
        for part in self.trainer.parts:
            part.step_begin(self.trainer)

    def on_optimizer_step(self, args, state, control, **kwargs):
        if self.trainer.whole_step_ran:  # the whole step ran them after its own optimizer step
            return
        for part in self.trainer.parts:
            part.after_step(self.trainer)
