"""Every loss and method cites its paper, every method's record is complete, and every loss
docstring's example runs."""

import doctest
import importlib
import os
import pkgutil
import re

import pytest

from cse import citations, registry
from cse.arguments import parse_args

from .conftest import REPO, SHARED, TINY_FLAGS


def modules(package: str) -> list:
    path = importlib.import_module(package).__path__
    return [importlib.import_module(f"{package}.{info.name}") for info in pkgutil.iter_modules(path)]


def cited(module) -> set[type]:
    """The classes with a ``citation`` (losses and parts) that ``module`` defines or imports."""
    classes = [value for value in vars(module).values() if isinstance(value, type)]
    return {cls for cls in classes if isinstance(getattr(cls, "citation", None), str) and cls.citation}


LOSS_MODULES = [module.__name__.removeprefix("cse.losses.") for module in modules("cse.losses")]
# every loss that cites a paper, as "module.Class"
LOSSES = sorted(
    f"{module.__name__.removeprefix('cse.losses.')}.{cls.__name__}"
    for module in modules("cse.losses")
    for cls in cited(module)
    if cls.__module__ == module.__name__
)
# Each method's module and its record: what the module defines or imports beyond what the base's module
# holds (SimCSE's part, which every method builds on) is the method's own and cites its paper.
METHOD_MODULES = modules("cse.methods")
BASE_CLASSES = cited(next(module for module in METHOD_MODULES if module.RECORD.base))
CITING = sorted(
    (
        (cls, module.RECORD)
        for module in METHOD_MODULES
        for cls in (cited(module) if module.RECORD.base else cited(module) - BASE_CLASSES)
    ),
    key=lambda pair: (pair[1].name, pair[0].__module__, pair[0].__name__),
)
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
    "cls, record", CITING, ids=lambda value: value.__name__ if isinstance(value, type) else value.name
)
def test_losses_and_parts_cite_their_paper(cls, record):
    assert cls.citation == record.citation


def test_every_loss_is_a_methods_own():
    """So that the test above checks each loss's citation against the paper of the method that uses it; the
    base's InfoNCE is what every build starts from (cse.build) and cites SimCSE."""
    base = cited(importlib.import_module("cse.build"))
    assert all(cls.citation == citations.SIMCSE for cls in base)
    assert {resolve("cse.losses", dotted) for dotted in LOSSES} <= {cls for cls, _ in CITING} | base


@pytest.mark.parametrize("record", registry.records(), ids=lambda record: record.name)
def test_every_method_record_is_complete(record, tmp_path):
    """A name to show, a paper, a part, benchmark shapes whose script and configuration exist, of one
    backbone family (a small run's), a docs page that exists, and the flags of a small run, which its
    script takes."""
    assert record.display_name and BIBTEX.match(record.citation) and record.part.name == record.name
    assert record.bench, f"{record.name} has no benchmark shape"
    for shape in record.bench.values():
        assert os.path.isfile(os.path.join(REPO, f"{shape.script}.py")), shape.script
        assert os.path.isfile(os.path.join(REPO, shape.config)), shape.config
        assert shape.backbone in ("bert", "roberta")
    assert len({shape.backbone for shape in record.bench.values()}) == 1
    assert os.path.isfile(os.path.join(REPO, record.docs)), record.docs
    parse_args(record.argument_types, ["--output_dir", str(tmp_path), *TINY_FLAGS.get(record.name, ())])


METHODS = [record.name for record in registry.records()]


@pytest.mark.parametrize("method", METHODS)
def test_citation_is_bibtex_with_title_author_year(method):
    entry = registry.get(method).citation
    assert BIBTEX.match(entry), entry
    for name in ("title", "author", "year"):
        assert field(entry, name).strip()


@pytest.mark.parametrize("method", METHODS)
def test_citation_title_and_authors_match_the_paper(method):
    path = os.path.join(SHARED, "papers", f"{method}.txt")
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


def test_a_conference_paper_in_citation_file_format():
    """AdCSE's entry as CITATION.cff 1.2.0 references it (written from the paper's Springer page)."""
    assert citations.cff_reference(citations.ADCSE) == {
        "type": "conference-paper",
        "title": "AdCSE: An Adversarial Method for Contrastive Learning of Sentence Embeddings",
        "authors": [
            {"family-names": "Li", "given-names": "Renhao"},
            {"family-names": "Duan", "given-names": "Lei"},
            {"family-names": "Xie", "given-names": "Guicai"},
            {"family-names": "Xiao", "given-names": "Shan"},
            {"family-names": "Jiang", "given-names": "Weipeng"},
        ],
        "collection-title": (
            "Database Systems for Advanced Applications (DASFAA 2022), Lecture Notes in Computer Science"
        ),
        "conference": {"name": "DASFAA 2022"},
        "publisher": {"name": "Springer"},
        "volume": 13247,
        "start": 165,
        "end": 180,
        "doi": "10.1007/978-3-031-00129-1_11",
        "year": 2022,
    }
    # a venue abbreviated without its year takes the entry's; a multi-line field is one line
    assert citations.cff_reference(citations.SIMCSE)["conference"] == {"name": "EMNLP 2021"}
    assert citations.cff_reference(citations.SGBERT)["collection-title"].endswith(
        "Linguistics and the 11th International Joint Conference on Natural Language Processing (ACL-IJCNLP 2021)"
    )


def test_a_preprint_a_manuscript_and_an_author_without_a_comma():
    sarcse = citations.cff_reference(citations.SARCSE)
    assert sarcse["type"] == "article" and sarcse["status"] == "preprint" and sarcse["year"] == 2024
    assert (
        sarcse["journal"] == "arXiv preprint arXiv:2402.15153" and sarcse["url"] == "https://arxiv.org/abs/2402.15153"
    )
    vadvcse = citations.cff_reference(citations.VADVCSE)
    assert vadvcse == {
        "type": "unpublished",
        "title": "V-advCSE: Virtual Adversarial Contrastive Learning for Sentence Embeddings",
        "authors": [{"family-names": "Ko", "given-names": "Kyung Min"}],
        "notes": "School of Electrical and Computer Engineering, Purdue University",
    }  # no year: the manuscript's is "n.d."
    entry = "@misc{x,\n  title = {A {BERT} Note},\n  author = {The Team and Doe, Jane},\n  year = {2020},\n}"
    assert citations.cff_reference(entry) == {
        "type": "generic",
        "title": "A BERT Note",
        "authors": [{"name": "The Team"}, {"family-names": "Doe", "given-names": "Jane"}],
        "year": 2020,
    }
