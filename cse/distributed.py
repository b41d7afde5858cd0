"""Cross-device negatives: gather every rank's embeddings so that each anchor sees the whole global
batch, keeping the gradient path to the local shard.

Every rank computes the *same* loss over the gathered global batch. In backward, the gradient with
respect to the gathered tensor is summed over ranks (all-reduce) and each rank keeps its own shard's
slice; DDP then averages parameter gradients over ranks. The two factors cancel, so the parameter
gradient equals that of one process on the concatenated batch. (SimCSE's own gather keeps only the
local rank's gradient, which leaves the gradient divided by the world size.)
"""

from __future__ import annotations

import contextlib

import torch
import torch.distributed as dist


def world_size() -> int:
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


class _AllGatherWithGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor):
        ctx.rank, ctx.size = dist.get_rank(), tensor.shape[0]
        gathered = [torch.empty_like(tensor) for _ in range(dist.get_world_size())]
        dist.all_gather(gathered, tensor.contiguous())
        return torch.cat(gathered)

    @staticmethod
    def backward(ctx, grad):
        grad = grad.contiguous()
        dist.all_reduce(grad)
        return grad[ctx.rank * ctx.size : (ctx.rank + 1) * ctx.size]


def all_gather_with_grad(tensor: torch.Tensor) -> torch.Tensor:
    """Concatenate ``tensor`` (same shape on every rank) over ranks, in rank order."""
    if world_size() == 1:
        return tensor
    return _AllGatherWithGrad.apply(tensor)


@contextlib.contextmanager
def whole_weights_loading():
    """Within the block, ``from_pretrained`` loads whole weights even under DeepSpeed ZeRO-3, where
    transformers would partition them as they load (``zero.Init``): the methods build on whole
    weights (heads re-initialised, frozen or momentum copies taken) before the Trainer's DeepSpeed
    engine partitions the finished model."""
    from transformers.integrations import deepspeed as hf_deepspeed

    # The Trainer's DeepSpeed configuration, which transformers consults through this weak reference.
    ref = hf_deepspeed._hf_deepspeed_config_weak_ref
    hf_deepspeed.unset_hf_deepspeed_config()
    try:
        yield
    finally:
        if ref is not None and ref() is not None:
            hf_deepspeed.set_hf_deepspeed_config(ref())
