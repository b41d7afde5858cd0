"""The sentence encoder: a Hugging Face backbone, a pooler and SimCSE's projection head.

SimCSE separates the *training forward* (both dropout views of every sentence, pooled with the
training pooler, head included) from the *embedding forward* used at evaluation (one view, pooled
with the evaluation pooler). :class:`CSEModel` keeps that split: :meth:`CSEModel.forward` is the
former and :meth:`CSEModel.embed` / :meth:`CSEModel.encode` the latter.

The projection head (linear + tanh on [CLS]) is the backbone's own pooling layer (``BertPooler``,
``RobertaPooler``), re-initialised at the start of training as SimCSE initialises its fresh MLP.
Training it in place means the exported directory is a plain Hugging Face model whose
``pooler_output`` *is* the trained head, which is what SimCSE's ``simcse_to_huggingface.py``
produces by renaming ``mlp.*`` to ``pooler.*``: ``AutoModel.from_pretrained(dir)`` plus the recorded
pooler reproduces our evaluation with no conversion step.
"""

from __future__ import annotations

import contextlib
import copy
import importlib
import logging
import os
import re
import sys
import time
from collections.abc import Sequence

import torch
from huggingface_hub import constants as hub_constants
from huggingface_hub import try_to_load_from_cache
from torch import nn
from transformers import AutoModel, AutoTokenizer
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from . import atomic
from .distributed import whole_weights_loading
from .errors import CSEUsageError
from .export import sentence_transformers_pooler, write_sentence_transformers_files
from .file_checks import CHECKED_SUFFIXES, load_mapping, unreadable
from .pooling import (
    MIN_LAYERS,
    NEEDS_HIDDEN_STATES,
    NEEDS_POOLING_LAYER,
    POOLERS,
    READS_FIRST_POSITION,
    check_pooler,
    pool,
)
from .run_names import CSE_CONFIG_NAME
from .walks import KeptWalk

logger = logging.getLogger(__name__)

# An encoding that lasts longer than this logs its progress this often (a CPU takes minutes for the
# STS test sets), so that no evaluation is silent for long.
PROGRESS_SECONDS = 5.0
# Backbones whose attention mask transformers builds with ``create_bidirectional_mask``, which takes
# a prepared 4D mask as it is (see :func:`prepared_attention_mask`).
PREPARED_MASK_MODEL_TYPES = frozenset({"bert", "roberta"})
# What transformers records in a tokenizer's settings of how its files were found, not what the tokenizer is
LOADING_ONLY_TOKENIZER_KEYS = ("local_files_only", "is_local")


def prepared_attention_mask(backbone, attention_mask: torch.Tensor) -> torch.Tensor:
    """The ``(batch, 1, length, length)`` mask transformers would build from a 2D padding mask for
    the backbone's attention (boolean for ``sdpa``, 0 / dtype-min for ``eager``), built here from the
    mask's shape alone. Given the 2D mask, transformers checks ``mask.all()`` in every forward, to drop
    the mask of a batch without padding: a device-to-host sync that stalls the CUDA stream each step.
    Other backbones and attention implementations get the 2D mask unchanged."""
    config = backbone.config
    implementation = getattr(config, "_attn_implementation", None)
    if attention_mask.dim() != 2 or config.model_type not in PREPARED_MASK_MODEL_TYPES:
        return attention_mask
    if implementation not in ("sdpa", "eager"):
        return attention_mask
    keep = attention_mask.bool()[:, None, None, :].expand(-1, 1, attention_mask.shape[1], -1)
    if implementation == "sdpa":
        return keep
    dtype = backbone.get_input_embeddings().weight.dtype
    return torch.where(keep, torch.zeros((), dtype=dtype, device=keep.device), torch.finfo(dtype).min)


def looks_local(name_or_path: str) -> bool:
    """Whether a model name can only be a path: it starts with ``.``, ``/`` or ``~``, or has more
    separators than a hub id (``owner/name``) has."""
    separators = name_or_path.count("/") + (name_or_path.count(os.sep) if os.sep != "/" else 0)
    return name_or_path.startswith((".", "/", "~", os.sep)) or separators > 1


def check_model_path(
    name_or_path: str, cache_dir: str | None = None, require_config: bool = True, flag: str = "--model_name_or_path"
) -> str:
    """``name_or_path`` as ``from_pretrained`` should get it (``~`` expanded), after refusing what
    cannot load: a missing local path, a Trainer checkpoint, a directory without ``config.json``
    (unless not ``require_config``: a tokenizer directory may have none), and a hub name that is not
    cached while ``HF_HUB_OFFLINE`` is set (which would otherwise end in a connection error). ``flag``:
    the flag that named it, which a hint names."""
    path = os.path.expanduser(name_or_path)
    if os.path.isdir(path):
        if re.fullmatch(rf"{PREFIX_CHECKPOINT_DIR}-\d+", os.path.basename(os.path.normpath(path))):
            parent = os.path.dirname(os.path.abspath(path))
            raise CSEUsageError(
                f"{name_or_path} is a training checkpoint (weights and optimizer state to resume from), "
                "not an exported model",
                hint=f"use the exported model in {parent}"
                if os.path.isfile(os.path.join(parent, "config.json"))
                else f"run the training to its end (re-running its command resumes from {name_or_path}): "
                f"it exports the best model to {parent}",
            )
        if require_config and not os.path.isfile(os.path.join(path, "config.json")):
            checkpoints = sorted(
                (n for n in os.listdir(path) if re.fullmatch(rf"{PREFIX_CHECKPOINT_DIR}-\d+", n)),
                key=lambda name: int(name.rsplit("-", 1)[1]),
            )
            raise CSEUsageError(
                f"{name_or_path} has no config.json: not a model directory",
                hint=f"it holds a run that has not finished ({checkpoints[-1]}): rerun the run's command, which "
                "completes it and exports the model there"
                if checkpoints
                else "pass the directory of an exported model (a finished run's --output_dir) or of a Hugging Face "
                "model",
            )
        check_model_files(path)
        return path
    if os.path.islink(path):
        raise CSEUsageError(
            f"{name_or_path} is a symbolic link to {os.readlink(path)}, which does not exist",
            hint="correct the link, or pass the model directory itself",
        )
    if os.path.exists(path):
        raise CSEUsageError(f"{name_or_path} is a file, not a model directory", hint="pass the directory that holds it")
    if looks_local(name_or_path):
        raise CSEUsageError(
            f"model directory not found: {name_or_path}",
            hint="check the path (a hub name is owner/name, without a leading ./ or /)",
        )
    if hub_constants.HF_HUB_OFFLINE and not isinstance(
        try_to_load_from_cache(name_or_path, "config.json", cache_dir=cache_dir), str
    ):
        raise CSEUsageError(
            f"{name_or_path} is not a local directory nor in the Hugging Face cache, and HF_HUB_OFFLINE is set",
            hint=f"pass a model directory ({flag} ./my-model), or download the model once with HF_HUB_OFFLINE unset",
        )
    return name_or_path


def check_model_files(directory: str) -> None:
    """Refuse a model or tokenizer directory any of whose weight, configuration or tokenizer files is
    not whole (:func:`cse.file_checks.unreadable`: cut short by an interrupted copy or download, empty,
    not the format its name says), naming the file, before anything is loaded."""
    for name in sorted(os.listdir(directory)):
        problem = unreadable(os.path.join(directory, name)) if name.endswith(CHECKED_SUFFIXES) else None
        if problem is not None:
            raise CSEUsageError(
                f"{os.path.join(directory, name)} is {problem}",
                hint="the file is damaged or cut short: copy or download the model directory again",
            )


def is_causal(backbone) -> bool:
    """Whether ``backbone``'s attention is causal (GPT-2 and other decoders: a position sees only those
    before it), as its attention modules declare it (``is_causal``)."""
    return any(getattr(module, "is_causal", False) is True for module in backbone.modules())


def fit_problem(backbone, tokenizer, poolers) -> tuple[str, str] | None:
    """``(what, hint)`` when ``backbone``, ``tokenizer`` and the ``poolers`` a run uses (training and
    evaluation) do not fit together, else None. Each is known before any sentence is encoded:

    - the tokenizer's ids must have rows in the backbone's input embeddings (``len(tokenizer)`` <=
      its rows; more rows are unused ids, harmless), and the tokenizer must pad, with the padding id
      the backbone's configuration declares where it declares one (RoBERTa derives positions from it);
    - each pooler's needs (:mod:`cse.pooling`): a pooling layer, a special first token read by a
      bidirectional backbone, enough transformer layers."""
    name = type(backbone).__name__
    other_poolers = "avg or max" if is_causal(backbone) else "cls_before_pooler, avg or max"
    rows = backbone.get_input_embeddings().num_embeddings
    if len(tokenizer) > rows:
        return (
            f"the tokenizer has {len(tokenizer):,} tokens and the model's input embeddings {rows:,} rows: ids "
            f"{rows:,} and above would index past them in training",
            "pass the tokenizer the model was trained with (--tokenizer_name, or the model's own), or one of at most "
            f"{rows:,} tokens",
        )
    if tokenizer.pad_token_id is None:
        return (
            f"the tokenizer ({type(tokenizer).__name__}) has no padding token, and batches of sentences of different "
            "lengths are padded",
            "pass a tokenizer with a padding token (--tokenizer_name), or give this one one (tokenizer.pad_token = "
            "tokenizer.eos_token; tokenizer.save_pretrained(DIR))",
        )
    declared = getattr(backbone.config, "pad_token_id", None)
    if declared is not None and tokenizer.pad_token_id != declared:
        return (
            f"the tokenizer pads with id {tokenizer.pad_token_id} ({tokenizer.pad_token}) and the model's "
            f"configuration declares padding id {declared}: not the tokenizer the model was trained with",
            "pass the tokenizer the model was trained with (--tokenizer_name, or the model's own)",
        )
    first = tokenizer("a")["input_ids"][:1]
    for pooler in dict.fromkeys(poolers):
        if pooler in NEEDS_POOLING_LAYER and getattr(backbone, "pooler", None) is None:
            return (
                f"pooler {pooler!r} reads the backbone's pooling layer (SimCSE's head on [CLS]), and {name} has none",
                f"pass --pooler_type {other_poolers}",
            )
        if pooler in READS_FIRST_POSITION and is_causal(backbone):
            return (
                f"pooler {pooler!r} reads the first position, and {name}'s attention is causal: there the first "
                "position sees itself alone, so every sentence would be embedded by its first token",
                "pass --pooler_type avg or max, which read every position",
            )
        if pooler in READS_FIRST_POSITION and (not first or first[0] not in tokenizer.all_special_ids):
            return (
                f"pooler {pooler!r} reads the first position, and the tokenizer ({type(tokenizer).__name__}) puts no "
                "special token ([CLS], <s>) there: it would embed each sentence by its first word",
                "pass --pooler_type avg or max, or a tokenizer that puts a special token first (--tokenizer_name)",
            )
        layers = getattr(backbone.config, "num_hidden_layers", None)
        if layers is not None and layers < MIN_LAYERS.get(pooler, 0):
            return (
                f"pooler {pooler!r} averages the last {MIN_LAYERS[pooler]} transformer layers, and {name} has {layers}",
                "pass --pooler_type avg",
            )
    return None


def check_fit(backbone, tokenizer, poolers, where: str) -> None:
    """Refuse a model (``where``: its name or path) whose backbone, tokenizer and poolers do not fit
    together (:func:`fit_problem`)."""
    problem = fit_problem(backbone, tokenizer, poolers)
    if problem is not None:
        raise CSEUsageError(f"{where}: {problem[0]}", hint=problem[1])


def read_cse_config(model_dir: str) -> dict:
    """The ``cse_config.json`` this repository writes beside an exported model ({} if absent)."""
    path = os.path.join(model_dir, CSE_CONFIG_NAME)
    if not os.path.isfile(path):
        return {}
    hint = f"restore the file, or delete it and name the pooler (--pooler {'/'.join(POOLERS)})"
    return load_mapping(path, "the encoder's settings", hint=hint)


class CSEModel(KeptWalk, nn.Module):
    """Backbone + pooler + optional projection head.

    Its modules and parameters are walked once and kept (:mod:`cse.walks`): the Trainer's
    ``model.train()``, ``zero_grad()`` and gradient clipping at every step read the kept lists.

    The training forward (:meth:`forward`), the embedding forward (:meth:`embed`) and the momentum
    encoder's positives (:meth:`positives`) all embed a view's rows through one public hook,
    :meth:`sentence_embedding`. An encoder whose embedding is more than a pooled backbone (SARCSE's
    Z, or a part of your own) implements it through :class:`cse.embedding_encoder.EmbeddingEncoder`,
    which also says what its export and loading need (docs/extending.md, "Replacing the embedding").

    Args:
        backbone: an ``AutoModel`` (BERT, RoBERTa, ...).
        tokenizer: the matching tokenizer, used by :meth:`encode`.
        pooler_type: the pooler used in training (one of :data:`cse.pooling.POOLERS`).
        mlp_only_train: use the head (pooler ``cls``) in training only and evaluate with
            ``cls_before_pooler``, as unsupervised SimCSE does.
    """

    def __init__(self, backbone, tokenizer, pooler_type: str = "cls", mlp_only_train: bool = False):
        super().__init__()
        self.backbone = backbone
        self.tokenizer = tokenizer
        self.pooler_type = check_pooler(pooler_type)
        self.mlp_only_train = mlp_only_train
        if mlp_only_train and pooler_type != "cls":
            raise ValueError(f"mlp_only_train needs pooler 'cls' (the head is only used with it), got {pooler_type!r}")
        head = getattr(backbone, "pooler", None)
        if pooler_type == "cls" and head is None:
            raise ValueError(
                f"pooler 'cls' needs a backbone with a pooling layer; {type(backbone).__name__} has none: "
                "use 'cls_before_pooler'"
            )
        if head is not None and pooler_type != "cls":
            # The pooling layer would get no gradient: keep it out of the optimizer and out of DDP's
            # reducer (which requires every trainable parameter to be used).
            head.requires_grad_(False)
        # The encoder of the positive view where a part replaces it (AdCSE's momentum encoder p, a
        # copy of the backbone outside the optimizer; :meth:`attach_momentum_backbone`), else None.
        self.momentum_backbone: nn.Module | None = None
        self._batch_cache = None  # see length_sorted_batches

    @property
    def eval_pooler(self) -> str:
        return "cls_before_pooler" if self.mlp_only_train else self.pooler_type

    @property
    def config(self):
        return self.backbone.config

    @classmethod
    def from_pretrained(
        cls,
        model_name_or_path: str,
        pooler_type: str | None = None,
        mlp_only_train: bool = False,
        tokenizer_name_or_path: str | None = None,
        **backbone_kwargs,
    ) -> CSEModel:
        """Load a backbone and tokenizer; ``pooler_type=None`` takes the pooler recorded in the
        directory's ``cse_config.json``, else the one its sentence-transformers modules embed with
        (:func:`cse.export.sentence_transformers_pooler`), else it is an error."""
        cache_dir = backbone_kwargs.get("cache_dir")
        model_name_or_path = check_model_path(model_name_or_path, cache_dir)
        if tokenizer_name_or_path is not None:
            tokenizer_name_or_path = check_model_path(tokenizer_name_or_path, cache_dir, require_config=False)
        if pooler_type is None and os.path.isdir(model_name_or_path):
            # ours, else the pooling of a sentence-transformers model (all-MiniLM-L6-v2's mean)
            pooler_type = read_cse_config(model_name_or_path).get("pooler") or sentence_transformers_pooler(
                model_name_or_path
            )
        if pooler_type is None:
            raise CSEUsageError(
                f"no pooler given and {model_name_or_path} records none in {CSE_CONFIG_NAME} or "
                "sentence-transformers' modules.json",
                hint=f"name one with --pooler ({', '.join(POOLERS)})",
            )
        try:
            with whole_weights_loading():
                backbone = AutoModel.from_pretrained(model_name_or_path, **backbone_kwargs)
            tokenizer = AutoTokenizer.from_pretrained(tokenizer_name_or_path or model_name_or_path, cache_dir=cache_dir)
            # transformers keeps how the files were found (the hub's offline mode, a local folder) among
            # the tokenizer's settings and saves them: an export would then depend on the environment it
            # was written in (a run resumed offline differs from the same run online); its loader sets them anew
            for how_loaded in LOADING_ONLY_TOKENIZER_KEYS:
                tokenizer.init_kwargs.pop(how_loaded, None)
        except (OSError, ValueError) as err:
            # transformers' own account (unreachable hub, unknown repo, missing weights file, a config
            # it cannot read) comes first
            raise CSEUsageError(
                f"cannot load {model_name_or_path}: {str(err).strip().splitlines()[0]}",
                hint="pass a directory saved by save_pretrained (config.json, the weights and the tokenizer "
                "files), or a model's hub name",
            ) from err
        named = f" with the tokenizer {tokenizer_name_or_path}" if tokenizer_name_or_path is not None else ""
        poolers = [pooler_type, "cls_before_pooler" if mlp_only_train else pooler_type]
        check_fit(backbone, tokenizer, poolers, f"{model_name_or_path}{named}")
        return cls(backbone, tokenizer, pooler_type=pooler_type, mlp_only_train=mlp_only_train)

    def reset_head(self) -> None:
        """Re-initialise the projection head as SimCSE initialises its MLP (N(0, initializer_range)
        weights, zero bias) rather than keeping BERT's next-sentence-prediction pooler. An encoder of
        the positives starts again as an exact copy of the backbone (its own head included)."""
        std = getattr(self.config, "initializer_range", 0.02)
        for module in self.backbone.pooler.modules():
            if isinstance(module, nn.Linear):
                nn.init.normal_(module.weight, mean=0.0, std=std)
                nn.init.zeros_(module.bias)
        if self.momentum_backbone is not None:
            self.copy_to_momentum_backbone()

    def attach_momentum_backbone(self, shared_head: bool = True) -> None:
        """Encode the positive view with ``momentum_backbone``, a copy of the backbone that no gradient
        reaches (its weights are the business of the part that attaches it: AdCSE's Eq. 4). With
        ``shared_head`` the copy has no pooling layer: its outputs go through this model's head (the
        ``cls`` pooler's linear + tanh, or what an encoder with more to its embedding puts after the
        backbone); else through its own copy of the pooling layer."""
        self.momentum_backbone = copy.deepcopy(self.backbone).requires_grad_(False)
        if shared_head:
            self.momentum_backbone.pooler = None

    def momentum_parameters(self) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """``([theta_p], [theta_q])``, the momentum backbone's parameters and the backbone's of the
        same names."""
        q = dict(self.backbone.named_parameters())
        p = list(self.momentum_backbone.named_parameters())
        return [t for _, t in p], [q[name] for name, _ in p]

    @torch.no_grad()
    def copy_to_momentum_backbone(self) -> None:
        """theta_p <- theta_q."""
        torch._foreach_copy_(*self.momentum_parameters())

    @property
    def embedding_size(self) -> int:
        return self.config.hidden_size

    def backbone_outputs(self, input_ids, attention_mask, token_type_ids=None, backbone=None, hidden_states=False):
        """Run ``backbone`` (default: this model's) on ``(rows, length)`` inputs: its outputs (``last_hidden_state``,
        and every layer's with ``hidden_states``)."""
        kwargs = {} if token_type_ids is None else {"token_type_ids": token_type_ids}
        backbone = backbone or self.backbone
        return backbone(
            input_ids=input_ids,
            attention_mask=prepared_attention_mask(backbone, attention_mask),
            output_hidden_states=hidden_states,
            return_dict=True,
            **kwargs,
        )

    def input_length(self, sentence_length: int) -> int:
        """The most tokens of one input the model forms from a sentence of ``sentence_length`` tokens
        (its special tokens included) in training: the sentence itself."""
        return sentence_length

    def sentence_embedding(self, pooler_type, input_ids, attention_mask, token_type_ids=None, backbone=None):
        """The hook every forward embeds through: ``(rows, length)`` inputs -> ``(rows, d)`` sentence
        embeddings by ``backbone`` (default: this model's; the momentum encoder's for the positives),
        pooled by ``pooler_type``."""
        outputs = self.backbone_outputs(
            input_ids, attention_mask, token_type_ids, backbone, hidden_states=pooler_type in NEEDS_HIDDEN_STATES
        )
        return pool(pooler_type, attention_mask, outputs)

    def forward(self, input_ids, attention_mask, token_type_ids=None) -> dict[str, torch.Tensor]:
        """Training forward: ``(batch, views, length)`` token ids -> ``{"embeddings": (batch, views,
        hidden)}``, each view its own dropout sample. With a momentum backbone, view 0 is encoded by
        the backbone and view 1 by the momentum backbone, without gradient (:meth:`positives`)."""
        if self.momentum_backbone is not None:
            anchors = self.sentence_embedding(self.pooler_type, *view_of(0, input_ids, attention_mask, token_type_ids))
            with torch.no_grad():
                positives = self.positives(*view_of(1, input_ids, attention_mask, token_type_ids))
            return {"embeddings": torch.stack([anchors, positives], dim=1)}
        batch, views, _ = input_ids.shape
        pooled = self.sentence_embedding(self.pooler_type, *flat_views(input_ids, attention_mask, token_type_ids))
        return {"embeddings": pooled.view(batch, views, -1)}

    def positives(self, input_ids, attention_mask, token_type_ids=None) -> torch.Tensor:
        """The momentum backbone's embedding of one view: its [CLS] through this model's head where it
        has none of its own (:meth:`attach_momentum_backbone`), else its own pooled output."""
        if self.pooler_type == "cls" and self.momentum_backbone.pooler is None:
            cls = self.sentence_embedding(
                "cls_before_pooler", input_ids, attention_mask, token_type_ids, self.momentum_backbone
            )
            return self.backbone.pooler(cls[:, None])  # the head reads position 0 of a sequence of states
        return self.sentence_embedding(
            self.pooler_type, input_ids, attention_mask, token_type_ids, self.momentum_backbone
        )

    def embed(self, input_ids, attention_mask, token_type_ids=None, pooler_type=None) -> torch.Tensor:
        """Embedding forward: ``(n, length)`` -> ``(n, hidden)`` with the evaluation pooler (or ``pooler_type``)."""
        return self.sentence_embedding(pooler_type or self.eval_pooler, input_ids, attention_mask, token_type_ids)

    def tokenize_sentences(self, sentences: Sequence[str], max_length: int | None = None) -> dict:
        """The embedding forward's inputs of ``sentences``, unpadded lists by key (``input_ids``,
        ``attention_mask``, ...), cut to ``max_length`` tokens where given: the tokenizer's, each
        sentence alone. An encoder that reads sentences otherwise overrides it (a prompt template's,
        :class:`cse.encoders.prompt.PromptEncoder`)."""
        return dict(
            self.tokenizer(list(sentences), truncation=max_length is not None, max_length=max_length, padding=False)
        )

    def length_sorted_batches(self, sentences: Sequence[str], batch_size: int, max_length: int | None):
        """``(order, batches)``: the sentences' indices sorted by token length, and the sentences in
        that order, padded into batches of ``batch_size`` (little padding per batch). Kept for the last
        arguments seen: evaluation during training encodes the same dev sentences every time, and
        tokenising them costs about as much as encoding them on a GPU (0.17 s for the 3,833 STS-B dev
        and SICK-R trial sentences on a 2-core CPU; 0.21 s to encode 3,072 with BERT-base on an H100)."""
        key = (tuple(sentences), batch_size, max_length)
        if self._batch_cache is not None and self._batch_cache[0] == key:
            return self._batch_cache[1]
        encoded = self.tokenize_sentences(sentences, max_length)
        features = [dict(zip(encoded.keys(), values)) for values in zip(*encoded.values())]
        order = sorted(range(len(features)), key=lambda i: len(features[i]["input_ids"]))
        batches = [
            self.tokenizer.pad([features[i] for i in order[start : start + batch_size]], return_tensors="pt")
            for start in range(0, len(order), batch_size)
        ]
        if torch.cuda.is_available():
            # page-locked, so that each batch goes to the GPU without waiting for the stream
            batches = [{k: v.pin_memory() for k, v in batch.items()} for batch in batches]
        self._batch_cache = (key, (torch.tensor(order, dtype=torch.long), batches))
        return self._batch_cache[1]

    @torch.no_grad()
    def encode(
        self,
        sentences: Sequence[str],
        batch_size: int = 128,
        max_length: int | None = None,
        autocast_dtype: torch.dtype | None = None,
        pooler_type: str | None = None,
    ) -> torch.Tensor:
        """Embed sentences (float32, on the CPU, in input order) with the evaluation pooler, or
        ``pooler_type``.

        Batches are length-sorted (:meth:`length_sorted_batches`); the embeddings stay on the device
        until the last batch, then move to the CPU at once. ``max_length=None`` does not truncate, as
        SentEval's batcher does not. An encoding that lasts over :data:`PROGRESS_SECONDS` logs its
        progress every :data:`PROGRESS_SECONDS`.
        """
        if batch_size < 1:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        device = next(self.parameters()).device
        order, batches = self.length_sorted_batches(sentences, batch_size, max_length)
        was_training = self.training
        self.eval()
        autocast = (
            torch.autocast(device.type, dtype=autocast_dtype)
            if autocast_dtype is not None
            else contextlib.nullcontext()
        )
        embedded, done = [], 0
        start = last_report = time.perf_counter()
        try:
            with autocast:
                for batch in batches:
                    embedded.append(
                        self.embed(
                            **{k: v.to(device, non_blocking=True) for k, v in batch.items()}, pooler_type=pooler_type
                        ).float()
                    )
                    done += len(batch["input_ids"])
                    now = time.perf_counter()
                    if now - last_report >= PROGRESS_SECONDS:
                        logger.info("encoded %d of %d sentences (%.0f s)", done, len(order), now - start)
                        last_report = now
        finally:
            self.train(was_training)
        out = torch.empty(len(order), self.embedding_size, dtype=torch.float32)
        if embedded:
            out[order] = torch.cat(embedded).cpu()
        return out

    def save_pretrained(self, save_directory: str, state_dict: dict | None = None) -> None:
        """Export a plain Hugging Face model directory (backbone, tokenizer) plus ``cse_config.json``
        recording the evaluation pooler, and sentence-transformers' module files (:mod:`cse.export`).
        ``state_dict`` is this module's full state dict when the caller had to gather it (DeepSpeed);
        by default the live weights are saved.

        The files are written into a staging folder and moved into place one by one,
        ``cse_config.json`` last (:func:`cse.atomic.publish`): a reader never sees a partial file, and
        a directory holding ``cse_config.json`` holds the whole export."""
        os.makedirs(save_directory, exist_ok=True)
        staging = atomic.staging_dir(save_directory)
        self.write_export(staging, state_dict)
        atomic.publish(staging, save_directory, last=(CSE_CONFIG_NAME,))

    def write_export(self, directory: str, state_dict: dict | None = None) -> None:
        """Write the files :meth:`save_pretrained` exports into ``directory`` (a staging folder)."""
        self.backbone.save_pretrained(directory, state_dict=submodule_state(state_dict, "backbone"))
        self.tokenizer.save_pretrained(directory)
        self.write_sentence_transformers_modules(directory, state_dict)
        atomic.write_json(os.path.join(directory, CSE_CONFIG_NAME), self.cse_config())

    def write_sentence_transformers_modules(self, directory: str, state_dict: dict | None = None) -> None:
        """sentence-transformers' module files of the evaluation pooler (:mod:`cse.export`);
        ``state_dict`` as :meth:`save_pretrained`'s."""
        write_sentence_transformers_files(
            directory, self.backbone, self.tokenizer, self.eval_pooler, submodule_state(state_dict, "backbone")
        )

    def cse_config(self) -> dict:
        """What ``cse_config.json`` records beside the exported weights."""
        return {"pooler": self.eval_pooler, "training_pooler": self.pooler_type, "mlp_only_train": self.mlp_only_train}


def submodule_state(state_dict: dict | None, name: str) -> dict | None:
    """The entries of the submodule ``name`` in a model's ``state_dict``, by their names in it (None for None)."""
    if state_dict is None:
        return None
    prefix = f"{name}."
    return {k[len(prefix) :]: v for k, v in state_dict.items() if k.startswith(prefix)}


def view_of(view: int, *tensors):
    """The ``view``-th view of ``(batch, views, length)`` tensors (None stays None)."""
    return tuple(None if t is None else t[:, view] for t in tensors)


def flat_views(*tensors):
    """``(batch, views, length)`` tensors (the shape of the first) as ``(batch * views, length)``,
    each view of a sentence its own row (None stays None)."""
    batch, views, length = tensors[0].shape
    return tuple(None if t is None else t.reshape(batch * views, length) for t in tensors)


def load_encoder(model_args, pooler_type: str | None = None, mlp_only_train: bool | None = None) -> CSEModel:
    """The pretrained backbone, tokenizer and pooler that ``model_args`` name; ``pooler_type`` and
    ``mlp_only_train``, where given, replace theirs."""
    return CSEModel.from_pretrained(
        model_args.model_name_or_path,
        pooler_type=model_args.pooler_type if pooler_type is None else pooler_type,
        mlp_only_train=model_args.mlp_only_train if mlp_only_train is None else mlp_only_train,
        tokenizer_name_or_path=model_args.tokenizer_name,
        cache_dir=model_args.cache_dir,
        attn_implementation=model_args.attn_implementation,
    )


# The classes ``cse_config.json`` may name as ``model_class``: this package's own, and a class outside
# it only when the caller trusts the directory (``trust_remote_code=True``), as transformers' loaders
# do, so that a directory cannot make the loader import code its user did not choose. Exports
# written before ``model_class`` was recorded name SARCSE's encoder by ``model_kind: sarcse``.
MODEL_CLASS_PACKAGE = "cse."
LEGACY_MODEL_KINDS = {"sarcse": "cse.encoders.autoencoding:SARCSEModel"}
# Where a class an export may name has moved since (``old module:name`` -> ``new``): a directory
# exported before the move still loads.
MOVED_MODEL_CLASSES = {"cse.autoencoding:SARCSEModel": "cse.encoders.autoencoding:SARCSEModel"}


def model_class_path(model_class: type) -> str:
    """``module:name``, as ``cse_config.json`` records an export's class. A class of the script being
    run (``__main__``, such as a part's own file run as ``python my_part.py``) is recorded by the
    script's file name: the module a loader imports where that file's directory is on the path."""
    module = model_class.__module__
    if module == "__main__":
        module = os.path.splitext(os.path.basename(sys.modules["__main__"].__file__))[0]
    return f"{module}:{model_class.__qualname__}"


def names_encoder_class(config) -> bool:
    """Whether an export's ``cse_config.json`` (``config``) names its own encoder class (``model_class``,
    or an older ``model_kind``): its sentence embedding is more than a pooled backbone."""
    return "model_class" in config or "model_kind" in config


def exported_class(model_dir: str, config: dict, trust_remote_code: bool = False) -> type:
    """The class ``cse_config.json`` names (``model_class``, or an older ``model_kind``): one of this
    package's, or, with ``trust_remote_code``, a :class:`CSEModel` class of any importable module."""
    path = config.get("model_class") or LEGACY_MODEL_KINDS.get(config.get("model_kind"))
    named = config.get("model_class") or config.get("model_kind")
    if path is None or not re.fullmatch(r"[\w.]+:[\w.]+", path):
        raise CSEUsageError(
            f"{model_dir}: {CSE_CONFIG_NAME} names no encoder class ({named!r})",
            hint="load it with the code that exported it",
        )
    path = MOVED_MODEL_CLASSES.get(path, path)
    module, name = path.split(":")
    if not path.startswith(MODEL_CLASS_PACKAGE) and not trust_remote_code:
        raise CSEUsageError(
            f"{model_dir}: {CSE_CONFIG_NAME} names the encoder class {path}, outside this package: loading it "
            f"would run the code of the module {module}",
            hint="if you trust that code, load with trust_remote_code=True (senteval_eval.py --trust_remote_code), "
            f"{module} importable (on PYTHONPATH)",
        )
    try:
        found = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as err:
        raise CSEUsageError(
            f"{model_dir}: {CSE_CONFIG_NAME} names the encoder class {path}, which cannot be imported ({err})",
            hint=f"put the directory of the module {module} on PYTHONPATH, or load it with the code that exported it",
        ) from err
    if not (isinstance(found, type) and issubclass(found, CSEModel)):
        raise CSEUsageError(
            f"{model_dir}: {CSE_CONFIG_NAME} names {path}, which is not an encoder class (a CSEModel)",
            hint="load it with the code that exported it",
        )
    return found


def load_model(
    model_name_or_path: str, pooler_type: str | None = None, trust_remote_code: bool = False, **kwargs
) -> CSEModel:
    """The encoder a directory holds: the class its ``cse_config.json`` names (exports whose sentence
    embedding is more than a pooled backbone, such as SARCSE's), imported alone (not the trainer nor
    the methods), else a backbone + pooler (:meth:`CSEModel.from_pretrained`). A class outside this
    package is imported only with ``trust_remote_code=True`` (:func:`exported_class`)."""
    model_name_or_path = check_model_path(model_name_or_path, kwargs.get("cache_dir"))
    config = read_cse_config(model_name_or_path)
    if not names_encoder_class(config):
        return CSEModel.from_pretrained(model_name_or_path, pooler_type=pooler_type, **kwargs)
    return exported_class(model_name_or_path, config, trust_remote_code).from_pretrained(
        model_name_or_path, pooler_type=pooler_type, **kwargs
    )
