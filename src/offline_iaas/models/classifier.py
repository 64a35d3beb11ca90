"""A small BBHnet-shaped classifier: H1+L1 strain windows in, one statistic per window out.

Only imported by ``offline-iaas export`` (torch is the optional ``export`` extra).
"""

from __future__ import annotations

import torch
from torch import nn


class Classifier(nn.Module):
    """1-D CNN: scale, three strided convolutions, global average pool, linear head.

    Parameters
    ----------
    channels
        Input channels (one per interferometer).
    input_scale
        Factor applied to the raw input (strain is ~1e-21) before the first layer.
    width
        Channels of the first convolution; doubled at each of the next two.
    """

    def __init__(self, channels: int, input_scale: float = 1e21, width: int = 8) -> None:
        super().__init__()
        self.register_buffer("input_scale", torch.tensor(float(input_scale)))
        layers: list[nn.Module] = []
        size_in = channels
        for i in range(3):
            size_out = width * 2**i
            layers += [nn.Conv1d(size_in, size_out, 7, stride=2, padding=3), nn.ReLU()]
            size_in = size_out
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(size_in, 1)

    def forward(self, windows: torch.Tensor) -> torch.Tensor:
        """``windows``: [batch, channels, kernel_samples] → statistic [batch]."""
        x = self.features(windows * self.input_scale)
        return self.head(x.mean(dim=-1)).squeeze(-1)
