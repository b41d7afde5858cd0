"""The training corpus: loading, cleaning, tokenising once (cached by ``datasets``), and the collator
that turns each sentence into its two views.

Unsupervised SimCSE's positive pair is the same sentence passed twice through the encoder: the two
views have identical token ids and differ only by dropout, so the collator repeats each row.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import os

import datasets
import numpy as np
import torch
import torch.nn.functional as F
from datasets.exceptions import DatasetNotFoundError
from scipy.special import gammaln, logsumexp

from .batches import SENTENCE_COLUMNS
from .errors import CSEUsageError
from .export import position_limit
from .file_checks import require_regular_file
from .paths import (
    CORPUS_FILE_HINT,
    EMPTY_CORPUS_HINT,
    MissingDataError,
    corpus_emptiness,
    default_train_file,
    require_path,
)

logger = logging.getLogger(__name__)

LOCAL_FORMATS = {".txt": "text", ".csv": "csv"}
# How much of a local corpus is read to tell text from binary data, and the share of its lines that
# may be invalid UTF-8 before the file counts as binary (stray bytes in a text corpus are only warned about).
BINARY_CHECK_BYTES = 4 << 20
MAX_UNDECODABLE_SHARE = 0.5
# Above this share of batches holding some sentence twice (a false negative), the corpus' duplicates are warned about.
MAX_REPEAT_BATCH_SHARE = 0.01
# A corpus is refused when a batch is expected to hold fewer distinct sentences than this share of its
# rows: most rows would then repeat a sentence of their batch, each a false negative.
MIN_DISTINCT_SHARE = 0.5


class EmptyCorpusError(CSEUsageError):
    """The corpus holds no usable sentence."""


def binary_evidence(path: str, limit: int = BINARY_CHECK_BYTES) -> str | None:
    """Why the first ``limit`` bytes of ``path`` look like binary data rather than text (NUL bytes,
    or more than ``MAX_UNDECODABLE_SHARE`` of the lines invalid UTF-8), or None if they look like text."""
    with open(path, "rb") as f:
        head = f.read(limit)
    if b"\0" in head:
        return f"NUL bytes in its first {len(head):,} bytes"
    lines = head.splitlines()
    if len(head) == limit and len(lines) > 1:
        lines = lines[:-1]  # the last line may be cut inside a multi-byte character
    bad = 0
    for line in lines:
        try:
            line.decode("utf-8")
        except UnicodeDecodeError:
            bad += 1
    if lines and bad / len(lines) > MAX_UNDECODABLE_SHARE:
        return f"{bad} of its first {len(lines)} lines are not valid UTF-8"
    return None


def count_undecodable_lines(path: str) -> int:
    """Lines of ``path`` that are not valid UTF-8 (they are decoded with U+FFFD replacements)."""
    bad = 0
    with open(path, "rb") as f:
        for line in f:
            try:
                line.decode("utf-8")
            except UnicodeDecodeError:
                bad += 1
    return bad


def _pick_text_column(columns: list[str], text_column: str | None, source: str) -> str:
    if text_column is not None:
        if text_column not in columns:
            raise CSEUsageError(
                f"{source} has no column {text_column!r}; its columns are {columns}",
                hint="name the column of sentences with --text_column",
            )
        return text_column
    if len(columns) == 1:
        return columns[0]
    if "text" in columns:
        return "text"
    raise CSEUsageError(
        f"{source} has columns {columns}: say which holds the sentences",
        hint=f"add --text_column {columns[0]} (or the column of sentences)",
    )


def load_corpus(
    train_file: str | None = None,
    dataset_name: str | None = None,
    dataset_config_name: str | None = None,
    text_column: str | None = None,
    max_train_samples: int | None = None,
    cache_dir: str | None = None,
    allow_binary_corpus: bool = False,
) -> datasets.Dataset:
    """The training sentences as a one-column (``text``) dataset, blank lines dropped and counted.

    ``train_file`` is a local ``.txt`` (one sentence a line) or ``.csv``; ``dataset_name`` a hub
    dataset (its ``train`` split). Neither given: ``$CSE_DATA_DIR/wiki1m_for_simcse.txt``. A local
    file that looks binary (:func:`binary_evidence`) is refused unless ``allow_binary_corpus``.
    """
    if train_file and dataset_name:
        raise CSEUsageError(
            "give either train_file or dataset_name, not both", hint="drop --train_file or --dataset_name"
        )
    if dataset_name:
        source = dataset_name
        try:
            corpus = datasets.load_dataset(dataset_name, dataset_config_name, split="train", cache_dir=cache_dir)
        except (ConnectionError, FileNotFoundError, DatasetNotFoundError) as err:
            # datasets' own account (offline, no such dataset or configuration) comes first
            raise CSEUsageError(
                f"cannot load the dataset {dataset_name}: {str(err).strip().splitlines()[0]}",
                hint="pass a local --train_file, or download the dataset once with HF_DATASETS_OFFLINE unset",
            ) from err
    else:
        path = train_file or default_train_file()
        source = path
        require_path(path, "training corpus")
        require_regular_file(path, "training corpus", hint=CORPUS_FILE_HINT)
        extension = os.path.splitext(path)[1].lower()
        if extension not in LOCAL_FORMATS:
            raise CSEUsageError(
                f"training corpus must be .txt or .csv, got {path}",
                hint="pass one sentence a line as .txt, or a .csv with a column of sentences (--text_column)",
            )
        empty = corpus_emptiness(path)  # before datasets reads the file
        if empty:
            raise EmptyCorpusError(empty, hint=EMPTY_CORPUS_HINT)
        evidence = None if allow_binary_corpus else binary_evidence(path)
        if evidence:
            raise CSEUsageError(
                f"training corpus {path} looks like binary data, not text: {evidence}",
                hint="pass a UTF-8 text corpus, or --allow_binary_corpus to train on it anyway",
            )
        bad = count_undecodable_lines(path)
        if bad:
            logger.warning("%s: %d line(s) are not valid UTF-8; bad bytes are replaced by U+FFFD", path, bad)
        # A sentence such as "NA" or "null" is text, not a missing value, when pandas reads a CSV.
        csv_options = {"keep_default_na": False, "na_filter": False} if extension == ".csv" else {}
        corpus = datasets.load_dataset(
            LOCAL_FORMATS[extension],
            data_files={"train": path},
            split="train",
            cache_dir=cache_dir,
            encoding_errors="replace",
            **csv_options,
        )
    column = _pick_text_column(corpus.column_names, text_column, source)
    feature = corpus.features[column]
    if getattr(feature, "dtype", None) not in ("string", "large_string"):
        raise CSEUsageError(
            f"{source}: column {column!r} holds {getattr(feature, 'dtype', type(feature).__name__)}, not text",
            hint="name the column of sentences with --text_column",
        )
    corpus = corpus.select_columns([column])
    if column != "text":
        corpus = corpus.rename_column(column, "text")
    total = len(corpus)
    nonblank = corpus.filter(
        lambda batch: [isinstance(t, str) and bool(t.strip()) for t in batch["text"]],
        batched=True,
        desc="Dropping blank lines",
    )
    dropped = total - len(nonblank)
    if dropped:
        logger.warning("%s: dropped %d empty or whitespace-only line(s) of %d", source, dropped, total)
        corpus = nonblank
    # Nothing dropped: the unfiltered table is kept, as reading through the filter's row mapping (even one of
    # every row) is about ten times slower for corpus_statistics' pass over every line.
    if len(corpus) == 0:
        raise EmptyCorpusError(f"training corpus has no non-blank line: {source}", hint=EMPTY_CORPUS_HINT)
    if max_train_samples is not None:
        corpus = corpus.select(range(min(max_train_samples, len(corpus))))
    logger.info("training corpus %s: %d sentences", source, len(corpus))
    return corpus


def _log_binomial(n, k):
    return gammaln(n + 1) - gammaln(k + 1) - gammaln(n - k + 1)


@dataclasses.dataclass(frozen=True)
class CorpusStatistics:
    """How many sentences a corpus holds and how often each occurs: ``multiplicities`` maps a count c
    to the number of distinct sentences that occur exactly c times (identical strings; sentences that
    differ only beyond ``--max_seq_length`` tokens or in case under an uncased tokenizer also become one)."""

    sentences: int
    multiplicities: dict[int, int]

    @property
    def distinct(self) -> int:
        return sum(self.multiplicities.values())

    @property
    def duplicate_share(self) -> float:
        """The share of lines that repeat a sentence met earlier in the corpus."""
        return 1 - self.distinct / self.sentences

    def repeat_probability(self, batch: int) -> float:
        """The probability that a batch of ``batch`` sentences (the whole corpus when it is smaller)
        drawn without replacement, as the Trainer's shuffled sampler draws an epoch, holds some sentence
        at least twice: a pair that the contrastive loss treats as a negative while it is the positive.

        An exact formula, not an approximation: a batch is a uniform ``batch``-subset of the N lines
        (so is the global batch of several processes, a contiguous block of one shuffled order; an
        epoch's short last batch is not modelled), and the subsets with no sentence twice pick
        ``batch`` distinct sentences and one of the c_i copies of each, so P(no repeat) =
        e_B(c_1, ..., c_D) / C(N, B), e_B the elementary symmetric polynomial of the multiplicities.
        e_B is the x^B coefficient of prod_c (1 + c x)^(m_c) (m_c sentences occur c times), expanded
        one multiplicity at a time in float64 log space, O(#multiplicities * B^2); the log-gamma terms
        leave a relative error of about 1e-9 for N near 10^4."""
        n = self.sentences
        b = min(batch, n)
        # log_e[k]: log of e_k over the multiplicities expanded so far (-inf: zero).
        log_e = np.full(b + 1, -np.inf)
        log_e[0] = 0.0
        k = np.arange(b + 1)
        for c, m in self.multiplicities.items():
            j = np.arange(min(m, b) + 1)
            factor = _log_binomial(m, j) + j * np.log(c)  # (1 + c x)^m's coefficients
            # new[k] = log sum_j exp(log_e[k - j] + factor[j])
            shifted = np.where(k[:, None] >= j, log_e[np.clip(k[:, None] - j, 0, None)], -np.inf)
            log_e = logsumexp(shifted + factor, axis=1)
        log_no_repeat = log_e[b] - _log_binomial(n, b)
        return float(-np.expm1(log_no_repeat)) if log_no_repeat < 0 else 0.0

    def expected_distinct(self, batch: int) -> float:
        """The expected number of distinct sentences in a batch of ``batch`` lines (the whole corpus
        when it is smaller) drawn without replacement: a sentence with c copies is in the batch unless
        all ``batch`` lines come from the other N - c, so E = sum_c m_c (1 - C(N - c, B) / C(N, B)),
        in float64 log space."""
        n = self.sentences
        b = min(batch, n)
        counts = np.array(list(self.multiplicities), dtype=np.float64)
        sentences = np.array(list(self.multiplicities.values()), dtype=np.float64)
        rest = n - counts
        log_miss = np.where(rest >= b, _log_binomial(np.maximum(rest, b), b) - _log_binomial(n, b), -np.inf)
        return float((sentences * -np.expm1(log_miss)).sum())

    def largest_batch(self) -> int:
        """The largest batch whose expected distinct sentences reach :data:`MIN_DISTINCT_SHARE` of its rows
        (the share falls as the batch grows: bisection)."""
        low, high = 1, self.sentences
        while low < high:
            middle = (low + high + 1) // 2
            if self.expected_distinct(middle) >= MIN_DISTINCT_SHARE * middle:
                low = middle
            else:
                high = middle - 1
        return low

    def settings(self) -> dict[str, int]:
        """What ``run_args.json`` and the model card record (a changed corpus under the same path changes them)."""
        return {"sentences": self.sentences, "distinct": self.distinct}


def corpus_statistics(corpus: datasets.Dataset, batch_size: int = 1 << 16) -> CorpusStatistics:
    """Count the sentences of ``corpus``'s ``text`` column in one pass, by their 64-bit Python hash
    (a collision among wiki1m's million sentences has probability about 3e-8)."""
    counts = collections.Counter()
    for batch in corpus.with_format("arrow").iter(batch_size=batch_size):
        counts.update(map(hash, batch.column("text").to_pylist()))
    return CorpusStatistics(len(corpus), dict(sorted(collections.Counter(counts.values()).items())))


def check_corpus(
    statistics: CorpusStatistics, global_batch: int, source: str, max_train_samples: int | None = None
) -> None:
    """Log the distinct sentences and the duplicate share of a training corpus; refuse one smaller than
    a global batch (the batches would be smaller than the size asked for and recorded), one with fewer
    than 2 distinct sentences (every batch would hold only positives: a constant loss, ln B) or whose
    batches cannot hold distinct sentences for most of their rows (:data:`MIN_DISTINCT_SHARE`,
    :meth:`CorpusStatistics.expected_distinct`); warn when more than ``MAX_REPEAT_BATCH_SHARE`` of the
    batches would hold a sentence twice (:meth:`CorpusStatistics.repeat_probability`)."""
    dedup = f"deduplicate it (awk '!seen[$0]++' {source} > deduplicated.txt keeps the first of each)"
    if statistics.distinct < 2:
        raise CSEUsageError(
            f"training corpus {source} holds {statistics.distinct} distinct sentence(s) in "
            f"{statistics.sentences:,} lines: contrastive learning needs at least 2 different sentences (the others "
            "in a batch are the negatives)",
            hint="pass a corpus of different sentences (one a line)",
        )
    if global_batch > statistics.sentences:
        # ``--max_train_samples`` cut the corpus only where the corpus holds more lines than it keeps
        cut = max_train_samples is not None and max_train_samples <= statistics.sentences
        more = (
            f"more of the corpus (--max_train_samples {global_batch:,} or more, or none)"
            if cut
            else "a larger corpus"
            + (
                f" (--max_train_samples {max_train_samples:,} already exceeds its {statistics.sentences:,} sentences)"
                if max_train_samples is not None
                else ""
            )
        )
        raise CSEUsageError(
            f"the global batch of {global_batch:,} sentences exceeds the {statistics.sentences:,} of training corpus "
            f"{source}: every step would train a batch of {statistics.sentences:,}, not the size asked for",
            hint="pass a global batch (--per_device_train_batch_size x processes) of at most "
            f"{statistics.sentences:,}, or {more}",
        )
    batch = global_batch
    distinct = statistics.expected_distinct(batch)
    if distinct < MIN_DISTINCT_SHARE * batch:
        largest = statistics.largest_batch()
        raise CSEUsageError(
            f"training corpus {source} repeats its {statistics.distinct:,} distinct sentences over "
            f"{statistics.sentences:,} lines: a batch of {batch} holds {distinct:.1f} distinct sentences on average, "
            f"so most of its rows repeat a sentence of the batch (a false negative: the loss pushes a sentence away "
            f"from itself); a batch must hold distinct sentences for at least half of its rows",
            hint=dedup + (f", or train with a global batch of at most {largest}" if largest >= 2 else ""),
        )
    repeat = statistics.repeat_probability(batch)
    logger.info(
        "training corpus %s: %s distinct sentences of %s (%.2f%% of the lines repeat another); "
        "%.2f%% of batches of %d hold some sentence twice",
        source,
        f"{statistics.distinct:,}",
        f"{statistics.sentences:,}",
        100 * statistics.duplicate_share,
        100 * repeat,
        batch,
    )
    if repeat > MAX_REPEAT_BATCH_SHARE:
        logger.warning(
            "training corpus %s: duplicated sentences put the same sentence twice into %.1f%% of batches of %d; "
            "each such pair is a false negative (the loss pushes a sentence away from itself). Deduplicate the "
            "corpus (awk '!seen[$0]++' keeps the first of each) unless the repetition is intended",
            source,
            100 * repeat,
            batch,
        )


def check_sequence_length(max_seq_length: int, model) -> None:
    """Refuse a ``--max_seq_length`` beyond the positions of ``model``'s backbone, the tokens a model
    puts around the sentence counted (PromptBERT's template: :meth:`~cse.modeling.CSEModel.input_length`):
    a longer input would reach the position embeddings' end in the first batch that holds one."""
    limit = position_limit(model.config, model.tokenizer)
    length = model.input_length(max_seq_length)
    where = f"this model ({model.config.model_type}, {model.config.max_position_embeddings} positions) can hold"
    if length > limit and length == max_seq_length:
        raise CSEUsageError(
            f"--max_seq_length {max_seq_length} exceeds the {limit} tokens a sentence of {where}",
            hint=f"pass --max_seq_length {limit} or less (SimCSE: 32)",
        )
    if length > limit:
        raise CSEUsageError(
            f"--max_seq_length {max_seq_length} makes inputs of up to {length} tokens with the template around the "
            f"sentence, beyond the {limit} tokens an input of {where}",
            hint=f"pass --max_seq_length {max_seq_length - (length - limit)} or less",
        )


# A line longer than this many characters per token of --max_seq_length is cut before it is tokenised
# (clip_line): a token of English text spans about 4 characters, so the cut keeps 16 times what the
# tokens kept take, and a line of a MiB is no longer tokenised whole (3 s) to keep its first 32 tokens.
CLIP_CHARS_PER_TOKEN = 64


def splits_at_spaces(tokenizer) -> bool:
    """Whether ``tokenizer`` is a fast tokenizer whose pre-tokenizer ends a piece at a space (BERT's
    WordPiece, byte-level BPE, SentencePiece's Metaspace): then the text before a space is tokenised
    alike whatever follows the space."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    pre_tokenizer = None if backend is None else backend.pre_tokenizer
    return pre_tokenizer is not None and pre_tokenizer.pre_tokenize_str("x y")[0][1] == (0, 1)


def clip_line(line: str, limit: int) -> str:
    """``line`` cut before its last space within its first ``limit`` characters (whole words only);
    a line no longer than ``limit``, or with no space there, whole."""
    if len(line) <= limit:
        return line
    cut = line.rfind(" ", 0, limit + 1)
    return line[:cut] if cut > 0 else line


def tokenize_lines(tokenizer, lines: list[str], max_seq_length: int) -> dict:
    """The tokens of ``lines``, each truncated to ``max_seq_length``, the same as tokenising each line
    whole: under a tokenizer that splits at spaces (:func:`splits_at_spaces`) and truncates a line's
    end, a line is cut first at a space (:func:`clip_line`, :data:`CLIP_CHARS_PER_TOKEN` characters per
    token); the words before the cut are tokenised as in the whole line, so a cut line that still fills
    ``max_seq_length`` tokens has the whole line's first tokens. One that does not (long words, few
    spaces) is tokenised whole."""
    if not splits_at_spaces(tokenizer) or getattr(tokenizer, "truncation_side", "right") != "right":
        # (a tokenizer that truncates on the left keeps a line's end: no cut at its start keeps that)
        return dict(tokenizer(lines, truncation=True, max_length=max_seq_length))
    clipped = [clip_line(line, CLIP_CHARS_PER_TOKEN * max_seq_length) for line in lines]
    encoded = dict(tokenizer(clipped, truncation=True, max_length=max_seq_length))
    for i, (line, clip) in enumerate(zip(lines, clipped)):
        if clip is not line and len(encoded["input_ids"][i]) < max_seq_length:
            whole = tokenizer(line, truncation=True, max_length=max_seq_length)
            for key, values in encoded.items():
                values[i] = whole[key]
    return encoded


def tokenize_corpus(
    corpus: datasets.Dataset,
    tokenizer,
    max_seq_length: int,
    num_proc: int | None = None,
    overwrite_cache: bool = False,
) -> datasets.Dataset:
    """Tokenise once (:func:`tokenize_lines`); ``datasets`` caches the result beside the corpus' Arrow
    cache."""
    if max_seq_length < 2:
        raise CSEUsageError(f"max_seq_length must leave room for the special tokens, got {max_seq_length}")
    return corpus.map(
        lambda batch: tokenize_lines(tokenizer, batch["text"], max_seq_length),
        batched=True,
        num_proc=num_proc,
        remove_columns=["text"],
        load_from_cache_file=not overwrite_cache,
        desc="Tokenising",
    )


class TwoViewCollator:
    """Pad a batch of tokenised sentences (or take one padded already, as :class:`cse.batches.TokenRows`
    slices it) and repeat each one: tensors of shape ``(batch, 2, length)``; the columns a part adds to
    the corpus (:meth:`~cse.parts.Part.corpus`) stay ``(batch, length)``, for its views to read.
    ``length`` is the batch's longest sentence, or ``max_length`` when given (static shapes). Then
    each of ``views`` (the parts' :meth:`~cse.parts.Part.views`) remakes the batch in turn, and the
    batch is padded on to the shortest of ``lengths`` that holds it, if any (a few shapes, one CUDA
    graph each: ``--cuda_graphs``). Padding is masked: it changes no sentence's embedding."""

    def __init__(self, tokenizer, num_views: int = 2, max_length: int | None = None, views=(), lengths=()):
        self.tokenizer = tokenizer
        self.num_views = num_views
        self.max_length = max_length
        self.views = list(views)
        self.lengths = sorted(lengths)

    def __call__(self, features: list[dict] | dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        if isinstance(features, dict):  # already padded: a batch of cse.batches.TokenRows
            batch = features
        else:
            padding = "max_length" if self.max_length else True
            batch = self.tokenizer.pad(features, padding=padding, max_length=self.max_length, return_tensors="pt")
        # the sentence's own columns repeated; a part's columns of the corpus (its views) go as they are
        batch = {
            k: v.unsqueeze(1).expand(-1, self.num_views, -1).contiguous() if k in SENTENCE_COLUMNS else v
            for k, v in batch.items()
        }
        for remake in self.views:
            batch = remake(batch)
        length = batch["input_ids"].shape[-1]
        target = next((bucket for bucket in self.lengths if bucket >= length), length)
        if target > length:
            pad = {"input_ids": self.tokenizer.pad_token_id}
            batch = {k: F.pad(v, (0, target - length), value=pad.get(k, 0)) for k, v in batch.items()}
        return batch


def graph_lengths(max_seq_length: int, lengths: list[int] | None = None) -> list[int]:
    """The lengths batches are padded to under ``--cuda_graphs``: ``lengths``, or half, three quarters
    and all of ``max_seq_length`` rounded up to multiples of 8 (16, 24 and 32 for SimCSE's 32).
    Refused: lengths that leave no room for a batch of the longest sentences, or that pad beyond them
    (no sentence is longer than ``max_seq_length``: a longer graph would compute on padding alone)."""
    if not lengths:
        return sorted({min(max_seq_length, -(-max_seq_length * k // 4 // 8) * 8) for k in (2, 3, 4)})
    if max(lengths) > max_seq_length:
        raise CSEUsageError(
            f"--cuda_graph_lengths {' '.join(map(str, lengths))} pad batches beyond --max_seq_length "
            f"{max_seq_length}, which no sentence exceeds",
            hint=f"keep the lengths at most {max_seq_length}, the largest {max_seq_length}",
        )
    if max(lengths) < max_seq_length:
        raise CSEUsageError(
            f"--cuda_graph_lengths {' '.join(map(str, lengths))} leave no length for sentences of up to "
            f"--max_seq_length {max_seq_length} tokens",
            hint=f"end the lengths with {max_seq_length}",
        )
    return sorted(lengths)


def load_train_corpus(data_args, cache_dir: str | None = None) -> datasets.Dataset:
    """The training sentences ``data_args`` name (a ``text`` column), before tokenisation."""
    return load_corpus(
        train_file=data_args.train_file,
        dataset_name=data_args.dataset_name,
        dataset_config_name=data_args.dataset_config_name,
        text_column=data_args.text_column,
        max_train_samples=data_args.max_train_samples,
        cache_dir=cache_dir,
        allow_binary_corpus=data_args.allow_binary_corpus,
    )


def build_train_dataset(
    data_args, tokenizer, global_batch: int, cache_dir: str | None = None
) -> tuple[datasets.Dataset, CorpusStatistics]:
    """The tokenised corpus ``data_args`` name and its statistics, checked for batches of
    ``global_batch`` sentences before tokenisation (:func:`check_corpus`: a refused corpus is not
    tokenised). Each process counts for itself, so that each refuses on its own."""
    corpus = load_train_corpus(data_args, cache_dir)
    statistics = corpus_statistics(corpus)
    source = data_args.dataset_name or data_args.train_file or default_train_file()
    check_corpus(statistics, global_batch, source, data_args.max_train_samples)
    tokenized = tokenize_corpus(
        corpus,
        tokenizer,
        data_args.max_seq_length,
        data_args.preprocessing_num_workers,
        data_args.overwrite_cache,
    )
    return tokenized, statistics


__all__ = [
    "CorpusStatistics",
    "EmptyCorpusError",
    "MissingDataError",
    "TwoViewCollator",
    "binary_evidence",
    "build_train_dataset",
    "check_corpus",
    "corpus_statistics",
    "count_undecodable_lines",
    "load_corpus",
    "tokenize_corpus",
]
