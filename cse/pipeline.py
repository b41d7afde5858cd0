"""The body every ``run_*.py`` shares: logging, corpus, trainer, training (resuming where a run
stopped), export of the best encoder with its model card, the final STS table and, with
``--push_to_hub``, the upload of the exported encoder."""

from __future__ import annotations

import json
import logging
import os
import sys

import datasets
import transformers

from .data import TwoViewCollator, build_train_dataset
from .environment import collect_environment
from .errors import CSEUsageError
from .evaluation import SentEvalSuite
from .model_card import push_encoder, write_model_card
from .modeling import CSEModel
from .paths import default_train_file
from .reliability import output_dir_lock
from .results import markdown_table
from .resume import check_best_model_loaded, find_checkpoint, run_settings
from .trainer import CSETrainer

logger = logging.getLogger(__name__)


def setup_logging(training_args) -> None:
    logging.basicConfig(
        format="%(asctime)s %(levelname)s %(name)s: %(message)s", handlers=[logging.StreamHandler(sys.stdout)]
    )
    level = training_args.get_process_log_level()
    # Our own progress lines (corpus size, batch and negatives) are info-level: show them once.
    logging.getLogger("cse").setLevel(logging.INFO if training_args.should_log else level)
    datasets.utils.logging.set_verbosity(level)
    transformers.utils.logging.set_verbosity(level)
    transformers.utils.logging.enable_default_handler()
    transformers.utils.logging.enable_explicit_format()


def check_precision(training_args) -> None:
    """Refuse ``--fp16`` on a CPU: the shipped configs' ``fp16: true`` is the authors' GPU setting,
    which the Trainer would take on a CPU without a word; the user picks float32 or bfloat16 instead of
    getting a silent substitute. (``--bf16`` where the GPU lacks bfloat16 is refused by
    ``TrainingArguments`` itself.)"""
    if training_args.fp16 and training_args.device.type == "cpu":
        raise CSEUsageError(
            "--fp16 needs a GPU and this run is on the CPU",
            hint="pass --fp16 false to train in float32 (or --fp16 false --bf16 true --use_cpu true for bfloat16)",
        )


def load_encoder(model_args) -> CSEModel:
    """The pretrained backbone, tokenizer and pooler that ``model_args`` name."""
    return CSEModel.from_pretrained(
        model_args.model_name_or_path,
        pooler_type=model_args.pooler_type,
        mlp_only_train=model_args.mlp_only_train,
        tokenizer_name_or_path=model_args.tokenizer_name,
        cache_dir=model_args.cache_dir,
        attn_implementation=model_args.attn_implementation,
    )


def save_model_card(trainer, model_args, data_args, method_args, train_sentences: int, reports: dict) -> None:
    """Write the exported encoder's ``README.md`` (:mod:`cse.model_card`) in the main process, for the
    method the trainer was built for (its ``method`` record, :meth:`cse.registry.MethodRecord.pieces`)."""
    if not trainer.is_world_process_zero():
        return
    args = trainer.args
    record = trainer.method
    if record is None:
        raise ValueError("the trainer was built without its method's record (MethodRecord.pieces): no model card")
    write_model_card(
        args.output_dir,
        method=record.name,
        base_model=model_args.model_name_or_path,
        train_source=data_args.dataset_name or data_args.train_file or default_train_file(),
        train_dataset_name=data_args.dataset_name,
        train_sentences=train_sentences,
        settings=run_settings(model_args, data_args, args, method_args),
        reports=reports,
        citations=list(dict.fromkeys([record.citation, *trainer.citations])),
        environment=collect_environment(args),
        repo_id=args.hub_model_id if args.push_to_hub else None,
    )


def build_trainer(model_args, data_args, training_args, model, loss, trainer_class=CSETrainer, **trainer_kwargs):
    """The trainer of ``model`` and ``loss`` on the corpus ``data_args`` name (tokenised here)."""
    with training_args.main_process_first(desc="corpus tokenisation"):
        train_dataset = build_train_dataset(data_args, model.tokenizer, cache_dir=model_args.cache_dir)
    return trainer_class(
        model=model,
        args=training_args,
        train_dataset=train_dataset,
        data_collator=TwoViewCollator(
            model.tokenizer, max_length=data_args.max_seq_length if data_args.pad_to_max_length else None
        ),
        processing_class=model.tokenizer,
        loss=loss,
        senteval_data_dir=data_args.senteval_data_dir,
        **trainer_kwargs,
    )


def train_and_evaluate(
    model_args, data_args, training_args, model, loss, trainer_class=CSETrainer, method_args=None, **trainer_kwargs
):
    """Train ``model`` with ``loss`` (``trainer_class`` gets ``trainer_kwargs``; ``method_args``, the
    method's dataclass, guards resumption with the rest), save the best encoder to ``output_dir`` with
    its model card and, unless ``--final_eval none``, print and save its STS table (the card is written
    again with it); with ``--push_to_hub``, upload the exported directory. Returns the trainer.

    What the run needs at its end is checked before it starts: the precision, and the final
    evaluation's data (read now; the trainer reads the dev sets when it is built). Then the run holds
    ``output_dir`` throughout (:func:`cse.reliability.output_dir_lock`)."""
    check_precision(training_args)
    final_suite = (
        SentEvalSuite("sts", training_args.final_eval, data_args.senteval_data_dir, progress=True)
        if training_args.final_eval != "none"
        else None
    )
    with output_dir_lock(training_args):
        return _train_and_evaluate(
            model_args, data_args, training_args, model, loss, trainer_class, method_args, final_suite, **trainer_kwargs
        )


def train_built(model_args, data_args, training_args, built, method_args=None, callbacks=()):
    """:func:`train_and_evaluate` of what a method's ``build`` returns, ``(model, loss, trainer_class,
    trainer_kwargs)``; ``callbacks`` join the Trainer's."""
    model, loss, trainer_class, trainer_kwargs = built
    return train_and_evaluate(
        model_args,
        data_args,
        training_args,
        model,
        loss,
        trainer_class,
        method_args,
        callbacks=list(callbacks),
        **trainer_kwargs,
    )


def _train_and_evaluate(
    model_args, data_args, training_args, model, loss, trainer_class, method_args, final_suite, **trainer_kwargs
):
    trainer = build_trainer(model_args, data_args, training_args, model, loss, trainer_class, **trainer_kwargs)
    train_dataset = trainer.train_dataset
    checkpoint = find_checkpoint(
        model_args, data_args, training_args, method_args, method_files=trainer.checkpoint_files()
    )
    result = trainer.train(resume_from_checkpoint=checkpoint)
    check_best_model_loaded(trainer)
    trainer.save_encoder()
    metrics = {**result.metrics, "train_samples": len(train_dataset)}
    trainer.log_metrics("train", metrics)
    trainer.save_metrics("train", metrics)
    trainer.save_state()
    save_model_card(trainer, model_args, data_args, method_args, len(train_dataset), reports={})

    if final_suite is not None:
        report = trainer.senteval(final_suite)
        if trainer.is_world_process_zero():
            report.update(
                model=training_args.output_dir,
                pooler=model.eval_pooler,
                environment=collect_environment(training_args),
            )
            path = os.path.join(training_args.output_dir, f"sts_{training_args.final_eval}_results.json")
            with open(path, "w", encoding="utf-8") as f:
                json.dump(report, f, indent=2)
                f.write("\n")
            print(f"\nSTS ({training_args.final_eval}), Spearman x 100, pooler {model.eval_pooler}:")
            print(
                markdown_table(
                    {os.path.basename(os.path.normpath(training_args.output_dir)): report["scores"]},
                    list(report["scores"]),
                )
            )
            save_model_card(
                trainer, model_args, data_args, method_args, len(train_dataset), {training_args.final_eval: report}
            )
    if training_args.push_to_hub and trainer.is_world_process_zero():
        push_encoder(
            training_args.output_dir,
            trainer.hub_model_id,
            token=training_args.hub_token,
            revision=training_args.hub_revision,
        )
    return trainer
