"""SentEval's classifier (``nhid 0``: multinomial logistic regression on frozen embeddings) and its three
validation schemes, re-implemented so that every classifier of a task trains at once.

One SentEval classifier (``senteval/tools/classifier.py``, ``MLP`` with ``nhid=0``) is an
``nn.Linear(d, C)`` trained on the batch-mean cross-entropy (SentEval sets ``size_average = False``
after constructing the loss, which PyTorch >= 0.4.1 ignores, so the loss it actually minimises is the
mean) with Adam or RMSprop at PyTorch's default settings, the L2 penalty as the optimizer's
``weight_decay`` (on weight and bias). Every ``epoch_size`` passes over the shuffled training set it
scores the held-out set and keeps the best model; it stops once the held-out accuracy has failed to
improve ``tenacity + 1`` times (the count is never reset), or after ``max_epoch`` passes. Each
classifier re-seeds NumPy and PyTorch with the task seed (1111), so all of them start from the same
``nn.Linear`` initialisation and draw their shuffles from ``np.random.RandomState(seed)``.

The validation schemes (``senteval/tools/validation.py``) train many such classifiers: MR/CR/SUBJ/MPQA
10 outer folds x 4 penalties x 10 inner folds (400), TREC and MRPC 4 penalties x 10 folds, SST2 4
penalties; SentEval trains them one after another. Here the classifiers of one stage are one tensor
problem: weights ``(S, d, R, C)`` for S data splits x R penalties, one gathered batch per split
shared by its R penalties, and a per-classifier Adam/RMSprop whose update is masked once a classifier
has stopped (or has no batch at that step). Each classifier sees exactly the batches, updates and
early-stopping decisions it would see alone, so the results are SentEval's up to float summation
order, at a fraction of the time; the computation is deterministic on CPU and GPU.

The penalty grid is SentEval's for its PyTorch classifier, ``[10**t for t in range(-5, -1)]``
(1e-5 ... 1e-2); ``[2**t for t in range(-2, 4)]`` is the ``C`` grid of its scikit-learn logistic
regression, used only with ``usepytorch=False``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

# SentEval's L2 grid for its PyTorch classifier (validation.py, usepytorch=True).
L2_GRID = tuple(10.0**t for t in range(-5, -1))
# Torch's defaults, which SentEval's get_optimizer("adam") / ("rmsprop") use.
ADAM = {"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8}
RMSPROP = {"lr": 1e-2, "alpha": 0.99, "eps": 1e-8}


@dataclass(frozen=True)
class ClassifierConfig:
    """SentEval's classifier settings; :data:`CLASSIFIER_CONFIGS` holds the two SimCSE uses."""

    optim: str = "adam"
    batch_size: int = 64
    tenacity: int = 5
    epoch_size: int = 4
    max_epoch: int = 200
    kfold: int = 10
    seed: int = 1111

    def __post_init__(self):
        if self.optim not in ("adam", "rmsprop"):
            raise ValueError(f"optim must be 'adam' or 'rmsprop', got {self.optim!r}")
        if min(self.batch_size, self.epoch_size, self.max_epoch) < 1 or self.tenacity < 0 or self.kfold < 2:
            raise ValueError(f"invalid classifier settings: {self}")


# SimCSE's evaluation.py: "test" mode, and "fasttest"/"dev" mode.
CLASSIFIER_CONFIGS = {
    "test": ClassifierConfig(optim="adam", batch_size=64, tenacity=5, epoch_size=4, kfold=10),
    "dev": ClassifierConfig(optim="rmsprop", batch_size=128, tenacity=3, epoch_size=2, kfold=5),
}


@dataclass
class Split:
    """Training rows and held-out (early-stopping) rows of one classifier, as indices into ``X``;
    ``dev=None`` holds out a random 5% of ``train`` (SentEval's ``validation_split=0.05``)."""

    train: np.ndarray
    dev: np.ndarray | None = None


def _linear_init(d: int, nclasses: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``nn.Linear(d, nclasses)``'s initial weight (transposed, ``(d, C)``) and bias after
    ``torch.manual_seed(seed)``: the draws of ``reset_parameters``, in its order."""
    generator = torch.Generator().manual_seed(seed)
    weight = torch.empty(nclasses, d)
    torch.nn.init.kaiming_uniform_(weight, a=math.sqrt(5), generator=generator)
    bound = 1.0 / math.sqrt(d)
    bias = torch.empty(nclasses).uniform_(-bound, bound, generator=generator)
    return weight.T.contiguous(), bias


def _padded(rows: list[np.ndarray]) -> tuple[torch.Tensor, torch.Tensor]:
    """Index rows of unequal length as one ``(n, max_len)`` tensor (padding 0) and its validity mask."""
    width = max(len(r) for r in rows)
    index = np.zeros((len(rows), width), dtype=np.int64)
    valid = np.zeros((len(rows), width), dtype=bool)
    for i, r in enumerate(rows):
        index[i, : len(r)], valid[i, : len(r)] = r, True
    return torch.from_numpy(index), torch.from_numpy(valid)


class _Optimizer:
    """Adam or RMSprop (PyTorch's update rules and defaults) for every classifier at once; parameters
    are stacked along dimension 0 by data split. A split that is not ``active`` at a step (it has no
    batch left in this pass) keeps its parameters and optimizer state, as if it had not stepped."""

    def __init__(self, kind: str, params: list[torch.Tensor]):
        self.kind, self.params = kind, params
        self.state = [(torch.zeros_like(p), torch.zeros_like(p)) for p in params]
        self.steps = torch.zeros(params[0].shape[0], dtype=torch.float64, device=params[0].device)

    def select(self, keep: torch.Tensor, params: list[torch.Tensor]) -> None:
        """Go on with the splits ``keep`` (booleans) only, whose parameters are now ``params``."""
        self.params, self.steps = params, self.steps[keep]
        self.state = [(a[keep], b[keep]) for a, b in self.state]

    def step(self, grads: list[torch.Tensor], active: torch.Tensor | None) -> None:
        """``active``: ``(S,)`` booleans, or ``None`` when every split steps."""
        self.steps += 1 if active is None else active
        b1, b2 = ADAM["betas"]
        if self.kind == "adam":  # bias corrections in float64, as PyTorch computes them
            step_size = (ADAM["lr"] / (1 - b1**self.steps)).float()
            bias_correction2 = torch.sqrt(1 - b2**self.steps).float()
        for i, (p, g) in enumerate(zip(self.params, grads)):
            exp_avg, sq_avg = self.state[i]
            shape = (-1,) + (1,) * (p.dim() - 1)
            if self.kind == "adam":
                exp_avg = exp_avg * b1 + g * (1 - b1)
                sq_avg = sq_avg * b2 + g * g * (1 - b2)
                denom = sq_avg.sqrt() / bias_correction2.view(shape) + ADAM["eps"]
                update = step_size.view(shape) * exp_avg / denom
            else:
                alpha = RMSPROP["alpha"]
                sq_avg = sq_avg * alpha + g * g * (1 - alpha)
                update = RMSPROP["lr"] * g / (sq_avg.sqrt() + RMSPROP["eps"])
            if active is not None:
                mask = active.view(shape)
                update = update * mask
                exp_avg = torch.where(mask, exp_avg, self.state[i][0])
                sq_avg = torch.where(mask, sq_avg, self.state[i][1])
            p.sub_(update)
            self.state[i] = (exp_avg, sq_avg)


def train_classifiers(
    X: torch.Tensor,
    y: torch.Tensor,
    nclasses: int,
    splits: list[Split],
    penalties: np.ndarray,
    config: ClassifierConfig,
) -> tuple[torch.Tensor, torch.Tensor, np.ndarray]:
    """Train ``len(splits) x penalties.shape[1]`` SentEval classifiers at once.

    ``X``: ``(N, d)`` features (float32, on the device to train on); ``y``: ``(N,)`` labels;
    ``penalties``: ``(S, R)`` L2 penalties (classifier ``(s, r)`` trains on ``splits[s]`` with
    ``penalties[s, r]``). Returns the kept (best held-out) weights ``(S, d, R, C)``, biases
    ``(S, R, C)`` and best held-out accuracies ``(S, R)``.
    """
    device, d = X.device, X.shape[1]
    S, R = penalties.shape
    if S != len(splits):
        raise ValueError(f"{len(splits)} splits but penalties for {S}")
    # Each classifier's RandomState(seed): the 5% hold-out permutation (if any), then one per pass.
    rngs, trains, devs = [], [], []
    for split in splits:
        rng = np.random.RandomState(config.seed)
        train, dev = np.asarray(split.train), split.dev
        if dev is None:
            perm = rng.permutation(len(train))
            cut = int(0.05 * len(train))
            train, dev = train[perm[cut:]], train[perm[:cut]]
        if len(train) == 0 or len(dev) == 0:
            raise ValueError("a classifier needs training and held-out rows; the task has too few examples")
        rngs.append(rng)
        trains.append(train)
        devs.append(np.asarray(dev))
    dev_index, dev_valid = (t.to(device) for t in _padded(devs))
    dev_size = dev_valid.sum(1).to(torch.float64)

    w0, b0 = _linear_init(d, nclasses, config.seed)
    weight = w0.to(device)[None, :, None, :].repeat(S, 1, R, 1)  # (S, d, R, C)
    bias = b0.to(device)[None, None, :].repeat(S, R, 1)  # (S, R, C)
    reg = torch.as_tensor(penalties, dtype=X.dtype, device=device)
    optimizer = _Optimizer(config.optim, [weight, bias])

    def expand(t, like):  # (S, R) -> broadcastable to (S, d, R, C) or (S, R, C)
        return t[:, None, :, None] if like.dim() == 4 else t[:, :, None]

    best_w, best_b = weight.clone(), bias.clone()
    best_acc = torch.full((S, R), -1.0, dtype=torch.float64, device=device)
    bad_evals = torch.zeros((S, R), dtype=torch.long, device=device)
    stopped = torch.zeros((S, R), dtype=torch.bool, device=device)
    onehot_y = torch.nn.functional.one_hot(y.to(device), nclasses).to(X.dtype)
    live = torch.arange(S, device=device)  # the splits still training; the others are dropped
    n_epoch = 0
    while len(live) and n_epoch <= config.max_epoch:
        n_live = len(live)
        for _ in range(config.epoch_size):
            batches, batch_valid = _padded([train[rng.permutation(len(train))] for rng, train in zip(rngs, trains)])
            batches, batch_valid = batches.to(device), batch_valid.to(device)
            for start in range(0, batches.shape[1], config.batch_size):
                index = batches[:, start : start + config.batch_size]
                valid = batch_valid[:, start : start + config.batch_size].to(X.dtype)  # (L, B)
                count = valid.sum(1)
                xb = X[index]  # (L, B, d)
                logits = torch.bmm(xb, weight.view(n_live, d, R * nclasses)).view(n_live, -1, R, nclasses)
                logits = logits + bias[:, None]
                # d(mean cross-entropy)/d(logits) = (softmax - onehot) / batch size, on the valid rows
                scale = valid / count.clamp_min(1)[:, None]
                grad_logits = (logits.softmax(-1) - onehot_y[index][:, :, None, :]) * scale[:, :, None, None]
                grad_w = torch.bmm(xb.transpose(1, 2), grad_logits.reshape(n_live, -1, R * nclasses))
                grad_b = grad_logits.sum(1)
                # L2 as the optimizer's weight_decay: added to the gradient of weight and bias
                grad_w = grad_w.view_as(weight) + expand(reg, weight) * weight
                grad_b = grad_b + expand(reg, bias) * bias
                # A stopped classifier of a live split goes on training: its kept parameters no longer change.
                active = count > 0
                optimizer.step([grad_w, grad_b], None if bool(active.all()) else active)
        n_epoch += config.epoch_size
        logits = _logits(X, weight, bias)[dev_index, torch.arange(n_live, device=device)[:, None]]
        correct = ((logits.argmax(-1) == y.to(device)[dev_index][:, :, None]) & dev_valid[:, :, None]).sum(1)
        accuracy = correct.to(torch.float64) / dev_size[:, None]  # (L, R)
        done = stopped[live]
        improved = (accuracy > best_acc[live]) & ~done
        best_acc[live] = torch.where(improved, accuracy, best_acc[live])
        best_w[live] = torch.where(expand(improved, weight), weight, best_w[live])
        best_b[live] = torch.where(expand(improved, bias), bias, best_b[live])
        worse = ~improved & ~done
        stopped[live] = done | (worse & (bad_evals[live] >= config.tenacity))
        bad_evals[live] += worse.long()
        keep = ~stopped[live].all(1)
        if not bool(keep.all()):  # drop the splits whose classifiers have all stopped
            live, weight, bias, reg = live[keep], weight[keep], bias[keep], reg[keep]
            dev_index, dev_valid, dev_size = dev_index[keep], dev_valid[keep], dev_size[keep]
            kept = keep.tolist()
            rngs = [r for r, k in zip(rngs, kept) if k]
            trains = [t for t, k in zip(trains, kept) if k]
            optimizer.select(keep, [weight, bias])
    return best_w, best_b, best_acc.cpu().numpy()


def _logits(X: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """Every row of ``X`` under every classifier ``(S, d, R, C)``, as one matrix product: ``(N, S, R, C)``."""
    S, d, R, C = weight.shape
    return (X @ weight.permute(1, 0, 2, 3).reshape(d, S * R * C)).view(-1, S, R, C) + bias


def predict(X: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> np.ndarray:
    """Predicted classes (the first of tied maxima) of the rows of ``X``: ``(S, R, N)``."""
    return _logits(X, weight, bias).argmax(-1).permute(1, 2, 0).cpu().numpy()


def _accuracy(pred: np.ndarray, y: np.ndarray) -> float:
    return float((pred == y).mean())


def _round_pct(value: float) -> float:
    return round(100 * float(value), 2)


def stratified_folds(n_splits: int, seed: int):
    """scikit-learn's ``StratifiedKFold(n_splits, shuffle=True, random_state=seed)``, SentEval's folds.
    scikit-learn is imported here, not with the module: only the transfer tasks use it, and it takes
    seconds to load (the trainer and every command's ``--help`` import this module)."""
    from sklearn.model_selection import StratifiedKFold

    return StratifiedKFold(n_splits, shuffle=True, random_state=seed)


def inner_kfold(X: np.ndarray, y: np.ndarray, nclasses: int, config: ClassifierConfig, device="cpu") -> dict:
    """SentEval's ``InnerKFoldClassifier`` (MR, CR, SUBJ, MPQA): ``kfold`` outer folds; in each, the
    penalty with the best mean accuracy over ``kfold`` inner folds of the outer training part (each
    inner classifier early-stopped on its inner test fold), then one classifier with that penalty on
    the whole training part (5% held out for early stopping), scored on the outer test fold. Folds are
    scikit-learn's ``StratifiedKFold(shuffle=True, random_state=1111)``, as in SentEval."""
    folds = list(stratified_folds(config.kfold, 1111).split(X, y))
    inner = stratified_folds(config.kfold, 1111)
    splits = [
        Split(train_idx[a], train_idx[b]) for train_idx, _ in folds for a, b in inner.split(X[train_idx], y[train_idx])
    ]
    Xt, yt = torch.as_tensor(X, dtype=torch.float32, device=device), torch.as_tensor(y, device=device)
    penalties = np.tile(np.array(L2_GRID), (len(splits), 1))
    _, _, inner_acc = train_classifiers(Xt, yt, nclasses, splits, penalties, config)
    # (outer fold, inner fold, penalty) -> the rounded mean over inner folds, as SentEval rounds it
    scores = np.round(100 * inner_acc.reshape(len(folds), config.kfold, len(L2_GRID)).mean(1), 2)
    best = scores.argmax(1)
    final = [Split(train_idx) for train_idx, _ in folds]
    weight, bias, _ = train_classifiers(Xt, yt, nclasses, final, np.array(L2_GRID)[best][:, None], config)
    pred = predict(Xt, weight, bias)[:, 0]
    test = [_round_pct(_accuracy(pred[i][test_idx], y[test_idx])) for i, (_, test_idx) in enumerate(folds)]
    return {
        "devacc": round(float(np.mean(scores.max(1))), 2),
        "acc": round(float(np.mean(test)), 2),
        "penalties": [L2_GRID[i] for i in best],
    }


def kfold(train: tuple, test: tuple, nclasses: int, config: ClassifierConfig, device="cpu") -> dict:
    """SentEval's ``KFoldClassifier`` (TREC, MRPC): the penalty with the best mean accuracy over
    ``kfold`` folds of the training set (``StratifiedKFold(shuffle=True, random_state=seed)``), then
    one classifier with it on the whole training set (5% held out for early stopping), scored on the
    test set. Also returns the test predictions."""
    (X, y), (X_test, y_test) = train, test
    folds = list(stratified_folds(config.kfold, config.seed).split(X, y))
    Xt, yt = torch.as_tensor(X, dtype=torch.float32, device=device), torch.as_tensor(y, device=device)
    splits = [Split(a, b) for a, b in folds]
    _, _, acc = train_classifiers(Xt, yt, nclasses, splits, np.tile(np.array(L2_GRID), (len(splits), 1)), config)
    scores = np.round(100 * acc.mean(0), 2)
    best = int(scores.argmax())
    weight, bias, _ = train_classifiers(
        Xt, yt, nclasses, [Split(np.arange(len(y)))], np.array([[L2_GRID[best]]]), config
    )
    pred = predict(torch.as_tensor(X_test, dtype=torch.float32, device=device), weight, bias)[0, 0]
    return {
        "devacc": float(scores.max()),
        "acc": _round_pct(_accuracy(pred, y_test)),
        "penalty": L2_GRID[best],
        "predictions": pred,
    }


def split_classifier(train: tuple, dev: tuple, test: tuple, nclasses: int, config: ClassifierConfig, device="cpu"):
    """SentEval's ``SplitClassifier`` (SST2): one classifier per penalty on the training set,
    early-stopped and scored on the dev set; the best penalty's classifier retrained (identically:
    same seed, same data) and scored on the test set."""
    X = np.concatenate([train[0], dev[0]])
    y = np.concatenate([train[1], dev[1]])
    Xt, yt = torch.as_tensor(X, dtype=torch.float32, device=device), torch.as_tensor(y, device=device)
    split = Split(np.arange(len(train[1])), np.arange(len(train[1]), len(y)))
    weight, bias, acc = train_classifiers(Xt, yt, nclasses, [split], np.array([L2_GRID]), config)
    # SentEval retrains the chosen penalty with the same seed and data, which reproduces this classifier.
    scores = np.round(100 * acc[0], 2)
    best = int(scores.argmax())
    pred = predict(torch.as_tensor(test[0], dtype=torch.float32, device=device), weight, bias)[0, best]
    return {"devacc": float(scores.max()), "acc": _round_pct(_accuracy(pred, test[1])), "penalty": L2_GRID[best]}
