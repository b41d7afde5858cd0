"""CoT-BERT: the extended InfoNCE (Eq. 2-3) against float64 hand computations."""

import math

import pytest
import torch

from cse.losses.cotbert import CoTBERTLoss

# --- the loss: float64 hand computations (docs/methods/cotbert.md, "The loss") ---------------------

R = [[1.0, 0.0], [0.0, 1.0]]
R_POS = [[0.8, 0.6], [0.6, 0.8]]
R_NEG = [[1.0, 1.0], [-1.0, 1.0]]
TAU = 0.05
# each row's loss and their mean, worked by hand: the blocks / tau are A = [[16, 12], [12, 16]],
# B = 10 sqrt(2) [[1, -1], [1, 1]], C = [[14 sqrt(2), -2 sqrt(2)], [14 sqrt(2), 2 sqrt(2)]]
HAND_ROWS = [3.8249470704, 3.8283453061]
HAND_MEAN = 3.8266461882
HAND_WITHOUT_PAIRS = 0.2230572996  # Table 4's ablation: no a_i+j- block
HAND_INFONCE = 0.0181499279  # the A block alone: SimCSE's / PromptBERT's InfoNCE


def cos(a, b):
    return sum(x * y for x, y in zip(a, b)) / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


def hand_row(i, r, pos, neg, tau, pair_negatives=True):
    """-log( a_ii+ / sum_j (a_ij+ + a_ij- + a_i+j-) ), term by term (Eq. 3), j over the whole batch."""
    terms = [math.exp(cos(r[i], pos[j]) / tau) for j in range(len(r))]
    terms += [math.exp(cos(r[i], neg[j]) / tau) for j in range(len(r))]
    if pair_negatives:
        terms += [math.exp(cos(pos[i], neg[j]) / tau) for j in range(len(r))]
    return -math.log(math.exp(cos(r[i], pos[i]) / tau) / sum(terms))


def as_tensors(*rows):
    return [torch.tensor(r, dtype=torch.float64) for r in rows]


def test_hand_rows_are_eq3():
    """The hand values above are Eq. 3's, row by row."""
    for i, expected in enumerate(HAND_ROWS):
        assert hand_row(i, R, R_POS, R_NEG, TAU) == pytest.approx(expected, abs=1e-9)


def test_loss_matches_hand_computation():
    """In float32 (the cosine logits' precision, as InfoNCE's) the loss is the hand mean."""
    loss = CoTBERTLoss(temperature=TAU)(*as_tensors(R, R_POS, R_NEG))
    assert float(loss) == pytest.approx(HAND_MEAN, abs=1e-5)


def test_loss_float64_to_1e12(monkeypatch):
    """With the cosine computed in float64 the loss is the hand value to 1e-12."""
    from cse.losses import cotbert

    def cosine64(anchors, candidates, temperature):
        a = torch.nn.functional.normalize(anchors, dim=-1)
        c = torch.nn.functional.normalize(candidates, dim=-1)
        return a @ c.T / temperature

    monkeypatch.setattr(cotbert, "cosine_logits", cosine64)
    r, pos, neg = as_tensors(R, R_POS, R_NEG)
    exact = sum(hand_row(i, R, R_POS, R_NEG, TAU) for i in range(2)) / 2
    assert float(CoTBERTLoss(temperature=TAU)(r, pos, neg)) == pytest.approx(exact, abs=1e-12)
    assert exact == pytest.approx(HAND_MEAN, abs=1e-9)
    without = sum(hand_row(i, R, R_POS, R_NEG, TAU, pair_negatives=False) for i in range(2)) / 2
    assert without == pytest.approx(HAND_WITHOUT_PAIRS, abs=1e-9)
    assert float(CoTBERTLoss(temperature=TAU, pair_negatives=False)(r, pos, neg)) == pytest.approx(without, abs=1e-12)
    # the blocks hold j = i: the columns 2 + i and 4 + i are sim(r_i, r-_i) and sim(r+_i, r-_i)
    logits = cotbert.extended_logits(r, pos, neg, TAU, True)
    for i in range(2):
        assert float(logits[i, 2 + i]) == pytest.approx(cos(R[i], R_NEG[i]) / TAU, abs=1e-12)
        assert float(logits[i, 4 + i]) == pytest.approx(cos(R_POS[i], R_NEG[i]) / TAU, abs=1e-12)
    assert float(logits[0, 4]) == pytest.approx(14 * math.sqrt(2), abs=1e-12)
    assert float(logits[1, 5]) == pytest.approx(2 * math.sqrt(2), abs=1e-12)


def test_infonce_block_alone():
    """The A block alone is SimCSE's InfoNCE (the hand value of the spec), the base the two blocks extend."""
    rows = [math.exp(cos(R[i], R_POS[i]) / TAU) / sum(math.exp(cos(R[i], p) / TAU) for p in R_POS) for i in range(2)]
    infonce = -sum(map(math.log, rows)) / 2
    assert infonce == pytest.approx(HAND_INFONCE, abs=1e-9)


def test_groups_are_separate_losses():
    """``group_size`` 2 of a batch of 4: the mean of the two halves' own losses (DataParallel's two replicas)."""
    torch.manual_seed(0)
    r, pos, neg = torch.randn(3, 4, 8, dtype=torch.float64).unbind(0)
    halves = [CoTBERTLoss(gather_across_devices=False)(r[s], pos[s], neg[s]) for s in (slice(0, 2), slice(2, 4))]
    grouped = CoTBERTLoss(group_size=2, gather_across_devices=False)(r, pos, neg)
    assert float(grouped) == pytest.approx(float(sum(halves) / 2), abs=1e-6)
    whole = CoTBERTLoss(gather_across_devices=False)(r, pos, neg)
    assert float(whole) != pytest.approx(float(grouped), abs=1e-3)
    assert float(CoTBERTLoss(group_size=4)(r, pos, neg)) == pytest.approx(float(whole), abs=1e-6)


@pytest.mark.parametrize("settings", [{"temperature": 0.0}, {"group_size": 0}])
def test_loss_refuses_undefined_settings(settings):
    with pytest.raises(ValueError, match="must be"):
        CoTBERTLoss(**settings)
