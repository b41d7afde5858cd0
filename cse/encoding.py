"""A fixed set of sentences encoded in a few shapes, and on a GPU as one CUDA graph per shape: the
dev suite that the trainer evaluates every ``eval_steps`` under ``--cuda_graphs``.

:class:`BucketedEncoder` tokenises the sentences once, sorts them by length, cuts them into batches
of ``batch_size`` and pads each batch to the next multiple of :data:`BUCKET` tokens (its rows to
``batch_size`` too, repeating its last sentence), so that the batches take a few shapes; the
batches stay on the model's device. Each call embeds every batch with the model's ``embed`` (the
evaluation pooler, under the training's autocast) into one embedding tensor on the device. Padding
is masked and the rows of a batch are independent in evaluation mode, so the embeddings are those of
:meth:`cse.modeling.CSEModel.encode`, within float rounding.

With ``capture`` (a CUDA device), the embedding of each shape is captured as a CUDA graph
(:class:`cse.step_graph.StepGraphs`: the first evaluation runs eagerly, the next captures, later
ones replay) and replayed: a graph reads the weights where they are, so each replay embeds with the
weights of that moment. Without it the same function runs eagerly, which is how the tests check it
on the CPU.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

import torch

from .step_graph import StepGraphs

# batches are padded to a multiple of this many tokens: a few shapes, little padding
BUCKET = 16


def bucket_length(length: int) -> int:
    return -(-length // BUCKET) * BUCKET


class Embedding:
    """The model's embedding of a batch as the step :class:`StepGraphs` runs or captures: evaluation
    pooler (or ``pooler_type``), ``autocast_dtype`` without autocast's weight cache (a cached cast is
    a tensor of the capture's that no replay recomputes), float32 out, no gradient."""

    def __init__(self, model, autocast_dtype: torch.dtype | None, pooler_type: str | None):
        self.model, self.autocast_dtype, self.pooler_type = model, autocast_dtype, pooler_type
        self.device = next(model.parameters()).device

    def attach(self) -> None:
        """No gradient to attach: :class:`StepGraphs` asks for it around every run."""

    detach = attach

    @torch.no_grad()
    def __call__(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        autocast = (
            torch.autocast(self.device.type, dtype=self.autocast_dtype, cache_enabled=False)
            if self.autocast_dtype is not None
            else contextlib.nullcontext()
        )
        with autocast:
            return self.model.embed(**inputs, pooler_type=self.pooler_type).float()


class BucketedEncoder:
    """``sentences`` tokenised once into bucketed batches on ``model``'s device (the module docstring);
    calling it embeds them all, in input order: a float32 ``(len(sentences), hidden)`` tensor on the
    device. ``capture``: one CUDA graph per batch shape."""

    def __init__(
        self,
        model,
        sentences: Sequence[str],
        batch_size: int,
        autocast_dtype: torch.dtype | None = None,
        pooler_type: str | None = None,
        capture: bool = False,
    ):
        if batch_size < 1:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        self.model = model
        self.embedding = Embedding(model, autocast_dtype, pooler_type)
        device = self.embedding.device
        tokenizer = model.tokenizer
        encoded = model.tokenize_sentences(sentences)
        lengths = [len(ids) for ids in encoded["input_ids"]]
        order = sorted(range(len(lengths)), key=lengths.__getitem__)
        self.batches = []  # (the batch's sentences' positions in the input, its padded inputs on the device)
        for start in range(0, len(order), batch_size):
            rows = order[start : start + batch_size]
            features = [{key: encoded[key][i] for key in encoded} for i in rows]
            features += features[-1:] * (batch_size - len(rows))
            padded = tokenizer.pad(
                features, padding="max_length", max_length=bucket_length(lengths[rows[-1]]), return_tensors="pt"
            )
            positions = torch.tensor(rows, dtype=torch.long, device=device)
            self.batches.append((positions, {key: value.to(device) for key, value in padded.items()}))
        self.out = torch.empty(len(lengths), model.embedding_size, dtype=torch.float32, device=device)
        self.graphs = StepGraphs(self.embedding, capture=capture, warmup=1, what="evaluation batch")

    @property
    def shapes(self) -> set[tuple]:
        """The batch shapes: one graph each under capture."""
        return {StepGraphs.shape(inputs) for _, inputs in self.batches}

    def __call__(self) -> torch.Tensor:
        was_training = self.model.training
        self.model.eval()
        try:
            for positions, inputs in self.batches:
                # a graph's output is overwritten by its next replay: read before the next batch
                self.out[positions] = self.graphs.step(inputs)[: len(positions)]
        finally:
            self.model.train(was_training)
        return self.out
