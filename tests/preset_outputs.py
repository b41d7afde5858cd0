"""What a preset's run leaves, reduced to what a refactor must not change: every logged value (timing
keys aside), the final dev results, and each exported weight file by sha256 and, tensor by tensor,
float64 statistics that survive a change of machine (tests/test_presets.py).

``python tests/preset_outputs.py OUT.json`` runs every case of :data:`CASES` (each preset by its own
script, each composition by ``run_cse.py``) on tiny random encoders, one thread each, two at a time,
and writes their outputs. tests/fixtures/presets.json was written so at revision 78ca14f, whose runs
were bit-identical to those of 71c0a48 (before the step program of parts) where both were first
recorded; it was recorded again at 78ca14f on a processor that rounds otherwise (:func:`machine`).
The test replays the same command lines and compares.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(os.path.dirname(REPO), "shared", "data")
WIKI_HEAD = os.path.join(DATA, "wiki1m_head.txt")

# Log keys that measure time or speed, which no two runs share.
TIMING = ("runtime", "per_second", "train_runtime")
STEPS = 6

# name -> (script, backbone family, the case's own flags). The presets with their paper defaults
# (made small by the records' tiny flags), the ablations and variants that take another path through
# the step, and every composition that trains.
ADVERSARIES = ["--num_adversaries", "8", "--momentum", "0.9"]  # AdCSE small
TEXTCNN = ["--textcnn_channels", "16", "--cnn_channels", "2"]  # SARCSE's TextCNN small
SG = ["--projection_size", "16", "--early_stopping_patience", "0"]
CASES = {
    "simcse": ("run_simcse", "bert", []),
    "adcse": ("run_adcse", "bert", ADVERSARIES),
    "adcse-paper": ("run_adcse", "bert", [*ADVERSARIES, "--variant", "paper"]),
    "adcse-no-adversaries": ("run_adcse", "bert", ["--momentum", "0.9", "--no_adversaries"]),
    "mixcse": ("run_mixcse", "bert", []),
    "mixcse-paper": ("run_mixcse", "bert", ["--variant", "paper", "--single"]),
    "vadvcse": ("run_vadvcse", "bert", []),
    "vadvcse-shared-dropout": ("run_vadvcse", "bert", ["--shared_dropout", "--vadv_lambda", "0.1"]),
    "sarcse": ("run_sarcse", "roberta", TEXTCNN),
    "sarcse-no-decoder": ("run_sarcse", "roberta", [*TEXTCNN, "--no_decoder"]),
    "sgbert-opt": ("run_sgbert", "bert", SG),
    "sgbert-sg": ("run_sgbert", "bert", [*SG, "--loss_variant", "base"]),
    "adcse+mixcse": ("run_cse", "bert", ["--parts", "adcse,mixcse", *ADVERSARIES]),
    "mixcse+vadvcse": ("run_cse", "bert", ["--parts", "mixcse,vadvcse"]),
    "adcse+sarcse": ("run_cse", "roberta", ["--parts", "adcse,sarcse", *ADVERSARIES, *TEXTCNN]),
    "mixcse+sarcse": ("run_cse", "roberta", ["--parts", "mixcse,sarcse", *TEXTCNN]),
    "sarcse+vadvcse": ("run_cse", "roberta", ["--parts", "sarcse,vadvcse", *TEXTCNN]),
    "adcse+mixcse+sarcse": ("run_cse", "roberta", ["--parts", "adcse,mixcse,sarcse", *ADVERSARIES, *TEXTCNN]),
    "mixcse+sarcse+vadvcse": ("run_cse", "roberta", ["--parts", "mixcse,sarcse,vadvcse", *TEXTCNN]),
}


def common_flags(model: str, out: str, senteval: str) -> list[str]:
    """6 steps of 8 sentences, a log line every step, a dev evaluation every 3 (the best exported), a
    final dev evaluation."""
    return [
        "--model_name_or_path", model,
        "--output_dir", out,
        "--train_file", WIKI_HEAD,
        "--senteval_data_dir", senteval,
        "--max_train_samples", "512",
        "--per_device_train_batch_size", "8",
        "--learning_rate", "1e-3",
        "--max_steps", str(STEPS),
        "--logging_steps", "1",
        "--eval_strategy", "steps",
        "--eval_steps", "3",
        "--final_eval", "dev",
        "--fp16", "false",
        "--use_cpu", "true",
        "--report_to", "none",
        "--disable_tqdm", "true",
        "--seed", "7",
    ]  # fmt: skip


def machine() -> dict:
    """What decides whether two machines round alike: the same torch and transformers on the same
    processor (two processors of one capability, AVX512 say, can still take other kernels)."""
    import torch
    import transformers

    return {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "cpu": processor(),
        "machine": platform.machine(),
    }


def processor() -> str:
    """The processor's model name as Linux reports it (``platform.processor()`` elsewhere)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def tensor_statistics(path: str) -> dict:
    """Per tensor: float64 sum, sum of absolute values and L2 norm, and the sha256 of its bytes."""
    import torch
    from safetensors.torch import load_file

    out = {}
    for name, t in sorted(load_file(path).items()):
        d = t.double()
        out[name] = {
            "sum": d.sum().item(),
            "abs": d.abs().sum().item(),
            "norm": d.norm().item(),
            "sha256": hashlib.sha256(t.contiguous().view(torch.uint8).numpy().tobytes()).hexdigest(),
        }
    return out


def outputs(out: str) -> dict:
    """The run's logged values, dev results and weights (:func:`tensor_statistics`)."""
    with open(os.path.join(out, "trainer_state.json"), encoding="utf-8") as f:
        history = json.load(f)["log_history"]
    logs = [{k: v for k, v in entry.items() if not any(t in k for t in TIMING)} for entry in history]
    with open(os.path.join(out, "sts_dev_results.json"), encoding="utf-8") as f:
        scores = json.load(f)["scores"]
    weights = {
        name: tensor_statistics(os.path.join(out, name))
        for name in sorted(os.listdir(out))
        if name.endswith(".safetensors")
    }
    return {"log_history": logs, "scores": scores, "weights": weights}


def run_case(name: str, models: dict, senteval: str, workdir: str, repo: str = REPO) -> dict:
    """Train case ``name`` in a subprocess with one thread; its :func:`outputs`."""
    script, family, flags = CASES[name]
    out = os.path.join(workdir, name)
    argv = [sys.executable, os.path.join(repo, f"{script}.py"), *common_flags(models[family], out, senteval), *flags]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false",
           "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "CSE_DATA_DIR": DATA}  # fmt: skip
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=repo, timeout=900)
    if proc.returncode != 0:
        raise RuntimeError(f"{name} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}")
    return outputs(out)


def run_all(names, models: dict, senteval: str, workdir: str, repo: str = REPO) -> dict:
    """:func:`run_case` of each of ``names``, two at a time (one thread each)."""
    with ThreadPoolExecutor(2) as pool:
        results = pool.map(lambda n: run_case(n, models, senteval, workdir, repo), names)
        return dict(zip(names, results))


def main(path: str) -> None:
    sys.path.insert(0, os.path.join(REPO, "tests"))
    from conftest import tiny_model_dir  # noqa: E402  (the suite's own tiny encoders)

    with tempfile.TemporaryDirectory() as tmp:
        models = {family: tiny_model_dir(os.path.join(tmp, family), family) for family in ("bert", "roberta")}
        senteval = os.path.join(tmp, "senteval")
        dev_head(senteval)
        results = run_all(list(CASES), models, senteval, tmp)
    git = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=REPO).stdout
    fixture = {"revision": git.strip(), "machine": machine(), "steps": STEPS, "cases": results}
    with open(path, "w", encoding="utf-8") as f:
        json.dump(fixture, f, indent=1, sort_keys=True)
        f.write("\n")


def dev_head(root: str) -> None:
    """STS-B dev and SICK-R trial cut to their first 100 pairs (conftest's ``dev_head``)."""
    for path in ("STS/STSBenchmark/sts-dev.csv", "SICK/SICK_trial.txt"):
        target = os.path.join(root, path)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(os.path.join(DATA, "senteval", path), encoding="utf-8") as f:
            head = "".join(f.readlines()[:101])
        with open(target, "w", encoding="utf-8") as f:
            f.write(head)


if __name__ == "__main__":
    main(sys.argv[1])
