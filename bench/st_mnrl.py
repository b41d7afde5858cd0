"""The sentence-transformers recipe for unsupervised SimCSE, as a benchmark method (``st-mnrl``):
``SentenceTransformerTrainer`` with ``MultipleNegativesRankingLoss`` on (s, s) pairs (the two
dropout views of each sentence), scale 20 (= 1 / tau, tau = 0.05) and CLS pooling, which is what a
user would run instead of this repository's SimCSE.

It takes the run scripts' command line (a SimCSE configuration plus flags) and uses what a training
step needs from it: model, tokenizer, attention implementation, corpus and its first
``--max_train_samples`` sentences, ``--max_seq_length`` (with ``--pad_to_max_length``, every batch
padded to it), batch size, learning rate, steps, seed, precision, ``--torch_compile`` and the device.
It trains only: no evaluation, no saving.
"""

from __future__ import annotations

from sentence_transformers import (
    SentenceTransformer,
    SentenceTransformerTrainer,
    SentenceTransformerTrainingArguments,
)
from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss
from sentence_transformers.sentence_transformer.modules import Pooling, Transformer
from transformers import set_seed

from cse.arguments import CSETrainingArguments, DataArguments, ModelArguments, parse_args
from cse.data import load_train_corpus

SCALE = 20.0  # 1 / SimCSE's temperature 0.05

# The training arguments carried over, as they are, from the run scripts' command line.
CARRIED_ARGUMENTS = (
    "output_dir",
    "per_device_train_batch_size",
    "learning_rate",
    "weight_decay",
    "warmup_steps",
    "max_steps",
    "num_train_epochs",
    "seed",
    "bf16",
    "fp16",
    "tf32",
    "use_cpu",
    "torch_compile",
    "torch_compile_backend",
    "torch_compile_mode",
    "optim",
    "dataloader_num_workers",
    "dataloader_drop_last",
    "logging_steps",
    "report_to",
    "disable_tqdm",
)


def build_model(model_args: ModelArguments, data_args: DataArguments) -> SentenceTransformer:
    """The backbone with CLS pooling, truncating at ``max_seq_length`` (and padding to it with
    ``--pad_to_max_length``, else to the batch's longest sentence, sentence-transformers' default)."""
    processing = {"text": {"padding": "max_length"}} if data_args.pad_to_max_length else None
    transformer = Transformer(
        model_args.model_name_or_path,
        max_seq_length=data_args.max_seq_length,
        tokenizer_name_or_path=model_args.tokenizer_name,
        model_kwargs={"attn_implementation": model_args.attn_implementation},
        processing_kwargs=processing,
    )
    pooling = Pooling(transformer.get_embedding_dimension(), pooling_mode="cls")
    return SentenceTransformer(modules=[transformer, pooling])


def main(argv=None, callbacks=()):
    """Train as the command line ``argv`` says (the run scripts' flags); ``callbacks`` join the
    Trainer's. Returns the trainer."""
    model_args, data_args, training_args = parse_args((ModelArguments, DataArguments, CSETrainingArguments), argv)
    set_seed(training_args.seed)
    model = build_model(model_args, data_args)
    corpus = load_train_corpus(data_args, model_args.cache_dir)
    pairs = corpus.map(lambda batch: {"anchor": batch["text"], "positive": batch["text"]}, batched=True)
    pairs = pairs.select_columns(["anchor", "positive"])
    args = SentenceTransformerTrainingArguments(
        **{name: getattr(training_args, name) for name in CARRIED_ARGUMENTS},
        eval_strategy="no",
        save_strategy="no",
    )
    trainer = SentenceTransformerTrainer(
        model=model,
        args=args,
        train_dataset=pairs,
        loss=MultipleNegativesRankingLoss(model, scale=SCALE),
        callbacks=list(callbacks),
    )
    trainer.train()
    return trainer
