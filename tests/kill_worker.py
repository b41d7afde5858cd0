"""``python tests/kill_worker.py run_simcse.py ARGS...``: the script's ``main(ARGS)``, which kills
itself with SIGKILL at the point ``CSE_TEST_KILL`` names (test-only):

* ``<step>:step``: at the end of optimizer step ``<step>``, outside any checkpoint write;
* ``<step>:before:<file>``, ``<step>:after:<file>``: just before or after ``checkpoint-<step>/<file>``
  is written (e.g. after ``model.safetensors``, before ``optimizer.pt``);
* ``<step>:during:<file>``: that file written and cut to half its bytes, as a writer killed
  halfway leaves it;
* ``<step>:signal:<file>``: SIGTERM sent to the process just before that file is written, which is
  then written a moment later (the run, not this worker, decides how it stops).

The files are caught at the three writers a checkpoint goes through: ``torch.save``, safetensors'
``save_file`` (the Trainer's and the methods') and ``TrainerState.save_to_json``.

After training (the run's tail), at the rename that puts each file in place (``cse.atomic``):

* ``tail:after:<path>``: just after ``<path>`` (relative to ``--output_dir``, e.g.
  ``model.safetensors``, ``cse_config.json``, ``sts_dev_results.json``) is renamed into place;
* ``tail:during:<path>``: its temporary file written and cut to half its bytes, not yet renamed;
* ``tail:during:final_eval``: inside the final STS evaluation, once its sentences are encoded.

The same command without ``CSE_TEST_KILL`` is an ordinary run.
"""

import functools
import importlib
import os
import signal
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def die():
    sys.stdout.flush()
    sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def install_tail(spec: str, output_dir: str):
    from cse.evaluation import SentEvalSuite

    _, when, name = spec.split(":", 2)
    if name == "final_eval":
        run = SentEvalSuite.run

        def run_and_die(self, encode):
            if not self.progress:  # the trainer's dev evaluations are quiet; the final one reports
                return run(self, encode)

            def encode_and_die(sentences):
                encode(sentences)
                die()

            return run(self, encode_and_die)

        SentEvalSuite.run = run_and_die
        return []
    target = os.path.abspath(os.path.join(output_dir, name))
    replace = os.replace

    def replace_and_die(source, destination, **kwargs):
        if os.path.abspath(destination) != target:
            return replace(source, destination, **kwargs)
        if when == "during":
            os.truncate(source, os.path.getsize(source) // 2)
            die()
        replace(source, destination, **kwargs)
        die()

    os.replace = replace_and_die
    return []


def install(spec: str, argv: list[str]):
    if spec.startswith("tail:"):
        return install_tail(spec, argv[argv.index("--output_dir") + 1])
    import safetensors.torch
    import torch
    from transformers import TrainerCallback
    from transformers.trainer_callback import TrainerState

    import cse.methods.sarcse
    import cse.parts_state

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
            if target and when == "signal":
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(0.3)  # a slow write: the signal arrives well inside it
                return write(*args, **kwargs)
            result = write(*args, **kwargs)
            if target and when == "during":
                os.truncate(path, os.path.getsize(path) // 2)
            if target:
                die()
            return result

        return writer

    torch.save = wrap(torch.save, 1)
    for module in (safetensors.torch, cse.parts_state, cse.methods.sarcse):
        module.save_file = wrap(module.save_file, 1)
    TrainerState.save_to_json = wrap(TrainerState.save_to_json, 1)
    return [KillAtStep()]


def main():
    script, argv = sys.argv[1], sys.argv[2:]
    sys.path.insert(0, REPO)
    spec = os.environ.get("CSE_TEST_KILL")
    callbacks = install(spec, argv) if spec else []
    importlib.import_module(os.path.splitext(script)[0]).main(argv, callbacks=callbacks)


if __name__ == "__main__":
    main()
