"""SARCSE's TextCNN autoencoder over token states (Liu et al., arXiv 2402.15153, Sect. 2.2, Eqs. 3-7).

Shapes, for a batch of B sentences whose real tokens (``<s>``/``</s>`` and padding removed) are
X = x_1..x_N in R^d, padded to a common length L' = max(L, max ks), with K kernel sizes ks
(3, 4, 5), co_t TextCNN channels (500) and co_c CNN channels (3):

    Eq. 3  H_ks = TextCNN_ks(X)                  conv1d d -> co_t, width ks, over L' - ks + 1 windows,
                                                 ReLU, max over the sentence's windows: (B, co_t)
    Eq. 4  Z = CNN([H_3; H_4; H_5])              the stack (B, 1, K, co_t), conv2d 1 -> co_c with a
                                                 K x 2 kernel: (B, co_c, 1, co_t - 1), flattened:
                                                 Z in R^{co_c (co_t - 1)}, the sentence embedding
    Eq. 5  H'_ks = TransposedCNN(Z)              transposed conv2d co_c -> 1, K x 2: (B, 1, K, co_t),
                                                 row ks is H'_ks, the shape of H_ks
    Eq. 6  X'_ks = TransposedTextCNN_ks(H'_ks)   max-unpooling of H'_ks to (B, co_t, L' - ks + 1), then
                                                 transposed conv1d co_t -> d, width ks: (B, L', d)
    Eq. 7  X' = mean(X'_3, X'_4, X'_5)           (B, L, d), cropped to the real tokens' length

The paper gives H_ks in R^{co_t} and Z in R^{co_c (co_t - 1)}; the rest is our reading (the
authors' code is not public):

* **TextCNN is Kim (2014)'s**: convolution, ReLU, max over time. A window counts for a sentence
  when it lies inside its n real tokens; a sentence shorter than the kernel (n < ks, including
  n = 0) has one window, at position 0, over its tokens and zero vectors: padding states are zeroed
  before the convolution, so they never enter H, and a sentence's Z does not depend on what it is
  batched with.
* **The transposed TextCNN inverts the max-over-time pooling by max-unpooling**: each channel of
  H'_ks is put back at the window where H_ks took its maximum (zeros elsewhere), which is the
  transpose of max pooling (Zeiler and Fergus's deconvolution, SegNet). Spreading H'_ks over every
  window instead, the other reading, would give every interior token the same reconstruction
  (sum_j W_j H'_ks), so no token could be told from another.
* No non-linearity after the CNN or in the decoder: Z is the embedding the contrastive loss sees,
  and the paper names none.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn


@dataclass
class AutoEncoderOutput:
    embedding: torch.Tensor  # Z, (B, co_c (co_t - 1))
    reconstruction: torch.Tensor | None  # X', (B, L, d); None without a decoder


class TextCNNAutoEncoder(nn.Module):
    """Args:
    hidden_size: d, the size of the token states.
    kernel_sizes: the TextCNN's ks (3, 4, 5).
    textcnn_channels: co_t (500).
    cnn_channels: co_c (3).
    decoder: build the transposed CNN and TextCNN (Eqs. 5-7); without it (Table 1's "w/o decoder")
        the module only encodes.
    """

    # the submodules of Eqs. 3-4, all that Z needs (the rest is the decoder)
    ENCODER_MODULES = ("textcnn", "cnn")

    def __init__(
        self,
        hidden_size: int,
        kernel_sizes: tuple[int, ...] = (3, 4, 5),
        textcnn_channels: int = 500,
        cnn_channels: int = 3,
        decoder: bool = True,
    ):
        super().__init__()
        kernel_sizes = tuple(int(k) for k in kernel_sizes)
        if not kernel_sizes or min(kernel_sizes) < 1 or len(set(kernel_sizes)) != len(kernel_sizes):
            raise ValueError(f"kernel_sizes must be distinct positive integers, got {kernel_sizes}")
        if textcnn_channels < 2 or cnn_channels < 1:
            raise ValueError(
                f"need textcnn_channels >= 2 (the CNN's kernel is 2 wide) and cnn_channels >= 1, "
                f"got {textcnn_channels} and {cnn_channels}"
            )
        self.hidden_size = hidden_size
        self.kernel_sizes = kernel_sizes
        self.textcnn_channels = textcnn_channels
        self.cnn_channels = cnn_channels
        self.textcnn = nn.ModuleList(nn.Conv1d(hidden_size, textcnn_channels, ks) for ks in kernel_sizes)
        # Kernel K x 2: all K scales at once, two neighbouring channels (3 x 2 for ks = 3, 4, 5).
        self.cnn = nn.Conv2d(1, cnn_channels, (len(kernel_sizes), 2))
        self.has_decoder = decoder
        if decoder:
            self.transposed_cnn = nn.ConvTranspose2d(cnn_channels, 1, (len(kernel_sizes), 2))
            self.transposed_textcnn = nn.ModuleList(
                nn.ConvTranspose1d(textcnn_channels, hidden_size, ks) for ks in kernel_sizes
            )

    @property
    def embedding_size(self) -> int:
        return self.cnn_channels * (self.textcnn_channels - 1)

    def get_config_dict(self) -> dict:
        return {
            "hidden_size": self.hidden_size,
            "kernel_sizes": list(self.kernel_sizes),
            "textcnn_channels": self.textcnn_channels,
            "cnn_channels": self.cnn_channels,
            "decoder": self.has_decoder,
        }

    def padded_length(self, length: int) -> int:
        return max(length, max(self.kernel_sizes))

    def encode(self, tokens: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """Eqs. 3-4: ``tokens`` (B, L, d) with ``mask`` (B, L), real tokens first, -> Z (B, co_c (co_t - 1))
        and, per kernel, the window of each channel's maximum (B, co_t)."""
        batch, length, _ = tokens.shape
        padded = self.padded_length(length)
        x = tokens.masked_fill(~mask.bool()[..., None], 0.0)
        x = nn.functional.pad(x, (0, 0, 0, padded - length)).transpose(1, 2)  # (B, d, L')
        n = mask.sum(1)
        pooled, argmax = [], []
        for ks, conv in zip(self.kernel_sizes, self.textcnn):
            windows = torch.relu(conv(x))  # (B, co_t, L' - ks + 1)
            start = torch.arange(windows.shape[-1], device=x.device)
            inside = start[None, :] <= (n[:, None] - ks).clamp_min(0)  # one window if n < ks
            values, where = windows.masked_fill(~inside[:, None, :], float("-inf")).max(dim=-1)
            pooled.append(values)
            argmax.append(where)
        stacked = torch.stack(pooled, dim=1)[:, None]  # (B, 1, K, co_t)
        return self.cnn(stacked).flatten(1), argmax

    def decode(self, embedding: torch.Tensor, argmax: list[torch.Tensor], length: int) -> torch.Tensor:
        """Eqs. 5-7: Z and the encoder's argmax windows -> X' (B, length, d)."""
        if not self.has_decoder:
            raise RuntimeError("this autoencoder was built without a decoder")
        batch = embedding.shape[0]
        z = embedding.view(batch, self.cnn_channels, 1, self.textcnn_channels - 1)
        scales = self.transposed_cnn(z)[:, 0]  # (B, K, co_t)
        padded = self.padded_length(length)
        reconstructions = []
        for k, (ks, deconv) in enumerate(zip(self.kernel_sizes, self.transposed_textcnn)):
            h = scales[:, k]
            unpooled = h.new_zeros(batch, self.textcnn_channels, padded - ks + 1)
            unpooled = unpooled.scatter(2, argmax[k][..., None], h[..., None])
            reconstructions.append(deconv(unpooled))  # (B, d, L')
        return torch.stack(reconstructions).mean(0).transpose(1, 2)[:, :length]

    def forward(self, tokens: torch.Tensor, mask: torch.Tensor, reconstruct: bool = True) -> AutoEncoderOutput:
        # Z is the sentence embedding the contrastive loss reads: in the weights' dtype (float32)
        # under autocast too (in bf16 it put SARCSE's bf16 loss curve 30x further from float32's;
        # tests/test_speed.py).
        # The decoder may run in bf16: the reconstruction loss casts to float32 itself.
        with torch.autocast(tokens.device.type, enabled=False):
            embedding, argmax = self.encode(tokens.to(self.cnn.weight.dtype), mask)
        reconstruction = self.decode(embedding, argmax, tokens.shape[1]) if reconstruct else None
        return AutoEncoderOutput(embedding, reconstruction)
