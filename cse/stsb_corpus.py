"""The STS-B sentence corpus of BERT-flow (Li et al., 2020) and SG-BERT (Kim et al., 2021): every
sentence of the STS Benchmark train, dev and test pairs, without the gold scores.

    python -m cse.stsb_corpus OUTPUT.txt [--senteval_data_dir DIR]

Both sentences of each of the 8,628 pairs (5,749 + 1,500 + 1,379) are kept, in file order, repeats
included: 17,256 lines. That is what BERT-flow trains its flow on and what SG-BERT's released code
reads (each row's ``sentence1`` and ``sentence2``, no deduplication). The sentences are SentEval's
copies of the files (``STS/STSBenchmark/sts-*.csv``), as the evaluation reads them.
"""

from __future__ import annotations

import argparse
import logging
import os

from .errors import CSEUsageError
from .evaluation.sts import read_stsb
from .paths import senteval_dir

logger = logging.getLogger(__name__)

STSB_SPLITS = ("sts-train.csv", "sts-dev.csv", "sts-test.csv")


def stsb_sentences(senteval_data_dir: str | None = None) -> list[str]:
    """Sentence 1 and sentence 2 of every STS-B pair, train then dev then test."""
    base = os.path.join(senteval_dir(senteval_data_dir), "STS", "STSBenchmark")
    sentences = []
    for name in STSB_SPLITS:
        pairs = read_stsb(os.path.join(base, name))
        for first, second in zip(pairs.sentences1, pairs.sentences2):
            sentences += [first, second]
    return sentences


def write_stsb_corpus(path: str, senteval_data_dir: str | None = None, replace: bool = True) -> str:
    """Write the corpus, one sentence a line (atomically: other processes may be reading ``path``).
    Without ``replace`` (a run writing it into its output directory), a file already at ``path`` is
    left as it is when it holds this corpus (a run stopped after writing it), and refused otherwise:
    it is someone else's file of that name."""
    sentences = stsb_sentences(senteval_data_dir)
    text = "".join(sentence + "\n" for sentence in sentences)
    if not replace and os.path.lexists(path):
        if os.path.isfile(path) and not os.path.islink(path):
            with open(path, encoding="utf-8", errors="replace", newline="") as f:
                if f.read() == text:
                    return path
        raise CSEUsageError(
            f"{path} is not the STS-B sentence corpus a run writes there, and a run would replace it",
            hint=f"move it away, or pass --train_file {path} to train on it",
        )
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8", newline="") as f:
        f.write(text)
    os.replace(tmp, path)
    distinct = len(set(sentences))
    logger.info("STS-B sentence corpus: %d sentences (%d distinct) written to %s", len(sentences), distinct, path)
    return path


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description="Write the STS-B train+dev+test sentences, one a line.")
    parser.add_argument("output", help="the .txt file to write")
    parser.add_argument("--senteval_data_dir", default=None, help="default $CSE_DATA_DIR/senteval")
    return parser


def main(argv=None) -> None:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    write_stsb_corpus(args.output, args.senteval_data_dir)


if __name__ == "__main__":
    main()
