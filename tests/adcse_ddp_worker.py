"""Run by test_adcse.py under ``torchrun --nproc_per_node 2``: ``run_adcse.py``'s main with the
given flags (also under ``--deepspeed``), then each rank saves its adversaries, their SGD momentum,
encoder p and p's fp32 master (16-bit DeepSpeed runs), so that the test can check the ranks agree."""

import os
import sys

from safetensors.torch import save_file

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import run_adcse  # noqa: E402


def main(out_dir, argv):
    trainer = run_adcse.main(argv)
    model = trainer.accelerator.unwrap_model(trainer.model)
    state = {f"momentum_backbone.{k}": v.contiguous() for k, v in model.momentum_backbone.state_dict().items()}
    adcse = trainer.part("adcse")
    own = ("adversaries", "momentum_buffer")  # p's fp32 master apart, under momentum_master. below
    state.update({k: v.contiguous().cpu() for k, v in adcse.state_dict().items() if k in own})
    if adcse.momentum_master is not None:
        state.update({f"momentum_master.{k}": v.contiguous().cpu() for k, v in adcse.momentum_master.items()})
    save_file(state, os.path.join(out_dir, f"rank{trainer.args.process_index}.safetensors"))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
