"""The model card (``README.md``) of an exported encoder: Hub metadata (YAML front matter, built with
``huggingface_hub``'s :class:`~huggingface_hub.ModelCardData`) and what a user needs to trust and load
the model: method and papers, base model, training data, settings, STS scores, how to load it, and the
software and hardware it was trained with.

``--push_to_hub`` uploads the exported directory with this card (:func:`push_encoder`): the Trainer's
own ``push_to_hub`` would save the training wrapper's weights over the export and replace the card.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import yaml
from huggingface_hub import ModelCard, ModelCardData, upload_folder

from . import registry
from .atomic import atomic_path
from .citations import bibtex_field
from .environment import collect_environment
from .export import sentence_transformers_loads
from .modeling import MODEL_CLASS_PACKAGE, names_encoder_class, read_cse_config
from .paths import default_train_file
from .results import markdown_table
from .resume import model_selection
from .run import Run
from .run_names import CSE_CONFIG_NAME

# What AutoModel's outputs give each exportable pooler's embedding (``outputs``: the model's output,
# ``mask``: the attention mask as a float (batch, length, 1) tensor).
POOLER_CODE = {
    "cls": "outputs.pooler_output  # [CLS] through the trained linear + tanh head",
    "cls_before_pooler": "outputs.last_hidden_state[:, 0]  # [CLS]",
    "avg": "(outputs.last_hidden_state * mask).sum(1) / mask.sum(1)  # mean over the tokens",
    "max": "outputs.last_hidden_state.masked_fill(mask == 0, float('-inf')).max(1).values",
}
MODEL_CARD_NAME = "README.md"
# Uploaded with the export: not the training checkpoints (their weights are the training wrapper's).
PUSH_IGNORE = ["_*", "checkpoint-*", "*.tmp"]


def base_model_license(model_name_or_path: str) -> str | None:
    """The license a local base model's own card declares (``None`` for hub names: no lookup offline)."""
    path = os.path.join(model_name_or_path, "README.md")
    if not os.path.isfile(path):
        return None
    return ModelCard.load(path).data.license


def _is_hub_id(name: str | None) -> bool:
    return bool(name) and not os.path.exists(name)


def _module_code(export_dir: str) -> list[str]:
    """The Python files beside an export: the code of its own sentence-transformers modules (SARCSE's
    Z), which ``modules.json`` names ``file.Class`` and sentence-transformers runs only when trusted."""
    return sorted(name for name in os.listdir(export_dir) if name.endswith(".py"))


def _load_section(repo: str, cse_config: Mapping, sentence_transformers: bool, code: Sequence[str]) -> str:
    pooler = cse_config.get("pooler")
    # a class of the encoder outside the package loads only when trusted (cse.modeling.exported_class)
    module = cse_config.get("model_class", MODEL_CLASS_PACKAGE).split(":")[0]
    trusted = "" if module.startswith(MODEL_CLASS_PACKAGE) else ", trust_remote_code=True"
    parts = [
        "With this repository's code (any pooler; reads the pooler from `cse_config.json`"
        + (f"; the encoder's class is of the module `{module}`, which must be importable and runs" if trusted else "")
        + "):\n",
        f'```python\nfrom cse.modeling import load_model\n\nmodel = load_model("{repo}"{trusted})\n'
        'embeddings = model.encode(["A man is playing a guitar.", "Someone plays an instrument."])\n```\n',
    ]
    # an export of another encoder class (SARCSE's Z) embeds with more than a pooled backbone
    if not names_encoder_class(cse_config) and pooler in POOLER_CODE:
        parts += [
            f"With `transformers` alone (pooler `{pooler}`, recorded in `cse_config.json`):\n",
            "```python\nimport torch\nfrom transformers import AutoModel, AutoTokenizer\n\n"
            f'tokenizer = AutoTokenizer.from_pretrained("{repo}")\nmodel = AutoModel.from_pretrained("{repo}")\n'
            'batch = tokenizer(["A man is playing a guitar."], padding=True, return_tensors="pt")\n'
            "with torch.no_grad():\n    outputs = model(**batch)\n"
            + ('mask = batch["attention_mask"].unsqueeze(-1).float()\n' if "mask" in POOLER_CODE[pooler] else "")
            + f"embeddings = {POOLER_CODE[pooler]}\n```\n",
        ]
    if sentence_transformers:
        files = ", ".join(f"`{name}`" for name in code)
        parts += [
            "With `sentence-transformers` (the same embeddings"
            + (
                f"; `trust_remote_code=True` runs the module of its embedding, this model's own code ({files}), "
                "without which sentence-transformers refuses to load it"
                if code
                else ""
            )
            + "):\n",
            "```python\nfrom sentence_transformers import SentenceTransformer\n\n"
            f'model = SentenceTransformer("{repo}"{", trust_remote_code=True" if code else ""})\n'
            'embeddings = model.encode(["A man is playing a guitar.", "Someone plays an instrument."])\n```\n',
        ]
    return "\n".join(parts)


@dataclass(frozen=True)
class CardData:
    """What the card of an exported encoder says of its run (as sentence-transformers'
    ``SentenceTransformerModelCardData`` holds a run's facts for its card), built from the run and its
    trainer (:meth:`of_run`).

    ``output_dir``: where the encoder is exported (the card's loading instructions name it unless
    ``repo_id``, the Hub repository it is pushed to, is given); ``method``: the method's record (a
    composed run's names every part); ``train_source``: the corpus (a file or a hub dataset),
    ``train_dataset_name`` the hub dataset if any, ``train_sentences`` its size; ``settings``: the
    run's settings (:meth:`cse.run.Run.with_corpus`; their ``corpus`` group gives the distinct
    sentences); ``reports``: ``{mode: report}`` of the STS evaluations run on the final model (``{}``
    for none); ``citations``: BibTeX entries, the method's paper first; ``environment``: the run's
    software and hardware (:func:`cse.environment.collect_environment`); ``selection``: which weights
    were exported (:func:`cse.resume.model_selection`)."""

    output_dir: str
    method: registry.MethodRecord
    base_model: str
    train_source: str
    train_dataset_name: str | None
    train_sentences: int
    settings: Mapping
    reports: Mapping[str, Mapping]
    citations: Sequence[str]
    environment: Mapping
    repo_id: str | None = None
    selection: str | None = None

    @classmethod
    def of_run(cls, run: Run, trainer, reports: Mapping[str, Mapping]) -> CardData:
        """The card data of ``run`` trained by ``trainer``, whose final STS evaluations are ``reports``."""
        args, data_args = run.training_args, run.data_args
        return cls(
            output_dir=run.output_dir,
            method=run.record,
            base_model=run.model_args.model_name_or_path,
            train_source=data_args.dataset_name or data_args.train_file or default_train_file(),
            train_dataset_name=data_args.dataset_name,
            train_sentences=len(trainer.train_dataset),
            settings=run.with_corpus(trainer.corpus_statistics),
            reports=reports,
            citations=list(dict.fromkeys([*run.record.citations, *trainer.citations])),
            environment=collect_environment(args),
            repo_id=args.hub_model_id if args.push_to_hub else None,
            selection=model_selection(trainer),
        )


def build_model_card(card: CardData, export_dir: str | None = None) -> ModelCard:
    """The card of the encoder exported to ``card.output_dir`` (its ``cse_config.json`` and, when
    present, sentence-transformers' ``modules.json`` decide the loading instructions and
    ``library_name``; they are read from ``export_dir`` when the export is still staged there)."""
    record = card.method
    export_dir = export_dir or card.output_dir
    cse_config = read_cse_config(export_dir)
    sentence_transformers = sentence_transformers_loads(export_dir)
    code = _module_code(export_dir) if sentence_transformers else []
    name = record.display_name
    data = ModelCardData(
        library_name="sentence-transformers" if sentence_transformers else "transformers",
        tags=[
            *(["sentence-transformers"] if sentence_transformers else []),
            "sentence-similarity",
            *(p.name for p in record.parts or [record]),
            "cse",
        ],
        base_model=card.base_model if _is_hub_id(card.base_model) else None,
        datasets=[card.train_dataset_name] if card.train_dataset_name else None,
        metrics=["spearman"],
        pipeline_tag="sentence-similarity",
        license=base_model_license(card.base_model),
    )
    repo = card.repo_id or os.path.abspath(card.output_dir)
    parts = ", ".join(f"`{p.name}`" for p in record.parts)
    titles = "; ".join(f"_{bibtex_field(entry, 'title')}_" for entry in record.citations)
    sections = [
        f"# {name} sentence encoder\n",
        f"A sentence encoder trained with **{name}** ({titles}) from `{card.base_model}`, "
        "without labels, with the `cse` code base. Its sentence embedding is pooler "
        f"`{cse_config.get('pooler', 'unknown')}`; compare sentences with the cosine similarity.\n",
        *([f"Its parts, on SimCSE's InfoNCE: {parts} (`--parts`, docs/composition.md).\n"] if record.parts else []),
        "## Training data\n",
        f"{card.train_sentences:,} sentences from `{card.train_source}`"
        + (f" (hub dataset `{card.train_dataset_name}`)" if card.train_dataset_name else "")
        + (f", {card.settings['corpus']['distinct']:,} of them distinct" if "corpus" in card.settings else "")
        + ", unlabelled.\n",
        "## Training settings\n",
        "The run's settings (`run_args.json`): model, data, the training arguments that change what is "
        f"computed, {name}'s own arguments and the corpus' sentence counts.\n",
        f"```yaml\n{yaml.safe_dump(dict(card.settings), sort_keys=False).rstrip()}\n```\n",
        *([f"Model selection: {card.selection}.\n"] if card.selection else []),
        "## Evaluation\n",
    ]
    if card.reports:
        for mode, report in card.reports.items():
            scores = report["scores"]
            sections += [
                f"STS {mode} sets, Spearman correlation x 100 (SentEval protocol, `all` aggregation), pooler "
                f"`{report.get('pooler', cse_config.get('pooler'))}`:\n",
                markdown_table({name: scores}, list(scores)) + "\n",
            ]
    else:
        sections.append("Not evaluated after training (`--final_eval none`); see `senteval_eval.py`.\n")
    sections += [
        "## Usage\n",
        _load_section(repo, cse_config, sentence_transformers, code),
        "## Environment\n",
        "The software and hardware of the training run:\n",
        f"```json\n{json.dumps(dict(card.environment), indent=2)}\n```\n",
        "## Citation\n",
        "\n".join(f"```bibtex\n{entry}\n```\n" for entry in card.citations),
    ]
    return ModelCard(f"---\n{data.to_yaml()}\n---\n\n" + "\n".join(sections))


def write_model_card(card: CardData, export_dir: str | None = None) -> str:
    """Write :func:`build_model_card`'s card as ``README.md`` in ``export_dir`` (default the card's
    ``output_dir``), atomically (:mod:`cse.atomic`); returns its path."""
    path = os.path.join(export_dir or card.output_dir, MODEL_CARD_NAME)
    with atomic_path(path) as tmp:
        build_model_card(card, export_dir).save(tmp)
    return path


def push_encoder(output_dir: str, repo_id: str, token: str | None = None, revision: str | None = None):
    """Upload the exported encoder in ``output_dir`` (weights, tokenizer, ``cse_config.json``,
    sentence-transformers modules, model card, result JSONs) to the Hub model repository ``repo_id``."""
    if not os.path.isfile(os.path.join(output_dir, CSE_CONFIG_NAME)):
        raise FileNotFoundError(f"{output_dir} holds no exported encoder ({CSE_CONFIG_NAME}): nothing to push")
    return upload_folder(
        repo_id=repo_id,
        folder_path=output_dir,
        commit_message="Exported encoder and model card",
        token=token,
        revision=revision,
        ignore_patterns=PUSH_IGNORE,
    )


def is_cse_card(path: str) -> bool:
    """Whether ``path`` is a model card :func:`write_model_card` wrote (its tags hold ``cse``)."""
    return os.path.isfile(path) and "cse" in (ModelCard.load(path).data.tags or [])


def add_eval_results(export_dir: str, eval_results: Sequence) -> str | None:
    """Put ``eval_results`` (``huggingface_hub.EvalResult``, e.g. MTEB's) into the ``model-index`` of
    the card in ``export_dir``, as the hub's leaderboards read it, replacing earlier results of the
    same dataset, split and metric and keeping the others; atomically. A card that cse did not write,
    or none, is left alone (returns ``None``); else returns its path."""
    path = os.path.join(export_dir, MODEL_CARD_NAME)
    if not eval_results or not is_cse_card(path):
        return None
    card = ModelCard.load(path)

    def key(result):
        return (result.dataset_type, result.dataset_config, result.dataset_split, result.metric_type)

    new = {key(r) for r in eval_results}
    kept = [r for r in card.data.eval_results or [] if key(r) not in new]
    card.data.eval_results = kept + list(eval_results)
    # the hub's model-index needs a model name: the export's folder unless the card already has one
    card.data.model_name = card.data.model_name or os.path.basename(os.path.normpath(export_dir))
    with atomic_path(path) as tmp:
        card.save(tmp)
    return path
