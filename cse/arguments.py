"""Command-line arguments shared by every ``run_*.py``: three ``HfArgumentParser`` dataclasses
(model, data, training), in the layout of the Hugging Face example scripts.

Every script also takes one ``.json`` or ``.yaml`` file as its first argument; flags after it
override the file (``python run_simcse.py configs/simcse_bert_base.yaml --seed 2``). Flags are
never abbreviated (``--learning_rat`` is an error, not ``--learning_rate``).
"""

from __future__ import annotations

import json
import logging
import math
import os
import sys
import types
import typing
from dataclasses import dataclass, field, fields, replace
from difflib import get_close_matches

import torch
import yaml
from transformers import HfArgumentParser, TrainingArguments
from transformers.trainer_utils import HubStrategy

from .errors import CSEUsageError, nearest_existing
from .file_checks import require_regular_file
from .paths import CORPUS_FILE_HINT, EMPTY_CORPUS_HINT, MissingDataError, corpus_emptiness
from .pooling import POOLERS, check_pooler
from .ranges import (
    RANGE,
    Range,
    at_least,
    check_fields,
    check_finite,
    check_values,
    declared_ranges,
    positive,
    seed,
)
from .run_dir import check_run_directory

logger = logging.getLogger(__name__)

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
    temp: float = field(
        default=0.05, metadata={"help": "Softmax temperature tau of the contrastive loss.", RANGE: positive}
    )
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
        check_fields(self)
        if self.attn_implementation not in ATTENTION_IMPLEMENTATIONS:
            raise CSEUsageError(
                f"--attn_implementation must be one of {', '.join(ATTENTION_IMPLEMENTATIONS)}, "
                f"got {self.attn_implementation!r}"
            )
        check_pooler(self.pooler_type)
        if self.mlp_only_train is None:
            self.mlp_only_train = self.pooler_type == "cls"
        elif self.mlp_only_train and self.pooler_type != "cls":
            raise CSEUsageError(
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
    max_seq_length: int = field(
        default=32,
        metadata={
            "help": "Training sentences are truncated to this many tokens (at most the model's positions).",
            RANGE: at_least(2, hint="leave room for the special tokens: 2 or more (32 is SimCSE's)"),
        },
    )
    pad_to_max_length: bool = field(
        default=False,
        metadata={
            "help": "Pad every training batch to max_seq_length instead of its longest sentence: static shapes, "
            "which torch.compile's CUDA graphs (--torch_compile_mode reduce-overhead) need. Padding is masked."
        },
    )
    max_train_samples: int | None = field(
        default=None, metadata={"help": "Keep only the first N sentences.", RANGE: at_least(1)}
    )
    allow_binary_corpus: bool = field(
        default=False,
        metadata={
            "help": "Train on a local corpus even if it looks binary (NUL bytes, or over half of the lines in its "
            "first 4 MiB invalid UTF-8; such lines are decoded with U+FFFD replacements). Off: such a file is "
            "refused, as it is usually the wrong file."
        },
    )
    preprocessing_num_workers: int | None = field(
        default=None, metadata={"help": "Processes for tokenisation.", RANGE: at_least(1)}
    )
    overwrite_cache: bool = field(default=False, metadata={"help": "Re-tokenise even if a cached copy exists."})
    senteval_data_dir: str | None = field(
        default=None,
        metadata={"help": "SentEval data (STS-B dev for model selection); default $CSE_DATA_DIR/senteval."},
    )

    def __post_init__(self):
        check_fields(self)
        if self.train_file is not None:
            check_train_file(self.train_file)


FINAL_EVAL_MODES = ("test", "dev", "none")


@dataclass
class CSETrainingArguments(TrainingArguments):
    """``TrainingArguments`` with SimCSE's unsupervised BERT-base defaults."""

    per_device_train_batch_size: int = field(default=64, metadata={"help": "Sentences per device and step."})
    per_device_eval_batch_size: int = field(
        default=128, metadata={"help": "Sentences per encoding batch in evaluation."}
    )
    learning_rate: float = field(default=3e-5, metadata={"help": "Peak learning rate (linear decay)."})
    num_train_epochs: float = field(
        default=1.0, metadata={"help": "Epochs over the corpus (unless --max_steps is set)."}
    )
    eval_strategy: str = field(default="steps", metadata={"help": "Evaluate on STS-B dev every eval_steps."})
    eval_steps: float | None = field(
        default=125, metadata={"help": "Steps between STS-B dev evaluations (a fraction < 1: of the run's steps)."}
    )
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
    log_term_gradients: bool = field(
        default=False,
        metadata={
            "help": "At each logging step, log every weighted term of the method's loss (term_<name>), the L2 norm "
            "of its gradient on the encoder's trainable weights (term_grad_norm_<name>, one extra backward per term) "
            "and its share of the sum of those norms (term_share_<name>). Other steps are unchanged. See "
            "docs/diagnostics.md."
        },
    )
    hub_strategy: str = field(
        default="end",
        metadata={
            "help": "--push_to_hub uploads the exported encoder with its model card once, at the end: the training "
            "checkpoints hold the training wrapper's weights, not a loadable model, so no other strategy is taken."
        },
    )
    compile_cache_dir: str | None = field(
        default=None,
        metadata={
            "help": "With --torch_compile: where inductor caches compiled graphs and kernels, so that a resumed or "
            "repeated run loads them instead of compiling again (default: $TORCHINDUCTOR_CACHE_DIR, else "
            "/tmp/torchinductor_$USER)."
        },
    )
    final_eval: str = field(
        default="test",
        metadata={
            "help": "After training, evaluate the best model on the 7 STS test sets (test), dev, or not (none).",
            "choices": list(FINAL_EVAL_MODES),
        },
    )
    cuda_graphs: bool = field(
        default=False,
        metadata={
            "help": "On a CUDA device, capture the whole training step (forward, every part's terms, backward, "
            "clipping, the optimizer, the parts' updates after it) as one CUDA graph per batch shape and replay it "
            "(docs/speed.md). With --torch_compile the captured kernels are the compiled ones."
        },
    )
    cuda_graph_lengths: list[int] | None = field(
        default=None,
        metadata={
            "help": "With --cuda_graphs: the lengths training batches are padded to (padding masked), one graph "
            "each; default half, three quarters and all of --max_seq_length, in multiples of 8."
        },
    )
    keep_cpu_memory: bool = field(
        default=True,
        metadata={
            "help": "On a CPU with glibc, keep the memory a step frees in the process for the next step (glibc's "
            "trim and mmap thresholds raised, as PyTorch's CUDA caching allocator keeps GPU memory) instead of "
            "returning it to the system and faulting it in again at each step (docs/speed.md); false keeps glibc's "
            "defaults. Left alone where MALLOC_TRIM_THRESHOLD_, MALLOC_MMAP_THRESHOLD_ or GLIBC_TUNABLES set them."
        },
    )

    def __post_init__(self):
        if self.final_eval not in FINAL_EVAL_MODES:
            raise CSEUsageError(f"--final_eval must be one of {', '.join(FINAL_EVAL_MODES)}, got {self.final_eval!r}")
        if self.push_to_hub and HubStrategy(self.hub_strategy) != HubStrategy.END:
            raise CSEUsageError(
                f"--hub_strategy {HubStrategy(self.hub_strategy).value} would push the training checkpoints, whose "
                "weights are the training wrapper's, as the model",
                hint="leave --hub_strategy at end: the exported encoder and its model card are pushed after training",
            )
        if int(os.environ.get("WORLD_SIZE", "1")) > 1 and not self.use_cpu and not torch.accelerator.is_available():
            # Without --use_cpu the Trainer would give each of torchrun's processes no device and no
            # distributed mode: each would train alone, into the same --output_dir.
            if os.environ.get("RANK", "0") == "0":
                logger.warning(
                    "%s processes launched on a machine without a GPU: they train together on the CPU (--use_cpu true)",
                    os.environ["WORLD_SIZE"],
                )
            self.use_cpu = True
        if self.use_cpu or not torch.accelerator.is_available():
            # Page-locked memory only speeds up copies to a GPU (torch warns that it is unused), and
            # DeepSpeed, imported by the Trainer, need not probe for (and warn about) a GPU it lacks.
            self.dataloader_pin_memory = False
            os.environ.setdefault("DS_ACCELERATOR", "cpu")
        elif self.accelerator_config is None:
            # Batches are copied to the GPU asynchronously from page-locked memory (--dataloader_pin_memory,
            # on by default) instead of waiting for the stream at every step.
            self.accelerator_config = {"non_blocking": True}
        # before the Trainer's own checks, whose errors and warnings about a setting (bf16 without a
        # GPU, reduce-overhead) would come before the reason the run cannot be captured at all
        check_cuda_graphs(self, device_type(self), int(os.environ.get("WORLD_SIZE", "1")))
        super().__post_init__()
        check_output_dir(self.output_dir)
        check_launch(self)
        if self.compile_cache_dir is not None:
            if not self.torch_compile:
                raise CSEUsageError(
                    "--compile_cache_dir set, but --torch_compile is off: nothing is compiled",
                    hint="add --torch_compile true, or drop --compile_cache_dir",
                )
            # inductor reads the variable whenever it opens its caches (the FX graph cache and
            # AOTAutograd's, both on by default), so setting it before the first compilation suffices
            self.compile_cache_dir = os.path.abspath(os.path.expanduser(self.compile_cache_dir))
            os.makedirs(self.compile_cache_dir, exist_ok=True)
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = self.compile_cache_dir


def device_type(args) -> str:
    """The type of device a run of ``args`` trains on, before the Trainer sets it up: ``cpu`` under
    ``--use_cpu`` or without an accelerator, else the accelerator's (``cuda``, ``mps``, ...)."""
    accelerator = None if args.use_cpu else torch.accelerator.current_accelerator()
    return "cpu" if accelerator is None else accelerator.type


def check_cuda_graphs(args, device: str, world_size: int) -> None:
    """Refuse, before any work, what a captured training step cannot be, the device first (on a
    machine without a GPU no other setting matters): on a device other than CUDA, one of several
    processes, sharded, accumulating gradients over several batches, with fp16's dynamic loss scale
    (a host decision each step), with CUDA graphs of its own inside (``reduce-overhead``), an
    optimizer that cannot be captured or a learning rate set from evaluation metrics."""
    if not args.cuda_graphs:
        if args.cuda_graph_lengths:
            raise CSEUsageError(
                "--cuda_graph_lengths set, but --cuda_graphs is off", hint="add --cuda_graphs true, or drop the lengths"
            )
        return
    lengths = args.cuda_graph_lengths or []
    if any(length < 1 for length in lengths) or len(set(lengths)) != len(lengths):
        raise CSEUsageError(
            f"--cuda_graph_lengths must be distinct positive lengths, got {lengths}",
            hint="e.g. --cuda_graph_lengths 16 24 32",
        )
    optim = str(getattr(args.optim, "value", args.optim))
    scheduler = str(getattr(args.lr_scheduler_type, "value", args.lr_scheduler_type))
    refusals = [
        (
            device != "cuda",
            f"--cuda_graphs captures the training step on a CUDA device, and this run is on {device}",
            "leave --cuda_graphs out on a machine without a GPU",
        ),
        (
            world_size > 1,
            f"--cuda_graphs captures one process's step, and this run has {world_size} processes",
            "train one run per GPU (a table's runs over the GPUs: docs/reproduce.md), or leave --cuda_graphs out",
        ),
        (
            bool(args.deepspeed) or bool(args.fsdp),
            "--cuda_graphs does not capture a DeepSpeed or FSDP step",
            "leave --cuda_graphs out, or train without --deepspeed/--fsdp",
        ),
        (
            args.gradient_accumulation_steps > 1,
            f"--cuda_graphs captures one batch a step, and --gradient_accumulation_steps is "
            f"{args.gradient_accumulation_steps}",
            "raise --per_device_train_batch_size instead, or leave --cuda_graphs out",
        ),
        (
            args.fp16,
            "--cuda_graphs cannot capture fp16's dynamic loss scale, which skips steps by a host decision",
            "train in bfloat16: --bf16 true --fp16 false",
        ),
        (
            args.torch_compile_mode in ("reduce-overhead", "max-autotune"),
            f"--torch_compile_mode {args.torch_compile_mode} makes CUDA graphs of its own inside the captured step",
            "leave --torch_compile_mode at its default, or use max-autotune-no-cudagraphs",
        ),
        (
            optim != "adamw_torch_fused",
            f"--cuda_graphs captures fused AdamW's step, and --optim is {optim}",
            "pass --optim adamw_torch_fused",
        ),
        (
            scheduler in ("reduce_lr_on_plateau", "greedy"),
            f"--cuda_graphs updates the learning rate in place from its schedule, and --lr_scheduler_type "
            f"{scheduler} sets it from the evaluation's metrics",
            "use a schedule of the step count (linear, the default; cosine, constant, ...), or leave --cuda_graphs out",
        ),
    ]
    for refused, message, hint in refusals:
        if refused:
            raise CSEUsageError(message, hint=hint)


def check_train_file(path: str) -> None:
    """Refuse a ``--train_file`` that is not a regular file (a directory, a FIFO, a device, a socket)
    or cannot be read, before any work."""
    if os.path.isdir(path):
        corpora = sorted(name for name in os.listdir(path) if name.endswith((".txt", ".csv")))
        raise CSEUsageError(
            f"--train_file {path} is a directory, not a corpus file",
            hint=f"pass a file in it, e.g. --train_file {os.path.join(path, corpora[0])}"
            if corpora
            else "pass a .txt (one sentence a line) or .csv file",
        )
    require_regular_file(path, "--train_file", hint=CORPUS_FILE_HINT)
    if os.path.exists(path) and not os.access(path, os.R_OK):
        raise CSEUsageError(f"--train_file {path} cannot be read (permission denied)", hint="check its permissions")
    empty = corpus_emptiness(path) if os.path.isfile(path) else None
    if empty:  # before the model loads and datasets reads the file, each with its progress bar
        raise CSEUsageError(empty, hint=EMPTY_CORPUS_HINT)


def check_output_dir(path: str) -> None:
    """Refuse, before any work, an ``--output_dir`` the run could not write: an existing file, a path
    through a file, a link to nowhere, a directory on a read-only file system or one this user may not
    write."""
    if os.path.islink(os.path.normpath(path)) and not os.path.exists(path):
        raise CSEUsageError(
            f"--output_dir {path} is a symbolic link to {os.readlink(os.path.normpath(path))}, which does not exist",
            hint="create the directory it points to, or choose another --output_dir",
        )
    if os.path.exists(path) and not os.path.isdir(path):
        raise CSEUsageError(
            f"--output_dir {path} exists and is not a directory", hint="choose another --output_dir, or move the file"
        )
    existing = nearest_existing(path)
    if not os.path.isdir(existing):
        raise CSEUsageError(f"--output_dir {path} goes through {existing}, a file", hint="correct the path")
    if not os.access(existing, os.W_OK | os.X_OK):
        read_only = os.statvfs(existing).f_flag & os.ST_RDONLY
        why = "on a read-only file system" if read_only else "not writable by this user"
        raise CSEUsageError(
            f"--output_dir {path} cannot be written: {existing} is {why}",
            hint="choose an --output_dir on a writable file system",
        )


def check_resume_path(path: str | None) -> None:
    """Refuse a ``--resume_from_checkpoint`` that is not a directory, before any work (the Trainer would
    fail after the corpus is tokenised, or read a file as a folder)."""
    if path is not None and not os.path.isdir(path):
        why = "is a file" if os.path.exists(path) else "does not exist"
        raise CSEUsageError(
            f"--resume_from_checkpoint {path} {why}: it names a checkpoint folder",
            hint="name a run's checkpoint-N folder, or leave the flag out: the same command resumes from the newest "
            "complete checkpoint in --output_dir",
        )


def check_output_file(path: str, flag: str) -> None:
    """Refuse, before any work, an output file (``--output_json``) that could not be written when the
    work is done: a directory, a path through a file, a directory this user may not write."""
    if os.path.isdir(path):
        raise CSEUsageError(
            f"{flag} {path} is a directory", hint=f"name a file, e.g. {flag} {os.path.join(path, 'results.json')}"
        )
    existing = nearest_existing(os.path.dirname(os.path.abspath(path)))
    if not os.path.isdir(existing):
        raise CSEUsageError(f"{flag} {path} goes through {existing}, a file", hint="correct the path")
    if not os.access(existing, os.W_OK | os.X_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
        raise CSEUsageError(f"{flag} {path} cannot be written by this user", hint="choose a path you may write")


def check_launch(training_args) -> None:
    """The processes the launcher asked for must be the ones that train. ``torchrun`` (and ``accelerate
    launch --multi_gpu``) say how many in ``WORLD_SIZE``: fewer in the Trainer means each process would
    train alone, so the run is refused. ``accelerate launch --num_processes N`` without ``--multi_gpu``
    (``--cpu`` included) starts one process; it then sets ``MASTER_PORT`` but no ``WORLD_SIZE``, and the
    run goes on in that one process with a warning."""
    asked = int(os.environ.get("WORLD_SIZE", "1"))
    if asked > 1 and training_args.world_size != asked:
        raise CSEUsageError(
            f"launched as {asked} processes (WORLD_SIZE={asked}), but the Trainer sees {training_args.world_size}: "
            "each would train alone",
            hint="add --use_cpu true to train them together on the CPU (gloo)",
        )
    accelerate_single = "ACCELERATE_DYNAMO_BACKEND" in os.environ and "WORLD_SIZE" not in os.environ
    if accelerate_single and "MASTER_PORT" in os.environ:
        logger.warning(
            "accelerate launch was asked for more than one process but started this one alone (without "
            "--multi_gpu, --cpu included, it runs one process): training in 1 process; for several CPU processes "
            "run torchrun --nproc_per_node N ... --use_cpu true"
        )


class DuplicateKeyError(ValueError):
    """A mapping of a config file gives ``key`` twice (``where``: the lines, where known)."""

    def __init__(self, key, where: str = ""):
        super().__init__(f"duplicate key {key!r}{where}")
        self.key, self.where = key, where


def _unique_json_object(pairs: list) -> dict:
    """A JSON object's pairs as a dict, refusing a key given twice (``json`` keeps the last silently)."""
    seen = {}
    for key, value in pairs:
        if key in seen:
            raise DuplicateKeyError(key)
        seen[key] = value
    return seen


class _UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.safe_load``'s loader, refusing a mapping that gives a key twice (PyYAML keeps the last
    silently, though YAML requires keys to be unique), in every mapping of the file. A merge key
    (``<<: *base``) reads as in ``yaml.safe_load``: a key written beside it overrides the merged one,
    as YAML's merge rule says, and is no duplicate."""

    _MERGE = "tag:yaml.org,2002:merge"

    def flatten_mapping(self, node):
        # Each mapping is checked once, on the keys written in it, before its merges are taken in
        # (flattening prepends the merged pairs to the node's own, and may reach a node twice).
        checked = self.__dict__.setdefault("_checked", set())
        if id(node) not in checked:
            checked.add(id(node))
            lines = {}
            for key_node, _ in node.value:
                if key_node.tag == self._MERGE:
                    continue
                key = self.construct_object(key_node, deep=True)
                line = key_node.start_mark.line + 1
                if isinstance(key, (str, int, float, bool)) and key in lines:
                    raise DuplicateKeyError(key, f" (lines {lines[key]} and {line})")
                lines.setdefault(key, line)
        super().flatten_mapping(node)


def _yaml_error(err: yaml.YAMLError) -> str:
    """PyYAML's message in one line, the place as a line and column rather than the loader's
    ``in "<unicode string>"`` and an excerpt with a caret."""
    if not isinstance(err, yaml.MarkedYAMLError):
        return " ".join(str(err).split())
    said = ": ".join(part for part in (err.context, err.problem) if part)
    mark = err.problem_mark or err.context_mark
    return f"{said} (line {mark.line + 1}, column {mark.column + 1})" if mark else said


def read_config_file(path: str) -> dict:
    """The mapping of argument names to values that the ``.json``/``.yaml`` file ``path`` holds; a
    file that is missing, empty, not UTF-8, not valid JSON or YAML, not a mapping, or that gives a key
    twice in any of its mappings (which the parsers would settle silently, the last one winning), is
    refused in one line."""
    if os.path.isdir(path):
        raise CSEUsageError(f"config file {path} is a directory", hint="pass the .json or .yaml file itself")
    if not os.path.isfile(path):
        raise MissingDataError(f"config file not found: {path}", hint="check the path (the config file goes first)")
    kind = "JSON" if path.endswith(".json") else "YAML"
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        config = (
            json.loads(text, object_pairs_hook=_unique_json_object)
            if kind == "JSON"
            else yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader: no arbitrary objects
        )
    except DuplicateKeyError as err:
        raise CSEUsageError(
            f"config file {path} gives {err.key} twice{err.where}: which value is meant is unclear",
            hint=f"give {err.key} once in {path}",
        ) from None
    except UnicodeDecodeError as err:
        raise CSEUsageError(
            f"config file {path} is not UTF-8 text (byte {err.start}: {err.object[err.start : err.start + 1]!r})",
            hint=f"pass a {kind} file of argument names and values, saved as UTF-8",
        ) from None
    except (ValueError, yaml.YAMLError) as err:
        where = _yaml_error(err) if isinstance(err, yaml.YAMLError) else " ".join(str(err).split())
        raise CSEUsageError(
            f"config file {path} is not valid {kind}: {where}", hint=f"correct the {kind} syntax at the place named"
        ) from None
    if config is None or config == {}:
        raise CSEUsageError(
            f"config file {path} is empty: it sets no argument",
            hint="write one `name: value` per line (e.g. learning_rate: 3e-5; see configs/), or leave the file out",
        )
    if not isinstance(config, dict):
        raise CSEUsageError(
            f"config file {path} holds a {type(config).__name__}, not a mapping of argument names to values",
            hint="write one `name: value` per line (see configs/)",
        )
    return config


CONFIG_SUFFIXES = (".json", ".yaml", ".yml")

# The Trainer's seeds, which numpy takes.
_NUMPY_SEED = replace(seed, hint="a whole number in [0, 2^32 - 1] (numpy's seeds)")

# The most optimizer steps a run may take (2^31 - 1). Beyond any possible run: at 1,000 steps a second,
# faster than any backbone here steps, they take 24.8 days without a pause (SimCSE's run takes 15,625),
# and a larger count is a typo (1e12 steps would take 32 years; 1e20 exceeds the int64 step counters).
MAX_STEPS = 2**31 - 1

# The numeric fields of TrainingArguments (whichever subclass redeclares them) that a run reads, with
# the values that make sense (cse.ranges).
TRAINER_RANGES = {
    "learning_rate": Range(0, low_open=True, hint="a positive peak learning rate (SimCSE, BERT-base: 3e-5)"),
    "num_train_epochs": Range(0, hint="1 (the default) or more epochs, or --max_steps N"),
    "per_device_train_batch_size": at_least(1, hint="sentences per device and step (SimCSE: 64)"),
    "per_device_eval_batch_size": at_least(1, hint="sentences per encoding batch (default 128)"),
    "eval_steps": Range(0, low_open=True, hint="evaluate every N > 0 steps (SimCSE: 125), or pass --eval_strategy no"),
    "logging_steps": Range(0, low_open=True, hint="log every N > 0 steps (a fraction < 1: of the run's steps)"),
    "save_total_limit": at_least(1, hint="keep 1 or more checkpoints (null in a config file keeps all)"),
    "max_steps": Range(
        1,
        MAX_STEPS,
        integer=True,
        also=(-1,),
        hint=f"-1 (the default) trains --num_train_epochs epochs; N in [1, {MAX_STEPS}] trains N steps",
    ),
    "gradient_accumulation_steps": at_least(1, hint="1 (the default) steps the optimizer after every batch"),
    "warmup_steps": Range(0, hint="0 for no warm-up, N steps, or a fraction < 1 of the run's steps"),
    "weight_decay": Range(0, hint="AdamW's decoupled weight decay: 0 (the default) or a small positive value"),
    "adam_beta1": Range(0, 1, high_open=True, hint="AdamW's beta1 lies in [0, 1) (default 0.9)"),
    "adam_beta2": Range(0, 1, high_open=True, hint="AdamW's beta2 lies in [0, 1) (default 0.999)"),
    "adam_epsilon": Range(0, low_open=True, hint="AdamW's epsilon is a small positive number (default 1e-8)"),
    "max_grad_norm": Range(0, hint="the gradient-norm clip: positive, or 0 for no clipping (default 1.0)"),
    "save_steps": Range(0, low_open=True, hint="save every N > 0 steps (a fraction < 1: of the run's steps)"),
    "seed": _NUMPY_SEED,
    "data_seed": _NUMPY_SEED,
    "dataloader_num_workers": at_least(0, hint="0 (the default) loads batches in the main process"),
    "eval_accumulation_steps": at_least(1, hint="leave it out to gather evaluation outputs once"),
}


class ArgumentParser(HfArgumentParser):
    """``HfArgumentParser`` that keeps a field's range (:data:`cse.ranges.RANGE`) out of argparse and
    turns argparse's own refusals (``--learning_rate abc``, a missing required flag) into a
    ``CSEUsageError``: one line and a hint rather than the whole usage text."""

    def add_argument(self, *args, **kwargs):
        kwargs.pop(RANGE, None)
        if isinstance(kwargs.get("help"), str):  # argparse formats help with %: "80%" is a percentage
            kwargs["help"] = kwargs["help"].replace("%", "%%")
        return super().add_argument(*args, **kwargs)

    def error(self, message):
        raise CSEUsageError(message, hint="see --help for each flag and the values it takes")


def training_ranges(dataclass_types) -> dict[str, tuple[Range, str | None]]:
    """The ranges of the ``TrainingArguments`` among ``dataclass_types``: :data:`TRAINER_RANGES` and any
    a subclass's own fields declare. They are checked on the parsed values (:func:`parse_args`), not when the
    dataclass is built: the Trainer's own ``__post_init__`` would first replace some of them
    (``--eval_steps 0`` by ``--logging_steps``), and code may build one for a test (a learning rate of
    0 isolates another part's update). The other dataclasses check their own fields when built."""
    training = [dtype for dtype in dataclass_types if issubclass(dtype, TrainingArguments)]
    ranges = {name: (allowed, None) for name, allowed in TRAINER_RANGES.items()} if training else {}
    ranges.update(declared_ranges(training))
    return ranges


def _scalar_type(annotation):
    """``int``, ``float``, ``str`` or ``bool`` for a field annotated so (``X | None`` included), or
    ``list[X]`` as ``(list, X)``; None for anything else (unions with enums, dicts)."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return _scalar_type(args[0]) if len(args) == 1 else None
    if typing.get_origin(annotation) is list and len(args) == 1 and args[0] in (int, float, str):
        return (list, args[0])
    return annotation if annotation in (int, float, str, bool) else None


def _fits(value, expected) -> bool:
    if expected is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if expected is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, expected)


_TYPE_WORDS = {int: "a whole number", float: "a number", str: "text", bool: "true or false"}


def check_config_types(path: str, config: dict, dataclass_types) -> None:
    """Refuse a config-file value of the wrong kind (``learning_rate: [1, 2]``, ``output_dir: 5``,
    ``max_steps: 2.5``, ``temp: null``), which argparse passes on unread (a list for a text field is
    left to the command that reads it: run_cse.py's ``parts``). A string is left to argparse,
    which reads ``learning_rate: "1e-5"`` as a number and refuses ``"abc"``."""
    annotations = {}
    optional = set()
    for dtype in dataclass_types:
        hints = typing.get_type_hints(dtype)
        for f in fields(dtype):
            annotations.setdefault(f.name, hints[f.name])
            if type(None) in typing.get_args(hints[f.name]):
                optional.add(f.name)
    for name, value in config.items():
        expected = _scalar_type(annotations.get(name))
        if expected is None or isinstance(value, str):
            continue
        if value is None:
            if name in optional:
                continue
            wrong = True
            said = _TYPE_WORDS[expected] if expected in _TYPE_WORDS else f"a list of {_TYPE_WORDS[expected[1]]}s"
        elif isinstance(expected, tuple):
            wrong = not (isinstance(value, list) and all(_fits(v, expected[1]) for v in value))
            said = f"a list of {_TYPE_WORDS[expected[1]]}s"
        else:
            # a text field may take a list where its command reads one (run_cse.py's parts), not a number
            wrong = not _fits(value, expected) and not (expected is str and isinstance(value, (list, dict)))
            said = _TYPE_WORDS[expected]
        if wrong:
            raise CSEUsageError(
                f"{path}: {name} must be {said}, got {value!r}",
                hint=f"write `{name}: <{said}>`, or leave the key out for its default",
            )


def check_training_length(values: dict) -> None:
    """A run of 0 epochs and no ``--max_steps`` would train nothing and export the untrained model."""
    if values.get("max_steps", -1) <= 0 and values.get("num_train_epochs", 1) == 0:
        raise CSEUsageError(
            "--num_train_epochs 0 without --max_steps trains nothing: the run would export the untrained model",
            hint="pass --num_train_epochs 1 (or more), or --max_steps N",
        )


def global_batch(training_args) -> int:
    """The sentences of one training step across the processes (gradient accumulation aside)."""
    return training_args.per_device_train_batch_size * training_args.world_size


def steps_per_epoch(training_args, sentences: int) -> int:
    """The optimizer steps of an epoch over ``sentences``, as the Trainer counts them."""
    return max(1, math.ceil(sentences / global_batch(training_args)) // training_args.gradient_accumulation_steps)


def run_steps(training_args, sentences: int) -> int:
    """The optimizer steps a run over ``sentences`` takes: ``--max_steps``, else its epochs'."""
    if training_args.max_steps > 0:
        return training_args.max_steps
    return math.ceil(training_args.num_train_epochs * steps_per_epoch(training_args, sentences))


def check_run_steps(training_args, sentences: int) -> None:
    """Refuse a run of ``--num_train_epochs`` over ``sentences`` that takes more than
    :data:`MAX_STEPS` optimizer steps (``--max_steps`` is checked against it at parse)."""
    steps = run_steps(training_args, sentences)
    if steps > MAX_STEPS:
        per_epoch = steps_per_epoch(training_args, sentences)
        raise CSEUsageError(
            f"--num_train_epochs {training_args.num_train_epochs:g} over {sentences:,} sentences takes {steps:,} "
            f"steps, beyond the {MAX_STEPS:,} a run may take",
            hint=f"pass at most {MAX_STEPS // per_epoch:,} epochs, or --max_steps N",
        )


def check_global_batch(training_args) -> None:
    """In-batch contrastive learning needs 2 sentences or more in each global batch."""
    batch = global_batch(training_args)
    if batch < 2:
        raise CSEUsageError(
            f"the global batch is {batch} sentence(s): in-batch contrastive learning needs at least 2 "
            "(each sentence's negatives are the other sentences of the batch)",
            hint="pass --per_device_train_batch_size 2 or more (SimCSE: 64)",
        )


def given_flags(argv: list[str]) -> set[str]:
    """The argument names that ``argv`` spells out (``--name value`` or ``--name=value``)."""
    return {arg[2:].split("=", 1)[0] for arg in argv if arg.startswith("--")}


def check_save_steps(training_args, given: set[str]) -> None:
    """``--save_steps`` only acts with ``--save_strategy steps``; any other strategy would drop it
    without a word, and a run killed later would lose everything since its last best checkpoint."""
    if "save_steps" in given and training_args.save_strategy != "steps":
        raise CSEUsageError(
            f"--save_steps {training_args.save_steps:g} has no effect with --save_strategy "
            f"{getattr(training_args.save_strategy, 'value', training_args.save_strategy)}",
            hint="add --save_strategy steps for a checkpoint every save_steps (with --load_best_model_at_end, "
            "save_steps must be a multiple of eval_steps)",
        )


def check_command_line(dataclass_types, argv: list[str], config: dict | None = None, config_path=None):
    """The checks of :func:`parse_args` made before any dataclass is built (types, missing values,
    empty values, NaN, the training ranges, the training length), which need neither a device nor the
    run's directory: a sweep makes them on each run's command line before it launches any
    (:mod:`sweep.flags`). Returns ``(parser, flags after the config file, names given, names known,
    config file)``."""
    parser = ArgumentParser(dataclass_types, allow_abbrev=False)
    given = given_flags(argv)
    known = [f.name for dtype in dataclass_types for f in fields(dtype) if f.init]
    config_file = argv[0] if config is None and argv and argv[0].endswith(CONFIG_SUFFIXES) else config_path
    if config is None and config_file is not None:
        config = read_config_file(argv[0])
        argv = argv[1:]
    unknown = sorted(set(config or ()) - set(known))
    if unknown:
        close = [match for name in unknown for match in get_close_matches(name, known, 1)]
        raise CSEUsageError(
            f"{config_file}: unknown argument(s) {', '.join(unknown)}",
            hint=f"did you mean {close[0]}?" if close else "see --help for the arguments a config file may set",
        )
    if config:
        check_config_types(config_file or "the config file", config, dataclass_types)
        # File values become the parser's defaults, so that flags given after the file win.
        parser.set_defaults(**config)
        given |= set(config)
    # Before the dataclasses are built: their own checks would misreport a NaN (every comparison is
    # false) or a value out of range (the Trainer replaces --eval_steps 0 with --logging_steps).
    values = vars(parser.parse_known_args(args=argv)[0])
    # An empty path or name given on purpose is a mistake (an unset shell variable): `--train_file ""`
    # would otherwise train on the default corpus, `--output_dir ""` fail after the model is loaded.
    empty = sorted(name for name in given if values.get(name) == "")
    if empty:
        raise CSEUsageError(
            f"--{empty[0]} is empty", hint=f"give --{empty[0]} a value, or leave it out for its default"
        )
    check_finite(values)
    check_values(values, training_ranges(dataclass_types))
    if any(issubclass(dtype, TrainingArguments) for dtype in dataclass_types):
        check_training_length(values)
    return parser, argv, given, known, config_file


def parse_args(dataclass_types, argv: list[str] | None = None, config: dict | None = None, config_path=None):
    """Parse ``argv`` (default ``sys.argv[1:]``) into the dataclasses. A leading ``.json``/``.yaml``
    path supplies values, typed as the file types them (``null``, mappings and lists included), that
    later flags override (or ``config``, such values the caller read already from ``config_path``).
    Refused (``CSEUsageError``, one line and a hint) before any dataclass is built: unknown names, in
    the file or on the command line, abbreviated flags, an empty value, a value of the wrong kind, NaN
    or infinite numbers, a training argument outside its range (:func:`training_ranges`; the other
    dataclasses check theirs when built), 0 epochs without ``--max_steps``; after: ``save_steps``
    without ``save_strategy: steps``, a global batch under 2 and, for a training run, an
    ``--output_dir`` holding something other than a run (:func:`cse.run_dir.check_run_directory`)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser, argv, given, known, config_file = check_command_line(dataclass_types, argv, config, config_path)
    try:
        *outputs, remaining = parser.parse_args_into_dataclasses(
            args=argv, look_for_args_file=False, return_remaining_strings=True
        )
    except CSEUsageError:
        raise
    except ValueError as err:
        # The dataclasses' own checks (the Trainer's included) judge the user's values.
        raise CSEUsageError(
            " ".join(str(err).split()), hint="correct the value the message names (see --help)"
        ) from err
    if remaining:
        configs = [arg for arg in remaining if arg.endswith(CONFIG_SUFFIXES) and not arg.startswith("-")]
        if configs:
            raise CSEUsageError(
                f"the config file goes first, got it after flags: {configs[0]}",
                hint=f"python {os.path.basename(sys.argv[0]) or 'run_x.py'} {configs[0]} "
                f"{' '.join(arg for arg in argv if arg != configs[0])}".rstrip(),
            )
        flags = [arg[2:].split("=", 1)[0] for arg in remaining if arg.startswith("--")]
        close = [match for flag in flags for match in get_close_matches(flag, known, 1)]
        hint = f"did you mean --{close[0]}? (flags are never abbreviated)" if close else "see --help for the flags"
        raise CSEUsageError(f"unknown argument(s): {' '.join(remaining)}", hint=hint)
    for args in outputs:
        if isinstance(args, TrainingArguments):
            check_save_steps(args, given)
        if isinstance(args, CSETrainingArguments):
            check_global_batch(args)
            check_resume_path(args.resume_from_checkpoint)
            check_run_directory(args.output_dir, own=(config_file,) if config_file else ())
    return tuple(outputs)
