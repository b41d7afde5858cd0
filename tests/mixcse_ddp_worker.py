"""Run by test_mixcse.py under ``torchrun --nproc_per_node 2`` (gloo): each rank takes its half of a
fixed batch of embeddings and computes every MixCSE loss configuration on the gathered global batch;
the loss, the logged scores and the gradient of its half are saved for comparison with one process
on the whole batch."""

import os
import sys

import torch.distributed as dist
from safetensors.torch import load_file, save_file

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from cse.losses.mixcse import MixCSELoss  # noqa: E402

CONFIGS = {
    f"{form}_{name}": dict(form=form, **kwargs)
    for form in ("released", "paper")
    for name, kwargs in (("default", {}), ("single", {"single": True}), ("no_sg", {"stop_gradient": False}))
}


def main(batch_file, out_dir):
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    batch = load_file(batch_file)
    n = batch["anchors"].shape[0] // world
    results = {}
    for name, kwargs in CONFIGS.items():
        anchors, positives = (
            batch[k][rank * n : (rank + 1) * n].clone().requires_grad_(True) for k in ("anchors", "positives")
        )
        loss_fn = MixCSELoss(temperature=0.1, **kwargs)
        terms, statistics = loss_fn.terms(anchors, positives)
        loss = terms["contrastive"]
        loss.backward()
        results[f"{name}.loss"] = loss.detach().reshape(1)
        for stat, value in statistics.items():
            results[f"{name}.{stat}"] = value.reshape(1)
        # DDP averages parameter gradients over the processes: the same division, done here by hand
        results[f"{name}.anchors_grad"] = anchors.grad / world
        results[f"{name}.positives_grad"] = positives.grad / world
    save_file(results, os.path.join(out_dir, f"rank{rank}.safetensors"))
    dist.destroy_process_group()


if __name__ == "__main__":
    main(*sys.argv[1:3])
