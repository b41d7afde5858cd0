"""Run by test_diffcse.py under ``torchrun --nproc_per_node 2`` (gloo): ``run_diffcse.py`` with the
command line after the output file's prefix; at the end of training each rank saves its model's
weights (the discriminator, its head and the projector included) to ``<prefix><rank>.safetensors``."""

import os
import sys

from safetensors.torch import save_file
from transformers import TrainerCallback

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import run_diffcse  # noqa: E402


class SaveEachRank(TrainerCallback):
    def __init__(self, prefix):
        self.prefix = prefix

    def on_train_end(self, args, state, control, model=None, **kwargs):
        model = getattr(model, "module", model)
        weights = {name: t.detach().contiguous().clone() for name, t in model.state_dict().items()}
        save_file(weights, f"{self.prefix}{os.environ['RANK']}.safetensors")


if __name__ == "__main__":
    run_diffcse.main(sys.argv[2:], callbacks=[SaveEachRank(sys.argv[1])])
