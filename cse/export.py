"""sentence-transformers module files beside an exported model, so that
``SentenceTransformer(dir)`` embeds exactly as our evaluator's pooler does.

The directory already holds the Hugging Face backbone and tokenizer (``modules.json`` module 0, a
``Transformer`` at the directory itself); we add a ``Pooling`` module and, for the ``cls`` pooler,
a ``Dense`` module (linear + tanh) holding a copy of the backbone's pooling layer, since
sentence-transformers' ``Transformer`` does not expose ``pooler_output``:

========================  =================================================
pooler                    sentence-transformers modules
========================  =================================================
``cls``                   Transformer, Pooling(cls), Dense(tanh) = pooler
``cls_before_pooler``     Transformer, Pooling(cls)
``avg``                   Transformer, Pooling(mean)
``max``                   Transformer, Pooling(max)
``textcnn`` (SARCSE's Z)  Transformer, SARCSEEmbedding (code in the export)
========================  =================================================

An embedding that no sentence-transformers module computes (SARCSE's Z) is a module of its own whose
code travels with the export (:func:`write_module_code`): ``modules.json`` names it ``file.Class``,
which sentence-transformers imports from the directory only when loaded with
``trust_remote_code=True``, and refuses to load otherwise.

``avg_first_last`` and ``avg_top2`` are not exported: they read intermediate layers, which
sentence-transformers' ``Transformer`` passes on only when the backbone's config sets
``output_hidden_states=True`` — a change to ``config.json`` that would alter what ``AutoModel``
returns for every other user of the directory. For them no module files are written (and a warning
logged); note that sentence-transformers then falls back to mean pooling (``avg``), so load such a
model with :class:`cse.modeling.CSEModel` instead.

The files use the module names and legacy keys that every sentence-transformers release since 2.x
reads (``sentence_transformers.models.*``, ``pooling_mode_*_tokens``). Encoding is not truncated
by our evaluator; ``max_seq_length`` is set to the backbone's position limit so that it is not
truncated there either for any sentence the backbone can take.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys

from safetensors.torch import save_file
from transformers.dynamic_module_utils import get_relative_import_files

from .atomic import write_json

logger = logging.getLogger(__name__)

POOLING_MODES = {"cls": "cls_token", "cls_before_pooler": "cls_token", "avg": "mean_tokens", "max": "max_tokens"}
EXPORTABLE_POOLERS = tuple(POOLING_MODES)
_LEGACY_MODES = ("cls_token", "mean_tokens", "max_tokens", "mean_sqrt_len_tokens")


# sentence-transformers' module types a directory may list for its pooler to be read as one of ours:
# the backbone, one Pooling and, optionally, a Normalize (which changes no cosine similarity)
TRANSFORMER = "sentence_transformers.models.Transformer"
_READABLE_MODULES = (TRANSFORMER, "sentence_transformers.models.Pooling")
_NORMALIZE = "sentence_transformers.models.Normalize"


def sentence_transformers_pooler(directory: str) -> str | None:
    """The pooler of ours that embeds as the sentence-transformers model in ``directory`` does: its
    ``modules.json`` lists the backbone, a ``Pooling`` of one mode (mean, CLS or max) and at most a
    ``Normalize``; None for anything else (a Dense layer, several modes, no such files)."""
    import json

    try:
        with open(os.path.join(directory, "modules.json"), encoding="utf-8") as f:
            modules = json.load(f)
        types = [module["type"] for module in modules]
        if types not in (list(_READABLE_MODULES), [*_READABLE_MODULES, _NORMALIZE]):
            return None
        with open(os.path.join(directory, modules[1]["path"], "config.json"), encoding="utf-8") as f:
            pooling = json.load(f)
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        return None
    modes = [mode for mode in _LEGACY_MODES if pooling.get(f"pooling_mode_{mode}") is True]
    ours = {"mean_tokens": "avg", "cls_token": "cls_before_pooler", "max_tokens": "max"}
    return ours.get(modes[0]) if len(modes) == 1 else None


def _write_json(path: str, data) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    write_json(path, data)


def position_limit(config, tokenizer) -> int:
    """The most tokens the backbone of ``config`` takes in one sentence (and ``tokenizer`` allows)."""
    # RoBERTa's positions start after the padding index: 514 positions hold 512 tokens.
    limit = config.max_position_embeddings - (2 if config.model_type in ("roberta", "xlm-roberta", "camembert") else 0)
    return min(limit, tokenizer.model_max_length)


def write_sentence_transformers_files(
    save_directory: str, backbone, tokenizer, pooler: str, state_dict: dict | None = None
) -> bool:
    """Write ``modules.json``, ``sentence_bert_config.json``, ``1_Pooling/`` (and ``2_Dense/`` for
    ``cls``) into a saved model directory; ``False`` (nothing written) for a pooler that cannot be
    exported (see the module docstring). ``state_dict``: the backbone's weights as saved, when they
    are not the live ones (gathered under DeepSpeed)."""
    if pooler not in POOLING_MODES:
        logger.warning(
            "pooler %r has no sentence-transformers equivalent: the export loads with cse.modeling.load_model "
            "only (SentenceTransformer refuses it rather than falling back to mean pooling)",
            pooler,
        )
        write_refusing_modules(save_directory)
        return False
    hidden = backbone.config.hidden_size
    modules = [("1_Pooling", "sentence_transformers.models.Pooling")]
    pooling = {"word_embedding_dimension": hidden}
    pooling.update({f"pooling_mode_{mode}": mode == POOLING_MODES[pooler] for mode in _LEGACY_MODES})
    _write_json(os.path.join(save_directory, "1_Pooling", "config.json"), pooling)
    if pooler == "cls":
        head = backbone.pooler.dense
        modules.append(("2_Dense", "sentence_transformers.models.Dense"))
        dense = os.path.join(save_directory, "2_Dense")
        _write_json(
            os.path.join(dense, "config.json"),
            {
                "in_features": head.in_features,
                "out_features": head.out_features,
                "bias": head.bias is not None,
                "activation_function": "torch.nn.modules.activation.Tanh",
            },
        )
        live = {"weight": head.weight, "bias": head.bias}
        weights = {
            f"linear.{name}": (live[name] if state_dict is None else state_dict[f"pooler.dense.{name}"])
            .detach()
            .cpu()
            .contiguous()
            for name in ("weight", "bias")
            if live[name] is not None
        }
        save_file(weights, os.path.join(dense, "model.safetensors"))
    write_modules(save_directory, backbone, tokenizer, modules)
    return True


def write_modules(
    save_directory: str, backbone, tokenizer, modules: list[tuple[str, str]], first: str = TRANSFORMER
) -> None:
    """``modules.json``: the backbone's ``Transformer`` (or ``first``, a type of module that loads as
    one: a prompt's, :mod:`cse.prompt_modules`) at the directory itself, then ``modules`` (``(folder,
    type)`` each, in order), and ``sentence_bert_config.json`` (the Transformer's)."""
    entries = [{"idx": 0, "name": "0", "path": "", "type": first}]
    for idx, (path, module_type) in enumerate(modules, start=1):
        entries.append({"idx": idx, "name": str(idx), "path": path, "type": module_type})
    _write_json(os.path.join(save_directory, "modules.json"), entries)
    _write_json(
        os.path.join(save_directory, "sentence_bert_config.json"),
        {"max_seq_length": position_limit(backbone.config, tokenizer), "do_lower_case": False},
    )


def write_refusing_modules(save_directory: str) -> None:
    """``modules.json`` of an export that no sentence-transformers module computes: one module,
    :class:`cse.no_sentence_transformers.LoadWithCSE`, which refuses to load (without ``modules.json``
    sentence-transformers would load the backbone with mean pooling, another embedding)."""
    from .no_sentence_transformers import LoadWithCSE

    module = write_module_code(save_directory, LoadWithCSE)
    _write_json(os.path.join(save_directory, "modules.json"), [{"idx": 0, "name": "0", "path": "", "type": module}])


def sentence_transformers_loads(export_dir: str) -> bool:
    """Whether sentence-transformers loads the export in ``export_dir``: its ``modules.json`` is there
    and is not :func:`write_refusing_modules`'."""
    path = os.path.join(export_dir, "modules.json")
    if not os.path.isfile(path):
        return False
    with open(path, encoding="utf-8") as f:
        return not any(entry.get("type", "").endswith(".LoadWithCSE") for entry in json.load(f))


def write_module_code(save_directory: str, module_class: type) -> str:
    """Copy the source file of ``module_class``'s module, and those it imports relatively (as
    transformers' loader of remote code finds them), to the directory's root; the class's
    ``modules.json`` type, ``file.Class``, which sentence-transformers resolves there, with
    ``trust_remote_code=True`` only."""
    source = sys.modules[module_class.__module__].__file__
    for path in (source, *get_relative_import_files(source)):
        shutil.copyfile(path, os.path.join(save_directory, os.path.basename(path)))
    return f"{os.path.splitext(os.path.basename(source))[0]}.{module_class.__qualname__}"
