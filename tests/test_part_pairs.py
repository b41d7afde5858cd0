"""Every pair of the registered parts, generated from the registry (:func:`cse.registry.parts`) and the
composition matrix (:func:`cse.parts.why_not`, docs/composition.md), so that a new part is tested with
every other without a list to edit: a pair the matrix calls combining trains two steps, records its
parts and their settings, names and cites both papers in its model card, exports an encoder that
loads again, and its directory resumes only with the same parts; a pair it refuses is refused before
any work."""

import dataclasses
import itertools
import json
import os
import re
import shutil

import pytest

from cse import citations, composition, registry
from cse.errors import CSEUsageError
from cse.modeling import load_model
from cse.parts import why_not

from .conftest import SENTEVAL, train_argv

PAIRS = list(itertools.combinations(registry.parts(), 2))
COMBINING = [(a, b) for a, b in PAIRS if why_not(a.part, b.part) is None]
REFUSED = [(a, b) for a, b in PAIRS if why_not(a.part, b.part) is not None]


def pair_id(pair):
    return "+".join(record.name for record in pair)


def pair_argv(model_dir, out, pair, *flags):
    """Two steps of 12 wiki1m sentences in batches of 6, the parts named in the reverse of their
    names' order (a composition is the same whichever way it is spelled)."""
    names = ",".join(record.name for record in reversed(pair))
    return train_argv(
        model_dir, out, "--parts", names, "--max_train_samples", "12", "--per_device_train_batch_size", "6", *flags
    )


def test_the_matrix_has_pairs_of_each_kind():
    assert COMBINING and REFUSED and len(COMBINING) + len(REFUSED) == len(PAIRS)


@pytest.mark.parametrize("pair", REFUSED, ids=pair_id)
def test_every_pair_the_matrix_refuses_is_refused_before_any_work(pair, tmp_path):
    out = tmp_path / "out"
    names = ",".join(record.name for record in pair)
    with pytest.raises(CSEUsageError, match=f"^--parts {names} is not defined: ") as refused:
        composition.main(pair_argv("unused", out, pair))
    assert refused.value.hint == "see docs/composition.md"
    assert not out.exists()


def recorded(flags) -> dict:
    """A part's flags as run_args.json records them (JSON values)."""
    return json.loads(json.dumps(dataclasses.asdict(flags))) if flags is not None else None


@pytest.mark.e2e
@pytest.mark.parametrize("pair", COMBINING, ids=pair_id)
def test_every_pair_the_matrix_calls_combining_trains_exports_and_loads(pair, tiny_bert, tmp_path, monkeypatch):
    """Two steps of the pair on a tiny BERT: every term's share of the gradient, the parts and their
    settings in run_args.json, a model card naming both parts and citing both papers and SimCSE's, an
    export that loads again, and a resume with other parts refused."""
    from cse.citations import bibtex_field

    monkeypatch.setenv("CSE_DATA_DIR", os.path.dirname(SENTEVAL))
    out = tmp_path / "run"
    flags = ["--logging_steps", "1", "--log_term_gradients", "true", "--final_eval", "none", "--eval_strategy", "no"]
    flags += ["--load_best_model_at_end", "false", "--save_strategy", "steps", "--save_steps", "2", "--fp16", "false"]
    trainer = composition.main(pair_argv(tiny_bert, out, pair, *flags))
    parts = [record.name for record in pair]
    logged = [entry for entry in trainer.state.log_history if "loss" in entry]
    own_terms = {name for part in trainer.parts for name in part.term_weights()}
    assert len(logged) == 2
    for entry in logged:
        shares = {key.removeprefix("term_share_"): v for key, v in entry.items() if key.startswith("term_share_")}
        assert {"contrastive", *own_terms} <= set(shares) and sum(shares.values()) == pytest.approx(1.0)
    with open(out / "run_args.json", encoding="utf-8") as f:
        method = json.load(f)["method"]
    assert method["parts"] == parts
    for record in pair:
        assert method.get(record.name) == recorded(record.method_arguments and record.method_arguments()), record.name
    card = (out / "README.md").read_text(encoding="utf-8")
    assert f"# {' + '.join(record.display_name for record in pair)} sentence encoder" in card
    for entry in [record.citation for record in pair] + [citations.SIMCSE]:
        assert entry in card and bibtex_field(entry, "title") in card
    loaded = load_model(str(out))
    embeddings = loaded.encode(["a man plays a guitar", "ok"])
    assert embeddings.shape == (2, trainer.model.embedding_size) and embeddings.isfinite().all()
    # stopped before its export (its settings and checkpoints only), the directory resumes with the same
    # parts alone
    for name in os.listdir(out):
        if name != "run_args.json" and not name.startswith("checkpoint-"):
            shutil.rmtree(out / name) if (out / name).is_dir() else os.remove(out / name)
    other = COMBINING[(COMBINING.index(pair) + 1) % len(COMBINING)]
    named = pair_id(pair), pair_id(other)
    with pytest.raises(CSEUsageError, match=re.escape(f"run.method: {named[0]!r} -> {named[1]!r}")) as refusal:
        composition.main(pair_argv(tiny_bert, out, other, *flags))
    assert f"it is a run of {named[0]}, which this command cannot continue" in refusal.value.hint
