"""One run, as its command line gave it (:func:`cse.composition.parse`, the one parser of the run
scripts and ``run_cse.py``): the method's record, its parts, the three argument groups, and what is
derived from them once: the output directory, the global batch and the settings ``run_args.json``
records and compares (:func:`cse.resume.find_checkpoint`) and the model card shows
(:mod:`cse.model_card`). Every function of the run's path (:mod:`cse.pipeline`, :mod:`cse.resume`)
takes it.

A preset is the run of one method's record: its one part (none for SimCSE) with its flags, and its
run script's dataclasses and defaults; a composition is the run of several parts on SimCSE's
arguments (:meth:`~cse.registry.MethodRecord.preset`, :func:`cse.registry.composed`).
"""

from __future__ import annotations

import dataclasses
import functools
import json
from dataclasses import dataclass, field

from .arguments import CSETrainingArguments, DataArguments, ModelArguments, global_batch
from .parts import Part
from .registry import MethodRecord

# Training settings that change what a run computes: a run resumed automatically must keep them.
RESUME_SENSITIVE = (
    "learning_rate",
    "per_device_train_batch_size",
    "gradient_accumulation_steps",
    "num_train_epochs",
    "max_steps",
    "seed",
    "data_seed",
    "lr_scheduler_type",
    "warmup_steps",
    "weight_decay",
    "adam_beta1",
    "adam_beta2",
    "adam_epsilon",
    "max_grad_norm",
    "optim",
    "fp16",
    "bf16",
    "eval_steps",
    "metric_for_best_model",
    "world_size",
)
# Data arguments that only say where or how fast, not what.
DATA_LOGISTICS = ("preprocessing_num_workers", "overwrite_cache", "senteval_data_dir")


@dataclass(frozen=True)
class Run:
    """A run: ``record`` (the method, or a composition's record naming every part), its ``parts`` in
    the order their hooks run (``()``: SimCSE), and its ``model_args``, ``data_args`` and
    ``training_args``; :attr:`output_dir`, :attr:`global_batch` and :attr:`settings` follow from them.

    The global batch and the settings are computed at their first reading, once the run is prepared:
    a part may set a data argument before the corpus is read (SG-BERT's default corpus,
    :meth:`~cse.parts.Part.prepare_run`), and ``python -m cse.diagnostics`` sets its batch size."""

    record: MethodRecord
    parts: tuple[Part, ...]
    model_args: ModelArguments
    data_args: DataArguments
    training_args: CSETrainingArguments
    output_dir: str = field(init=False)

    def __post_init__(self):
        object.__setattr__(self, "parts", tuple(self.parts))
        object.__setattr__(self, "output_dir", self.training_args.output_dir)

    @functools.cached_property
    def global_batch(self) -> int:
        """The sentences of one training step across the processes (each anchor's in-batch negatives are
        the others; :func:`cse.arguments.global_batch`)."""
        return global_batch(self.training_args)

    @property
    def method_settings(self) -> dict | None:
        """The ``method`` group of :attr:`settings`: a preset's flags, or a composition's parts and each
        part's flags (None for SimCSE, which has none)."""
        if self.record.parts:
            return {
                "parts": [part.name for part in self.parts],
                **{p.name: dataclasses.asdict(p.args) for p in self.parts},
            }
        first = self.parts[0] if self.parts else None
        return dataclasses.asdict(first.args) if first is not None and first.args is not None else None

    @functools.cached_property
    def settings(self) -> dict:
        """The settings a run records in ``run_args.json`` and compares when it resumes, as JSON values:
        the method's name (which tells apart methods whose own arguments alone do not: SimCSE has
        none), the model and data arguments (but where and how fast), the training arguments that
        change what is computed (:data:`RESUME_SENSITIVE`) and the method's own
        (:attr:`method_settings`). The corpus' counts join them (:meth:`with_corpus`)."""
        method = self.method_settings
        settings = {
            "run": {"method": self.record.name},
            "model": dataclasses.asdict(self.model_args),
            "data": {k: v for k, v in dataclasses.asdict(self.data_args).items() if k not in DATA_LOGISTICS},
            "training": {k: getattr(self.training_args, k, None) for k in RESUME_SENSITIVE},
            **({"method": method} if method is not None else {}),
        }
        return json.loads(json.dumps(settings, default=str))

    def with_corpus(self, corpus) -> dict:
        """:attr:`settings` with the training corpus' :class:`cse.data.CorpusStatistics` (its sentence
        and distinct counts: the same path may hold another corpus); ``corpus`` None: not counted."""
        return {**self.settings, **({"corpus": corpus.settings()} if corpus is not None else {})}
