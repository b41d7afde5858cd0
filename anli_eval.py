#!/usr/bin/env python
"""Robustness on Adversarial NLI (V-advCSE, Table 3): fine-tune a trained encoder as a 3-way NLI
classifier (``AutoModelForSequenceClassification``: the encoder's pooling layer and a new linear
layer) on SNLI + MNLI + FEVER-NLI + ANLI, then report ANLI R1/R2/R3/All accuracy on dev and test
(see cse/evaluation/anli.py).

    python anli_eval.py --model_name_or_path result/vadvcse/vadvcse-bert-base \
        --output_dir result/vadvcse/vadvcse-bert-base/anli

writes OUTPUT_DIR/anli_results.json and prints the table. Defaults follow the ANLI repository's
training recipe (lr 1e-5, 2 epochs, batch 32, max length 156, ANLI rounds upsampled 10/20/10);
every TrainingArguments flag works (--bf16 true, --per_device_train_batch_size 16, ...).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np
from transformers import (
    AutoModelForSequenceClassification,
    AutoTokenizer,
    DataCollatorWithPadding,
    Trainer,
    TrainingArguments,
    set_seed,
)

from cse.arguments import check_output_dir, parse_args
from cse.atomic import write_json
from cse.environment import check_min_versions, collect_environment
from cse.errors import CSEUsageError, run_cli
from cse.evaluation.anli import NLI_LABELS, ROUNDS, accuracy_table, load_source, nli_split, training_mix
from cse.modeling import check_model_path
from cse.pipeline import check_precision
from cse.ranges import RANGE, at_least, check_fields
from cse.results import markdown_table


@dataclass
class ANLIArguments:
    model_name_or_path: str = field(metadata={"help": "The trained encoder (a plain Hugging Face directory)."})
    snli: str = field(default="stanfordnlp/snli", metadata={"help": "SNLI: hub name or save_to_disk directory."})
    mnli: str = field(default="nyu-mll/multi_nli", metadata={"help": "MultiNLI: hub name or directory."})
    fever_nli: str = field(
        default="pietrolesci/nli_fever", metadata={"help": "FEVER-NLI (the ANLI authors' NLI-style FEVER)."}
    )
    anli: str = field(default="facebook/anli", metadata={"help": "ANLI: train_r*, dev_r*, test_r* splits."})
    anli_upsampling: list[int] = field(
        default_factory=lambda: [10, 20, 10],
        metadata={"help": "Times each ANLI training round is repeated.", RANGE: at_least(0)},
    )
    max_seq_length: int = field(
        default=156, metadata={"help": "Premise + hypothesis are truncated to this.", RANGE: at_least(2)}
    )
    cache_dir: str | None = field(default=None, metadata={"help": "Where hub downloads are cached."})

    def __post_init__(self):
        check_fields(self)


@dataclass
class ANLITrainingArguments(TrainingArguments):
    learning_rate: float = field(default=1e-5, metadata={"help": "The ANLI repository's learning rate."})
    num_train_epochs: float = field(default=2.0, metadata={"help": "Epochs over the training mix."})
    per_device_train_batch_size: int = field(default=32, metadata={"help": "Pairs per device and step."})
    per_device_eval_batch_size: int = field(default=64, metadata={"help": "Pairs per evaluation batch."})
    warmup_ratio: float = field(default=0.0, metadata={"help": "Linear warm-up share of the steps."})
    save_strategy: str = field(default="no", metadata={"help": "The classifier is a means, not a result."})


def main(argv=None) -> dict:
    check_min_versions()
    anli_args, training_args = parse_args((ANLIArguments, ANLITrainingArguments), argv)
    if len(anli_args.anli_upsampling) != len(ROUNDS):
        raise CSEUsageError(f"--anli_upsampling takes one count per round, got {anli_args.anli_upsampling}")
    check_output_dir(training_args.output_dir)
    model_path = check_model_path(anli_args.model_name_or_path, anli_args.cache_dir)
    check_precision(training_args)
    set_seed(training_args.seed)
    sources = {
        name: load_source(getattr(anli_args, name), anli_args.cache_dir)
        for name in ("snli", "mnli", "fever_nli", "anli")
    }
    tokenizer = AutoTokenizer.from_pretrained(model_path)

    def tokenize(data):
        return data.map(
            lambda batch: tokenizer(
                batch["premise"], batch["hypothesis"], truncation=True, max_length=anli_args.max_seq_length
            ),
            batched=True,
            remove_columns=["premise", "hypothesis"],
        ).rename_column("label", "labels")

    train = tokenize(training_mix(sources, tuple(anli_args.anli_upsampling)))
    evaluation = {
        f"{part}_{r}": tokenize(nli_split(sources["anli"], f"{part}_{r}", "anli"))
        for part in ("dev", "test")
        for r in ROUNDS
    }
    model = AutoModelForSequenceClassification.from_pretrained(
        model_path,
        num_labels=len(NLI_LABELS),
        id2label=dict(enumerate(NLI_LABELS)),
        label2id={label: i for i, label in enumerate(NLI_LABELS)},
    )
    trainer = Trainer(
        model=model,
        args=training_args,
        train_dataset=train,
        data_collator=DataCollatorWithPadding(tokenizer),
        processing_class=tokenizer,
    )
    trainer.train()
    predictions, labels = {}, {}
    for key, data in evaluation.items():
        output = trainer.predict(data)
        predictions[key], labels[key] = np.argmax(output.predictions, axis=-1), output.label_ids
    report = {
        "model": anli_args.model_name_or_path,
        "train_examples": len(train),
        "scores": accuracy_table(predictions, labels),
        "environment": collect_environment(training_args),
    }
    if trainer.is_world_process_zero():
        os.makedirs(training_args.output_dir, exist_ok=True)
        write_json(os.path.join(training_args.output_dir, "anli_results.json"), report)
        print("\nANLI accuracy x 100 (dev and test):")
        print(
            markdown_table(
                {os.path.basename(os.path.normpath(anli_args.model_name_or_path)): report["scores"]},
                list(report["scores"]),
            )
        )
    return report


if __name__ == "__main__":
    run_cli(main)
