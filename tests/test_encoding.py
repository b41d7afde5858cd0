"""The dev suite's bucketed encoding (cse.encoding), which ``--cuda_graphs`` captures on a GPU.

On the CPU no graph is captured, but the function is the same: the sentences tokenised once, in
batches padded to multiples of 16 tokens (rows to the batch size), give the embeddings of the
eager evaluation (:meth:`CSEModel.encode`, batches padded to their longest sentence), in input order,
within float32 rounding. The captured replays are checked against the eager embeddings on a GPU by
the test named ``cuda`` (``pytest -k cuda``).
"""

import pytest
import torch

from cse.encoding import BUCKET, BucketedEncoder
from cse.evaluation import SentEvalSuite
from cse.modeling import CSEModel

from .conftest import SENTEVAL

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")


@pytest.fixture(scope="module")
def dev_sentences():
    return SentEvalSuite("sts", "dev", SENTEVAL).sentences


@pytest.mark.parametrize(
    "family, pooler", [("bert", "cls_before_pooler"), pytest.param("roberta", "avg", marks=pytest.mark.e2e)]
)
def test_bucketed_encoding_gives_the_eager_embeddings(family, pooler, backbones, dev_sentences):
    torch.manual_seed(0)
    model = CSEModel.from_pretrained(backbones[family], pooler_type="cls")
    model.train()  # as during training: the encoding must switch dropout off and back on
    sentences = dev_sentences[::10]  # 384 of every length
    expected = model.encode(sentences, batch_size=64, pooler_type=pooler)
    encoder = BucketedEncoder(model, sentences, batch_size=64, pooler_type=pooler)
    got = encoder()
    assert model.training
    assert got.shape == expected.shape and got.dtype == torch.float32
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    # every batch a full one, its length a multiple of the bucket: few shapes (6 batches here)
    lengths = {dict(shape)["input_ids"][1] for shape in encoder.shapes}
    assert {dict(shape)["input_ids"][0] for shape in encoder.shapes} == {64}
    assert all(length % BUCKET == 0 for length in lengths) and len(lengths) < len(encoder.batches)
    # the weights of the moment: a change to them shows in the next call
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(0.5)
    torch.testing.assert_close(
        encoder().clone(), model.encode(sentences, batch_size=64, pooler_type=pooler), rtol=1e-5, atol=1e-5
    )


@CUDA
def test_cuda_captured_evaluation_equals_the_eager_one(tiny_bert, dev_sentences):
    """Replayed graphs (captured at the second call) give the eager embeddings, in bf16 as the training's
    autocast runs them, and follow the weights as they change in place (an optimizer step)."""
    model = CSEModel.from_pretrained(tiny_bert, pooler_type="cls").cuda()
    captured = BucketedEncoder(model, dev_sentences, 128, autocast_dtype=torch.bfloat16, capture=True)
    eager = BucketedEncoder(model, dev_sentences, 128, autocast_dtype=torch.bfloat16)
    for _ in range(3):  # eager, capture, replay
        torch.testing.assert_close(captured().clone(), eager().clone(), rtol=1e-2, atol=1e-2)
        with torch.no_grad():
            for p in model.parameters():
                p.mul_(0.9)
    assert len(captured.graphs.graphs) == len(captured.shapes)


@pytest.mark.e2e  # three evaluations of the whole dev suite
def test_the_trainer_evaluates_through_one_bucketed_encoder_under_cuda_graphs(tiny_roberta, tmp_path, monkeypatch):
    """Under --cuda_graphs the trainer's evaluations encode the dev suite through one BucketedEncoder,
    built (tokenised) at the first and asked to capture, and score as the eager evaluation does (the
    capture itself needs a GPU: here the encoder runs eagerly)."""
    import cse.trainer

    from .conftest import make_sarcse_trainer

    built = []

    class Eager(BucketedEncoder):
        def __init__(self, *args, capture, **kwargs):
            assert capture
            super().__init__(*args, capture=False, **kwargs)
            built.append(self)

    monkeypatch.setattr(cse.trainer, "BucketedEncoder", Eager)
    trainer = make_sarcse_trainer(tiny_roberta, tmp_path)
    expected = trainer.evaluate()
    trainer.args.cuda_graphs = True
    for _ in range(2):
        metrics = trainer.evaluate()
        assert metrics.keys() == expected.keys()
        for key, value in expected.items():
            assert metrics[key] == pytest.approx(value, abs=1e-5), key
    assert len(built) == 1
