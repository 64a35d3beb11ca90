"""DeepClean: witness channels in, predicted strain noise out (1-D convolutional autoencoder).

The architecture of the field (Ormiston et al. 2020, ml4gw/deepclean)::

    witnesses [batch, N, K]
      ─► standardize each witness ((w - mean) / std, baked in)
      ─► input conv N→N (k7) + BatchNorm + Tanh
      ─► encoder: 4 × conv (k7, stride 2) → 8, 16, 32, 64 channels, each + BatchNorm + Tanh
      ─► decoder: 4 × transposed conv (k7, stride 2) → 32, 16, 8, N, each + BatchNorm + Tanh
      ─► output conv N→1 (k7)
      ─► × strain_std + strain_mean (baked in)
    prediction [batch, K]   (strain units, same length as the window)

``K`` must be divisible by 16 (four halvings, four doublings). The statistics are buffers: they
are in the state_dict and in the exported ONNX graph, so the served graph takes raw witnesses
and returns strain.

``average_overlapping`` combines a span's overlapping window predictions into one prediction
per sample, offline (the held-out evaluation of training): its first and last samples are the
mean of the fewer windows that cover them. What campaigns serve is the online average
(``repository/backend/stateful.OnlineAverage``), which keeps partial sums across requests and
whose first ``kernel - stride`` samples fall in the warm-up.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

ENCODER_CHANNELS: tuple[int, ...] = (8, 16, 32, 64)
"""Output channels of the encoder's strided convolutions."""
KERNEL_TAPS = 7
"""Taps of every convolution."""
DOWNSAMPLING = 2 ** len(ENCODER_CHANNELS)
"""The window length (samples) must be a multiple of this."""


def _block(conv: nn.Module, channels: int) -> nn.Sequential:
    return nn.Sequential(conv, nn.BatchNorm1d(channels), nn.Tanh())


class DeepClean(nn.Module):
    """1-D convolutional autoencoder predicting the witness-coupled part of the strain.

    Parameters
    ----------
    witnesses
        Number of witness channels ``N``.
    witness_mean, witness_std
        Per-witness statistics (witness units) used to standardize the input; ``N`` values each.
    strain_mean, strain_std
        Statistics (strain units) of the training target; the network's output is scaled back
        by them.
    """

    def __init__(
        self,
        witnesses: int,
        witness_mean: Sequence[float],
        witness_std: Sequence[float],
        strain_mean: float,
        strain_std: float,
    ) -> None:
        super().__init__()
        if witnesses < 1:
            raise ValueError(f"DeepClean needs at least one witness channel, got {witnesses}")
        mean = torch.as_tensor(np.asarray(witness_mean, dtype=np.float32))
        std = torch.as_tensor(np.asarray(witness_std, dtype=np.float32))
        if mean.shape != (witnesses,) or std.shape != (witnesses,):
            raise ValueError(
                f"witness_mean and witness_std need {witnesses} values each, got "
                f"{tuple(mean.shape)} and {tuple(std.shape)}"
            )
        if not torch.all(std > 0) or not strain_std > 0:
            raise ValueError("standard deviations must be positive")
        self.witnesses = witnesses
        self.register_buffer("witness_mean", mean)
        self.register_buffer("witness_std", std)
        self.register_buffer("strain_mean", torch.tensor(float(strain_mean)))
        self.register_buffer("strain_std", torch.tensor(float(strain_std)))

        pad = KERNEL_TAPS // 2
        self.input_conv = nn.Conv1d(witnesses, witnesses, KERNEL_TAPS, padding=pad)
        self.input_norm = nn.BatchNorm1d(witnesses)
        self.input_activation = nn.Tanh()
        encoder: list[nn.Module] = []
        size_in = witnesses
        for size_out in ENCODER_CHANNELS:
            conv = nn.Conv1d(size_in, size_out, KERNEL_TAPS, stride=2, padding=pad)
            encoder.append(_block(conv, size_out))
            size_in = size_out
        self.encoder = nn.Sequential(*encoder)
        decoder: list[nn.Module] = []
        for size_out in (*ENCODER_CHANNELS[-2::-1], witnesses):
            conv = nn.ConvTranspose1d(
                size_in, size_out, KERNEL_TAPS, stride=2, padding=pad, output_padding=1
            )
            decoder.append(_block(conv, size_out))
            size_in = size_out
        self.decoder = nn.Sequential(*decoder)
        self.output_conv = nn.Conv1d(witnesses, 1, KERNEL_TAPS, padding=pad)

    def forward(self, windows: torch.Tensor) -> torch.Tensor:
        """``windows`` [batch, witnesses, kernel_samples] → prediction [batch, kernel_samples]."""
        if windows.dim() != 3 or windows.shape[1] != self.witnesses:
            raise ValueError(
                f"DeepClean expects [batch, {self.witnesses}, kernel_samples] windows, got "
                f"{tuple(windows.shape)}"
            )
        if windows.shape[-1] % DOWNSAMPLING:
            raise ValueError(
                f"DeepClean's window length must be a multiple of {DOWNSAMPLING} samples, got "
                f"{windows.shape[-1]}"
            )
        x = (windows - self.witness_mean[:, None]) / self.witness_std[:, None]
        x = self.input_activation(self.input_norm(self.input_conv(x)))
        x = self.decoder(self.encoder(x))
        x = self.output_conv(x)[:, 0]
        return x * self.strain_std + self.strain_mean


def average_overlapping(predictions: np.ndarray, stride_samples: int) -> np.ndarray:
    """Combine overlapping window predictions into one prediction per sample.

    Window ``j`` covers samples ``[j * stride, j * stride + kernel)`` of the output; each
    output sample is the mean over the windows that contain it (the first and last
    ``kernel - stride`` samples are covered by fewer windows).

    Parameters
    ----------
    predictions
        ``[n, kernel_samples]`` predictions of consecutive windows.
    stride_samples
        Samples between the starts of consecutive windows (``1 <= stride <= kernel``).

    Returns
    -------
    numpy.ndarray
        ``[(n - 1) * stride + kernel]`` averaged prediction (float64).
    """
    predictions = np.asarray(predictions)
    if predictions.ndim != 2:
        raise ValueError(f"predictions must be [n, kernel_samples], got {predictions.shape}")
    n, kernel = predictions.shape
    if not 1 <= stride_samples <= kernel:
        raise ValueError(f"stride ({stride_samples}) must be in [1, kernel ({kernel})]")
    if n == 0:
        return np.zeros(0)
    length = (n - 1) * stride_samples + kernel
    total = np.zeros(length)
    count = np.zeros(length)
    # Add whole blocks of windows that do not overlap each other (stride * m >= kernel):
    # at most ceil(kernel / stride) vectorised passes instead of n python iterations.
    step = -(-kernel // stride_samples)
    for first in range(min(step, n)):
        rows = predictions[first::step]
        starts = first * stride_samples + np.arange(len(rows)) * step * stride_samples
        index = (starts[:, None] + np.arange(kernel)).ravel()
        total[index] += rows.ravel()
        count[index] += 1
    return total / count


def fresh_network(expected: Mapping[str, Any], _whitening_taps: int | None) -> DeepClean:
    """A new DeepClean on ``expected["witnesses"]`` witness channels, placeholder statistics
    (``NetworkKind.fresh``)."""
    n = int(expected["witnesses"])
    return DeepClean(n, [0.0] * n, [1.0] * n, 0.0, 1.0)
