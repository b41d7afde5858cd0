"""Run by test_vadvcse.py under ``torchrun --nproc_per_node 2`` (gloo): each rank takes its half of a
fixed batch and of a fixed draw of r's random start, computes V-advCSE's objective through DDP (the ascent
along the ``normalized`` or the ``raw`` gradient), and
saves the loss, its perturbation and the synchronised gradients, for comparison with one process
on the whole batch."""

import os
import sys

import torch.distributed as dist
from safetensors.torch import load_file, save_file
from torch.nn.parallel import DistributedDataParallel

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.vadvcse_reference import objective_and_gradients  # noqa: E402


def main(model_dir, batch_file, out_dir, ascent):
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    batch = load_file(batch_file)
    n = batch["input_ids"].shape[0] // world
    local = {k: v[rank * n : (rank + 1) * n] for k, v in batch.items()}
    result = objective_and_gradients(
        model_dir, local, lambda m: DistributedDataParallel(m, find_unused_parameters=False), ascent
    )
    save_file(result, os.path.join(out_dir, f"rank{rank}.safetensors"))
    dist.destroy_process_group()


if __name__ == "__main__":
    main(*sys.argv[1:5])
