"""Run by test_esimcse.py under ``torchrun --nproc_per_node 2`` (gloo): each rank enqueues its half of
two batches' momentum embeddings into the global queue, then computes the loss
of its half of a third batch's two views against the queue; the queue, the loss and the gradient of
its half are saved for comparison with one process on the whole batches."""

import os
import sys
from types import SimpleNamespace

import torch
import torch.distributed as dist
from safetensors.torch import load_file, save_file

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from cse.methods.esimcse import ESimCSE, ESimCSEArguments  # noqa: E402
from cse.parts import Step  # noqa: E402


def main(batch_file, out_dir):
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    batch = load_file(batch_file)
    n = batch["anchors"].shape[0] // world
    half = slice(rank * n, (rank + 1) * n)
    results = {}
    part = ESimCSE(ESimCSEArguments(queue_size=6), SimpleNamespace(temp=0.1))
    part.loss(None, None, frozenset())
    encoder = SimpleNamespace(training=True, backbone=torch.nn.Linear(2, 1, bias=False))
    part.momentum = {"weight": torch.zeros(1, 2)}
    for key in ("momentum1", "momentum2"):  # the momentum encoder's view-0 embeddings of two batches
        part.momentum_embeddings = lambda encoder, inputs, rows=batch[key][half]: rows
        part.terms(Step(None, encoder, {}, {}, {}, {}))
    anchors, positives = (batch[k][half].clone().requires_grad_(True) for k in ("anchors", "positives"))
    loss = part.queue_loss(anchors, positives)
    loss.backward()
    results["global.queue"] = part.queue_loss.queue
    results["global.loss"] = loss.detach().reshape(1)
    # DDP averages parameter gradients over the processes: the same division, done here by hand
    results["global.anchors_grad"] = anchors.grad / world
    save_file(results, os.path.join(out_dir, f"rank{rank}.safetensors"))
    dist.destroy_process_group()


if __name__ == "__main__":
    main(*sys.argv[1:3])
