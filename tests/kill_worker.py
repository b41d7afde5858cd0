"""``python tests/kill_worker.py run_simcse.py ARGS...``: the script's ``main(ARGS)``, which kills
itself with SIGKILL at the point ``CSE_TEST_KILL`` names (test-only):

* ``<step>:step``: at the end of optimizer step ``<step>``, outside any checkpoint write;
* ``<step>:before:<file>``, ``<step>:after:<file>``: just before or after ``checkpoint-<step>/<file>``
  is written (e.g. after ``model.safetensors``, before ``optimizer.pt``);
* ``<step>:during:<file>``: that file written and cut to half its bytes, as a writer killed
  halfway leaves it.

The files are caught at the three writers a checkpoint goes through: ``torch.save``, safetensors'
``save_file`` (the Trainer's and the methods') and ``TrainerState.save_to_json``. The same command
without ``CSE_TEST_KILL`` is an ordinary run.
"""

import functools
import importlib
import os
import signal
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def die():
    sys.stdout.flush()
    sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def install(spec: str):
    import safetensors.torch
    import torch
    from transformers import TrainerCallback
    from transformers.trainer_callback import TrainerState

    import cse.methods.adcse
    import cse.methods.sarcse

    step, when, *file = spec.split(":")
    step = int(step)

    class KillAtStep(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if when == "step" and state.global_step == step:
                die()

    def wrap(write, path_index):
        @functools.wraps(write)
        def writer(*args, **kwargs):
            path = str(args[path_index])
            target = (
                when != "step"
                and os.path.basename(os.path.dirname(path)) == f"checkpoint-{step}"
                and os.path.basename(path) == file[0]
            )
            if target and when == "before":
                die()
            result = write(*args, **kwargs)
            if target and when == "during":
                os.truncate(path, os.path.getsize(path) // 2)
            if target:
                die()
            return result

        return writer

    torch.save = wrap(torch.save, 1)
    for module in (safetensors.torch, cse.methods.adcse, cse.methods.sarcse):
        module.save_file = wrap(module.save_file, 1)
    TrainerState.save_to_json = wrap(TrainerState.save_to_json, 1)
    return [KillAtStep()]


def main():
    script, argv = sys.argv[1], sys.argv[2:]
    sys.path.insert(0, REPO)
    spec = os.environ.get("CSE_TEST_KILL")
    callbacks = install(spec) if spec else []
    importlib.import_module(os.path.splitext(script)[0]).main(argv, callbacks=callbacks)


if __name__ == "__main__":
    main()
