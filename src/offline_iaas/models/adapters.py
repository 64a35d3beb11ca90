"""Adapters that fit a foreign network's output to what the campaign serves.

Only imported by ``offline-iaas export`` (torch is the optional ``export`` extra). No
``from __future__ import annotations`` here: TorchScript compiles these modules and reads their
annotations.
"""

import torch
from torch import nn


class DropLastAxis(nn.Module):
    """``inner`` with its trailing singleton output axis removed: ``[n, 1]`` → ``[n]``.

    The field's classifiers end in a class axis of one (ml4gw's ``ResNet1D``, aframe); the
    campaign's statistic is one value per window.
    """

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x).squeeze(-1)


def drop_last_axis(module: nn.Module) -> torch.jit.ScriptModule:
    """``module`` (TorchScript) wrapped in :class:`DropLastAxis`, compiled."""
    return torch.jit.script(DropLastAxis(module)).eval()
