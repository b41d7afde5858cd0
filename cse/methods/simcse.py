"""Unsupervised SimCSE (Gao, Yao and Chen, EMNLP 2021), the baseline every other method extends:
dropout positives, in-batch negatives, InfoNCE, and the plain ``CSETrainer``. Its record's preset
is the base with no part (:func:`cse.build.build` of ``[]``)."""

from .. import citations
from ..parts import BASE_EQUATION, Part
from ..registry import BenchShape, MethodRecord, register


class SimCSE(Part):
    """The base itself: two dropout views, one encoder, InfoNCE. It adds nothing to itself, and is no
    part of a composition (every composition extends it)."""

    name = "simcse"
    display_name = "SimCSE"
    citation = citations.SIMCSE
    docs = "docs/methods/simcse.md"
    equation = BASE_EQUATION


RECORD = register(
    MethodRecord(
        part=SimCSE,
        bench={
            "simcse": BenchShape("run_simcse", "configs/simcse_bert_base.yaml", "bert"),
            # The baseline at SG-BERT's shapes: overheads are measured against SimCSE on the same shapes.
            "simcse-16x128": BenchShape(
                "run_simcse",
                "configs/simcse_bert_base.yaml",
                "bert",
                ("--per_device_train_batch_size", "16", "--max_seq_length", "128"),
            ),
        },
        base=True,
    )
)
