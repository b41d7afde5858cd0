"""The files that list every method, against the method records (cse.registry), so that a new method
needs no edit beyond its own files (docs/extending.md): the generated ones equal what ``python -m
cse.listings`` writes (CITATION.cff's references, docs/README.md's method pages; docs/composition.md
in test_composition.py), and the hand-written ones name every record and nothing else (the README's
methods table, BENCHMARKS.md's step-time targets)."""

import os
import re

import pytest
import yaml

import cse
from cse import listings, registry
from cse.citations import bibtex_field

from .conftest import REPO

RECORDS = registry.records()


def read(path: str) -> str:
    with open(os.path.join(REPO, path), encoding="utf-8") as f:
        return f.read()


def table(text: str, header: str) -> list[list[str]]:
    """The cells of the rows of the markdown table under the line ``header``."""
    block = text.split(header + "\n", 1)[1].split("\n\n", 1)[0]
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in block.splitlines()[1:]]


@pytest.mark.parametrize("path", [path for path in listings.LISTINGS if path != "docs/composition.md"])
def test_each_generated_listing_is_the_records(path):
    assert read(path) == listings.generated(path), f"{path} is not the method records': run {listings.COMMAND}"


def test_citation_cff_cites_this_version_and_every_methods_paper():
    citation = yaml.safe_load(read("CITATION.cff"))
    assert citation["cff-version"] == "1.2.0" and citation["license"] == "Apache-2.0"
    assert citation["version"] == cse.__version__  # a release bumps both
    titles = [reference["title"] for reference in citation["references"]]
    assert sorted(titles) == sorted({bibtex_field(record.citation, "title") for record in RECORDS})
    assert titles[0] == bibtex_field(next(record for record in RECORDS if record.base).citation, "title")
    with open(os.path.join(REPO, "LICENSE"), encoding="utf-8") as f:
        assert "Apache License\n                           Version 2.0, January 2004" in f.read()


def test_the_docs_index_links_every_method_page_by_its_title():
    rows = table(read("docs/README.md"), "| page | what it holds |")
    pages = {re.fullmatch(r"\[(.+)\]\((.+)\)", row[0]).group(2): row[1] for row in rows}
    for record in RECORDS:
        with open(os.path.join(REPO, record.docs), encoding="utf-8") as f:
            assert pages[os.path.relpath(record.docs, "docs")] == f.readline().removeprefix("# ").strip()


def test_the_readme_has_one_row_per_method():
    """A row by hand (the method's paper in words), linking the method's page, naming its script and
    the first author of its paper."""
    rows = table(read("README.md"), "| method | paper | script | documentation |")
    by_page = {re.fullmatch(r"\[(.+)\]\((.+)\)", row[3]).group(2): row for row in rows}
    assert len(by_page) == len(rows) and sorted(by_page) == sorted(record.docs for record in RECORDS), (
        "README.md's methods table has one row per method (cse/methods/), linking its docs page: add or remove the row"
    )
    for record in RECORDS:
        name, paper, script, _ = by_page[record.docs]
        assert name.startswith(record.display_name), name
        assert script in {f"`{shape.script}.py`" for shape in record.bench.values()}, script
        assert bibtex_field(record.citation, "author").split(",")[0] in paper, paper


def test_benchmarks_states_every_methods_step_time_target():
    line = next(line for line in read("BENCHMARKS.md").splitlines() if line.startswith("| targets |"))
    stated = {name: float(target) for name, target in re.findall(r"`([\w-]+)`(?: \([^)]*\))? ≤ ([\d.]+)", line)}
    declared = {
        name: shape.overhead_target
        for record in RECORDS
        for name, shape in record.bench.items()
        if shape.overhead_target is not None
    }
    assert stated == declared, (
        "BENCHMARKS.md's '| targets |' line must state each benchmark method's overhead_target (its record's "
        f"BenchShape): edit it to {', '.join(f'`{name}` ≤ {target}' for name, target in declared.items())}"
    )
