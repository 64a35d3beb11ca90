"""BBHnet and the classifier streamed in torch, and exported for the torch-free runner
(issue #42).

The stream bookkeeping is ``backend/streamed_network.py`` (``StreamedNetwork``, ``StreamState``:
numpy only, what the server's python stub can run; its docstring says what is computed where).
This module gives it the layers of the two networks of that shape (a FIR, strided
convolutions, a global mean, a head): ``bbhnet_graph`` and ``classifier_graph`` cut a network
into the stream graph's nodes, each an ``nn.Module`` on one array (the layer without its
padding; a join on its inputs concatenated along channels), plus the whitening (the
classifier's: its input scale, one tap), the padded edge layers and the head.
``StreamedBBHnet`` and ``StreamedClassifier`` run them in torch (``streamed_in_torch`` picks
either, or a ``PhasedNetwork`` of their runs for a stride off the network's grid);
``export_streamed`` writes
each as an ONNX graph beside ``streamed.json``, which ``streamed_network.open_streamed_network``
runs with onnxruntime. ``export_campaign_network`` writes them for a campaign with
``model.streamed`` (``export``: the fused model serves them; docs/networks.md, "Streamed
graphs").
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from offline_iaas.config import CampaignConfig
from offline_iaas.errors import NotStreamable, WholeWindowLayer
from offline_iaas.geometry import StreamGeometry
from offline_iaas.models.weights import export_onnx
from offline_iaas.repository.backend.streamed_network import (
    DIRECTORY_SUFFIX,
    EDGES,
    HEAD,
    WHITENING,
    Conv,
    Node,
    PhasedNetwork,
    StreamedNetwork,
    StreamState,
    cumulative_stride,
    edge_plan,
    phases_of,
    spec_of,
)
from offline_iaas.repository.stream_layers import (
    Layer,
    conv_of,
    torch_run,
    without_padding,
    write_stream_spec,
)
from offline_iaas.science.bbhnet.network import BBHnet
from offline_iaas.science.classifier.network import Classifier

__all__ = ["StreamState", "StreamedBBHnet", "StreamedClassifier", "bbhnet_graph",
           "classifier_graph", "export_campaign_classifier", "export_campaign_network",
           "export_streamed", "macs_per_window", "streamed_in_torch"]


def _join(block: nn.Module) -> Layer:
    """The residual sum and activation of ``block`` on ``[1, 2 C, n]`` (both inputs)."""
    channels = block.conv2.out_channels
    return Layer(lambda x: block.activation(x[:, :channels] + x[:, channels:]), block)


def bbhnet_graph(network: BBHnet) -> tuple[list[Node], dict[str, nn.Module]]:
    """BBHnet as a stream graph: its nodes after the whitening, and the module of each run
    (the nodes', ``"whitened"``, ``"edges"`` and ``"head"``)."""
    stem_conv, stem_norm, stem_act = network.stem
    nodes = [Node("stem", ("whitened",), conv_of(stem_conv))]
    modules: dict[str, nn.Module] = {
        WHITENING: Layer(network.whiten, network),
        EDGES: Layer(lambda x: network.stages(network.stem(x)), network),
        HEAD: network.head,
        "stem": Layer(lambda x: stem_act(stem_norm(without_padding(stem_conv)(x))), network.stem),
    }
    previous = "stem"
    for index, block in enumerate(network.stages):
        name = f"stage{index}"
        if isinstance(block.shortcut, nn.Identity):
            shortcut, run_shortcut = Conv(1, 1, 0), Layer(lambda x: x)
        else:
            conv, norm = block.shortcut
            shortcut = conv_of(conv)
            run_shortcut = Layer(lambda x, conv=conv, norm=norm: norm(without_padding(conv)(x)),
                                  block.shortcut)
        nodes += [
            Node(f"{name}.conv1", (previous,), conv_of(block.conv1)),
            Node(f"{name}.conv2", (f"{name}.conv1",), conv_of(block.conv2)),
            Node(f"{name}.shortcut", (previous,), shortcut),
            Node(name, (f"{name}.conv2", f"{name}.shortcut"), None),
        ]
        modules[f"{name}.conv1"] = Layer(
            lambda x, b=block: b.activation(b.norm1(without_padding(b.conv1)(x))), block)
        modules[f"{name}.conv2"] = Layer(
            lambda x, b=block: b.norm2(without_padding(b.conv2)(x)), block)
        modules[f"{name}.shortcut"] = run_shortcut
        modules[name] = _join(block)
        previous = name
    return nodes, modules


def classifier_graph(network: Classifier) -> tuple[list[Node], dict[str, nn.Module]]:
    """The classifier as a stream graph: its strided convolutions (each with its ReLU), and
    the module of each run (the nodes', ``"whitened"``: the input scale, ``"edges"``,
    ``"head"``)."""
    nodes, modules = [], {
        WHITENING: Layer(lambda x: x * network.input_scale, network),
        EDGES: Layer(network.features, network.features),
        HEAD: network.head,
    }
    previous = WHITENING
    convolutions = [layer for layer in network.features if isinstance(layer, nn.Conv1d)]
    for index, conv in enumerate(convolutions):
        name = f"conv{index}"
        nodes.append(Node(name, (previous,), conv_of(conv)))
        modules[name] = Layer(
            lambda x, conv=conv: nn.functional.relu(without_padding(conv)(x)), conv)
        previous = name
    return nodes, modules


def bbhnet_nodes(network: BBHnet) -> list[Node]:
    """BBHnet's stem and stages as a stream graph (the whitening is done before it)."""
    return bbhnet_graph(network)[0]


class _StreamedInTorch(StreamedNetwork):
    """A network's graph (``bbhnet_graph``, ``classifier_graph``) run in torch on a stream.
    ``network`` must be in eval mode (its BatchNorm is then affine); it is shared by every
    stream."""

    def __init__(self, network: nn.Module,
                 graph: tuple[list[Node], dict[str, nn.Module]], ifos: int,
                 kernel_samples: int, stride_samples: int, whitening_taps: int) -> None:
        if network.training:
            raise ValueError("stream a network in eval mode (BatchNorm must be affine)")
        self.network = network
        nodes, self.modules = graph
        super().__init__(nodes, ifos, kernel_samples, stride_samples, whitening_taps,
                         {name: torch_run(module) for name, module in self.modules.items()})


class StreamedBBHnet(_StreamedInTorch):
    """BBHnet's windows on a stream, run in torch: ``update(state, [ifos, n S])`` → ``[n]``.

    Parameters
    ----------
    network
        The whole-window network, in eval mode.
    kernel_samples, stride_samples
        Window ``K`` and stride ``S``; ``S`` must be a multiple of the network's cumulative
        stride ``P`` (else a window's downsampled grid is not the stream's).
    """

    def __init__(self, network: BBHnet, kernel_samples: int, stride_samples: int) -> None:
        super().__init__(network, bbhnet_graph(network), network.ifos, kernel_samples,
                         stride_samples, network.whitening_taps)


class StreamedClassifier(_StreamedInTorch):
    """The classifier's windows on a stream, run in torch, as ``StreamedBBHnet`` (its
    cumulative stride is 8: three convolutions of stride 2)."""

    def __init__(self, network: Classifier, kernel_samples: int, stride_samples: int
                 ) -> None:
        super().__init__(network, classifier_graph(network), network.features[0].in_channels,
                         kernel_samples, stride_samples, 1)


def _on_the_grid(network: BBHnet | Classifier, kernel_samples: int, stride_samples: int
                 ) -> tuple[StreamedBBHnet | StreamedClassifier, int]:
    """``network`` run in torch at the least multiple of ``stride_samples`` on its grid, and
    how many phases that multiple is (1: the stride itself)."""
    kind, graph = ((StreamedBBHnet, bbhnet_graph) if isinstance(network, BBHnet)
                   else (StreamedClassifier, classifier_graph))
    phases = phases_of(stride_samples, cumulative_stride(graph(network)[0]))
    return kind(network, kernel_samples, phases * stride_samples), phases


def streamed_in_torch(network: BBHnet | Classifier, kernel_samples: int, stride_samples: int
                      ) -> StreamedNetwork | PhasedNetwork:
    """``network``'s windows on a stream, run in torch: ``StreamedBBHnet``
    (``StreamedClassifier``) where the stride is on the network's grid, else a
    ``PhasedNetwork`` of its runs."""
    streamed, phases = _on_the_grid(network, kernel_samples, stride_samples)
    if phases == 1:
        return streamed
    return PhasedNetwork(streamed.nodes, streamed.ifos, kernel_samples, stride_samples,
                         streamed.whitening_taps, streamed.runs)


def export_streamed(network: BBHnet | Classifier, kernel_samples: int, stride_samples: int,
                    directory: Path) -> Path:
    """Write what ``StreamedBBHnet`` (``StreamedClassifier``) runs as ONNX graphs and
    ``streamed.json`` to ``directory`` (``streamed_network.open_streamed_network`` runs them);
    return it.

    Each graph has a dynamic batch and time axis (``export_onnx``), the same for every phase
    of a stride off the network's grid; ValueError as ``StreamedBBHnet`` for a geometry it
    cannot stream.
    """
    streamed, _phases = _on_the_grid(network, kernel_samples, stride_samples)
    directory = Path(directory)
    channels = {"whitened": streamed.ifos}
    head = streamed.modules[HEAD]
    edge = streamed.plan.edge_samples
    for node in streamed.nodes:
        module = streamed.modules[node.name]
        if node.conv is None:
            width = sum(channels[source] for source in node.inputs)
            channels[node.name] = channels[node.inputs[0]]
        else:
            width = channels[node.inputs[0]]
            with torch.no_grad():
                channels[node.name] = int(module(torch.zeros((1, width, 64))).shape[1])
        taps = 1 if node.conv is None else node.conv.taps
        export_onnx(module, directory / f"{node.name}.onnx", "x", "y", (1, width, taps + 8),
                    dynamic_time=True)
    export_onnx(streamed.modules[WHITENING], directory / f"{WHITENING}.onnx", "x", "y",
                (1, streamed.ifos, kernel_samples), dynamic_time=True)
    export_onnx(streamed.modules[EDGES], directory / f"{EDGES}.onnx", "x", "y",
                (2, streamed.ifos, edge))
    export_onnx(head, directory / f"{HEAD}.onnx", "x", "y", (1, head.in_features))
    spec = spec_of(streamed.nodes, streamed.ifos, kernel_samples, stride_samples,
                   streamed.whitening_taps)
    write_stream_spec(directory, spec)
    return directory


def _export_campaign_streamed(network: BBHnet | Classifier, nodes: list[Node],
                              geometry: StreamGeometry, directory: Path) -> Path:
    """``network`` (whose graph is ``nodes``) exported streamed to
    ``directory/<bbhnet|classifier>.streamed``; NotStreamable where the campaign's stride is
    so far off the network's grid that its phases would cost a whole window or more."""
    name, called = (("bbhnet", "BBHnet's") if isinstance(network, BBHnet)
                    else ("classifier", "the classifier's"))
    kernel, stride = geometry.kernel_samples, geometry.stride_samples
    _refuse_costly_phases(nodes, kernel, stride, called)
    return export_streamed(network, kernel, stride,
                           directory / f"{name}{DIRECTORY_SUFFIX}")


def _refuse_costly_phases(nodes: list[Node], kernel: int, stride: int, called: str) -> None:
    """NotStreamable where the campaign's stride (``stride`` samples; windows of ``kernel``)
    puts the windows on so many phases of the graph's cumulative stride that streamed, a
    window would cost a whole window."""
    step = cumulative_stride(nodes)
    phases = phases_of(stride, step)
    if phases * stride >= kernel:
        raise NotStreamable(
            f"model.inference_rate: a stride of {stride} samples puts the windows on "
            f"{phases} phases of {called} cumulative stride {step}: streamed, each window "
            f"would cost {phases * stride} new samples, not fewer than its {kernel} "
            "(docs/networks.md, 'Streamed graphs')")


def export_campaign_network(config: CampaignConfig, weights: Path | None, directory: Path
                            ) -> Path:
    """The campaign's BBHnet (``weights``, as ``export --weights`` takes them) exported
    streamed to ``directory/bbhnet.streamed`` (``model.streamed``); return that directory.

    A graph that is not our BBHnet (``models/recognised.py``) is cut into stream layers
    from its own operators instead (``repository/streamed_foreign.py``; a TorchScript graph
    converted to ONNX first). NotStreamable for a graph with a layer needing the whole window, one
    whose operators cannot be cut, and a stride whose phases would cost a whole window
    (``_refuse_costly_phases``).
    """
    from offline_iaas.models.recognised import streamable_network
    from offline_iaas.models.weights import load_network, names
    from offline_iaas.repository.networks import weight_file

    path = weight_file(weights, "bbhnet", single=True)
    expected = {"ifos": len(config.ifos), "kernel_samples": config.kernel_samples}
    loaded = load_network("bbhnet", path, expected)
    try:
        network = streamable_network("bbhnet", path, loaded, expected)
    except WholeWindowLayer:
        raise
    except NotStreamable as not_ours:
        return _export_campaign_cut(config, loaded, path, directory, not_ours.reason,
                                    names("bbhnet", expected)[1])
    return _export_campaign_streamed(network, bbhnet_nodes(network), config.geometry,
                                     directory)


def _export_campaign_cut(config: CampaignConfig, loaded: Any, path: Path, directory: Path,
                         not_ours: str, output: str) -> Path:
    """The campaign's BBHnet-mode graph of another architecture (``loaded`` from ``path``,
    the statistic its ``output``), cut into stream layers from its ONNX operators and
    exported to ``directory/bbhnet.streamed``; NotStreamable, its reason following
    ``not_ours``, where it cannot be."""
    from offline_iaas.repository import streamed_foreign
    from offline_iaas.repository.stream_layers import (
        cut_failures_refused,
        cut_refusal,
        onnx_for_cut,
    )

    ifos, kernel = len(config.ifos), config.kernel_samples
    where = cut_refusal(not_ours)
    with cut_failures_refused(where):
        model, output = onnx_for_cut(loaded, path, directory / f".{path.name}.onnx",
                                     (1, ifos, kernel), output, where)
        cut = streamed_foreign.cut_into_stream(model, ifos, kernel, output, where)
    _refuse_costly_phases(cut.nodes, config.kernel_samples, config.stride_samples,
                          "the graph's")
    return streamed_foreign.write_cut(cut, model, ifos, kernel, config.stride_samples, output,
                                      directory / f"bbhnet{DIRECTORY_SUFFIX}", where)


def export_campaign_classifier(config: CampaignConfig, weights: Path | None, directory: Path
                               ) -> Path:
    """The campaign's classifier (seeded, or ``weights``: as the whole-window graph's,
    ``science.classifier.network.classifier_network``) exported streamed to
    ``directory/classifier.streamed``; return that directory. NotStreamable as
    ``export_campaign_network`` for the stride."""
    from offline_iaas.science.classifier.network import classifier_network

    network = classifier_network(config.model, len(config.stream_channels), weights)
    return _export_campaign_streamed(network, classifier_graph(network)[0], config.geometry,
                                     directory)


def macs_per_window(network: BBHnet, kernel_samples: int, stride_samples: int
                    ) -> dict[str, float]:
    """Multiply-accumulates per window of the whole-window graph and of the streamed one.

    Convolutions and the head count (BatchNorm, ReLU, sums: a few operations per value, not
    counted). Streamed: the whitening's new outputs per window (``S``), each layer's (``S /
    P_l`` of them, times the ``g = P / gcd(S, P)`` phases of the network's cumulative stride
    ``P`` the windows fall on, each streamed on its own: ``PhasedNetwork``), plus the two edge
    spans through the padded stem and stages, plus the head. ``edge_lower_bound`` is the
    edges' cost if only the positions the padding reaches were recomputed, layer by layer
    (not implemented: the spans recompute more).
    """
    nodes = bbhnet_nodes(network)
    taps = network.whitening_taps
    whitened = kernel_samples - taps + 1
    plan = edge_plan(nodes, whitened)
    phases = phases_of(stride_samples, plan.step)
    head = network.head.in_features * network.head.out_features
    whitening = network.ifos * taps
    whole = whitening * whitened + head
    streamed_layers = whitening * stride_samples + head
    edge = edge_lower = 0.0
    window = {"whitened": (whitened, 0, 0)}
    span = {"whitened": (plan.edge_samples, 0, 0)}
    strides = {"whitened": 1}
    for node in nodes:
        if node.conv is None:
            window[node.name] = window[node.inputs[0]]
            strides[node.name] = strides[node.inputs[0]]
            span[node.name] = span[node.inputs[0]]
            continue
        conv, source = node.conv, node.inputs[0]
        window[node.name] = conv.reach(*window[source])
        span[node.name] = conv.reach(*span[source])
        stride = strides[node.name] = strides[source] * conv.stride
        length, left, right = window[node.name]
        whole += conv.macs_per_output * length
        streamed_layers += conv.macs_per_output * stride_samples / stride * phases
        edge += 2 * conv.macs_per_output * span[node.name][0]
        edge_lower += conv.macs_per_output * (left + right)
    return {"whole": whole, "streamed": streamed_layers + edge,
            "streamed_layers": streamed_layers, "edges": edge, "edge_lower_bound": edge_lower,
            "edge_samples": plan.edge_samples, "left": plan.left, "right": plan.right,
            "top_length": plan.top_length, "step": plan.step}
