"""A part outside the package is one file (docs/extending.md): ``examples/align_uniform.py``, copied to a
directory outside the checkout, trains there as written and joins a composed run; its terms are Wang and
Isola's alignment and uniformity (float64, by hand); the page quotes the file as it is.

The file runs with ``cse`` importable as ``pip install -e .`` leaves it: the checkout's package on the
path. These tests put it there with ``PYTHONPATH`` (the suite runs the checkout itself, installed by
nobody: .ci/run installs requirements.txt only); tests/test_packaging.py checks that ``pip install``
gives a ``cse`` that works outside the checkout.

The file registers its part when imported, so it is never imported into this process's registry: the
run is a subprocess, and the in-process checks use a copy of the registry that is put back afterwards
(tests/test_composition.py lists the repository's own parts).
"""

import itertools
import json
import math
import os
import re

import pytest
import torch

from cse.parts import Step

from .conftest import REPO, import_example, train_outside

EXAMPLE = os.path.join(REPO, "examples", "align_uniform.py")
PAGE = os.path.join(REPO, "docs", "extending.md")
WANG_ISOLA = "Understanding Contrastive Representation Learning through Alignment and Uniformity on the Hypersphere"


@pytest.fixture
def example(monkeypatch):
    """The example imported as a module, its part registered in a copy of the registry."""
    return import_example(monkeypatch, EXAMPLE)


@pytest.mark.e2e
def test_the_example_trains_outside_the_checkout_with_mixcse(tiny_bert, tmp_path):
    flags = ["--parts", "mixcse,align_uniform", "--align_weight", "0.5", "--uniform_weight", "2"]
    out, logs = train_outside(EXAMPLE, tiny_bert, tmp_path, *flags, "--log_term_gradients", "true")
    assert len(logs) == 2
    for log in logs:
        # each step logs its own terms (--logging_steps 1): the weighted terms are the weights times the values
        assert log["term_align"] == pytest.approx(0.5 * log["loss_align"], rel=1e-5)
        assert log["term_uniform"] == pytest.approx(2 * log["loss_uniform"], rel=1e-5)
        assert 0 < log["loss_align"] <= 4 and -8 <= log["loss_uniform"] <= 0  # on the unit sphere
        shares = [log[f"term_share_{t}"] for t in ("contrastive", "align", "uniform")]
        assert all(share > 0 for share in shares) and sum(shares) == pytest.approx(1, abs=1e-5)
        assert "mix_score" in log  # MixCSE's statistics survive the mixin
    card = (out / "README.md").read_text(encoding="utf-8")
    assert "# Align-Uniform + MixCSE sentence encoder" in card and "- align_uniform\n- mixcse\n" in card
    assert "Its parts, on SimCSE's InfoNCE: `align_uniform`, `mixcse`" in card
    assert f"_{WANG_ISOLA}_" in card and "author = {Wang, Tongzhou and Isola, Phillip}" in card
    assert "author = {Gao, Tianyu and Yao, Xingcheng and Chen, Danqi}" in card  # SimCSE, the base
    with open(out / "run_args.json", encoding="utf-8") as f:
        method = json.load(f)["method"]
    assert method["parts"] == ["align_uniform", "mixcse"]
    assert method["align_uniform"] == {"align_weight": 0.5, "uniform_weight": 2.0}


def unit(row):
    norm = math.sqrt(sum(x * x for x in row))
    return [x / norm for x in row]


def squared_distance(a, b):
    return sum((x - y) ** 2 for x, y in zip(a, b))


def hand_uniformity(rows):
    """log of the mean of e^{-t ||z_i - z_j||^2} over the pairs i < j (Wang and Isola, Eq. 5; t = 2)."""
    values = [math.exp(-2.0 * squared_distance(a, b)) for a, b in itertools.combinations(rows, 2)]
    return math.log(sum(values) / len(values))


def test_the_terms_are_wang_and_isolas_alignment_and_uniformity(example):
    """The part's terms of given float64 embeddings against Eq. 4 (alpha = 2) and Eq. 5 (t = 2)
    computed with loops, the uniformity of each view averaged."""
    part = example.AlignUniform(example.AlignUniformArguments(align_weight=0.5, uniform_weight=3.0))
    views = torch.randn(5, 2, 7, dtype=torch.float64, generator=torch.Generator().manual_seed(0)) * 3
    views[3, 0] = views[1, 0]  # a sentence twice in the batch: zero distance, finite gradient
    views.requires_grad_(True)

    def step(embeddings):
        return Step(None, None, {}, {"embeddings": embeddings}, {}, {})

    terms, statistics = part.terms(step(views))
    anchors = [unit(row) for row in views[:, 0].tolist()]
    positives = [unit(row) for row in views[:, 1].tolist()]
    align = sum(squared_distance(a, b) for a, b in zip(anchors, positives)) / len(anchors)
    uniform = (hand_uniformity(anchors) + hand_uniformity(positives)) / 2
    assert list(terms) == ["align", "uniform"] and terms["align"].dtype == torch.float64
    assert terms["align"].item() == pytest.approx(0.5 * align, rel=1e-12)
    assert terms["uniform"].item() == pytest.approx(3.0 * uniform, rel=1e-12)
    assert statistics["loss_align"].item() == pytest.approx(align, rel=1e-12)
    assert statistics["loss_uniform"].item() == pytest.approx(uniform, rel=1e-12)
    assert part.term_weights() == {"align": 0.5, "uniform": 3.0}
    (terms["align"] + terms["uniform"]).backward()
    assert torch.isfinite(views.grad).all()
    # one sentence has no pair: no uniformity
    one, _ = part.terms(step(views[:1].detach()))
    assert one["uniform"].item() == 0


def test_the_part_alone_is_simcse_with_the_terms(example, tiny_bert):
    """The part alone is SimCSE's base (its encoder, head and InfoNCE) with its terms, and joins a
    composition in the order of the parts' names."""
    from cse import citations, composition
    from cse.arguments import ModelArguments
    from cse.build import build
    from cse.losses import InfoNCELoss

    assert [record.name for record in composition.select(["mixcse", "align_uniform", "sarcse"])] == [
        "align_uniform",
        "mixcse",
        "sarcse",
    ]
    part = example.AlignUniform(example.AlignUniformArguments(uniform_weight=0.25))
    model, loss = build([part], ModelArguments(model_name_or_path=tiny_bert))
    assert type(loss) is InfoNCELoss and model.pooler_type == "cls"
    assert example.RECORD.citations == (example.CITATION,) and example.RECORD.docs == "docs/extending.md"
    assert citations.bibtex_field(example.CITATION, "title") == WANG_ISOLA


def test_the_page_quotes_the_file_as_it_is():
    """Each Python block of the page is a piece of one of the examples it walks through."""
    with open(PAGE, encoding="utf-8") as f:
        page = f.read()
    sources = {}
    for name in ("align_uniform.py", "self_attentive.py"):
        with open(os.path.join(REPO, "examples", name), encoding="utf-8") as f:
            sources[name] = f.read()
    blocks = re.findall(r"^```python\n(.*?)^```", page, re.S | re.M)
    quoted = {name: [block for block in blocks if block in source] for name, source in sources.items()}
    assert len(quoted["align_uniform.py"]) >= 4 and len(quoted["self_attentive.py"]) >= 2
    for block in blocks:
        assert any(block in source for source in sources.values()), f"docs/extending.md quotes no example:\n{block}"
