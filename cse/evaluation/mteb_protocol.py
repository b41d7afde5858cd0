"""MTEB beside SentEval: any encoder of this repository evaluated by ``mteb`` (2.x), its results in
mteb's own layout.

* The encoder mteb is handed (:class:`CSEEncoder`) embeds through the ``encode`` callable it is given,
  the one SentEval's evaluation uses (``senteval_eval.py`` passes the model's own ``encode`` with the
  run's pooler, dtype and batch size). A method whose sentence embedding needs more than a pooled
  backbone (a prompt template, an extra module) puts it in its encoder's ``encode``: both evaluators
  then see it, and nothing here needs to know.
* Offline, the seven STS tasks are built from the local SentEval files (:data:`OFFLINE_TASKS`,
  :func:`local_task`): mteb's own task classes, metadata and scoring, with a ``load_data`` that reads
  ``$CSE_DATA_DIR/senteval`` instead of the hub. They are the same test sets: STS12-16 are each year's
  subsets concatenated (SentEval's "all" setting), STS-B its test split. SICK-R is the exception:
  MTEB scores all 9,927 SICK pairs (train, trial and test), SentEval its 4,927 test pairs, so the two
  SICK-R figures differ.
* With both protocols in one run, each sentence is encoded once (:class:`KeptEmbeddings`): MTEB's STS
  tasks ask for SentEval's sentences again, and only SICK's train and trial sentences are new.
* Any other MTEB task (retrieval, clustering, ...) is loaded from the hub by mteb; offline, it is
  refused before anything is encoded (:func:`resolve_tasks`).
* Results go to a :class:`mteb.ResultCache` folder (``results/<model>/<revision>/<task>.json``) and
  come back as a report shaped like SentEval's (``scores``: main score x 100 per column, ``Avg.``).
"""

from __future__ import annotations

import logging
import os
import warnings
from collections.abc import Callable, Sequence

import numpy as np

from ..errors import CSEUsageError
from .sts import STSPairs, load_sts_task, read_sick

logger = logging.getLogger(__name__)

# MTEB's names of the STS tasks that can be built from the SentEval files, in the papers' order.
OFFLINE_TASKS = ("STS12", "STS13", "STS14", "STS15", "STS16", "STSBenchmark", "SICK-R")
# Column names as in the SentEval tables; other tasks keep their MTEB names.
COLUMNS = {"STSBenchmark": "STS-B"}
# MTEB's SICK-R is every pair of the SICK release: train, trial and test.
SICK_ALL_FILES = ("SICK_train.txt", "SICK_trial.txt", "SICK_test_annotated.txt")
SOURCES = ("local", "hub")
GROUP = "mteb"
OFFLINE_HINT = (
    f"offline, MTEB runs the STS tasks built from the SentEval files: --mteb_tasks {','.join(OFFLINE_TASKS)} "
    "(other tasks need the Hugging Face hub, or its cached copy of their data)"
)


def concatenate(parts: Sequence[STSPairs]) -> STSPairs:
    """Several sets of pairs as one, in order."""
    return STSPairs(
        [s for p in parts for s in p.sentences1],
        [s for p in parts for s in p.sentences2],
        np.concatenate([p.scores for p in parts]),
    )


def local_pairs(name: str, senteval_dir: str) -> STSPairs:
    """The pairs of the MTEB STS task ``name`` (one of :data:`OFFLINE_TASKS`) from the SentEval files."""
    if name == "SICK-R":
        return concatenate([read_sick(os.path.join(senteval_dir, "SICK", file)) for file in SICK_ALL_FILES])
    return concatenate(list(load_sts_task(name, "test", senteval_dir).values()))


def _mteb():
    import mteb  # imported when an MTEB evaluation is asked for: SentEval's evaluation does without it

    return mteb


def local_task(name: str, senteval_dir: str):
    """The MTEB task ``name`` (one of :data:`OFFLINE_TASKS`) with its data read from ``senteval_dir``:
    a subclass of mteb's own task class (its metadata, score range and scoring) whose ``load_data``
    reads the local files."""
    from datasets import Dataset, DatasetDict

    registered = type(_mteb().get_task(name))

    def load_data(self, num_proc=None, **kwargs) -> None:
        if self.data_loaded:
            return
        pairs = local_pairs(self.metadata.name, senteval_dir)
        columns = {"sentence1": pairs.sentences1, "sentence2": pairs.sentences2, "score": pairs.scores.tolist()}
        self.dataset = DatasetDict({"test": Dataset.from_dict(columns)})
        self.data_loaded = True

    local = type(f"SentEval{registered.__name__}", (registered,), {"load_data": load_data})
    return local()


def parse_task_names(text: str) -> list[str]:
    """``--mteb_tasks``: comma-separated MTEB task names; each is checked against mteb's registry."""
    names = list(dict.fromkeys(name.strip() for name in text.split(",") if name.strip()))
    if not names:
        raise CSEUsageError(f"--mteb_tasks {text!r} names no task", hint=f"e.g. --mteb_tasks {','.join(OFFLINE_TASKS)}")
    mteb = _mteb()
    for name in names:
        try:
            mteb.get_task(name)
        except KeyError as error:
            raise CSEUsageError(
                f"--mteb_tasks: {str(error.args[0] if error.args else name).removeprefix('KeyError: ')}",
                hint="mteb's task names: python -c 'import mteb; print([t.metadata.name for t in mteb.get_tasks()])'",
            ) from None
    return names


def hub_offline() -> bool:
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE)


def resolve_tasks(names: Sequence[str], senteval_dir: str | None, source: str = "local") -> list:
    """The mteb tasks to run: with ``source="local"`` those of :data:`OFFLINE_TASKS` built from
    ``senteval_dir`` (:func:`local_task`), the others from the hub. The hub's tasks' data are loaded
    here, before any encoding: a task the hub cannot give (offline, no network, and no cached copy)
    is refused in one line that names the offline tasks."""
    if source not in SOURCES:
        raise ValueError(f"unknown MTEB data source {source!r}; choose one of {', '.join(SOURCES)}")
    mteb = _mteb()
    local = [n for n in names if source == "local" and n in OFFLINE_TASKS]
    if local:
        from ..paths import senteval_dir as resolve_senteval_dir

        senteval_dir = resolve_senteval_dir(senteval_dir)
    tasks = []
    for name in names:
        if name in local:
            tasks.append(local_task(name, senteval_dir))
            continue
        task = mteb.get_task(name)
        try:
            task.load_data()
        except OSError as error:  # datasets' ConnectionError: offline, or the hub unreachable
            where = "the hub is offline (HF_HUB_OFFLINE=1)" if hub_offline() else "the hub could not be reached"
            raise CSEUsageError(
                f"MTEB task {name} needs the Hugging Face hub and {where}: {str(error).splitlines()[0]}",
                hint=OFFLINE_HINT,
            ) from None
        tasks.append(task)
    return tasks


def model_name(model_name_or_path: str) -> str:
    """The name mteb files the results under (it takes ``organization/name``): a hub id as it is, a
    local directory as ``cse/<its folder>``."""
    if not os.path.exists(model_name_or_path) and model_name_or_path.count("/") == 1:
        return model_name_or_path
    return f"cse/{os.path.basename(os.path.normpath(model_name_or_path))}"


def _encoder_base():
    from mteb.models.abs_encoder import AbsEncoder

    return AbsEncoder


class KeptEmbeddings:
    """``encode`` (sentences -> ``(n, d)`` array) that keeps each sentence's embedding and encodes only
    the sentences it has not seen, in one call of ``encode`` (batched as ``encode`` batches them).
    Each embedding is the one its first encoding gave: a sentence is not encoded again in another
    batch, whose padding could change it at float rounding."""

    def __init__(self, encode: Callable[[list[str]], np.ndarray]):
        self.encode = encode
        self.kept: dict[str, np.ndarray] = {}

    def __call__(self, sentences: Sequence[str]) -> np.ndarray:
        if len(sentences) == 0:
            return np.asarray(self.encode([]))
        new = [s for s in dict.fromkeys(sentences) if s not in self.kept]
        if new:
            embeddings = np.asarray(self.encode(new))
            if len(embeddings) != len(new):
                raise ValueError(f"the encoder gave {len(embeddings)} embeddings for {len(new)} sentences")
            self.kept.update(zip(new, embeddings))
        return np.stack([self.kept[s] for s in sentences])


def make_encoder(encode: Callable[[list[str]], np.ndarray], name: str, embed_dim: int | None = None):
    """An mteb encoder (its ``EncoderProtocol``) that embeds with ``encode`` (sentences -> ``(n, d)``
    array) and compares embeddings with the cosine, as SentEval does."""
    from mteb.models.model_meta import ModelMeta, ScoringFunction

    class CSEEncoder(_encoder_base()):
        def __init__(self):
            self.encode_sentences = encode
            self.mteb_model_meta = ModelMeta.create_empty(
                overwrites={
                    "name": name,
                    "similarity_fn_name": ScoringFunction.COSINE,
                    "embed_dim": embed_dim,
                    "framework": ["PyTorch"],
                }
            )

        def encode(self, inputs, *, task_metadata, hf_split, hf_subset, prompt_type=None, **kwargs):
            # mteb's batches are of its own size; ``encode`` batches (length-sorted) as SentEval's does
            texts = [text for batch in inputs for text in batch["text"]]
            return np.asarray(self.encode_sentences(texts))

    return CSEEncoder()


def column(task_name: str) -> str:
    return COLUMNS.get(task_name, task_name)


def report_of(task_results, results_dir: str) -> dict:
    """A report shaped like SentEval's: ``scores`` (main score x 100 per column, and ``Avg.`` of the
    two-decimal figures as the papers average), ``score_groups`` ``{"mteb": scores}``, ``tasks``
    (each task's main score's name, its value and every score mteb computed) and ``results_dir``."""
    tasks, scores = {}, {}
    for result in task_results:
        main = result.get_score()
        tasks[result.task_name] = {
            "main_score": main,
            "main_score_name": result.task.metadata.main_score,
            "scores": result.scores,
            "dataset_revision": result.dataset_revision,
        }
        scores[column(result.task_name)] = 100.0 * main
    scores["Avg."] = float(np.mean([round(v, 2) for v in scores.values()]))
    return {
        "protocol": "mteb",
        "tasks": tasks,
        "scores": scores,
        "score_groups": {GROUP: dict(scores)},
        "results_dir": results_dir,
    }


def run(encoder, tasks: Sequence, results_dir: str):
    """Evaluate ``encoder`` on ``tasks`` with ``mteb.evaluate``, every task afresh (a result of an
    earlier model under the same name is replaced, never reused), the results written under
    ``results_dir`` in mteb's layout (:class:`mteb.ResultCache`). Returns mteb's task results."""
    mteb = _mteb()
    os.makedirs(results_dir, exist_ok=True)
    result = mteb.evaluate(
        encoder,
        list(tasks),
        cache=mteb.ResultCache(results_dir),
        overwrite_strategy="always",
        show_progress_bar=False,
    )
    return list(result.task_results)


def eval_results(task_results) -> list:
    """``huggingface_hub.EvalResult`` of each task's main score per split, as the hub reads a model
    card's ``model-index`` (mteb's own conversion)."""
    out = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # mteb's note on the hub's newer scheme
        for result in task_results:
            out += result.get_hf_eval_results()
    return out
