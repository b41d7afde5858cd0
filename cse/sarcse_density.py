"""SARCSE's Appendix D (Fig. 3): the distribution of predicted cosines on the STS-B test set, per
gold-score group 0-1, 1-2, 2-3, 3-4, 4-5 (a score of exactly 5 is in 4-5; every other group is
closed on the left, open on the right).

    python -m cse.sarcse_density result/simcse-roberta-base result/sarcse-roberta-base \\
        --name SimCSE SARCSE --output_dir result/sarcse-appD

writes, per model, ``<name>_stsb_test_cosines.json`` (every pair's gold score and cosine, and each
group's count, mean and standard deviation of the cosines), and ``density.png``: one panel per model,
one Gaussian kernel density per group, drawn one above the other as in the paper.
"""

from __future__ import annotations

import argparse
import json
import os

import numpy as np

from .evaluation.sts import STSPairs, cosine_scores, load_sts_task
from .modeling import load_model
from .paths import senteval_dir

GROUPS = ((0, 1), (1, 2), (2, 3), (3, 4), (4, 5))


def group_of(gold: float) -> int:
    """Index in :data:`GROUPS` of a gold score in [0, 5]."""
    if not 0.0 <= gold <= 5.0:
        raise ValueError(f"STS-B gold scores lie in [0, 5], got {gold}")
    return min(int(gold), len(GROUPS) - 1)


def pair_cosines(encode, pairs: STSPairs) -> dict:
    """Cosines of the pairs under ``encode`` (sentences -> (n, d) array), with per-group statistics."""
    sentences = list(dict.fromkeys(pairs.sentences1 + pairs.sentences2))
    vectors = dict(zip(sentences, np.asarray(encode(sentences))))
    cosines = cosine_scores(
        np.stack([vectors[s] for s in pairs.sentences1]), np.stack([vectors[s] for s in pairs.sentences2])
    )
    groups = np.array([group_of(g) for g in pairs.scores])
    summary = {}
    for index, (low, high) in enumerate(GROUPS):
        values = cosines[groups == index]
        summary[f"{low}-{high}"] = {
            "n": int(values.size),
            "mean": float(values.mean()) if values.size else None,
            "std": float(values.std(ddof=1)) if values.size > 1 else None,
        }
    return {"gold": pairs.scores.tolist(), "cosine": cosines.tolist(), "groups": summary}


def plot_density(results: dict[str, dict], path: str) -> None:
    """One panel per model (``{name: pair_cosines(...)}``), one density curve per gold group."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from scipy.stats import gaussian_kde

    fig, axes = plt.subplots(1, len(results), figsize=(4.5 * len(results), 4), squeeze=False, sharey=True)
    grid = np.linspace(-1.0, 1.0, 400)
    for ax, (name, result) in zip(axes[0], results.items()):
        cosines, groups = np.asarray(result["cosine"]), np.array([group_of(g) for g in result["gold"]])
        for index, (low, high) in enumerate(GROUPS):
            values = cosines[groups == index]
            if values.size > 1 and values.std() > 0:
                density = gaussian_kde(values)(grid)
                ax.fill_between(grid, index, index + 0.9 * density / density.max(), alpha=0.6)
            ax.text(-0.98, index + 0.05, f"n={values.size}", fontsize=7)
        ax.set_yticks(range(len(GROUPS)), [f"{low}-{high}" for low, high in GROUPS])
        ax.set_xlabel("cosine similarity")
        ax.set_title(name)
    axes[0][0].set_ylabel("gold similarity rating")
    fig.tight_layout()
    fig.savefig(path, dpi=150)
    plt.close(fig)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="+", help="model directories (any encoder senteval_eval.py loads)")
    parser.add_argument("--name", nargs="+", default=None, help="panel names (default: the folders' names)")
    parser.add_argument("--output_dir", required=True)
    parser.add_argument("--senteval_data_dir", default=None, help="default: $CSE_DATA_DIR/senteval")
    parser.add_argument("--batch_size", type=int, default=128)
    args = parser.parse_args(argv)
    names = args.name or [os.path.basename(os.path.normpath(m)) for m in args.models]
    if len(names) != len(args.models):
        parser.error(f"{len(args.models)} model(s) but {len(names)} --name(s)")
    (pairs,) = load_sts_task("STSBenchmark", "test", senteval_dir(args.senteval_data_dir)).values()
    os.makedirs(args.output_dir, exist_ok=True)
    results = {}
    for name, model_dir in zip(names, args.models):
        model = load_model(model_dir)
        results[name] = {"model": model_dir, **pair_cosines(lambda s: model.encode(s, args.batch_size).numpy(), pairs)}
        with open(os.path.join(args.output_dir, f"{name}_stsb_test_cosines.json"), "w", encoding="utf-8") as f:
            json.dump(results[name], f)
        print(name, json.dumps(results[name]["groups"]))
    plot_density(results, os.path.join(args.output_dir, "density.png"))
    print(f"density plot: {os.path.join(args.output_dir, 'density.png')}")


if __name__ == "__main__":
    main()
