"""Run by test_deepspeed.py under ``torchrun --nproc_per_node 2`` with ``--deepspeed``: each method
named (comma-separated) trains small (tiny_run's flags, on the backbone the command line names) into
``OUT_DIR/<method>``, one after another in the same processes, and reports what ran and the state
files its parts add to every checkpoint."""

import importlib
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.conftest import tiny_run  # noqa: E402


def main(out_dir, methods, argv):
    for method in methods:
        script, _, flags = tiny_run(method)
        trainer = importlib.import_module(script).main([*argv, *flags, "--output_dir", os.path.join(out_dir, method)])
        if trainer.is_world_process_zero():
            print(
                f"{method}: trained {trainer.state.global_step} steps across {trainer.args.world_size} process(es) "
                f"under ZeRO-{trainer.zero_stage}",
                flush=True,
            )
            print(f"{method}: state files [{', '.join(trainer.checkpoint_files())}]", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2].split(","), sys.argv[3:])
