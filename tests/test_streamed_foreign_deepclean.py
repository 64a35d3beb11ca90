"""Cleaning networks of another architecture cut into DeepClean's stream graph from their own
ONNX operators (``science/deepclean/streamed_foreign.py``): streamed, every window's
prediction is what the graph gives on it, run by onnxruntime; what cannot be cut is named."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
import torch
from torch import nn

from offline_iaas.errors import NotStreamable
from offline_iaas.models.weights import export_onnx
from offline_iaas.science.deepclean.backend.streamed_deepclean import open_streamed_deepclean
from offline_iaas.science.deepclean.streamed_foreign import cut_chain, write_chain_cuts
from tests.helpers import a_sample_late, relative_difference

BOUND = 1e-5
"""Streamed against whole windows, relative to the largest |prediction|."""
WITNESSES = {"H1": [0, 1, 2], "L1": [1, 3]}
"""Each detector's witnesses among the streamed channels."""


class Cleaner(nn.Module):
    """An encoder-decoder of another shape than ours: its witnesses standardised, a
    convolution to 8 channels, two of stride 2, two transposed back, BatchNorm and tanh
    after each, an output convolution, the channel dropped and scaled to strain with an
    offset: ``[n, W, K]`` → ``[n, K]``."""

    def __init__(self, witnesses: int) -> None:
        super().__init__()
        self.register_buffer("mean", 0.1 * torch.randn(witnesses))
        self.register_buffer("std", 1 + torch.rand(witnesses))

        def block(layer: nn.Module, channels: int) -> nn.Sequential:
            return nn.Sequential(layer, nn.BatchNorm1d(channels), nn.Tanh())

        self.layers = nn.Sequential(
            block(nn.Conv1d(witnesses, 8, 7, padding=3), 8),
            block(nn.Conv1d(8, 8, 7, stride=2, padding=3), 8),
            block(nn.Conv1d(8, 16, 5, stride=2, padding=2), 16),
            block(nn.ConvTranspose1d(16, 8, 5, stride=2, padding=2, output_padding=1), 8),
            block(nn.ConvTranspose1d(8, 8, 7, stride=2, padding=3, output_padding=1), 8),
            nn.Conv1d(8, 1, 7, padding=3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = (x - self.mean[:, None]) / self.std[:, None]
        return self.layers(x)[:, 0] * 3e-21 + 1e-22


class Skipped(Cleaner):
    """The same with a skip connection around the middle (a U-Net's)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        first = self.layers[0]((x - self.mean[:, None]) / self.std[:, None])
        middle = self.layers[1:5](first)
        return self.layers[5](first + middle)[:, 0]


def _graphs(network: type, kernel: int, tmp_path: Path) -> dict[str, onnx.ModelProto]:
    """Each detector's network (random BatchNorm statistics), exported to ONNX."""
    torch.manual_seed(0)
    graphs = {}
    for ifo, rows in WITNESSES.items():
        cleaner = network(len(rows))
        for module in cleaner.modules():
            if isinstance(module, nn.BatchNorm1d):
                module.running_mean.normal_(0, 0.2)
                module.running_var.uniform_(0.5, 2)
        path = export_onnx(cleaner.eval(), tmp_path / f"deepclean-{ifo}.onnx", "windows",
                           "prediction", (1, len(rows), kernel))
        graphs[ifo] = onnx.load(str(path))
    return graphs


def _whole_windows(graphs: dict, stream: np.ndarray, kernel: int, stride: int, count: int
                   ) -> np.ndarray:
    """Each graph on every window of ``stream`` (K zeros first): ``[count, ifos, K]``."""
    out = []
    for ifo, graph in graphs.items():
        session = onnxruntime.InferenceSession(graph.SerializeToString(),
                                               providers=["CPUExecutionProvider"])
        windows = np.stack([stream[WITNESSES[ifo], (j + 1) * stride:][:, :kernel]
                            for j in range(count)])
        out.append(session.run(["prediction"], {"windows": windows})[0])
    return np.stack(out, axis=1)


@pytest.mark.parametrize(("kernel", "stride"), [(256, 32), (240, 6)])
def test_a_cleaner_of_another_architecture_streams_what_it_gives_on_whole_windows(
        tmp_path: Path, kernel: int, stride: int) -> None:
    """On its grid (alignment 4) and off it (6 samples: 2 phases), every window's prediction
    of both detectors against the graphs; a sample late fails."""
    graphs = _graphs(Cleaner, kernel, tmp_path)
    cuts = {ifo: cut_chain(graph, len(WITNESSES[ifo]), kernel, "prediction", ifo)
            for ifo, graph in graphs.items()}
    assert [node.conv.spec() for node in cuts["H1"].nodes] == [
        ["conv", 7, 1, 3], ["conv", 7, 2, 3], ["conv", 5, 2, 2],
        ["transposed", 5, 2, 2, 1], ["transposed", 7, 2, 3, 1], ["conv", 7, 1, 3]]
    directory = write_chain_cuts(cuts, WITNESSES, kernel, stride, tmp_path / "cut", "test")
    count = 48
    samples = np.random.default_rng(4).standard_normal((4, count * stride)).astype(np.float32)
    network = open_streamed_deepclean(directory)
    state, out, first = network.initial_state(), [], 0
    for size in [3, 1, 5, 2] * 20:
        if first >= samples.shape[1]:
            break
        out.append(network.update(state, samples[:, first : first + size * stride]))
        first += size * stride
    streamed = np.concatenate(out)
    stream = np.concatenate([np.zeros((4, kernel), np.float32), samples], axis=1)
    whole = _whole_windows(graphs, stream, kernel, stride, count)
    print(f"K {kernel}, S {stride}: relative difference "
          f"{relative_difference(streamed, whole):.2e}")
    assert streamed.shape == whole.shape
    assert relative_difference(streamed, whole) <= BOUND
    late = a_sample_late(stream)
    assert relative_difference(streamed, _whole_windows(graphs, late, kernel, stride, count)
                               ) > 100 * BOUND


@pytest.mark.parametrize("misread", ["layer", "left edge"])
def test_a_misread_layer_is_caught_before_the_cut_is_written(tmp_path: Path, monkeypatch,
                                                            misread: str) -> None:
    """Negative controls of the probe check: in L1's graphs, a transposed layer's stream run
    with its taps reversed (its geometry and its edges kept), as a cut that misreads it would
    be; or the left edge reading its raw samples backwards (caught only where the probes fill
    whole windows with noise: a stream begins on zeros, and reversed they are the same)."""
    from onnx import helper, numpy_helper

    from offline_iaas.science.deepclean import streamed_foreign as cutting

    graphs = _graphs(Cleaner, 256, tmp_path)
    cuts = {ifo: cut_chain(graph, len(WITNESSES[ifo]), 256, "prediction", ifo)
            for ifo, graph in graphs.items()}
    transposed = next(layer.node.name for layer in cuts["L1"].layers
                      if layer.op.op_type == "ConvTranspose")

    def reversed_taps(graph: onnx.ModelProto) -> None:
        weight = next(i for i in graph.graph.initializer if len(i.dims) == 3)
        weight.CopyFrom(numpy_helper.from_array(
            numpy_helper.to_array(weight)[..., ::-1].copy(), weight.name))

    node_graphs, edge_graph = cutting._node_graphs, cutting._edge_graph

    def misread_node(cut, witnesses: int) -> dict:
        made = node_graphs(cut, witnesses)
        if cut is cuts["L1"]:
            reversed_taps(made[transposed])
        return made

    def misread_left_edge(cut, cone_cuts, witnesses: int) -> onnx.ModelProto:
        made = edge_graph(cut, cone_cuts, witnesses)
        if cut is cuts["L1"] and cone_cuts[-1].lo == 0:  # x read backwards along time
            graph = made.graph
            for node in graph.node:
                node.input[:] = ["backwards" if name == "x" else name for name in node.input]
            bounds = {"start": [-1], "end": [-(2**62)], "axis": [2], "step": [-1]}
            graph.initializer.extend(numpy_helper.from_array(np.array(v, np.int64), k)
                                     for k, v in bounds.items())
            graph.node.insert(0, helper.make_node("Slice", ["x", *bounds], ["backwards"]))
        return made

    if misread == "layer":
        monkeypatch.setattr(cutting, "_node_graphs", misread_node)
    else:
        monkeypatch.setattr(cutting, "_edge_graph", misread_left_edge)
    with pytest.raises(NotStreamable, match=r"^test: so cut, L1's prediction differs from the "
                       r"graph on the whole windows of a probe of amplitude 1 by"):
        write_chain_cuts(cuts, WITNESSES, 256, 32, tmp_path / "cut", "test")
    assert not (tmp_path / "cut").exists()
    assert not any(path.name.startswith(".cut-") for path in tmp_path.iterdir())


def test_a_cleaner_that_is_not_a_chain_of_layers_is_named(tmp_path: Path) -> None:
    graphs = _graphs(Skipped, 256, tmp_path)
    with pytest.raises(NotStreamable, match=r"^H1: Conv '[^']*' branches the chain \(only a chain"):
        cut_chain(graphs["H1"], 3, 256, "prediction", "H1")
