from types import SimpleNamespace

import pytest
import torch

from cse.pooling import POOLERS, pool

# Two sequences, length 3; the second has one padded position whose states are huge so that any
# leak of padding into a mean or a max shows.
MASK = torch.tensor([[1, 1, 1], [1, 1, 0]])
BIG = 1e6
L0 = torch.tensor([[[1.0, 2.0], [3.0, -4.0], [5.0, 0.0]], [[-1.0, -2.0], [-3.0, 6.0], [BIG, BIG]]])  # embeddings
L1 = torch.tensor([[[2.0, 0.0], [0.0, 2.0], [4.0, 4.0]], [[1.0, 1.0], [3.0, -1.0], [BIG, -BIG]]])  # layer 1
L2 = torch.tensor([[[0.0, 0.0], [2.0, 2.0], [-2.0, 4.0]], [[5.0, 1.0], [1.0, 3.0], [-BIG, BIG]]])  # layer 2 = last
POOLER_OUT = torch.tensor([[0.5, -0.5], [0.25, 0.75]])


def outputs():
    return SimpleNamespace(last_hidden_state=L2, hidden_states=(L0, L1, L2), pooler_output=POOLER_OUT)


# Expected values worked out by hand from the tensors above.
EXPECTED = {
    "cls": [[0.5, -0.5], [0.25, 0.75]],
    "cls_before_pooler": [[0.0, 0.0], [5.0, 1.0]],
    "avg": [[0.0, 2.0], [3.0, 2.0]],  # (0+2-2)/3, (0+2+4)/3 ; (5+1)/2, (1+3)/2
    # (layer1 + last)/2 averaged: seq0 rows (1,0),(1,2),(1,4) -> (1,2); seq1 rows (3,1),(2,1) -> (2.5,1)
    "avg_first_last": [[1.0, 2.0], [2.5, 1.0]],
    # (layer1 + last)/2 is also the top-2 mean here because the model has two layers
    "avg_top2": [[1.0, 2.0], [2.5, 1.0]],
    "max": [[2.0, 4.0], [5.0, 3.0]],
}


@pytest.mark.parametrize("name", POOLERS)
def test_pooler_on_hand_made_padded_batch(name):
    torch.testing.assert_close(pool(name, MASK, outputs()), torch.tensor(EXPECTED[name]))


def test_first_last_uses_first_transformer_layer_not_embeddings():
    # with three layers the two poolers differ; avg_first_last reads hidden_states[1], as SimCSE's evaluation
    h3 = torch.zeros_like(L2)
    out = SimpleNamespace(last_hidden_state=h3, hidden_states=(L0, L1, L2, h3), pooler_output=None)
    torch.testing.assert_close(pool("avg_first_last", MASK, out), torch.tensor([[1.0, 1.0], [1.0, 0.0]]))
    torch.testing.assert_close(pool("avg_top2", MASK, out), torch.tensor([[0.0, 1.0], [1.5, 1.0]]))


def test_errors():
    out = SimpleNamespace(last_hidden_state=L2, hidden_states=None, pooler_output=None)
    with pytest.raises(ValueError, match="pooling layer"):
        pool("cls", MASK, out)
    with pytest.raises(ValueError, match="output_hidden_states"):
        pool("avg_top2", MASK, out)
    with pytest.raises(ValueError, match="unknown pooler"):
        pool("mean", MASK, outputs())
