"""The body every ``run_*.py`` shares: logging, corpus, trainer, training (resuming where a run
stopped), export of the best encoder, and the final STS table."""

from __future__ import annotations

import json
import logging
import os
import sys

import datasets
import transformers

from .data import TwoViewCollator, build_train_dataset
from .evaluation import SentEvalSuite
from .modeling import CSEModel
from .reliability import output_dir_lock
from .results import markdown_table
from .resume import check_best_model_loaded, find_checkpoint
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


def train_and_evaluate(
    model_args, data_args, training_args, model, loss, trainer_class=CSETrainer, method_args=None, **trainer_kwargs
):
    """Train ``model`` with ``loss`` (``trainer_class`` gets ``trainer_kwargs``; ``method_args``, the
    method's dataclass, guards resumption with the rest), save the best encoder to ``output_dir`` and,
    unless ``--final_eval none``, print and save its STS table, holding ``output_dir`` for this run
    throughout (:func:`cse.reliability.output_dir_lock`). Returns the trainer."""
    with output_dir_lock(training_args):
        return _train_and_evaluate(
            model_args, data_args, training_args, model, loss, trainer_class, method_args, **trainer_kwargs
        )


def _train_and_evaluate(model_args, data_args, training_args, model, loss, trainer_class, method_args, **kwargs):
    with training_args.main_process_first(desc="corpus tokenisation"):
        train_dataset = build_train_dataset(data_args, model.tokenizer, cache_dir=model_args.cache_dir)
    trainer = trainer_class(
        model=model,
        args=training_args,
        train_dataset=train_dataset,
        data_collator=TwoViewCollator(
            model.tokenizer, max_length=data_args.max_seq_length if data_args.pad_to_max_length else None
        ),
        processing_class=model.tokenizer,
        loss=loss,
        senteval_data_dir=data_args.senteval_data_dir,
        **kwargs,
    )
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

    if training_args.final_eval != "none":
        report = trainer.senteval(SentEvalSuite("sts", training_args.final_eval, data_args.senteval_data_dir))
        if trainer.is_world_process_zero():
            report.update(model=training_args.output_dir, pooler=model.eval_pooler)
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
    return trainer
