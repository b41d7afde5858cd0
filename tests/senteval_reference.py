"""An independent re-statement of the reference evaluation, for tests only.

It follows SentEval's STS loaders and ``STSEval.run`` and SimCSE's ``evaluation.py`` batcher
step by step (pairs sorted by SentEval's key, sentences batched pair-wise, padding=True, no
truncation, numpy float32 cosine with ``nan_to_num``, "all" = one Spearman over the concatenated
subsets) and computes every pooler from a single forward pass of a plain ``AutoModel``. It shares no
code with ``cse`` on purpose.
"""

from __future__ import annotations

import io
import os

import numpy as np
import torch
from scipy.stats import spearmanr

YEARS = {
    "STS12": ("STS12-en-test", ["MSRpar", "MSRvid", "SMTeuroparl", "surprise.OnWN", "surprise.SMTnews"]),
    "STS13": ("STS13-en-test", ["FNWN", "headlines", "OnWN"]),
    "STS14": ("STS14-en-test", ["deft-forum", "deft-news", "headlines", "images", "OnWN", "tweet-news"]),
    "STS15": ("STS15-en-test", ["answers-forums", "answers-students", "belief", "headlines", "images"]),
    "STS16": ("STS16-en-test", ["answer-answer", "headlines", "plagiarism", "postediting", "question-question"]),
}
ALL_POOLERS = ("cls", "cls_before_pooler", "avg", "avg_first_last", "avg_top2", "max")


def _year(base, root):
    out = []
    for name in YEARS[base][1]:
        folder = os.path.join(root, "STS", YEARS[base][0])
        lines = io.open(f"{folder}/STS.input.{name}.txt", encoding="utf8").read().splitlines()
        sent1, sent2 = zip(*[line.split("\t") for line in lines])
        raw = np.array(io.open(f"{folder}/STS.gs.{name}.txt", encoding="utf8").read().splitlines())
        keep = raw != ""
        gs = [float(x) for x in raw[keep]]
        s1 = np.array([s.split() for s in sent1], dtype=object)[keep]
        s2 = np.array([s.split() for s in sent2], dtype=object)[keep]
        data = sorted(zip(s1, s2, gs), key=lambda z: (len(z[0]), len(z[1]), z[2]))
        out.append(tuple(map(list, zip(*data))))
    return out


def _columns(path, a, b, y, skip_header):
    s1, s2, gs = [], [], []
    with io.open(path, encoding="utf-8") as f:
        for i, line in enumerate(f):
            if skip_header and i == 0:
                continue
            text = line.strip().split("\t")
            s1.append(text[a].split())
            s2.append(text[b].split())
            gs.append(float(text[y]))
    return [(s1, s2, gs)]


def load(task, split, root):
    if task in YEARS:
        return _year(task, root)
    if task == "STSBenchmark":
        return _columns(os.path.join(root, "STS", "STSBenchmark", f"sts-{split}.csv"), 5, 6, 4, False)
    name = {"dev": "SICK_trial.txt", "test": "SICK_test_annotated.txt"}[split]
    return _columns(os.path.join(root, "SICK", name), 1, 2, 3, True)


def _embed_all_poolers(model, tokenizer, words_batch):
    batch = tokenizer([" ".join(s) for s in words_batch], return_tensors="pt", padding=True)
    with torch.no_grad():
        out = model(**batch, output_hidden_states=True, return_dict=True)
    mask = batch["attention_mask"].unsqueeze(-1).float()
    last, hs = out.last_hidden_state, out.hidden_states
    mean = lambda h: (h * mask).sum(1) / mask.sum(1)  # noqa: E731
    return {
        "cls": out.pooler_output,
        "cls_before_pooler": last[:, 0],
        "avg": mean(last),
        "avg_first_last": mean((hs[1] + hs[-1]) / 2.0),
        "avg_top2": mean((hs[-2] + hs[-1]) / 2.0),
        "max": last.masked_fill(mask == 0, -1e9).max(1).values,
    }


def _cosine(u, v, dtype):
    u, v = np.nan_to_num(u).astype(dtype), np.nan_to_num(v).astype(dtype)
    return np.nan_to_num(np.dot(u, v) / np.sqrt(np.dot(u, u) * np.dot(v, v)))


def reference_scores(model, tokenizer, tasks, mode, root, batch_size=128, cosine_dtype=np.float32):
    """``{pooler: {task: Spearman x 100}}`` for every pooler, as the reference computes them.

    SentEval takes the cosine of float32 vectors in float32. A tiny random encoder crowds all
    cosines just below 1, where float32 rounding creates rank ties; pass ``cosine_dtype=np.float64``
    for such models (``cse`` computes cosines in float64).
    """
    model.eval()
    scores = {p: {} for p in ALL_POOLERS}
    for task in tasks:
        split = "test" if task in YEARS else mode
        sys_all = {p: [] for p in ALL_POOLERS}
        gold_all = []
        for s1, s2, gs in load(task, split, root):
            for i in range(0, len(gs), batch_size):
                e1 = _embed_all_poolers(model, tokenizer, s1[i : i + batch_size])
                e2 = _embed_all_poolers(model, tokenizer, s2[i : i + batch_size])
                for p in ALL_POOLERS:
                    a, b = e1[p].numpy(), e2[p].numpy()
                    sys_all[p].extend(_cosine(a[k], b[k], cosine_dtype) for k in range(len(a)))
            gold_all.extend(gs)
        for p in ALL_POOLERS:
            scores[p][task] = 100 * spearmanr(sys_all[p], gold_all)[0]
    return scores
