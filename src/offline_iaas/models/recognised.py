"""Our architectures recognised inside the graphs users bring, so that they can be streamed.

A streamed network needs its layers (``repository/streamed.py``): a state_dict gives them
directly. A TorchScript graph carries its parameters under the names of the module it was
traced or scripted from, so one made from our DeepClean or BBHnet (``torch.jit.trace`` of a
trained network, as the field ships them) holds exactly a fresh network's state_dict. That is
necessary, not enough: a user's subclass may compute something else with the same
parameters. So the network rebuilt from them must also answer two probes (seeded noise at
strain scale and at unit scale) as the graph does, to float tolerance. An ONNX graph's
initializers are renamed and folded by the exporter (BatchNorm into the convolutions), so its
layers are not recognised: it is served on whole windows, as a TorchScript graph that fails
either test is (``model.streamed = "auto"``; ``true`` refuses it with the same reason).

The reason names what stands in the way. Some layers make a window's every output depend on
the whole window, so that no layer's output on one window is part of the next window's (a
group, instance or layer normalisation computing its statistics over the window, as ml4gw's
``ResNet1D`` does by default; attention over the window's samples; a recurrent layer that
starts each window from a zero state): no graph with one of them can be streamed, whoever's
it is, and the reason says so (``per_window_layer``). A graph without them could be, but only
our architectures' layers are rebuilt, and the reason says that instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from offline_iaas.errors import ModelError, NotStreamable
from offline_iaas.models.bbhnet import BBHnet
from offline_iaas.models.deepclean import DeepClean
from offline_iaas.models.weights import input_shape, network_for_state

PROBE_SCALES = (1e-21, 1.0)
"""Amplitudes of the probes a recognised graph must answer as the rebuilt network does."""
RELATIVE_TOLERANCE = 1e-5
"""``max |graph - rebuilt| ≤ tolerance × max |graph|`` on each probe (float32 both)."""
_PROBE_BATCH = 3


def streamable_network(kind: str, path: Path, loaded: Any, expected: Mapping[str, Any]
                       ) -> nn.Module:
    """The ``kind`` network (``deepclean``, ``bbhnet``) whose layers ``path`` holds:
    ``loaded`` itself for a state_dict (``weights.load_network``'s result), or our network
    rebuilt from a TorchScript graph's parameters when it computes what the graph does.

    Raises
    ------
    NotStreamable
        For an ONNX graph, and a TorchScript graph that is not one of ours; the reason
        names the file and what was found.
    """
    network_type, called = (DeepClean, "DeepClean") if kind == "deepclean" else (BBHnet, "BBHnet")
    if isinstance(loaded, network_type):
        return loaded
    form = "TorchScript" if isinstance(loaded, nn.Module) else "ONNX"
    graph = torch.jit.load(str(path), map_location="cpu") if form == "TorchScript" else None
    found = per_window_layer(path, form, graph)
    if found is not None:
        layer, why = found
        raise NotStreamable(f"{path}: a {form} graph with a layer that {why} ({layer}): a "
                            "window's outputs depend on the whole window, so none carry to "
                            "the next window and no layer can be streamed")
    if form == "ONNX":
        raise NotStreamable(f"{path}: {called}'s weights are an ONNX graph (its exporter "
                            "renames and folds the layers, so none are recognised to stream)")
    state = dict(graph.state_dict())
    try:
        rebuilt = network_for_state(kind, state, path, expected)
    except ModelError:
        raise NotStreamable(f"{path}: a TorchScript graph whose parameters are not "
                            f"{called}'s (its layers could stream, but only ours are rebuilt "
                            "to)") from None
    rebuilt.load_state_dict(state)
    rebuilt.eval()
    channels, kernel = input_shape(kind, expected)
    rng = np.random.default_rng(0)
    for scale in PROBE_SCALES:
        probe = torch.from_numpy(
            (scale * rng.standard_normal((_PROBE_BATCH, channels, kernel))).astype(np.float32))
        with torch.no_grad():
            graph, ours = loaded(probe).reshape(-1), rebuilt(probe).reshape(-1)
        error = float((graph - ours).abs().max()) if graph.shape == ours.shape else np.inf
        if not error <= RELATIVE_TOLERANCE * float(graph.abs().max()):  # NaN fails too
            raise NotStreamable(
                f"{path}: a TorchScript graph with {called}'s parameters that computes "
                f"something else (on a probe of amplitude {scale:g} it differs from "
                f"{called} by {error:.3g}, relative {RELATIVE_TOLERANCE:g} allowed)")
    return rebuilt


_PER_WINDOW = {
    "normalises each window by its own statistics": (
        "aten::group_norm", "aten::instance_norm", "aten::layer_norm",
        "GroupNormalization", "InstanceNormalization", "LayerNormalization"),
    "attends over the window's samples": (
        "aten::scaled_dot_product_attention", "aten::_native_multi_head_attention",
        "Attention", "MultiHeadAttention"),
    "runs over each window from a zero state": (
        "aten::lstm", "aten::gru", "aten::rnn_tanh", "aten::rnn_relu", "LSTM", "GRU", "RNN"),
}
_WHY = {op: why for why, ops in _PER_WINDOW.items() for op in ops}


def per_window_layer(path: Path, form: str, loaded: torch.jit.ScriptModule | None = None
                     ) -> tuple[str, str] | None:
    """The first layer of the ``form`` (``TorchScript``, ``ONNX``) graph at ``path`` whose
    outputs depend on the whole window, and why; None if it has none (``loaded``: the
    TorchScript module already loaded from ``path``).

    Read from the graph's operators: TorchScript's inlined graph (its ``aten::`` calls,
    sub-blocks included), the ONNX graph's nodes (subgraphs included)."""
    if form == "TorchScript":
        module = loaded if loaded is not None else torch.jit.load(str(path), map_location="cpu")
        kinds = _torchscript_kinds(module.inlined_graph.nodes())
    else:
        import onnx

        kinds = _onnx_kinds(onnx.load(str(path), load_external_data=False).graph)
    for op in kinds:
        if op in _WHY:
            return op, _WHY[op]
    return None


def _torchscript_kinds(nodes) -> list[str]:
    kinds = []
    for node in nodes:
        kinds.append(node.kind())
        for block in node.blocks():
            kinds += _torchscript_kinds(block.nodes())
    return kinds


def _onnx_kinds(graph) -> list[str]:
    kinds = []
    for node in graph.node:
        kinds.append(node.op_type)
        for attribute in node.attribute:
            for sub in ([attribute.g] if attribute.HasField("g") else []) + list(attribute.graphs):
                kinds += _onnx_kinds(sub)
    return kinds
