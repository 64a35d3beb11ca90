"""Export a convolution stack's streaming graphs (torch side of ``backend/streaming_conv``).

From a network with ``features`` (``Conv1d`` + ``ReLU`` pairs) and ``head`` (applied to the
features' mean over time, first output column kept) — the bench's toy CNN — write into one
directory:

    conv_layers.json   taps, stride and padding of each convolution
    conv<i>.onnx       layer i without its padding (a valid convolution) + ReLU
    edges.onnx         the padded features, for a window's edge segments
    head.onnx          the head on the pooled features

Every graph has dynamic batch and time axes; the weights are the network's own.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path

from offline_iaas.bench.backend.streaming_conv import (
    EDGES_FILE,
    HEAD_FILE,
    LAYERS_FILE,
    ConvLayer,
    layer_file,
)
from offline_iaas.models.weights import export_onnx


def conv_layers(network) -> list[ConvLayer]:
    """The geometry of ``network.features``' convolutions; ValueError for other layers."""
    from torch import nn

    layers = []
    for module in network.features:
        if isinstance(module, nn.Conv1d):
            layers.append(ConvLayer(module.kernel_size[0], module.stride[0], module.padding[0]))
        elif not isinstance(module, nn.ReLU):
            raise ValueError(f"cannot stream a {type(module).__name__} layer")
    return layers


def export_streaming_graphs(network, channels: int, directory: Path) -> Path:
    """Write ``network``'s streaming graphs into ``directory`` (created); return it."""
    from torch import nn

    directory.mkdir(parents=True, exist_ok=True)
    layers = conv_layers(network)
    convs = [m for m in network.features if isinstance(m, nn.Conv1d)]
    size_in = channels
    for index, conv in enumerate(convs):
        valid = copy.deepcopy(conv)
        valid.padding = (0,)
        taps = layers[index].taps
        export_onnx(
            nn.Sequential(valid, nn.ReLU()), directory / layer_file(index), "x", "y",
            (1, size_in, 4 * taps), dynamic_time=True,
        )
        size_in = conv.out_channels
    export_onnx(network.features, directory / EDGES_FILE, "x", "y", (2, channels, 256),
                dynamic_time=True)

    class Head(nn.Module):
        def __init__(self, head: nn.Module) -> None:
            super().__init__()
            self.head = head

        def forward(self, pooled):
            return self.head(pooled)[:, 0]

    export_onnx(Head(network.head), directory / HEAD_FILE, "pooled", "output", (2, size_in))
    (directory / LAYERS_FILE).write_text(
        json.dumps([dataclasses.asdict(layer) for layer in layers])
    )
    return directory
