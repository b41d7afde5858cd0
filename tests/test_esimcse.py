"""ESimCSE: the loss with and without its queue against float64 hand computations, the queue's order
and content, the momentum update's values and timing, the dropout-free momentum forward, the
released word repetition's exact count distribution and bounds, its flags, the state a checkpoint
holds, and ``run_esimcse.py`` end to end, alone and with MixCSE."""

import math
import os
import random
import subprocess
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import AutoTokenizer, TrainerCallback

import run_cse
import run_esimcse
from cse.arguments import parse_args
from cse.data import TwoViewCollator
from cse.errors import CSEUsageError
from cse.losses.esimcse import ESimCSELoss
from cse.losses.mixcse import MixCSELoss
from cse.methods.esimcse import ESimCSE, ESimCSEArguments
from cse.modeling import CSEModel
from cse.parts import Step, why_not
from cse.registry import get
from cse.repetition import repeated, repetition_choices
from cse.run_names import PARTS_STATE_NAME

from .conftest import REPO, SENTENCES, TOKENIZERS, batches_digest, recorded_batches, small_run_argv, torchrun

# --- the loss: float64 hand computations (docs/methods/esimcse.md, "The loss") ---------------------

Z1 = [[1.0, 0.0], [0.0, 1.0]]
Z2 = [[1.0, 1.0], [-1.0, 2.0]]
QUEUE = [[1.0, -1.0], [3.0, 1.0]]


def cos(a, b):
    return sum(x * y for x, y in zip(a, b)) / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


def hand_loss(z1, z2, queue, tau):
    """(1/N) sum_i -log( e^{s(z1_i, z2_i)/tau} / (sum_j e^{s(z1_i, z2_j)/tau} + sum_m e^{s(z1_i, q_m)/tau}) )."""
    rows = []
    for i, anchor in enumerate(z1):
        columns = [cos(anchor, c) / tau for c in z2] + [cos(anchor, q) / tau for q in queue]
        rows.append(-(columns[i] - math.log(sum(math.exp(c) for c in columns))))
    return sum(rows) / len(rows)


def tensors(*rows):
    return [torch.tensor(r, dtype=torch.float64) for r in rows]


@pytest.mark.parametrize(
    "tau, without_queue, with_queue",
    [(1.0, 0.43895498904753955, 1.1150225578925725), (0.05, 0.01166406982281476, 2.4353452670072047)],
)
def test_the_loss_is_infonce_with_the_queue_in_each_denominator(tau, without_queue, with_queue):
    # the hand formula reproduces the figures computed for the cosines S and Q of these vectors
    assert hand_loss(Z1, Z2, [], tau) == pytest.approx(without_queue, rel=1e-14)
    assert hand_loss(Z1, Z2, QUEUE, tau) == pytest.approx(with_queue, rel=1e-14)
    z1, z2, queue = tensors(Z1, Z2, QUEUE)
    loss = ESimCSELoss(temperature=tau)
    assert float(loss(z1, z2)) == pytest.approx(without_queue, rel=1e-6)  # empty queue: SimCSE's InfoNCE
    loss.queue = queue
    assert float(loss(z1, z2)) == pytest.approx(with_queue, rel=1e-6)
    loss.queue = queue[:0]  # a queue of no rows is none
    assert float(loss(z1, z2)) == pytest.approx(without_queue, rel=1e-6)


def test_queue_rows_are_raw_constants_whose_scale_does_not_matter():
    z1, z2, queue = tensors(Z1, Z2, QUEUE)
    z1.requires_grad_(True)
    queue.requires_grad_(True)
    loss = ESimCSELoss(temperature=0.05)
    loss.queue = queue
    value = loss(z1, z2)
    value.backward()
    assert queue.grad is None and z1.grad is not None  # detached: no gradient reaches the queue
    loss.queue = 7 * queue.detach()
    assert float(loss(z1, z2).detach()) == pytest.approx(float(value.detach()), rel=1e-6)
    # the separated terms add up to the loss: the in-batch softmax, and what the queue adds to it
    with torch.no_grad():
        terms, statistics = loss.terms(z1, z2, separate=True)
    assert float(terms["contrastive"]) == pytest.approx(0.01166406982281476, rel=1e-6)
    assert float(terms["contrastive"] + terms["queue"]) == pytest.approx(2.4353452670072047, rel=1e-6)
    assert 0 < float(statistics["queue_share"]) < 1


def test_the_queue_joins_mixcses_softmax_row_by_row():
    g = torch.Generator().manual_seed(0)
    z1, z2, queue = (torch.randn(n, 5, generator=g, dtype=torch.float64) for n in (4, 4, 3))
    base = MixCSELoss(temperature=0.05)
    loss = ESimCSELoss(temperature=0.05, base=base)
    loss.queue = queue
    (block,), _ = base.logit_blocks(z1, z2)
    # each of MixCSE's N x 3N rows gains the 3 columns cos(z1_i, q_m) / tau
    by_hand = []
    for i in range(4):
        columns = block.logits[i].tolist() + [cos(z1[i].tolist(), q.tolist()) / 0.05 for q in queue]
        by_hand.append(-(columns[i] - math.log(sum(math.exp(c) for c in columns))))
    assert float(loss(z1, z2)) == pytest.approx(sum(by_hand) / 4, rel=1e-6)
    terms, statistics = loss.terms(z1, z2)
    assert {"mix_score", "queue_share"} <= set(statistics)
    with pytest.raises(ValueError, match="the queue joins the base's softmax"):
        ESimCSELoss(temperature=0.1, base=base)


# --- the queue and the momentum encoder -----------------------------------------------------------


def part_with(**flags):
    part = ESimCSE(ESimCSEArguments(**flags), SimpleNamespace(temp=0.05))
    part.loss(None, None, frozenset())
    part.width = 2  # what setup reads from the model: the queue rows' width
    return part


class Backbone(torch.nn.Module):
    def __init__(self, value):
        super().__init__()
        self.w = torch.nn.Parameter(torch.full((2,), value, dtype=torch.float64))


def test_queue_order_over_three_steps_keeps_the_newest_rows():
    """neg_size 3, batches of 2 with momentum embeddings a1 a2 | b1 b2 | c1 c2."""
    part = part_with(queue_size=3)
    part.momentum = {"w": torch.zeros(2, dtype=torch.float64)}
    batches = [torch.tensor([[1.0, 0.0], [2.0, 0.0]]), torch.tensor([[3.0, 0.0], [4.0, 0.0]])]
    batches.append(torch.tensor([[5.0, 0.0], [6.0, 0.0]]))
    encoder = SimpleNamespace(training=True, backbone=Backbone(1.0))
    seen = []
    for batch in batches:
        seen.append(None if part.queue_loss.queue is None else part.queue_loss.queue[:, 0].tolist())
        part.momentum_embeddings = lambda encoder, inputs, batch=batch: batch
        part.terms(Step(None, encoder, {}, {}, {}, {}))
    assert seen == [None, [1.0, 2.0], [2.0, 3.0, 4.0]]  # each loss: the queue before its own batch
    assert part.queue_loss.queue[:, 0].tolist() == [4.0, 5.0, 6.0]


def test_momentum_update_is_one_minus_m_to_the_t_towards_a_constant_encoder():
    part = part_with()
    part.momentum = {"w": torch.zeros(2, dtype=torch.float64)}
    backbone = Backbone(1.0)
    expected = [0.0050000000000000044, 0.009975000000000008, 0.014925125000000013]
    for t, value in enumerate(expected, 1):
        part.momentum_update(backbone)
        assert part.momentum["w"].tolist() == [value, value]
        assert value == pytest.approx(1 - 0.995**t, rel=1e-12)


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(os.path.join(TOKENIZERS, "bert-base-uncased"))


def tiny_model(tiny_bert):
    model = CSEModel.from_pretrained(tiny_bert, pooler_type="cls", mlp_only_train=True)
    model.reset_head()
    return model


def repeated_batch(part, tokenizer, sentences, seed):
    """The training batch of ``sentences`` with ``part``'s views under ``--seed seed``, through the
    run's data path."""
    import datasets

    from cse.batches import TokenRows

    data_args = SimpleNamespace(max_seq_length=32, preprocessing_num_workers=None, overwrite_cache=False)
    corpus = datasets.Dataset.from_dict(dict(tokenizer(sentences)))
    tokenized = part.corpus(corpus, tokenizer, data_args, SimpleNamespace(seed=seed))
    rows = TokenRows(tokenized, tokenizer)
    return TwoViewCollator(tokenizer, views=[part.views])(rows.__getitems__(list(range(len(rows)))))


def test_the_momentum_forward_is_view_0s_without_dropout_through_the_online_head(tiny_bert, tokenizer):
    model = tiny_model(tiny_bert).train()
    part = part_with(momentum_start="pretrained")
    part.wrap(model, frozenset())
    part.momentum = part.start_momentum(model.backbone, seed=0)
    assert not any(name.startswith("pooler.") for name in part.momentum)  # the head stays online
    for seed in range(20):  # a seed under which some sentence's view 1 repeats a token
        batch = repeated_batch(part, tokenizer, SENTENCES[:4], seed)
        if not torch.equal(batch["input_ids"][:, 0], batch["input_ids"][:, 1]):
            break
    first, second = part.momentum_embeddings(model, batch), part.momentum_embeddings(model, batch)
    assert model.training  # the model's mode is given back
    assert torch.equal(first, second)  # eval mode: no dropout
    online = model(**batch)["embeddings"]
    assert not torch.allclose(online[:, 0], model(**batch)["embeddings"][:, 0])  # train mode: dropout
    # theta_m = theta (a pretrained start, no update yet): the model's own eval-mode embedding of view 0
    model.eval()
    with torch.no_grad():
        views = model(**batch)["embeddings"]
    assert torch.allclose(first, views[:, 0], atol=1e-6)
    changed = [i for i in range(4) if not torch.equal(batch["input_ids"][i, 0], batch["input_ids"][i, 1])]
    assert changed and all(not torch.allclose(first[i], views[i, 1], atol=1e-6) for i in changed)  # not view 1's
    # a random start is another encoder, seeded: the same seed draws the same weights
    random_start = part_with().start_momentum(model.backbone, seed=5)
    assert random_start.keys() == part.momentum.keys()
    assert all(
        torch.equal(a, b) for a, b in zip(random_start.values(), part_with().start_momentum(model.backbone, 5).values())
    )
    assert not torch.equal(
        random_start["embeddings.word_embeddings.weight"], part.momentum["embeddings.word_embeddings.weight"]
    )


@pytest.mark.e2e
def test_two_processes_with_a_global_queue_equal_one_process(tmp_path):
    """Each rank enqueues its half of two batches of 4: the global queue (M = 6) is the one-process
    queue of the whole batches in rank order, and every rank computes the one-process loss of the
    whole third batch, its half of the gradient included."""
    g = torch.Generator().manual_seed(11)
    batch = {key: torch.randn(4, 3, generator=g) for key in ("anchors", "positives", "momentum1", "momentum2")}
    save_file(batch, str(tmp_path / "batch.safetensors"))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = torchrun("esimcse_ddp_worker.py", 29641, str(tmp_path / "batch.safetensors"), str(tmp_path))
    proc = subprocess.run(cmd, env=env, timeout=300, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    ranks = [load_file(str(tmp_path / f"rank{r}.safetensors")) for r in range(2)]
    queue = torch.cat([batch["momentum1"], batch["momentum2"]])[-6:]
    loss_fn = ESimCSELoss(temperature=0.1)
    loss_fn.queue = queue
    anchors = batch["anchors"].clone().requires_grad_(True)
    loss = loss_fn(anchors, batch["positives"])
    loss.backward()
    for r, result in enumerate(ranks):
        assert torch.equal(result["global.queue"], queue)
        torch.testing.assert_close(result["global.loss"][0], loss.detach(), rtol=1e-6, atol=1e-6)
        rows = slice(2 * r, 2 * r + 2)
        torch.testing.assert_close(result["global.anchors_grad"], anchors.grad[rows], rtol=1e-5, atol=1e-7)


# --- word repetition (the released rule) -----------------------------------------------------------


def test_released_repetition_counts_for_small_lengths():
    """randrange(min(10, int(0.32 L))) with L counting [CLS] and [SEP]: the number of equally likely
    counts 0..k-1, none below L = 7."""
    counts = {length: repetition_choices("released", 0.32, length, length - 2) for length in range(3, 41)}
    assert counts[3] == counts[4] == counts[6] == 1  # int(0.96), int(1.28), int(1.92): never repeated
    assert counts[7] == 2 and counts[9] == 2 and counts[10] == 3  # int(2.24), int(2.88), int(3.2)
    assert counts[32] == 10 and counts[40] == 10  # at most 9 repeated tokens
    assert all(counts[length] == max(1, min(10, int(0.32 * length))) for length in counts)
    # the paper's rule: U{0..max(2, floor(r n))} over the n real tokens, its bound included
    assert repetition_choices("paper", 0.32, 7, 5) == 3 and repetition_choices("paper", 0.32, 32, 30) == 10


def test_repeating_a_position_writes_it_twice_in_place():
    cls, a, b, c, d, e, sep = 101, 1, 2, 3, 4, 5, 102
    assert repeated([cls, a, b, c, d, e, sep], {3}) == [cls, a, b, c, c, d, e, sep]
    assert repeated([cls, a, b, c, d, e, sep], {1, 2, 5}) == [cls, a, a, b, b, c, d, e, e, sep]
    # any positions, against writing the sentence out token by token
    rng = random.Random(0)
    for _ in range(500):
        tokens = [rng.randrange(1000) for _ in range(rng.randrange(40))]
        positions = set(rng.sample(range(len(tokens)), rng.randrange(len(tokens) + 1)))
        assert repeated(tokens, positions) == [t for i, t in enumerate(tokens) for t in [t] * (1 + (i in positions))]


def draws(part, tokens, n, max_length=32):
    """``part``'s repetition of ``tokens`` under the seeds 0..n-1: one draw per seed and sentence."""
    views = []
    for seed in range(n):
        views.append(part.repetition(SPECIAL, SimpleNamespace(max_seq_length=max_length), seed)(tokens))
    return views


SPECIAL = SimpleNamespace(all_special_ids=[101, 102, 0])  # the tokenizer's special tokens, as the part reads them


def test_released_repetition_distribution_is_exact_and_special_tokens_never_repeat():
    part = part_with()
    seven = [101, 11, 12, 13, 14, 15, 102]  # L = 7: 0 or 1 repeated token, each with probability 1/2
    views = draws(part, seven, 4000)
    lengths = [len(view) - len(seven) for view in views]
    assert set(lengths) == {0, 1} and abs(lengths.count(1) / 4000 - 0.5) < 0.03
    positions = [next(i for i in range(7) if view[i + 1] == view[i]) for view in views if len(view) == 8]
    assert set(positions) == {1, 2, 3, 4, 5}  # each real token, never [CLS] (0) or [SEP] (6)
    assert all(abs(positions.count(p) / len(positions) - 0.2) < 0.04 for p in range(1, 6))
    for short in ([101, 11, 102], [101, 11, 12, 102]):  # L = 3, 4: never changed
        assert all(view == short for view in draws(part, short, 50))
    # L = 32 (a truncated sentence): 0..9 repeated, no cap at --max_seq_length (up to 41 tokens)
    long = [101, *range(1000, 1030), 102]
    assert {len(view) - 32 for view in draws(part, long, 600)} == set(range(10))
    capped = part_with(cap_repetition=True)
    assert max(len(view) for view in draws(capped, long, 300, max_length=36)) == 36
    # one repetition per sentence and seed, whatever else is drawn in between
    repeat = part.repetition(SPECIAL, SimpleNamespace(max_seq_length=32), 3)
    first = repeat(long)
    torch.rand(100)
    random.random()
    assert repeat(long) == first


@pytest.mark.parametrize("pad_to_max_length", [False, True])
@pytest.mark.parametrize("family", ["bert-base-uncased", "roberta-base"])
def test_batches_hold_the_sentence_and_its_repetition_drawn_once_per_corpus(family, tmp_path, pad_to_max_length):
    """The whole data path (the corpus' columns, the sliced rows, the collator, the views hook) against
    each sentence's repetition drawn alone and padded by hand: view 0 the sentence, view 1 its
    repetition, both padded to the batch's longest view (at least --max_seq_length when padding to
    it), the masks exactly the tokens, token types zero; a second build reads the columns back from
    the cache."""
    import datasets

    from cse.batches import TokenRows

    tokenizer = AutoTokenizer.from_pretrained(os.path.join(TOKENIZERS, family))
    data_args = SimpleNamespace(max_seq_length=24, preprocessing_num_workers=None, overwrite_cache=False)
    path = tmp_path / "corpus.jsonl"
    path.write_text("".join(f'{{"text": "{s}"}}\n' for s in SENTENCES * 3))
    corpus = datasets.load_dataset("json", data_files=str(path), split="train", cache_dir=str(tmp_path / "cache"))
    tokenized = corpus.map(lambda r: tokenizer(r["text"], truncation=True, max_length=24), remove_columns=["text"])
    part, training_args = part_with(), SimpleNamespace(seed=5)
    with_views = part.corpus(tokenized, tokenizer, data_args, training_args)
    repeat = part.repetition(tokenizer, data_args, 5)
    assert with_views["repeated_input_ids"] == [repeat(tokens) for tokens in tokenized["input_ids"]]
    # a second build with the same seed reads the columns back from datasets' cache: nothing is written
    written = [os.stat(f["filename"]).st_mtime_ns for f in with_views.cache_files]
    again = part.corpus(tokenized, tokenizer, data_args, training_args)
    assert again.cache_files == with_views.cache_files
    assert [os.stat(f["filename"]).st_mtime_ns for f in again.cache_files] == written
    # another seed draws other repetitions, into another cache file
    other = part.corpus(tokenized, tokenizer, data_args, SimpleNamespace(seed=6))
    assert other.cache_files != with_views.cache_files
    assert other["repeated_input_ids"] == [part.repetition(tokenizer, data_args, 6)(t) for t in tokenized["input_ids"]]
    rows = TokenRows(with_views, tokenizer, 24 if pad_to_max_length else None)
    collate = TwoViewCollator(tokenizer, max_length=24 if pad_to_max_length else None, views=[part.views])
    changed = 0
    for indices in ([0, 1, 2], [3, 4, 5, 6, 7], list(range(len(rows)))):
        batch = collate(rows.__getitems__(indices))
        views = [(tokenized[i]["input_ids"], repeat(tokenized[i]["input_ids"])) for i in indices]
        width = max([24] * pad_to_max_length + [len(v) for pair in views for v in pair])
        pad = tokenizer.pad_token_id
        assert sorted(batch) == sorted(name for name in tokenized.column_names)  # the view columns taken out
        assert batch["input_ids"].tolist() == [[v + [pad] * (width - len(v)) for v in pair] for pair in views]
        masks = [[[1] * len(v) + [0] * (width - len(v)) for v in pair] for pair in views]
        assert batch["attention_mask"].tolist() == masks
        assert "token_type_ids" not in batch or not batch["token_type_ids"].any()
        changed += sum(first != second for first, second in views)
    assert changed > 0
    with pytest.raises(RuntimeError, match="repeated views"):
        part.views(TwoViewCollator(tokenizer)([dict(tokenizer(s)) for s in SENTENCES[:2]]))


def test_remade_batches_equal_a_sentence_by_sentence_padding():
    """The views' batch against padding written out per sentence and view: each view's tokens, then
    ``pad_id`` to the longest view (at least the batch's length); the mask exactly the tokens."""
    from cse.repetition import first_views, with_second_views

    rng = random.Random(0)
    for trial in range(50):
        size, length = rng.randint(1, 6), rng.randint(3, 12)
        lengths = [rng.randint(2, length) for _ in range(size)]
        sentences = [[rng.randint(1000, 2000) for _ in range(n)] for n in lengths]
        ids = [[s + [0] * (length - len(s))] * 2 for s in sentences]
        mask = [[[1] * len(s) + [0] * (length - len(s))] * 2 for s in sentences]
        batch = {"input_ids": torch.tensor(ids), "attention_mask": torch.tensor(mask)}
        if trial % 2:
            batch["token_type_ids"] = torch.ones_like(batch["input_ids"])
        assert first_views(batch) == sentences
        second = [s + [7] * rng.randint(0, 4) for s in sentences]
        out = with_second_views(batch, sentences, second, pad_id=5)
        width = max(length, *map(len, second))
        expected = [[v + [5] * (width - len(v)) for v in pair] for pair in zip(sentences, second)]
        assert out["input_ids"].tolist() == expected
        assert out["attention_mask"].tolist() == [
            [[1] * len(v) + [0] * (width - len(v)) for v in p] for p in zip(sentences, second)
        ]
        assert out["input_ids"].dtype == out["attention_mask"].dtype == torch.int64
        assert ("token_type_ids" in out) == bool(trial % 2)
        if trial % 2:
            assert not out["token_type_ids"].any()


# --- flags, state -----------------------------------------------------------------------------------


def test_the_variant_sets_the_three_readings_and_each_flag_overrides_it():
    released, paper = ESimCSEArguments(), ESimCSEArguments(variant="paper")
    assert (released.repetition, released.cap_repetition, released.momentum_start) == ("released", False, "random")
    assert (paper.repetition, paper.cap_repetition, paper.momentum_start) == ("paper", True, "pretrained")
    mixed = ESimCSEArguments(momentum_start="pretrained")
    assert (mixed.repetition, mixed.momentum_start) == ("released", "pretrained")
    with pytest.raises(ValueError, match="--queue_size 0 leaves no momentum encoder"):
        ESimCSEArguments(queue_size=0, momentum=0.9)
    with pytest.raises(ValueError, match="--momentum 1 keeps the momentum encoder at its start"):
        ESimCSEArguments(momentum=1.0)
    assert ESimCSEArguments(momentum=1.0, momentum_start="pretrained").momentum == 1.0  # a fixed pretrained encoder
    with pytest.raises(ValueError, match="--repetition must be one of"):
        ESimCSEArguments(repetition="words")


def test_state_dict_round_trips_and_refuses_another_backbone():
    part = part_with(queue_size=4)
    part.momentum = {"a": torch.ones(2), "b": torch.zeros(3)}
    part.queue_loss.queue = torch.arange(6.0).view(3, 2)
    state = part.state_dict()
    assert sorted(state) == ["momentum.a", "momentum.b", "queue"]
    other = part_with(queue_size=4)
    other.momentum = {"a": torch.zeros(2), "b": torch.ones(3)}
    other.load_state_dict(state)
    assert torch.equal(other.momentum["a"], torch.ones(2)) and torch.equal(other.queue_loss.queue, state["queue"])
    stranger = part_with(queue_size=4)
    stranger.momentum = {"a": torch.zeros(2)}
    with pytest.raises(CSEUsageError, match="momentum encoder of another backbone"):
        stranger.load_state_dict(state)
    small = part_with(queue_size=2)
    small.momentum = {"a": torch.zeros(2), "b": torch.ones(3)}
    with pytest.raises(CSEUsageError, match="more than --queue_size 2"):
        small.load_state_dict(state)


def saved_state():
    """A checkpoint's ESimCSE state: weights ``a`` (2) and ``b`` (3), three queue rows of width 2."""
    return {"momentum.a": torch.ones(2), "momentum.b": torch.zeros(3), "queue": torch.arange(6.0).view(3, 2)}


@pytest.mark.parametrize(
    "change, message",
    [
        # a weight of another shape: copy_ would broadcast a (1,) tensor into every element silently
        ({"momentum.a": torch.ones(1)}, r"momentum encoder's a has the shape \(1,\), this run's \(2,\)"),
        ({"momentum.b": torch.zeros(4)}, r"momentum encoder's b has the shape \(4,\), this run's \(3,\)"),
        # queue rows of another width: the first step's matmul would stop the run with a traceback
        ({"queue": torch.zeros(3, 7)}, r"queue has the shape \(3, 7\), not \(rows, 2\)"),
        ({"queue": torch.zeros(6)}, r"queue has the shape \(6,\), not \(rows, 2\)"),
        # no queue: the run would go on from an empty queue, not the uninterrupted run's
        ({"queue": None}, "holds a momentum encoder but no queue"),
        # a key no version writes: a state this part would otherwise load in part
        ({"bogus": torch.zeros(1)}, r"holds keys this version does not write \(bogus\)"),
    ],
)
def test_a_saved_state_of_other_shapes_or_keys_or_without_its_queue_is_refused_and_nothing_is_loaded(change, message):
    state = saved_state()
    for key, value in change.items():
        if value is None:
            del state[key]
        else:
            state[key] = value
    part = part_with(queue_size=4)
    part.momentum = {"a": torch.full((2,), 5.0), "b": torch.full((3,), 5.0)}
    with pytest.raises(CSEUsageError, match=message) as refused:
        part.load_state_dict(state)
    assert refused.value.hint
    assert torch.equal(part.momentum["a"], torch.full((2,), 5.0)) and part.queue_loss.queue is None


# --- end to end -------------------------------------------------------------------------------------


class BackboneAtEachStep(TrainerCallback):
    """The backbone's weights before the first step and after each optimizer step."""

    def __init__(self):
        self.weights = []

    def snapshot(self, model):
        self.weights.append({n: t.detach().clone() for n, t in model.backbone.named_parameters()})

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self.snapshot(model)

    def on_step_end(self, args, state, control, model=None, **kwargs):
        self.snapshot(model)


# sha256 (first 16 hex digits) of the six training batches of `small_run_argv(..., 6, --variant V
# --pad_to_max_length P --max_seq_length L --seed S --queue_size 16)`, each batch's input_ids,
# attention_mask and token_type_ids in turn (name, shape, int64 bytes), recorded at 2d2e9d6, when each
# batch drew its sentences' repetitions in the data loader
RECORDED_BATCHES = {
    ("bert", "released", "false", "48", "7"): "8c8c02588b74f9c6",
    ("bert", "paper", "true", "48", "8"): "5d79748666292087",
    ("bert", "released", "false", "16", "8"): "e08dd852d72d74e1",
    ("roberta", "released", "true", "48", "7"): "3f5b6e6682a0d5dd",
    ("roberta", "paper", "false", "48", "8"): "e14fd40f388d1978",
}


def test_a_runs_batches_are_those_recorded_when_each_batch_drew_its_repetitions(backbones, tmp_path, monkeypatch):
    seen = recorded_batches(monkeypatch)
    for (family, variant, pad, length, seed), expected in RECORDED_BATCHES.items():
        seen.clear()
        flags = ["--variant", variant, "--pad_to_max_length", pad, "--max_seq_length", length, "--seed", seed]
        run_esimcse.main(small_run_argv(backbones[family], tmp_path / "-".join(flags), 6, *flags, "--queue_size", "16"))
        assert (len(seen), batches_digest(seen)) == (6, expected), (family, variant, pad, length, seed)


@pytest.mark.e2e
def test_a_run_fills_the_queue_and_updates_theta_m_with_the_weights_before_each_step(tiny_bert, tmp_path):
    """Three steps of 8 sentences, M = 20, m = 0.5 from a pretrained start: theta_m after the run is
    m^2 theta_0 ... as the released order gives (each update with theta before the step's optimizer
    update: theta_0, theta_1, theta_2), not the order that updates after the step (theta_1..3)."""
    watch = BackboneAtEachStep()
    flags = ["--use_cpu", "true", "--logging_steps", "1", "--learning_rate", "1e-2", "--save_strategy", "steps"]
    flags += ["--save_steps", "3", "--queue_size", "20", "--momentum", "0.5", "--momentum_start", "pretrained"]
    trainer = run_esimcse.main(small_run_argv(tiny_bert, tmp_path / "out", 3, *flags), callbacks=[watch])
    part = trainer.part("esimcse")
    assert part.queue_loss.queue.shape == (20, 32)  # 24 enqueued, the newest 20 kept
    logs = [entry for entry in trainer.state.log_history if "loss" in entry]
    assert [entry["queue_share"] == 0 for entry in logs] == [True, False, False]  # no queue at step 1
    theta = watch.weights
    told_apart = 0
    for name, value in part.momentum.items():
        released = theta[0][name]
        for t in range(3):
            released = 0.5 * released + 0.5 * theta[t][name]
        after = theta[0][name]
        for t in range(1, 4):
            after = 0.5 * after + 0.5 * theta[t][name]
        assert torch.allclose(value, released, atol=1e-6), name
        if not torch.allclose(released, after, atol=1e-4):
            assert not torch.allclose(value, after, atol=1e-4), name
            told_apart += 1
    assert told_apart > len(part.momentum) // 2  # the two orders differ for most weights
    # the checkpoint holds the part's state: theta_m and the queue
    state = load_file(str(tmp_path / "out" / "checkpoint-3" / PARTS_STATE_NAME))
    assert torch.equal(state["esimcse.queue"], part.queue_loss.queue)
    assert all(torch.equal(state[f"esimcse.momentum.{name}"], t) for name, t in part.momentum.items())


@pytest.mark.e2e
def test_esimcse_with_mixcse_trains_one_softmax(tiny_bert, tmp_path):
    argv = small_run_argv(tiny_bert, tmp_path / "out", 2, "--use_cpu", "true", "--logging_steps", "1")
    trainer = run_cse.main(["--parts", "esimcse,mixcse", *argv])
    assert type(trainer.loss_fn).__name__ == "ESimCSELoss" and isinstance(trainer.loss_fn.base, MixCSELoss)
    logs = [entry for entry in trainer.state.log_history if "loss" in entry]
    assert all("mix_score" in entry and "queue_share" in entry for entry in logs)
    assert trainer.loss_fn.queue.shape[0] == 16


@pytest.mark.parametrize(
    "config, lr, dup_rate",
    [("configs/esimcse_bert_base.yaml", 3e-5, 0.32), ("configs/esimcse_roberta_base.yaml", 1e-5, 0.30)],
)
def test_the_configs_hold_the_released_settings(config, lr, dup_rate):
    """run.sh and the logs' training arguments: batch 64, queue 160, m 0.995, max length 32, tau 0.05,
    [CLS] with the MLP in training only, STS-B dev every 125 steps, seed 42, one epoch, fp16."""
    model, data, training, flags = parse_args(get("esimcse").argument_types, [os.path.join(REPO, config)])
    assert (training.per_device_train_batch_size, training.learning_rate, training.num_train_epochs) == (64, lr, 1)
    assert (training.eval_steps, training.seed, training.fp16, data.max_seq_length) == (125, 42, True, 32)
    assert (model.temp, model.pooler_type, model.mlp_only_train) == (0.05, "cls", True)
    assert (flags.variant, flags.dup_rate, flags.queue_size, flags.momentum) == ("released", dup_rate, 160, 0.995)


def test_esimcse_combines_with_mixcse_and_vadvcse_only():
    part = {name: get(name).part for name in ("adcse", "mixcse", "sarcse", "sgbert", "vadvcse")}
    assert why_not(ESimCSE, part["mixcse"]) is None and why_not(ESimCSE, part["vadvcse"]) is None
    assert "AdCSE's momentum encoder p" in why_not(ESimCSE, part["adcse"])
    assert "a part that replaces the embedding computes it its own way" in why_not(ESimCSE, part["sarcse"])
    assert why_not(ESimCSE, part["sgbert"]) is not None


def test_cuda_graphs_step_eagerly_with_the_reason_unless_there_is_no_queue():
    assert "queue grows over the first steps" in part_with().capture_problem()
    assert part_with(queue_size=0).capture_problem() is None  # word repetition alone: in the data loader
