#!/usr/bin/env python
"""Alignment and uniformity (Wang and Isola, ICML 2020) as a part of ``run_cse.py``'s compositions,
defined outside the ``cse`` package in this one file (docs/extending.md walks through it).

On the two views' L2-normalised embeddings h_i, h_i+ of the global batch, the part adds

    align_weight * L_align + uniform_weight * L_uniform
    L_align = (1/N) sum_i ||h_i - h_i+||^alpha                                     (Eq. 4, alpha = 2)
    L_uniform = (u(h) + u(h+)) / 2,  u(z) = log( (2 / (N (N - 1))) sum_{i<j} e^{-t ||z_i - z_j||^2} )   (Eq. 5, t = 2)

to the loss of SimCSE's InfoNCE, or of whatever the other parts of the run make of it (uniformity of
each view over its pairs i < j, averaged over the two views, as in Wang and Isola's released code).

    python align_uniform.py --parts mixcse,align_uniform --model_name_or_path bert-base-uncased --output_dir result/au
    python align_uniform.py --parts align_uniform ...    # SimCSE + the two terms
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from cse import composition
from cse.distributed import all_gather_with_grad
from cse.errors import run_cli
from cse.parts import Part
from cse.registry import MethodRecord, register

CITATION = """@inproceedings{wang2020alignment,
  title = {Understanding Contrastive Representation Learning through Alignment and Uniformity on the Hypersphere},
  author = {Wang, Tongzhou and Isola, Phillip},
  booktitle = {Proceedings of the 37th International Conference on Machine Learning (ICML 2020)},
  series = {Proceedings of Machine Learning Research},
  volume = {119},
  pages = {9929--9939},
  year = {2020},
}"""

# The exponent of L_align and the temperature of L_uniform: the paper's (and its released code's) values.
ALPHA = 2.0
T = 2.0


@dataclass
class AlignUniformArguments:
    """The part's own flags (docs/extending.md measures the defaults). ``align_weight`` 1 is Wang and
    Isola's: as the batch grows InfoNCE at temperature tau holds L_align with weight 1/(2 tau) (their
    Theorem 1), so 1 adds a tenth to its alignment at SimCSE's tau = 0.05. ``uniform_weight`` 0.1, not
    their 1: L_uniform's push does not fade once the positives win their softmax, as InfoNCE's does, and
    at 1 it took most of the encoder's gradient from InfoNCE and loosened the positive pairs."""

    align_weight: float = field(default=1.0, metadata={"help": "Weight of L_align (Wang and Isola's 1)."})
    uniform_weight: float = field(
        default=0.1, metadata={"help": "Weight of L_uniform (0.1: at Wang and Isola's 1 it outweighs InfoNCE)."}
    )

    def __post_init__(self):
        if self.align_weight < 0 or self.uniform_weight < 0:
            raise ValueError(f"the weights must not be negative, got {self.align_weight} and {self.uniform_weight}")


def uniformity(z: torch.Tensor) -> torch.Tensor:
    """u(z) over the pairs i < j of the unit rows of ``z``, from the Gram matrix (||a - b||^2 =
    2 - 2 a.b: no N^2 x d differences, and no square root whose gradient is infinite at a repeated
    sentence) and a log-sum-exp; 0 for a single row, which has no pair."""
    n = z.shape[0]
    if n < 2:
        return z.sum() * 0
    i, j = torch.triu_indices(n, n, offset=1, device=z.device)
    squared = (2 - 2 * (z @ z.T)[i, j]).clamp_min(0)
    return torch.logsumexp(-T * squared, dim=0) - math.log(i.shape[0])


def align_uniform(anchors: torch.Tensor, positives: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(L_align, L_uniform)`` of the two views' embeddings, over the global batch (every process
    computes the same values, as the repository's losses do), in float32 at least."""
    dtype = torch.promote_types(anchors.dtype, torch.float32)
    with torch.autocast(anchors.device.type, enabled=False):
        h = F.normalize(all_gather_with_grad(anchors).to(dtype), dim=-1)
        h_pos = F.normalize(all_gather_with_grad(positives).to(dtype), dim=-1)
        align = (h - h_pos).pow(2).sum(-1).pow(ALPHA / 2).mean()
        return align, (uniformity(h) + uniformity(h_pos)) / 2


class AlignUniform(Part):
    """The part: two weighted terms, ``align`` and ``uniform``, added to whatever loss the run's other
    parts compute (its :meth:`terms`), and their unweighted values in the training log
    (``loss_align``, ``loss_uniform``)."""

    name = "align_uniform"  # --parts align_uniform
    display_name = "Align-Uniform"  # the model card's name for it
    citation = CITATION  # the model card cites it; its title line is required
    docs = "docs/extending.md"  # its documentation page: a path in your repository or an address
    equation = (
        "+ w_a L_align + w_u L_uniform on the two views' normalised embeddings: L_align the mean ||h_i - h_i+||^2, "
        "L_uniform the two views' mean of log E_{i<j} e^{-2 ||h_i - h_j||^2} (Wang and Isola 2020)"
    )
    Flags = AlignUniformArguments

    def terms(self, step):
        views = step.outputs["embeddings"]
        align, uniform = align_uniform(views[:, 0], views[:, 1])
        terms = {"align": self.args.align_weight * align, "uniform": self.args.uniform_weight * uniform}
        return terms, {"loss_align": align.detach(), "loss_uniform": uniform.detach()}

    def term_weights(self):
        return {"align": self.args.align_weight, "uniform": self.args.uniform_weight}


RECORD = register(MethodRecord(part=AlignUniform))

if __name__ == "__main__":
    run_cli(composition.main)
