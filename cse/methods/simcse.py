"""Unsupervised SimCSE (Gao, Yao and Chen, EMNLP 2021), the baseline every other method extends:
dropout positives, in-batch negatives, InfoNCE, and the plain ``CSETrainer``."""

from .. import citations
from ..losses import InfoNCELoss
from ..pipeline import load_encoder
from ..registry import BenchShape, MethodRecord, register
from ..trainer import CSETrainer


def build(model_args, method_args=None):
    """SimCSE's encoder (a fresh head on [CLS]) and InfoNCE loss as ``run_simcse.py`` trains them:
    ``(model, loss, trainer_class, trainer_kwargs)``."""
    model = load_encoder(model_args)
    if model.pooler_type == "cls":
        model.reset_head()
    return model, InfoNCELoss(temperature=model_args.temp), CSETrainer, {}


RECORD = register(
    MethodRecord(
        name="simcse",
        display_name="SimCSE",
        citation=citations.SIMCSE,
        build=build,
        docs="docs/methods/simcse.md",
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
        tiny_args=(),
        base=True,
    )
)
