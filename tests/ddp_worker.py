"""Run by test_distributed.py under ``torchrun --nproc_per_node 2`` (gloo): each rank encodes its
half of a fixed batch through DDP, the InfoNCE loss uses the global batch, and the loss and the
synchronised gradients are saved for comparison with one process on the whole batch."""

import os
import sys

import torch.distributed as dist
from safetensors.torch import load_file, save_file
from torch.nn.parallel import DistributedDataParallel

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from cse.losses import InfoNCELoss  # noqa: E402
from cse.modeling import CSEModel  # noqa: E402


def main(model_dir, batch_file, out_dir):
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    batch = load_file(batch_file)
    n = batch["input_ids"].shape[0] // world
    local = {k: v[rank * n : (rank + 1) * n] for k, v in batch.items()}
    model = CSEModel.from_pretrained(model_dir, pooler_type="cls", mlp_only_train=True)
    ddp = DistributedDataParallel(model, find_unused_parameters=False)
    views = ddp(**local)["embeddings"]
    loss = InfoNCELoss(0.05)(views[:, 0], views[:, 1])
    loss.backward()
    grads = {name: p.grad for name, p in model.named_parameters() if p.grad is not None}
    save_file({"loss": loss.detach().reshape(1), **grads}, os.path.join(out_dir, f"rank{rank}.safetensors"))
    dist.destroy_process_group()


if __name__ == "__main__":
    main(*sys.argv[1:4])
