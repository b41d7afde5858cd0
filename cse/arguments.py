"""Command-line arguments shared by every ``run_*.py``: three ``HfArgumentParser`` dataclasses
(model, data, training), in the layout of the Hugging Face example scripts.

Every script also takes one ``.json`` or ``.yaml`` file as its first argument; flags after it
override the file (``python run_simcse.py configs/simcse_bert_base.yaml --seed 2``).
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field, fields

import yaml
from transformers import HfArgumentParser, TrainingArguments

from .pooling import POOLERS, check_pooler
from .reliability import check_finite_arguments

ATTENTION_IMPLEMENTATIONS = ("sdpa", "eager")


@dataclass
class ModelArguments:
    model_name_or_path: str = field(
        default="bert-base-uncased", metadata={"help": "Checkpoint to start from (hub name or directory)."}
    )
    tokenizer_name: str | None = field(default=None, metadata={"help": "Tokenizer, if not the model's own."})
    cache_dir: str | None = field(default=None, metadata={"help": "Where hub downloads are cached."})
    pooler_type: str = field(
        default="cls",
        metadata={"help": "Pooler used in training (cls = [CLS] + linear/tanh head).", "choices": list(POOLERS)},
    )
    temp: float = field(default=0.05, metadata={"help": "Softmax temperature tau of the contrastive loss."})
    mlp_only_train: bool | None = field(
        default=None,
        metadata={
            "help": "Use the head in training only and evaluate [CLS] before it (unsupervised SimCSE). "
            "Default: on with the cls pooler, off otherwise."
        },
    )

    attn_implementation: str = field(
        default="sdpa",
        metadata={
            "help": "The backbone's attention: sdpa (torch's fused scaled_dot_product_attention) or eager (the "
            "reference implementation; same results).",
            "choices": list(ATTENTION_IMPLEMENTATIONS),
        },
    )

    def __post_init__(self):
        if self.attn_implementation not in ATTENTION_IMPLEMENTATIONS:
            raise ValueError(
                f"--attn_implementation must be one of {', '.join(ATTENTION_IMPLEMENTATIONS)}, "
                f"got {self.attn_implementation!r}"
            )
        check_pooler(self.pooler_type)
        if self.mlp_only_train is None:
            self.mlp_only_train = self.pooler_type == "cls"
        elif self.mlp_only_train and self.pooler_type != "cls":
            raise ValueError(
                f"--mlp_only_train needs --pooler_type cls (the head follows [CLS]), got {self.pooler_type!r}"
            )


@dataclass
class DataArguments:
    train_file: str | None = field(
        default=None,
        metadata={"help": "A .txt (one sentence a line) or .csv corpus; default $CSE_DATA_DIR/wiki1m_for_simcse.txt."},
    )
    dataset_name: str | None = field(
        default=None, metadata={"help": "A hub dataset to train on instead of train_file."}
    )
    dataset_config_name: str | None = field(default=None, metadata={"help": "The hub dataset's configuration."})
    text_column: str | None = field(
        default=None,
        metadata={"help": "Column holding the sentences (CSV or hub data); default: the only column, else 'text'."},
    )
    max_seq_length: int = field(default=32, metadata={"help": "Training sentences are truncated to this many tokens."})
    pad_to_max_length: bool = field(
        default=False,
        metadata={
            "help": "Pad every training batch to max_seq_length instead of its longest sentence: static shapes, "
            "which torch.compile's CUDA graphs (--torch_compile_mode reduce-overhead) need. Padding is masked."
        },
    )
    max_train_samples: int | None = field(default=None, metadata={"help": "Keep only the first N sentences."})
    preprocessing_num_workers: int | None = field(default=None, metadata={"help": "Processes for tokenisation."})
    overwrite_cache: bool = field(default=False, metadata={"help": "Re-tokenise even if a cached copy exists."})
    senteval_data_dir: str | None = field(
        default=None,
        metadata={"help": "SentEval data (STS-B dev for model selection); default $CSE_DATA_DIR/senteval."},
    )


FINAL_EVAL_MODES = ("test", "dev", "none")


@dataclass
class CSETrainingArguments(TrainingArguments):
    """``TrainingArguments`` with SimCSE's unsupervised BERT-base defaults."""

    per_device_train_batch_size: int = field(default=64, metadata={"help": "Sentences per device and step."})
    per_device_eval_batch_size: int = field(
        default=128, metadata={"help": "Sentences per encoding batch in evaluation."}
    )
    learning_rate: float = field(default=3e-5, metadata={"help": "Peak learning rate (linear decay)."})
    num_train_epochs: float = field(default=1.0, metadata={"help": "Epochs over the corpus."})
    eval_strategy: str = field(default="steps", metadata={"help": "Evaluate on STS-B dev every eval_steps."})
    eval_steps: float | None = field(default=125, metadata={"help": "Steps between STS-B dev evaluations."})
    save_strategy: str = field(
        default="best",
        metadata={
            "help": "best: a full checkpoint whenever STS-B dev improves (SimCSE kept only the best model); "
            "steps: every save_steps."
        },
    )
    save_total_limit: int | None = field(
        default=1, metadata={"help": "Checkpoints kept besides the best one (each holds optimizer state)."}
    )
    logging_steps: float = field(default=125, metadata={"help": "Steps between loss logs."})
    metric_for_best_model: str | None = field(default="stsb_spearman", metadata={"help": "Model selection metric."})
    greater_is_better: bool | None = field(default=True, metadata={"help": "Higher Spearman is better."})
    load_best_model_at_end: bool = field(default=True, metadata={"help": "Restore the best checkpoint after training."})
    remove_unused_columns: bool = field(default=False, metadata={"help": "Batches are built by our collator."})
    ddp_find_unused_parameters: bool | None = field(default=False, metadata={"help": "Every trainable weight is used."})
    logging_nan_inf_filter: bool = field(
        default=False,
        metadata={
            "help": "Leave NaN/inf losses out of the logged loss (the Trainer's default is on; it reads the loss on "
            "the host every step, which stalls the GPU, and hides a diverging run)."
        },
    )
    final_eval: str = field(
        default="test",
        metadata={
            "help": "After training, evaluate the best model on the 7 STS test sets (test), dev, or not (none).",
            "choices": list(FINAL_EVAL_MODES),
        },
    )

    def __post_init__(self):
        if self.final_eval not in FINAL_EVAL_MODES:
            raise ValueError(f"--final_eval must be one of {', '.join(FINAL_EVAL_MODES)}, got {self.final_eval!r}")
        if self.accelerator_config is None:
            # Batches are copied to the GPU asynchronously from page-locked memory (--dataloader_pin_memory,
            # on by default) instead of waiting for the stream at every step.
            self.accelerator_config = {"non_blocking": True}
        super().__post_init__()


def read_config_file(path: str) -> dict:
    if not os.path.isfile(path):
        raise FileNotFoundError(f"config file not found: {path}")
    with open(path, encoding="utf-8") as f:
        config = json.load(f) if path.endswith(".json") else yaml.safe_load(f)
    if not isinstance(config, dict):
        raise ValueError(f"{path} must hold a mapping of argument names to values")
    return config


def parse_args(dataclass_types, argv: list[str] | None = None):
    """Parse ``argv`` (default ``sys.argv[1:]``) into the dataclasses. A leading ``.json``/``.yaml``
    path supplies values, typed as the file types them (``null``, mappings and lists included), that
    later flags override. Unknown names, in the file or on the command line, and NaN or infinite
    numbers are errors."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = HfArgumentParser(dataclass_types)
    if argv and argv[0].endswith((".json", ".yaml", ".yml")):
        config = read_config_file(argv[0])
        known = {f.name for dtype in dataclass_types for f in fields(dtype) if f.init}
        unknown = sorted(set(config) - known)
        if unknown:
            raise ValueError(f"{argv[0]}: unknown argument(s) {', '.join(unknown)}")
        # File values become the parser's defaults, so that flags given after the file win.
        parser.set_defaults(**config)
        argv = argv[1:]
    # Before the dataclasses are built: their own checks would misreport a NaN (every comparison is false).
    check_finite_arguments(vars(parser.parse_known_args(args=argv)[0]))
    return parser.parse_args_into_dataclasses(args=argv, look_for_args_file=False)
