"""DeepClean streamed in torch, and exported for the torch-free runner (issue #42).

The stream bookkeeping is ``backend/streamed_deepclean.py`` (``StreamedDeepClean``,
``DeepCleanState``: numpy only, what the server's python stub can run; its docstring says what
is computed where). This module gives it DeepClean's layers: ``deepclean_graph`` cuts a
network into the stream graph's nodes, each an ``nn.Module`` on one array (the layer without
its padding, with its BatchNorm and tanh; the witnesses' standardisation in the first, the
strain scaling in the last); ``edge_module`` gives each edge's graph (the padded network cut
to its ``EdgeCone``).
``torch_streamed_deepclean`` runs them in torch; ``export_streamed_deepclean`` writes each as
an ONNX graph beside ``streamed.json``, which ``open_streamed_deepclean`` runs with
onnxruntime.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from offline_iaas.config import CampaignConfig
from offline_iaas.errors import NotStreamable, WholeWindowLayer
from offline_iaas.geometry import StreamGeometry
from offline_iaas.models.weights import export_onnx
from offline_iaas.repository.backend.layer_stream import (
    DIRECTORY_SUFFIX,
    ConvTranspose,
    Node,
    cumulative_stride,
    phases_of,
    strides,
)
from offline_iaas.repository.stream_layers import (
    Layer,
    conv_of,
    torch_run,
    without_padding,
    write_stream_spec,
)
from offline_iaas.science.deepclean import DEEPCLEAN_NETWORK
from offline_iaas.science.deepclean.backend.streamed_deepclean import (
    FEATURES,
    RAW,
    Cut,
    EdgeCone,
    PhasedDeepClean,
    StreamedDeepClean,
    deepclean_runner,
    run_name,
)
from offline_iaas.science.deepclean.network import DeepClean
from offline_iaas.science.deepclean.settings import CANARY_NETWORK

__all__ = ["deepclean_graph", "export_streamed_deepclean", "macs_per_window",
           "torch_streamed_deepclean"]


def _transposed(module: nn.ConvTranspose1d) -> ConvTranspose:
    (taps,), (stride,), (padding,) = module.kernel_size, module.stride, module.padding
    macs = module.in_channels * module.out_channels * taps // (module.groups * stride)
    return ConvTranspose(taps, stride, padding, module.output_padding[0], macs)


def _valid_transposed(module: nn.ConvTranspose1d):
    """``module`` without its padding, cropped to the outputs its inputs complete and the
    stream has not had yet (``ConvTranspose``'s stream run)."""
    head, tail = _transposed(module).crop

    def run(x: torch.Tensor) -> torch.Tensor:
        y = nn.functional.conv_transpose1d(x, module.weight, module.bias, module.stride, 0, 0,
                                           module.groups, module.dilation)
        return y[..., head : y.shape[-1] - tail] if tail else y[..., head:]

    return run


def _block(block: nn.Sequential, valid) -> Layer:
    """A (conv, BatchNorm, tanh) block of DeepClean on the stream."""
    conv, norm, activation = block
    return Layer(lambda x: activation(norm(valid(conv)(x))), block)


def _cut_conv(module: nn.Conv1d):
    """``module`` on a ``Cut``'s inputs: their window padding added, then without padding."""
    return lambda x, cut: without_padding(module)(nn.functional.pad(x, (cut.before, cut.after)))


def _cut_transposed(module: nn.ConvTranspose1d):
    """``module`` on a ``Cut``'s inputs, without padding, cropped to the cut's outputs (output
    ``q`` is ``stride * first + f - padding`` of the unpadded layer's ``f``, ``first`` its
    first input). The window's zeros add nothing to a transposed convolution: they are added
    only where the unpadded layer's outputs would not reach the cut's."""
    (stride,), (padding,), (taps,) = module.stride, module.padding, module.kernel_size

    def run(x: torch.Tensor, cut: Cut) -> torch.Tensor:
        head = cut.lo - stride * cut.in_lo + padding
        before = max(0, -(head // stride))
        head += stride * before
        length = (cut.in_hi - cut.in_lo + before - 1) * stride + taps
        after = max(0, -((length - head - (cut.hi - cut.lo)) // stride))
        if before or after:
            x = nn.functional.pad(x, (before, after))
        y = nn.functional.conv_transpose1d(x, module.weight, module.bias, module.stride, 0, 0,
                                           module.groups, module.dilation)
        return y[..., head : head + cut.hi - cut.lo]

    return run


def _cut_runs(network: DeepClean) -> dict:
    """Node → its layer (+ pointwise ops) on a ``Cut``: ``(x, cut) → outputs [lo, hi)``."""
    def standardised(x: torch.Tensor) -> torch.Tensor:
        return (x - network.witness_mean[:, None]) / network.witness_std[:, None]

    runs = {"input": lambda x, cut: network.input_activation(network.input_norm(
        _cut_conv(network.input_conv)(standardised(x), cut)))}
    def block(cut_layer, norm: nn.Module, activation: nn.Module):
        return lambda x, cut: activation(norm(cut_layer(x, cut)))

    for index, (conv, norm, activation) in enumerate(network.encoder):
        runs[f"encoder{index}"] = block(_cut_conv(conv), norm, activation)
    for index, (conv, norm, activation) in enumerate(network.decoder):
        runs[f"decoder{index}"] = block(_cut_transposed(conv), norm, activation)
    runs["output"] = lambda x, cut: (_cut_conv(network.output_conv)(x, cut)[:, 0]
                                     * network.strain_std + network.strain_mean)
    return runs


def edge_module(network: DeepClean, nodes: list[Node], cone: EdgeCone) -> nn.Module:
    """The padded network on ``cone`` (``[b, witnesses, cone.input_samples()]``, the raw
    head, the first node's stream values, the raw tail) → its kept outputs ``[b, hi - lo]``."""
    runs = _cut_runs(network)
    first = nodes[0].name

    def run(x: torch.Tensor) -> torch.Tensor:
        parts, at = [], 0
        for (source, lo, hi), cut in zip(cone.spans(), _span_cuts(cone), strict=True):
            part = x[..., at : at + hi - lo]
            parts.append(part if source == FEATURES else runs[first](part, cut))
            at += hi - lo
        y = torch.cat(parts, dim=-1) if len(parts) > 1 else parts[0]
        for node, cut in zip(nodes[1:], cone.cuts[1:], strict=True):
            y = runs[node.name](y, cut)
        return y

    return Layer(run, network)


def _span_cuts(cone: EdgeCone) -> list[Cut | None]:
    """Per part of ``cone.spans()``: the first node's cut for a raw part, None for the
    stream's values."""
    return ([cone.head] if cone.head else []) + (
        [None] if cone.features[1] > cone.features[0] else []) + (
        [cone.tail] if cone.tail else [])


def deepclean_graph(network: DeepClean) -> tuple[list[Node], dict[str, nn.Module]]:
    """DeepClean as a stream graph: its nodes (the first reads ``"raw"``, the witnesses) and
    the module of each node's run (``edge_module`` gives the edges')."""
    nodes = [Node("input", (RAW,), conv_of(network.input_conv))]
    modules: dict[str, nn.Module] = {
        "input": Layer(lambda x: network.input_activation(network.input_norm(
            without_padding(network.input_conv)(
                (x - network.witness_mean[:, None]) / network.witness_std[:, None]))),
            network),
    }
    previous = "input"
    for index, block in enumerate(network.encoder):
        name = f"encoder{index}"
        nodes.append(Node(name, (previous,), conv_of(block[0])))
        modules[name], previous = _block(block, without_padding), name
    for index, block in enumerate(network.decoder):
        name = f"decoder{index}"
        nodes.append(Node(name, (previous,), _transposed(block[0])))
        modules[name], previous = _block(block, _valid_transposed), name
    nodes.append(Node("output", (previous,), conv_of(network.output_conv)))
    modules["output"] = Layer(lambda x: without_padding(network.output_conv)(x) * network.strain_std
                               + network.strain_mean, network)
    return nodes, modules


def _checked(networks: dict[str, DeepClean], witness_indices: dict[str, list[int]]) -> None:
    if set(networks) != set(witness_indices):
        raise ValueError(f"networks for {sorted(networks)} but witnesses for "
                         f"{sorted(witness_indices)}")
    for ifo, network in networks.items():
        if network.training:
            raise ValueError(f"{ifo}: stream a network in eval mode (BatchNorm must be affine)")
        if len(witness_indices[ifo]) != network.witnesses:
            raise ValueError(f"{ifo}: {len(witness_indices[ifo])} witness indices for a "
                             f"DeepClean of {network.witnesses} witnesses")


def torch_streamed_deepclean(networks: dict[str, DeepClean],
                             witness_indices: dict[str, list[int]], kernel_samples: int,
                             stride_samples: int) -> StreamedDeepClean | PhasedDeepClean:
    """``StreamedDeepClean`` on the networks' torch modules (per interferometer: its network
    in eval mode and its witnesses' indices among the streamed channels), ``PhasedDeepClean``
    for a stride off the alignment 16; ValueError for a window that is all edge, or a stride
    whose phases would stream a whole window each."""
    _checked(networks, witness_indices)
    runs, nodes = {}, []
    for ifo, network in networks.items():
        nodes, modules = deepclean_graph(network)
        runs.update({run_name(ifo, name): torch_run(module)
                     for name, module in modules.items()})
    streamed = deepclean_runner(nodes, witness_indices, kernel_samples, stride_samples, runs)
    for ifo, network in networks.items():
        runs.update({run_name(ifo, edge): torch_run(edge_module(network, nodes, cone))
                     for edge, cone in streamed.cones.items()})
    return streamed


def export_streamed_deepclean(networks: dict[str, DeepClean],
                              witness_indices: dict[str, list[int]], kernel_samples: int,
                              stride_samples: int, directory: Path) -> Path:
    """Write what ``StreamedDeepClean`` runs as ONNX graphs and ``streamed.json`` to
    ``directory`` (``backend/streamed_deepclean.open_streamed_deepclean`` runs them); return it.

    Each graph has a dynamic batch axis, the nodes' a dynamic time axis too; ValueError as
    ``torch_streamed_deepclean`` for a geometry it cannot stream.
    """
    streamed = torch_streamed_deepclean(networks, witness_indices, kernel_samples,
                                        stride_samples)
    directory = Path(directory)
    for ifo, network in networks.items():
        nodes, modules = deepclean_graph(network)
        width = network.witnesses
        for node in nodes:
            export_onnx(modules[node.name], directory / f"{run_name(ifo, node.name)}.onnx",
                        "x", "y", (1, width, 8 * node.conv.taps), dynamic_time=True)
            with torch.no_grad():
                width = int(modules[node.name](torch.zeros((1, width, 64))).shape[1])
        for edge, cone in streamed.cones.items():
            export_onnx(edge_module(network, nodes, cone),
                        directory / f"{run_name(ifo, edge)}.onnx", "x", "y",
                        (2, network.witnesses, cone.input_samples()))
    write_stream_spec(directory, streamed.spec())
    return directory


def export_campaign_deepclean(config: CampaignConfig, weights: Path | None, directory: Path,
                              name: str = "deepclean") -> Path:
    """The campaign's DeepClean per interferometer (``weights``, a directory of
    ``deepclean-<IFO>.*`` as ``export --weights`` takes it) exported streamed to
    ``directory/<name>.streamed`` (``model.streamed``; ``name`` ``deepclean_canary`` for the
    canary's weights); return that directory.

    Where an interferometer's weights are not our DeepClean (``models/recognised.py``),
    every interferometer's graph is cut into stream layers from its ONNX operators instead
    (``streamed_foreign.py``). NotStreamable for a graph with a layer needing the
    whole window, one that can be neither recognised nor cut, and a geometry DeepClean cannot
    stream (a window that is all edge, a stride off its alignment 16 whose phases would each
    stream a whole window).
    """
    from offline_iaas.models.recognised import streamable_network
    from offline_iaas.models.weights import load_network, names
    from offline_iaas.repository.networks import weight_file

    stream = list(config.stream_channels)
    networks, indices, graphs = {}, {}, {}
    for ifo in config.ifos:
        witnesses = config.witnesses_of(ifo)
        path = weight_file(weights, DEEPCLEAN_NETWORK.weight_stem(ifo), single=False)
        expected = {"witnesses": len(witnesses), "kernel_samples": config.kernel_samples}
        loaded = load_network("deepclean", path, expected)
        indices[ifo] = [stream.index(w) for w in witnesses]
        not_ours = None
        try:
            networks[ifo] = streamable_network("deepclean", path, loaded, expected)
        except WholeWindowLayer:
            raise
        except NotStreamable as refused:
            not_ours = refused.reason
        graphs[ifo] = _Graph(path, loaded, names("deepclean", expected)[1], not_ours)
    if len(networks) < len(graphs):
        return _export_campaign_cut(config.geometry, graphs, indices,
                                    directory / f"{name}{DIRECTORY_SUFFIX}")
    try:
        return export_streamed_deepclean(networks, indices, config.kernel_samples,
                                         config.stride_samples,
                                         directory / f"{name}{DIRECTORY_SUFFIX}")
    except ValueError as err:
        raise NotStreamable(f"model.inference_rate: DeepClean cannot be streamed at a stride "
                            f"of {config.stride_samples} samples and a window of "
                            f"{config.kernel_samples}: {err} (docs/networks.md, 'Streamed "
                            "graphs')") from None


@dataclass(frozen=True)
class _Graph:
    """An interferometer's weights as ``export`` loaded them."""

    path: Path
    loaded: Any
    """What ``load_network`` gave: our network, a TorchScript module, an ONNX graph."""
    output: str
    not_ours: str | None
    """Why ``models/recognised.py`` does not take it for our DeepClean (None: it does)."""


def export_campaign_canary(config: CampaignConfig, weights: Path | None, directory: Path
                           ) -> Path:
    """The canary's DeepClean (its own ``weights``) exported streamed as
    ``export_campaign_deepclean`` does, to ``directory/deepclean_canary.streamed``."""
    return export_campaign_deepclean(config, weights, directory, CANARY_NETWORK)


def _export_campaign_cut(geometry: StreamGeometry, graphs: dict[str, _Graph],
                         indices: dict[str, list[int]], directory: Path) -> Path:
    """Every interferometer's graph cut into stream layers from its ONNX operators and
    written to ``directory`` (as one of them is not ours: the layers must be the same);
    NotStreamable, its reason following the graph's ``not_ours``, where it cannot be."""
    from offline_iaas.repository.stream_layers import (
        cut_failures_refused,
        cut_refusal,
        onnx_for_cut,
    )
    from offline_iaas.science.deepclean import streamed_foreign as cutting

    wheres = {ifo: (cut_refusal(graph.not_ours) if graph.not_ours else f"{graph.path}: "
                    "DeepClean, cut from its ONNX export beside the other detectors' graphs")
              for ifo, graph in graphs.items()}
    kernel, cuts = geometry.kernel_samples, {}
    for ifo, graph in graphs.items():
        with cut_failures_refused(wheres[ifo]):
            model, output = onnx_for_cut(
                graph.loaded, graph.path, directory.parent / f".{ifo}-{graph.path.name}.onnx",
                (1, len(indices[ifo]), kernel), graph.output, wheres[ifo])
            cuts[ifo] = cutting.cut_chain(model, len(indices[ifo]), kernel, output,
                                          wheres[ifo])
    where = next(wheres[ifo] for ifo, graph in graphs.items() if graph.not_ours)
    with cut_failures_refused(where):
        return cutting.write_chain_cuts(cuts, indices, kernel, geometry.stride_samples,
                                        directory, where)


def macs_per_window(network: DeepClean, kernel_samples: int, stride_samples: int
                    ) -> dict[str, float]:
    """Multiply-accumulates per window of the whole-window network and of the streamed one.

    Convolutions count (standardisation, BatchNorm, tanh, scaling: a few operations per value,
    not counted). Streamed: each layer's new outputs per window (``S / P_l``), plus the edge
    graphs' outputs (``EdgeCone``: per node the outputs the kept ones depend on, the first
    node's only where the window's padding reaches).
    """
    nodes = deepclean_graph(network)[0]
    streamed = deepclean_runner(nodes, {"H1": list(range(network.witnesses))}, kernel_samples,
                                stride_samples, {})
    # off the alignment each phase runs every layer on every sample
    phases = phases_of(stride_samples, cumulative_stride(nodes))
    stride_of = strides(nodes)
    whole = edges = layers = 0.0
    window = kernel_samples
    for node in nodes:
        window = node.conv.output_length(window)
        whole += node.conv.macs_per_output * window
        layers += node.conv.macs_per_output * phases * stride_samples / stride_of[node.name]
    for cone in streamed.cones.values():
        computed = [cut.hi - cut.lo for cut in cone.cuts]
        computed[0] = sum(cut.hi - cut.lo for cut in (cone.head, cone.tail) if cut)
        edges += sum(node.conv.macs_per_output * outputs
                     for node, outputs in zip(nodes, computed, strict=True))
    plan = streamed.plan
    return {"whole": whole, "streamed": layers + edges, "streamed_layers": layers,
            "edges": edges, "edge_samples": {edge: cone.input_samples()
                                             for edge, cone in streamed.cones.items()},
            "left": plan.left, "right": plan.right, "step": plan.step}
