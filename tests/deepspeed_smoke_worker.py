"""Run by test_deepspeed.py under ``torchrun --nproc_per_node 2`` with ``--deepspeed``: each method
other than SimCSE and AdCSE (tested against references elsewhere) trains with the given flags into
``OUT_DIR/<method>``, one after another in the same processes, and reports what ran."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import run_mixcse  # noqa: E402
import run_sarcse  # noqa: E402
import run_sgbert  # noqa: E402
import run_vadvcse  # noqa: E402

METHODS = {
    "mixcse": (run_mixcse.main, []),
    "sarcse": (run_sarcse.main, []),
    # the default SG-OPT, with a small head; no evaluations to stop early on
    "sgbert": (run_sgbert.main, ["--projection_size", "16", "--early_stopping_patience", "0"]),
    "vadvcse": (run_vadvcse.main, []),
}


def main(out_dir, argv):
    for method, (run, extra) in METHODS.items():
        trainer = run([*argv, *extra, "--output_dir", os.path.join(out_dir, method)])
        if trainer.is_world_process_zero():
            print(
                f"{method}: trained {trainer.state.global_step} steps across {trainer.args.world_size} process(es) "
                f"under ZeRO-{trainer.zero_stage}",
                flush=True,
            )


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
