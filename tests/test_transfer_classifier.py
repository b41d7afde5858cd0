"""The batched SentEval classifiers against a literal, one-at-a-time re-statement of SentEval's
``PyTorchClassifier.fit`` (nn.Linear, torch.optim, np.random shuffles), on small synthetic data."""

import copy

import numpy as np
import pytest
import torch

from cse.evaluation.classifier import ClassifierConfig, Split, predict, train_classifiers
from cse.evaluation.transfer import binary_f1


def senteval_fit(X, y, nclasses, l2reg, config, train, dev):
    """SentEval's MLP(nhid=0) fit, line by line (validation_data, or validation_split=0.05 if dev is None)."""
    np.random.seed(config.seed)
    torch.manual_seed(config.seed)
    X, y = X[train], y[train]
    if dev is None:
        permutation = np.random.permutation(len(X))
        cut = int(0.05 * len(X))
        trainX, trainy, devX, devy = (
            X[permutation[cut:]],
            y[permutation[cut:]],
            X[permutation[:cut]],
            y[permutation[:cut]],
        )
    else:
        trainX, trainy, devX, devy = X, y, dev[0], dev[1]
    trainX, devX = torch.FloatTensor(trainX), torch.FloatTensor(devX)
    trainy, devy = torch.LongTensor(trainy), torch.LongTensor(devy)
    model = torch.nn.Sequential(torch.nn.Linear(X.shape[1], nclasses))
    loss_fn = torch.nn.CrossEntropyLoss()  # SentEval's later size_average = False has no effect
    opt = torch.optim.Adam if config.optim == "adam" else torch.optim.RMSprop
    optimizer = opt(model.parameters(), weight_decay=l2reg)
    nepoch, best, stop, count = 0, -1, False, 0
    while not stop and nepoch <= config.max_epoch:
        for _ in range(config.epoch_size):
            permutation = np.random.permutation(len(trainX))
            for i in range(0, len(trainX), config.batch_size):
                idx = torch.LongTensor(permutation[i : i + config.batch_size])
                loss = loss_fn(model(trainX[idx]), trainy[idx])
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
        nepoch += config.epoch_size
        with torch.no_grad():
            accuracy = (model(devX).argmax(1) == devy).double().mean().item()
        if accuracy > best:
            best, best_model = accuracy, copy.deepcopy(model)
        else:  # early_stop=True
            if count >= config.tenacity:
                stop = True
            count += 1
    return best, best_model


@pytest.mark.parametrize(
    "config",
    [
        ClassifierConfig(optim="adam", batch_size=16, tenacity=2, epoch_size=2, max_epoch=12, kfold=2, seed=7),
        ClassifierConfig(optim="rmsprop", batch_size=32, tenacity=1, epoch_size=1, max_epoch=30, kfold=2),
    ],
    ids=["adam", "rmsprop"],
)
def test_batched_classifiers_equal_senteval_one_at_a_time(config):
    rng = np.random.RandomState(0)
    n, d, nclasses = 150, 6, 3
    X = rng.randn(n, d).astype(np.float32)
    y = (X @ rng.randn(d, nclasses) + rng.randn(n, nclasses)).argmax(1)
    # two explicit splits of unequal sizes (ragged last batches) and one 5% hold-out split
    splits = [Split(np.arange(0, 100), np.arange(100, 150)), Split(np.arange(30, 150), np.arange(0, 30))]
    splits.append(Split(np.arange(0, 137)))
    penalties = np.array([[1e-5, 1e-2, 0.5]] * 3)
    weight, bias, acc = train_classifiers(torch.from_numpy(X), torch.from_numpy(y), nclasses, splits, penalties, config)
    pred = predict(torch.from_numpy(X), weight, bias)
    for s, split in enumerate(splits):
        for r, reg in enumerate(penalties[s]):
            dev = None if split.dev is None else (X[split.dev], y[split.dev])
            best, model = senteval_fit(X, y, nclasses, reg, config, split.train, dev)
            assert acc[s, r] == pytest.approx(best, abs=1e-12), (s, r)
            np.testing.assert_allclose(weight[s, :, r].T.numpy(), model[0].weight.detach().numpy(), atol=2e-5)
            np.testing.assert_allclose(bias[s, r].numpy(), model[0].bias.detach().numpy(), atol=2e-5)
            expected = model(torch.from_numpy(X)).argmax(1).numpy()
            assert (pred[s, r] == expected).mean() > 0.99


def test_f1_of_the_positive_class():
    pred, gold = np.array([1, 1, 0, 0, 1]), np.array([1, 0, 1, 0, 1])
    # tp 2, fp 1, fn 1: precision 2/3, recall 2/3
    assert binary_f1(pred, gold) == pytest.approx(2 / 3)
    assert binary_f1(np.zeros(3, int), np.array([1, 0, 1])) == 0.0


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="optim"):
        ClassifierConfig(optim="sgd")
    with pytest.raises(ValueError):
        ClassifierConfig(kfold=1)
    X, y = torch.zeros(4, 2), torch.zeros(4, dtype=torch.long)
    with pytest.raises(ValueError, match="too few"):
        train_classifiers(X, y, 2, [Split(np.arange(4))], np.array([[0.1]]), ClassifierConfig())
