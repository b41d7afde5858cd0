"""Every loss and method cites its paper, every method's record is complete, and every loss
docstring's example runs."""

import doctest
import importlib
import os
import pkgutil
import re

import pytest

from cse import citations, registry
from cse.trainer import CSETrainer

from .conftest import REPO, SHARED

LOSS_MODULES = [info.name for info in pkgutil.iter_modules(importlib.import_module("cse.losses").__path__)]
LOSSES = {
    "infonce.InfoNCELoss": "simcse",
    "adcse.AdversarialInfoNCELoss": "adcse",
    "mixcse.MixCSELoss": "mixcse",
    "reconstruction.SelfAdaptiveReconstructionLoss": "sarcse",
    "sgbert.SelfGuidedLoss": "sgbert",
    "vadvcse.VirtualAdversarialLoss": "vadvcse",
}
TRAINERS = {
    "adcse.AdCSETrainer": "adcse",
    "mixcse.MixCSETrainer": "mixcse",
    "sarcse.SARCSETrainer": "sarcse",
    "sgbert.SGTrainer": "sgbert",
    "vadvcse.VAdvCSETrainer": "vadvcse",
}
BIBTEX = re.compile(r"^@\w+\{[\w:.-]+,\n(?:  \w+ = \{.*?\},\n)+\}$", re.S)


def field(entry: str, name: str) -> str:
    return re.search(rf"^  {name} = \{{(.*?)\}},$", entry, re.S | re.M).group(1)


def plain(text: str) -> str:
    """Lower-case letters only: compares titles across BibTeX braces, line breaks and PDF hyphens."""
    return re.sub(r"[^a-z]", "", text.lower())


def resolve(prefix: str, dotted: str):
    module, name = dotted.rsplit(".", 1)
    return getattr(importlib.import_module(f"{prefix}.{module}"), name)


@pytest.mark.parametrize("module", LOSS_MODULES)
def test_loss_docstring_examples_run(module):
    result = doctest.testmod(importlib.import_module(f"cse.losses.{module}"), optionflags=doctest.ELLIPSIS)
    assert result.attempted >= 3 and result.failed == 0


@pytest.mark.parametrize("dotted", sorted(LOSSES))
def test_loss_docstring_has_relations_example_and_config(dotted):
    loss = resolve("cse.losses", dotted)
    assert "Relations:" in loss.__doc__ and "Example::" in loss.__doc__
    assert callable(getattr(loss, "get_config_dict", None))


@pytest.mark.parametrize(
    "cls, method",
    [(resolve("cse.losses", k), v) for k, v in LOSSES.items()]
    + [(resolve("cse.methods", k), v) for k, v in TRAINERS.items()]
    + [(CSETrainer, "simcse")],
)
def test_losses_and_trainers_cite_their_paper(cls, method):
    assert cls.citation == registry.get(method).citation


@pytest.mark.parametrize("record", registry.records(), ids=lambda record: record.name)
def test_every_method_record_is_complete(record):
    """A name to show, a paper, a build, a benchmark shape whose script and configuration exist, and a
    docs page that exists."""
    assert record.display_name and record.citation in vars(citations).values() and callable(record.build)
    assert record.bench, f"{record.name} has no benchmark shape"
    for shape in record.bench.values():
        assert os.path.isfile(os.path.join(REPO, f"{shape.script}.py")), shape.script
        assert os.path.isfile(os.path.join(REPO, shape.config)), shape.config
        assert shape.backbone in ("bert", "roberta")
    assert os.path.isfile(os.path.join(REPO, record.docs)), record.docs


@pytest.mark.parametrize("method", [record.name for record in registry.records()])
def test_citation_is_bibtex_with_title_author_year(method):
    entry = registry.get(method).citation
    assert BIBTEX.match(entry), entry
    for name in ("title", "author", "year"):
        assert field(entry, name).strip()


PAPERS = {"adcse": "adcse", "mixcse": "mixcse", "vadvcse": "vadvcse", "sarcse": "sarcse", "sgbert": "sgbert"}


@pytest.mark.parametrize("method", sorted(PAPERS))
def test_citation_title_and_authors_match_the_paper(method):
    path = os.path.join(SHARED, "papers", f"{PAPERS[method]}.txt")
    if not os.path.isfile(path):
        pytest.skip(f"{path} not available")
    with open(path, encoding="utf-8") as f:
        head = f.read(3000)
    entry = registry.get(method).citation
    assert plain(field(entry, "title")) in plain(head)
    for author in field(entry, "author").split(" and "):
        surname, given = (part.strip() for part in author.split(","))
        assert plain(f"{given} {surname}") in plain(head), author


def test_simcse_citation():
    entry = citations.SIMCSE
    assert field(entry, "title") == "{SimCSE}: Simple Contrastive Learning of Sentence Embeddings"
    assert field(entry, "author") == "Gao, Tianyu and Yao, Xingcheng and Chen, Danqi"
    assert field(entry, "year") == "2021" and "Empirical Methods in Natural Language Processing" in entry
