"""The body every ``run_*.py`` and ``run_cse.py`` shares (:func:`train` of the :class:`~cse.run.Run`
their command line names, :func:`cse.composition.parse`): the parts' build (:func:`cse.build.build`),
logging, corpus, trainer, training (resuming where a run stopped), the end of the run
(:func:`finish_run`: the best encoder's export, the final STS table and the model card,
``cse_config.json`` last, each file written atomically; the same command completes a run stopped
before it) and, with ``--push_to_hub``, the upload of the exported encoder."""

from __future__ import annotations

import logging
import os
import sys

import datasets
import transformers
from transformers import set_seed

from .arguments import check_run_steps, run_steps
from .atomic import atomic_path, publish, staging_dir, write_json
from .batches import TokenRows
from .build import build
from .cpu_memory import keep_freed_memory
from .data import TwoViewCollator, build_train_dataset, check_sequence_length, graph_lengths
from .environment import collect_environment
from .errors import CSEUsageError
from .evaluation import SentEvalSuite
from .model_card import CardData, push_encoder, write_model_card
from .reliability import check_free_space, output_dir_lock, refusal_leaves_nothing
from .results import markdown_table, read_result_json
from .resume import (
    check_best_model_loaded,
    check_checkpoint_matches,
    find_checkpoint,
    refuse_output_dir,
    training_ended,
)
from .run import Run
from .run_names import CSE_CONFIG_NAME, EXPORT_NAMES, STAGING_NAME, TRAIN_RESULTS_NAME, TRAINER_STATE_NAME
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


def train(run: Run, callbacks=()):
    """What the parts need before the build (SG-BERT's default corpus and early stopping), the parts'
    model and loss (:func:`cse.build.build`), then their training and evaluation (:func:`train_built`).
    The cheap refusals come first: the precision, before a part writes into the output directory.
    ``callbacks`` (``TrainerCallback`` objects, e.g. the benchmark's step timer) join the Trainer's.
    Returns the trainer."""
    training_args = run.training_args
    setup_logging(training_args)
    check_precision(training_args)  # before a part writes into the output directory
    if training_args.device.type == "cpu":
        logger.info(
            keep_freed_memory()
            if training_args.keep_cpu_memory
            else "glibc's allocator as it comes, freed memory going back to the system (--keep_cpu_memory false)"
        )
    if training_args.cuda_graphs:
        graph_lengths(run.data_args.max_seq_length, training_args.cuda_graph_lengths)  # refused before any work
    # What a part writes before the checks (SG-BERT's corpus) is removed again when one refuses the run;
    # the run holds its output directory from before the model is read (another run in it is refused at once).
    with refusal_leaves_nothing(training_args), output_dir_lock(training_args):
        callbacks = [
            *callbacks,
            *(callback for part in run.parts for callback in part.prepare_run(run.data_args, training_args)),
        ]
        if training_args.resume_from_checkpoint is None:
            # a finished run, or an interrupted one with other settings, refused before the model and
            # the corpus are read (the corpus' counts are compared once read: find_checkpoint)
            refuse_output_dir(run, run.settings)
        set_seed(training_args.seed)
        model, loss = build(list(run.parts), run.model_args)
        return train_built(run, model, loss, callbacks)


def build_trainer(run: Run, model, loss, **trainer_kwargs):
    """The trainer of ``model``, ``loss`` and the run's parts on the corpus its data arguments name
    (tokenised here, with the columns the parts add: :meth:`~cse.parts.Part.corpus`), its batches' views
    remade by the parts (:meth:`~cse.parts.Part.views`)."""
    data_args, training_args = run.data_args, run.training_args
    with training_args.main_process_first(desc="corpus tokenisation"):
        train_dataset, statistics = build_train_dataset(
            data_args, model.tokenizer, run.global_batch, cache_dir=run.model_args.cache_dir
        )
        for part in run.parts:
            train_dataset = part.corpus(train_dataset, model.tokenizer, data_args, training_args)
    check_run_steps(training_args, statistics.sentences)
    max_length = data_args.max_seq_length if data_args.pad_to_max_length else None
    return CSETrainer(
        model=model,
        args=training_args,
        # batches sliced from the corpus' token matrices, not padded sentence by sentence at each step
        train_dataset=TokenRows(train_dataset, model.tokenizer, max_length),
        data_collator=TwoViewCollator(
            model.tokenizer,
            max_length=max_length,
            views=[part.views for part in run.parts],
            lengths=graph_lengths(data_args.max_seq_length, training_args.cuda_graph_lengths)
            if training_args.cuda_graphs
            else (),
        ),
        processing_class=model.tokenizer,
        loss=loss,
        parts=list(run.parts),
        senteval_data_dir=data_args.senteval_data_dir,
        corpus_statistics=statistics,
        **trainer_kwargs,
    )


def train_built(run: Run, model, loss, callbacks=()):
    """Train ``model`` with ``loss`` and the run's parts, save the best encoder to the output
    directory with its model card and, unless ``--final_eval none``, print and save its STS table (the
    card includes it) (:func:`finish_run`); with ``--push_to_hub``, upload the finished directory.
    ``callbacks`` join the Trainer's. Returns the trainer.

    A ``--resume_from_checkpoint`` saved by another model layout is refused first, before the corpus
    is read: the Trainer would load it non-strictly. What the run needs at its end is checked before
    it starts: the final evaluation's data (read now; the trainer reads the dev sets when it is
    built). The run holds its output directory throughout (:func:`train` takes the lock,
    :func:`cse.reliability.output_dir_lock`), is refused before it writes there when the file system
    has less free space than the run writes at least (:func:`cse.reliability.check_free_space`), and
    writes nothing there before every check of the directory and of the checkpoint it resumes from has
    passed (:func:`cse.resume.find_checkpoint`)."""
    data_args, training_args = run.data_args, run.training_args
    check_sequence_length(data_args.max_seq_length, model)
    if training_args.resume_from_checkpoint:
        check_checkpoint_matches(model, training_args.resume_from_checkpoint)
    final_suite = (
        SentEvalSuite("sts", training_args.final_eval, data_args.senteval_data_dir, progress=True)
        if training_args.final_eval != "none"
        else None
    )

    def check_found(checkpoint: str | None) -> None:
        """What train() and restore_trained refuse in the checkpoint found, before the run writes anything."""
        if checkpoint is None:
            return
        if training_ended(checkpoint):
            trainer.check_restorable(checkpoint)
        else:
            check_checkpoint_matches(model, checkpoint)

    trainer = build_trainer(run, model, loss, callbacks=list(callbacks))
    check_free_space(model, training_args, run_steps(training_args, trainer.corpus_statistics.sentences))
    checkpoint = find_checkpoint(
        run, method_files=trainer.checkpoint_files(), corpus=trainer.corpus_statistics, check=check_found
    )
    # Every process has read the output directory before the main one writes the run's end into it:
    # completing a run (below) takes no collective step before the final evaluation, so a process
    # that started late could otherwise find the run already finished.
    trainer.accelerator.wait_for_everyone()
    # A checkpoint at the last step: training had ended when the run was stopped; the same command
    # completes what comes after it (what an earlier attempt wrote whole is kept).
    ended = checkpoint is not None and training_ended(checkpoint)
    if ended:
        trainer.restore_trained(checkpoint)
    train_metrics = None if ended else trainer.train(resume_from_checkpoint=checkpoint).metrics
    check_best_model_loaded(trainer)
    finish_run(run, trainer, final_suite, train_metrics)
    if training_args.push_to_hub and trainer.is_world_process_zero():
        push_encoder(
            run.output_dir,
            trainer.hub_model_id,
            token=training_args.hub_token,
            revision=training_args.hub_revision,
        )
    return trainer


def save_train_results(run: Run, trainer, metrics: dict | None) -> None:
    """The Trainer's ``trainer_state.json``, ``all_results.json`` and ``train_results.json`` (as
    ``Trainer.save_state`` and ``save_metrics`` lay them out), each written atomically, in that order.
    ``metrics`` None: training had ended in an earlier attempt, whose files are kept when its
    ``train_results.json`` is there; else only what the checkpoint records is written (its
    ``train_loss`` and speed were the attempt's, which is gone)."""
    if not trainer.is_world_process_zero():
        return
    if metrics is None:
        if os.path.isfile(os.path.join(run.output_dir, TRAIN_RESULTS_NAME)):
            return
        metrics = {"epoch": trainer.state.epoch, "total_flos": trainer.state.total_flos}
    # The Trainer counts FLOPs only for models that count their own (transformers'), not ours: 0 is no count.
    metrics = {k: v for k, v in metrics.items() if k != "total_flos" or v}
    metrics["train_samples"] = len(trainer.train_dataset)
    trainer.log_metrics("train", metrics)
    with atomic_path(os.path.join(run.output_dir, TRAINER_STATE_NAME)) as tmp:
        trainer.state.save_to_json(tmp)
    for name in ("all_results.json", TRAIN_RESULTS_NAME):
        write_json(os.path.join(run.output_dir, name), metrics, indent=4, sort_keys=True)


def final_report(run: Run, trainer, final_suite, keep: bool) -> dict:
    """The final STS evaluation's report on the trained model, as ``sts_<mode>_results.json`` holds it
    (with ``keep``, the file an earlier attempt wrote is read instead of evaluating again)."""
    args = run.training_args
    path = os.path.join(run.output_dir, f"sts_{args.final_eval}_results.json")
    if keep and os.path.isfile(path):
        return read_result_json(path)
    report = trainer.senteval(final_suite)
    if trainer.is_world_process_zero():
        report.update(model=run.output_dir, pooler=trainer.encoder.eval_pooler, environment=collect_environment(args))
        write_json(path, report)
    return report


def finish_run(run: Run, trainer, final_suite, train_metrics: dict | None) -> None:
    """Everything a run writes after training, ``cse_config.json`` last: the training metrics and
    state, the export (staged in ``output_dir/_export.tmp``), the final STS table unless
    ``--final_eval none``, the model card (:func:`save_model_card`); then the staged files are moved
    into place (:func:`cse.atomic.publish`). A directory with ``cse_config.json`` therefore holds a
    finished run, and the same command completes one stopped before it. ``train_metrics`` None:
    training had ended in an earlier attempt (:meth:`cse.trainer.CSETrainer.restore_trained`), whose
    whole files are kept (:func:`save_train_results`, :func:`final_report`)."""
    args, output_dir = run.training_args, run.output_dir
    save_train_results(run, trainer, train_metrics)
    staging = staging_dir(output_dir) if args.should_save else os.path.join(output_dir, STAGING_NAME)
    trainer.save_encoder(staging)
    reports = {}
    if final_suite is not None:
        report = reports[args.final_eval] = final_report(run, trainer, final_suite, keep=train_metrics is None)
        if trainer.is_world_process_zero():
            print(f"\nSTS ({args.final_eval}), Spearman x 100, pooler {report['pooler']}:")
            print(
                markdown_table(
                    {os.path.basename(os.path.normpath(output_dir)): report["scores"]}, list(report["scores"])
                )
            )
    save_model_card(run, trainer, reports, staging)
    if args.should_save:
        publish(staging, output_dir, last=(CSE_CONFIG_NAME,), names_file=os.path.join(output_dir, EXPORT_NAMES))
        logger.info("the trained encoder, its results and model card are in %s", output_dir)


def save_model_card(run: Run, trainer, reports: dict, export_dir: str) -> None:
    """Write the exported encoder's ``README.md`` (:mod:`cse.model_card`) into ``export_dir``, where
    the export is staged, in the main process: its :class:`~cse.model_card.CardData` of the run, the
    trainer and the final STS ``reports``."""
    if trainer.is_world_process_zero():
        write_model_card(CardData.of_run(run, trainer, reports), export_dir)
