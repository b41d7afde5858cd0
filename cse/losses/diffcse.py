"""DiffCSE's replaced-token detection (Chuang et al., "DiffCSE: Difference-based Contrastive Learning
for Sentence Embeddings", NAACL 2022, Sect. 3): the masking of a view's tokens, the labels of the
edited sentence, and the loss of the conditional discriminator.

For a sentence x of T tokens, x' = m . x (some tokens masked), x'' = G(x') (a frozen masked language
model fills them in), and the discriminator D, conditioned on the sentence embedding h, predicts for
each position whether x''(t) is the original token:

    L_RTD^x = sum_{t=1..T} [ -1(x''(t) = x(t)) log D(x'', h, t) - 1(x''(t) != x(t)) log(1 - D(x'', h, t)) ]
    L_RTD   = sum_i L_RTD^{x_i}          L = L_contrast + lambda L_RTD

The authors' code (voidism/DiffCSE, ``diffcse/models.py``), which produced the published numbers,
differs in ways this module offers as options, the released reading their default:

* **masking** (``train.py``, ``mask_tokens``): each token but the tokenizer's special ones is selected
  with probability ``ratio``; a selected token becomes [MASK] with probability 0.8, else a uniform
  random id with probability 0.5, else stays (BERT's 80/10/10 rule, ``rule="bert"``); the paper's
  x' = m . x is ``rule="mask"`` (every selected token masked);
* **labels** (``models.py:185-187``): the generator's output at *every* position, position 0 set to
  [CLS], compared with the original input: replaced = (x'' != x) . attention; padding gets label 0 and
  input id 0; ``where="masked"`` keeps the generator's output at the selected positions only (the
  paper's x'', which differs from x only where masked);
* **reduction** (``models.py:272``): the two-class cross-entropy averaged over all rows x positions of
  the padded batch, padding included (``"padded_mean"``); the paper's sum over each sentence's real
  tokens, summed over the batch (``"sum"``); the mean over real tokens (``"token_mean"``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

CITATION = (  # one field a line (the model card's reader); long lines split in the source only
    "@inproceedings{chuang2022diffcse,\n"
    "  title = {{DiffCSE}: Difference-based Contrastive Learning for Sentence Embeddings},\n"
    "  author = {Chuang, Yung-Sung and Dangovski, Rumen and Luo, Hongyin and Zhang, Yang and Chang, Shiyu and "
    "Soljacic, Marin and Li, Shang-Wen and Yih, Wen-tau and Kim, Yoon and Glass, James},\n"
    "  booktitle = {Proceedings of the 2022 Conference of the North American Chapter of the Association for "
    "Computational Linguistics: Human Language Technologies},\n"
    "  pages = {4207--4218},\n"
    "  year = {2022},\n"
    "}"
)

MASKING_RULES = ("bert", "mask")
POSITIONS = ("every", "masked")
REDUCTIONS = ("padded_mean", "token_mean", "sum")


def mask_tokens(
    input_ids: torch.Tensor,
    special_ids: torch.Tensor,
    mask_id: int,
    vocab_size: int,
    ratio: float,
    rule: str = "bert",
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(masked, selected)``: ``input_ids`` ``(rows, length)`` with some tokens masked, and which were
    selected. A token whose id is in ``special_ids`` (padding, [CLS], [SEP], [UNK], [MASK]) is never
    selected; any other is, with probability ``ratio``. ``rule="bert"``: a selected token becomes
    ``mask_id`` with probability 0.8, else (probability 0.5) a uniform random id in ``[0, vocab_size)``,
    else stays; ``"mask"``: it becomes ``mask_id``. The draws come from the default generator of the
    ids' device (one uniform per position and decision, as the released collator's Bernoulli draws)."""
    if rule not in MASKING_RULES:
        raise ValueError(f"unknown masking rule {rule!r}: {', '.join(MASKING_RULES)}")
    ordinary = ~torch.isin(input_ids, special_ids)
    selected = (torch.rand(input_ids.shape, device=input_ids.device) < ratio) & ordinary
    if rule == "mask":
        return torch.where(selected, torch.full_like(input_ids, mask_id), input_ids), selected
    to_mask = (torch.rand(input_ids.shape, device=input_ids.device) < 0.8) & selected
    to_random = (torch.rand(input_ids.shape, device=input_ids.device) < 0.5) & selected & ~to_mask
    random_ids = torch.randint(vocab_size, input_ids.shape, device=input_ids.device, dtype=input_ids.dtype)
    masked = torch.where(to_mask, torch.full_like(input_ids, mask_id), input_ids)
    return torch.where(to_random, random_ids, masked), selected


def edited_inputs(
    input_ids: torch.Tensor,
    generated: torch.Tensor,
    attention_mask: torch.Tensor,
    cls_id: int,
    selected: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(edited, replaced)``: the discriminator's input x'' and its labels (1 replaced, 0 original).

    ``generated``: the generator's token at each position of ``input_ids`` (the original sentences);
    position 0 is set to ``cls_id`` (the released ``g_pred[:, 0] = cls_token``). With ``selected``
    (the paper's x'') x'' takes the generator's token only where a token was selected for masking;
    without it (the released code), everywhere, so an unselected position whose generated token differs
    counts as replaced. Padding (``attention_mask`` 0) gets id 0 and label 0."""
    # a new tensor, not an in-place write of a Python number (which copies it from the host inside the step)
    generated = torch.cat([torch.full_like(generated[:, :1], cls_id), generated[:, 1:]], dim=1)
    if selected is not None:
        generated = torch.where(selected, generated, input_ids)
    attention = attention_mask.to(input_ids.dtype)
    replaced = (generated != input_ids).to(input_ids.dtype) * attention
    return generated * attention, replaced


def rtd_loss(
    logits: torch.Tensor, replaced: torch.Tensor, attention_mask: torch.Tensor, reduction: str = "padded_mean"
) -> torch.Tensor:
    """The replaced-token detection loss of the discriminator's two-class ``logits`` ``(rows, length,
    2)`` (class 1: replaced) against ``replaced`` ``(rows, length)``: the per-position cross-entropy
    -log softmax(logits)[label], computed in float32 at least, reduced as ``reduction`` says:
    ``padded_mean`` over every position of the padded batch (the released code), ``token_mean`` over
    the real tokens, ``sum`` over the real tokens (the paper's L_RTD).

    Relations: with the released reduction each padding position adds its own cross-entropy to the
    mean, so the value depends on the padded width; ``sum`` is ``token_mean`` times the real tokens.

    Example::

        >>> import torch
        >>> from cse.losses.diffcse import edited_inputs, rtd_loss
        >>> ids = torch.tensor([[101, 2023, 2003, 102, 0]])
        >>> attention = torch.tensor([[1, 1, 1, 1, 0]])
        >>> edited, replaced = edited_inputs(ids, torch.tensor([[7, 2023, 2154, 102, 9]]), attention, cls_id=101)
        >>> edited.tolist(), replaced.tolist()  # position 0 set to [CLS]; padding id and label 0
        ([[101, 2023, 2154, 102, 0]], [[0, 0, 1, 0, 0]])
        >>> logits = torch.zeros(1, 5, 2)  # D undecided: log 2 at every position
        >>> [round(rtd_loss(logits, replaced, attention, r).item(), 4) for r in ("padded_mean", "token_mean", "sum")]
        [0.6931, 0.6931, 2.7726]
    """
    if reduction not in REDUCTIONS:
        raise ValueError(f"unknown reduction {reduction!r}: {', '.join(REDUCTIONS)}")
    dtype = torch.promote_types(logits.dtype, torch.float32)
    nll = F.cross_entropy(logits.reshape(-1, 2).to(dtype), replaced.reshape(-1), reduction="none")
    nll = nll.view(replaced.shape)
    if reduction == "padded_mean":
        return nll.mean()
    real = attention_mask.to(dtype)
    total = (nll * real).sum()
    return total if reduction == "sum" else total / real.sum()


def rtd_statistics(logits: torch.Tensor, replaced: torch.Tensor, attention_mask: torch.Tensor) -> dict:
    """The released code's accuracies over real tokens (``models.py:265-270``): ``rtd_accuracy`` of every
    position, ``rtd_replaced_accuracy`` of the replaced ones, ``rtd_original_accuracy`` of the others,
    and ``rtd_replaced_share``, the share of real tokens replaced (tensors, no host sync)."""
    with torch.no_grad():
        real = attention_mask.to(torch.float32)
        prediction = logits.argmax(-1)
        rep = replaced.to(torch.float32) * real
        fix = real - rep
        right = (prediction == replaced).to(torch.float32) * real
        return {
            "rtd_accuracy": right.sum() / real.sum(),
            "rtd_replaced_accuracy": (right * rep).sum() / rep.sum().clamp(min=1),
            "rtd_original_accuracy": (right * fix).sum() / fix.sum().clamp(min=1),
            "rtd_replaced_share": rep.sum() / real.sum(),
        }
