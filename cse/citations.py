"""BibTeX entries of the papers this repository reproduces, as the ``citation`` of each loss, method
trainer, method record (:mod:`cse.registry`) and exported model card (checked against the papers' own
title pages)."""

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
