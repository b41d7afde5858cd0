"""The parts' state in a checkpoint: one safetensors file, :data:`PARTS_STATE_NAME`, holding every
part's :meth:`~cse.parts.Part.state_dict` under the keys ``<part>.<key>`` (``adcse.adversaries``,
``sarcse.token_counts``), as PyTorch modules and Lightning callbacks keep theirs. The trainer writes
it into each checkpoint right after the model's weights (:meth:`cse.trainer.CSETrainer.save_model`)
and hands each part its own keys on resume (:meth:`~cse.parts.Part.load_state_dict`).

Checkpoints written before this file (up to revision 78ca14f) held each part's state in files of
its own, whose keys are those of the part's ``state_dict``: :data:`EARLIER_STATE_FILES` names them
and their part, and a checkpoint holding them resumes as one holding :data:`PARTS_STATE_NAME`.
"""

from __future__ import annotations

import logging
import os

import torch
from safetensors.torch import load_file, save_file

from .run_names import PARTS_STATE_NAME

logger = logging.getLogger(__name__)

# The files in which checkpoints of the versions before PARTS_STATE_NAME kept the state of a part, by
# the name of the part (a closed list: parts added since keep theirs in PARTS_STATE_NAME only).
EARLIER_STATE_FILES = {
    "adcse_adversaries.safetensors": "adcse",  # keys adversaries, momentum_buffer
    "adcse_momentum_master.safetensors": "adcse",  # keys momentum_backbone.<p's parameter>
    "sarcse_token_counts.safetensors": "sarcse",  # key token_counts
}


def parts_state(parts) -> dict[str, torch.Tensor]:
    """Every part's state, flat: ``<part>.<key>`` -> tensor (the tensors themselves, not copies)."""
    return {f"{part.name}.{key}": tensor for part in parts for key, tensor in part.state_dict().items()}


def save_parts_state(parts, directory: str) -> None:
    """Write the state of ``parts`` into ``directory``'s :data:`PARTS_STATE_NAME`, on the CPU; no file
    when no part keeps any."""
    state = {key: tensor.detach().contiguous().cpu() for key, tensor in parts_state(parts).items()}
    if state:
        save_file(state, os.path.join(directory, PARTS_STATE_NAME))


def state_files(checkpoint: str) -> list[str]:
    """The files of ``checkpoint`` that hold its parts' state: :data:`PARTS_STATE_NAME`, or in a
    checkpoint written before it, those of :data:`EARLIER_STATE_FILES` it holds; [] for none."""
    if os.path.isfile(os.path.join(checkpoint, PARTS_STATE_NAME)):
        return [PARTS_STATE_NAME]
    return [name for name in EARLIER_STATE_FILES if os.path.isfile(os.path.join(checkpoint, name))]


def read_parts_state(checkpoint: str) -> dict[str, dict[str, torch.Tensor]]:
    """The parts' state ``checkpoint`` holds, on the CPU: part name -> its ``state_dict``."""
    by_part: dict[str, dict[str, torch.Tensor]] = {}
    for name in state_files(checkpoint):
        # read on the CPU: safetensors refuses device names such as DeepSpeed's "cpu:0"
        tensors = load_file(os.path.join(checkpoint, name))
        if name == PARTS_STATE_NAME:
            for key, tensor in tensors.items():
                part, _, own = key.partition(".")
                by_part.setdefault(part, {})[own] = tensor
        else:
            by_part.setdefault(EARLIER_STATE_FILES[name], {}).update(tensors)
    return by_part


def load_parts_state(parts, checkpoint: str, device) -> None:
    """Hand each of ``parts`` its state from ``checkpoint`` (an empty one where the checkpoint holds
    none for it: the part says whether it needs any), on ``device``; the state of a part the run does
    not have is refused."""
    by_part = read_parts_state(checkpoint)
    foreign = sorted(by_part.keys() - {part.name for part in parts})
    if foreign:
        raise ValueError(
            f"{checkpoint} holds the state of parts this run does not have ({', '.join(foreign)}): it is another "
            "run's checkpoint"
        )
    for part in parts:
        part.load_state_dict({key: tensor.to(device) for key, tensor in by_part.get(part.name, {}).items()})
    if by_part:
        logger.info("the state of %s restored from %s", ", ".join(sorted(by_part)), checkpoint)
