"""BibTeX entries of the papers this repository's losses reproduce, as the ``citation`` of each loss,
part and method record (:mod:`cse.registry`) and exported model card (checked against the papers' own
title pages), and their form in ``CITATION.cff`` (:func:`cff_reference`). A method added later keeps
its paper's entry in its own module, as its part's ``citation``."""

import re

SIMCSE = """@inproceedings{gao2021simcse,
  title = {{SimCSE}: Simple Contrastive Learning of Sentence Embeddings},
  author = {Gao, Tianyu and Yao, Xingcheng and Chen, Danqi},
  booktitle = {Proceedings of the 2021 Conference on Empirical Methods in Natural Language Processing (EMNLP)},
  year = {2021},
}"""

ADCSE = """@inproceedings{li2022adcse,
  title = {{AdCSE}: An Adversarial Method for Contrastive Learning of Sentence Embeddings},
  author = {Li, Renhao and Duan, Lei and Xie, Guicai and Xiao, Shan and Jiang, Weipeng},
  booktitle = {Database Systems for Advanced Applications (DASFAA 2022)},
  series = {Lecture Notes in Computer Science},
  volume = {13247},
  pages = {165--180},
  publisher = {Springer},
  doi = {10.1007/978-3-031-00129-1_11},
  year = {2022},
}"""

MIXCSE = """@inproceedings{zhang2022mixcse,
  title = {Unsupervised Sentence Representation via Contrastive Learning with Mixing Negatives},
  author = {Zhang, Yanzhao and Zhang, Richong and Mensah, Samuel and Liu, Xudong and Mao, Yongyi},
  booktitle = {Proceedings of the AAAI Conference on Artificial Intelligence (AAAI 2022)},
  year = {2022},
}"""

# The manuscript carries no venue or date.
VADVCSE = """@unpublished{ko_vadvcse,
  title = {{V-advCSE}: Virtual Adversarial Contrastive Learning for Sentence Embeddings},
  author = {Ko, Kyung Min},
  note = {School of Electrical and Computer Engineering, Purdue University},
  year = {n.d.},
}"""

SARCSE = """@article{liu2024sarcse,
  title = {Self-Adaptive Reconstruction with Contrastive Learning for Unsupervised Sentence Embeddings},
  author = {Liu, Junlong and Shang, Xichen and Feng, Huawen and Zheng, Junhao and Ma, Qianli},
  journal = {arXiv preprint arXiv:2402.15153},
  year = {2024},
}"""

SGBERT = """@inproceedings{kim2021sgbert,
  title = {Self-Guided Contrastive Learning for {BERT} Sentence Representations},
  author = {Kim, Taeuk and Yoo, Kang Min and Lee, Sang-goo},
  booktitle = {Proceedings of the 59th Annual Meeting of the Association for Computational Linguistics and the
    11th International Joint Conference on Natural Language Processing (ACL-IJCNLP 2021)},
  year = {2021},
}"""


def bibtex_field(entry: str, name: str) -> str:
    """A field of one of these entries, without BibTeX's braces and line breaks."""
    match = re.search(rf"^  {name} = \{{(.*?)\}},$", entry, re.S | re.M)
    if match is None:
        raise KeyError(f"no {name} field in {entry.splitlines()[0]}")
    return " ".join(match.group(1).replace("{", "").replace("}", "").split())


# BibTeX's entry types as the Citation File Format's reference types (CFF 1.2.0)
CFF_TYPES = {
    "inproceedings": "conference-paper",
    "article": "article",
    "unpublished": "unpublished",
    "book": "book",
    "techreport": "report",
    "phdthesis": "thesis",
    "mastersthesis": "thesis",
}


def bibtex_fields(entry: str) -> dict[str, str]:
    """Every field of one of these entries (``name = {value},`` a line), without braces and line breaks."""
    names = re.findall(r"^  (\w+) = \{", entry, re.M)
    return {name: bibtex_field(entry, name) for name in names}


def cff_reference(entry: str) -> dict:
    """The entry as a reference of ``CITATION.cff`` (Citation File Format 1.2.0): its type, title,
    authors (``Family, Given``), venue (a ``booktitle``'s trailing abbreviation is the conference's
    name, with the year where it has none), pages, publisher, DOI and year; an arXiv ``journal`` makes
    it a preprint with the abstract page's address."""
    kind = re.match(r"@(\w+)\{", entry).group(1).lower()
    fields = bibtex_fields(entry)
    reference = {"type": CFF_TYPES.get(kind, "generic"), "title": fields["title"], "authors": []}
    for author in fields["author"].split(" and "):
        family, comma, given = author.partition(",")
        name = {"family-names": family.strip(), "given-names": given.strip()} if comma else {"name": author.strip()}
        reference["authors"].append(name)
    year = fields.get("year", "")
    if "booktitle" in fields:
        series = fields.get("series")
        reference["collection-title"] = fields["booktitle"] + (f", {series}" if series else "")
        abbreviation = re.search(r"\(([^()]+)\)$", fields["booktitle"])
        if abbreviation:
            name = abbreviation.group(1)
            reference["conference"] = {"name": name if re.search(r"\d", name) or not year else f"{name} {year}"}
    if "journal" in fields:
        reference["journal"] = fields["journal"]
        arxiv = re.search(r"arXiv:(\S+)", fields["journal"])
        if arxiv:
            reference["status"] = "preprint"
            reference["url"] = f"https://arxiv.org/abs/{arxiv.group(1)}"
    if "publisher" in fields:
        reference["publisher"] = {"name": fields["publisher"]}
    if "volume" in fields:
        reference["volume"] = number(fields["volume"])
    if "pages" in fields:
        start, _, end = fields["pages"].partition("--")
        reference["start"] = number(start)
        if end:
            reference["end"] = number(end)
    if "doi" in fields:
        reference["doi"] = fields["doi"]
    if "note" in fields:
        reference["notes"] = fields["note"]
    if year.isdigit():
        reference["year"] = int(year)
    return reference


def number(value: str) -> int | str:
    return int(value) if value.isdigit() else value
