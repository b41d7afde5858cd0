"""Cross-device negatives: two CPU processes (gloo) give the loss and gradients of one process on
the concatenated batch."""

import os
import subprocess

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import AutoTokenizer

from cse.losses import InfoNCELoss
from cse.modeling import CSEModel

from .conftest import torchrun


@pytest.mark.e2e
def test_two_process_loss_and_gradients_equal_single_process(no_dropout_bert, tmp_path):
    tok = AutoTokenizer.from_pretrained(no_dropout_bert)
    sentences = [
        "a cat sat",
        "dogs bark loudly at night",
        "the sun",
        "rain again today",
        "one more",
        "last of all here",
        "trees grow",
        "rivers run to the sea",
    ]
    first = tok(sentences, padding="max_length", max_length=10, return_tensors="pt")
    # The second view differs from the first (reversed words) so that positives are not trivial.
    second = tok(
        [" ".join(reversed(s.split())) for s in sentences], padding="max_length", max_length=10, return_tensors="pt"
    )
    batch = {k: torch.stack([first[k], second[k]], dim=1) for k in first}
    save_file(batch, str(tmp_path / "batch.safetensors"))

    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = torchrun("ddp_worker.py", 29531, no_dropout_bert, str(tmp_path / "batch.safetensors"), str(tmp_path))
    subprocess.run(cmd, check=True, env=env, timeout=300)

    model = CSEModel.from_pretrained(no_dropout_bert, pooler_type="cls", mlp_only_train=True)
    views = model(**batch)["embeddings"]
    loss = InfoNCELoss(0.05)(views[:, 0], views[:, 1])
    loss.backward()
    ranks = [load_file(str(tmp_path / f"rank{r}.safetensors")) for r in range(2)]
    for result in ranks:
        torch.testing.assert_close(result["loss"][0], loss.detach(), rtol=1e-5, atol=1e-6)
        for name, p in model.named_parameters():
            if p.grad is not None:
                torch.testing.assert_close(result[name], p.grad, rtol=1e-4, atol=1e-6, msg=name)
    # the comparison is not vacuous: the 8-sentence loss differs from each 4-sentence half's
    half = InfoNCELoss(0.05)(views[:4, 0], views[:4, 1])
    assert abs(half.item() - loss.item()) > 1e-3


@pytest.mark.parametrize("refuses", [False, True], ids=["returns", "refuses"])
def test_an_entry_point_destroys_its_process_group_before_the_interpreter_exits(tmp_path, refuses):
    """A group left to the interpreter's exit can abort a finished run's process (gloo's threads)."""
    import torch.distributed as dist

    from cse.errors import CSEUsageError, run_cli

    def main(argv):
        dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
        if refuses:
            raise CSEUsageError("refused")
        return "done"

    if refuses:
        with pytest.raises(SystemExit):
            run_cli(main, [])
    else:
        assert run_cli(main, []) == "done"
    assert not dist.is_initialized()
