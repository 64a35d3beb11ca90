"""Our architectures recognised inside the graphs users bring, so that they can be streamed.

A streamed network needs its layers (``repository/streamed.py``): a state_dict gives them
directly. A TorchScript graph carries its parameters under the names of the module it was
traced or scripted from, so one made from our DeepClean or BBHnet (``torch.jit.trace`` of a
trained network, as the field ships them) holds exactly a fresh network's state_dict. That is
necessary, not enough: a user's subclass may compute something else with the same
parameters. So the network rebuilt from them must also answer two probes (seeded noise at
strain scale and at unit scale) as the graph does, to float tolerance.

An ONNX graph exported from our BBHnet (``torch.onnx.export`` in eval mode) keeps the names of
what it does not fold (the input scale, the whitening taps, the head) and folds each
BatchNorm into the convolution before it, renaming both. Its convolutions, in the graph's
order, are our convolutions in the order the network calls them; so BBHnet is rebuilt with
each convolution's folded weights and bias and its BatchNorm made the identity plus that bias
(``_rebuilt_from_onnx``), and must then answer the probes as the graph does, run by
onnxruntime. Other ONNX graphs (DeepClean's: its exporter also folds the witnesses'
standardisation into unnamed constants) are not recognised. A graph that fails is served on
whole windows (``model.streamed = "auto"``; ``true`` refuses it with the same reason).

The reason names what stands in the way. Some layers make a window's every output depend on
the whole window, so that no layer's output on one window is part of the next window's (a
group, instance or layer normalisation computing its statistics over the window, as ml4gw's
``ResNet1D`` does by default; attention over the window's samples; a recurrent layer that
starts each window from a zero state): no graph with one of them can be streamed, whoever's
it is, and the reason says so (``per_window_layer``). A graph without them could be, but only
our architectures' layers are rebuilt, and the reason says that instead.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from offline_iaas.errors import ModelError, NotStreamable
from offline_iaas.models.bbhnet import BBHnet
from offline_iaas.models.deepclean import DeepClean
from offline_iaas.models.weights import build_network, input_shape, network_for_state

PROBE_SCALES = (1e-21, 1.0)
"""Amplitudes of the probes a recognised graph must answer as the rebuilt network does."""
RELATIVE_TOLERANCE = 1e-5
"""``max |graph - rebuilt| ≤ tolerance × max |graph|`` on each probe (float32 both), or
``ROUNDING_FACTOR`` times the rebuilt network's own float32 error, if larger."""
ROUNDING_FACTOR = 4.0
"""A graph computed by other kernels (onnxruntime's; BatchNorm folded) differs from the
rebuilt network by float32 rounding, which a statistic summed over many features can make
larger than 1e-5 of it: it is measured on the probe (the rebuilt network in float32 against
float64) and the graph may differ by this many times it."""
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
        if kind != "bbhnet":
            raise NotStreamable(f"{path}: {called}'s weights are an ONNX graph (its exporter "
                                "renames and folds the layers, so none are recognised to "
                                "stream)")
        rebuilt = _rebuilt_from_onnx(path, expected)
        run_graph = _onnx_run(loaded, path)
    else:
        state = dict(graph.state_dict())
        try:
            rebuilt = network_for_state(kind, state, path, expected)
        except ModelError:
            raise NotStreamable(f"{path}: a TorchScript graph whose parameters are not "
                                f"{called}'s (its layers could stream, but only ours are "
                                "rebuilt to)") from None
        rebuilt.load_state_dict(state)

        def run_graph(probe: np.ndarray) -> np.ndarray:
            with torch.no_grad():
                return loaded(torch.from_numpy(probe)).numpy()
    rebuilt.eval()
    held = "parameters" if form == "TorchScript" else "layers"
    in_float64 = copy.deepcopy(rebuilt).double()
    channels, kernel = input_shape(kind, expected)
    rng = np.random.default_rng(0)
    for scale in PROBE_SCALES:
        probe = (scale * rng.standard_normal((_PROBE_BATCH, channels, kernel))).astype(np.float32)
        with torch.no_grad():
            ours = rebuilt(torch.from_numpy(probe)).numpy().reshape(-1)
            exact = in_float64(torch.from_numpy(probe).double()).numpy().reshape(-1)
        theirs = np.asarray(run_graph(probe), np.float32).reshape(-1)
        error = float(np.abs(theirs - ours).max()) if theirs.shape == ours.shape else np.inf
        allowed = max(RELATIVE_TOLERANCE * float(np.abs(theirs).max()),
                      ROUNDING_FACTOR * float(np.abs(ours - exact).max()))
        if not error <= allowed:  # NaN fails too
            raise NotStreamable(
                f"{path}: a {form} graph with {called}'s {held} that computes something "
                f"else (on a probe of amplitude {scale:g} it differs from {called} by "
                f"{error:.3g}, {allowed:.3g} allowed)")
    return rebuilt


def _onnx_run(loaded: Any, path: Path):
    """The user's ONNX graph (``loaded``: its path, or the graph ``load_network`` adapted)
    run by onnxruntime on one batch."""
    import onnx
    import onnxruntime

    source = loaded.SerializeToString() if isinstance(loaded, onnx.ModelProto) else str(path)
    session = onnxruntime.InferenceSession(source, providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    return lambda probe: session.run(None, {name: probe})[0]


def _rebuilt_from_onnx(path: Path, expected: Mapping[str, Any]) -> nn.Module:
    """BBHnet with the layers of the ONNX graph at ``path`` (module docstring); NotStreamable
    where the graph's convolutions are not BBHnet's."""
    import onnx
    from onnx import numpy_helper

    graph = onnx.load(str(path), load_external_data=False).graph
    values = {i.name: torch.from_numpy(numpy_helper.to_array(i).copy())
              for i in graph.initializer}
    whitening = values.get("whitening")
    taps = int(whitening.shape[-1]) if whitening is not None and whitening.dim() == 3 else None
    network = build_network("bbhnet", expected, taps).eval()
    state = network.state_dict()
    for name in state:  # what the exporter kept under our names
        if name in values and tuple(values[name].shape) == tuple(state[name].shape):
            state[name] = values[name]
    calls = _layer_calls(network, expected)
    consumer = {name: node.op_type for node in graph.node for name in node.input}
    convolutions = iter([node for node in graph.node if node.op_type == "Conv"
                         and node.input[1] not in state])

    def refuse(why: str) -> NotStreamable:
        return NotStreamable(f"{path}: an ONNX graph whose layers are not BBHnet's ({why}; "
                             "its layers could stream, but only ours are rebuilt to)")

    for index, (name, module) in enumerate(calls):
        if not isinstance(module, nn.Conv1d) or name + ".weight" not in state:
            continue
        node = next(convolutions, None)
        if node is None:
            raise refuse(f"no convolution for {name}")
        weight = values.get(node.input[1])
        bias = values.get(node.input[2]) if len(node.input) > 2 else None
        if weight is None or tuple(weight.shape) != tuple(state[name + ".weight"].shape):
            raise refuse(f"{node.name or node.op_type} is not {name}: weight shape "
                         f"{None if weight is None else tuple(weight.shape)}, BBHnet's "
                         f"{tuple(state[name + '.weight'].shape)}")
        state[name + ".weight"] = weight
        bias = torch.zeros(weight.shape[0]) if bias is None else bias
        after = calls[index + 1] if index + 1 < len(calls) else None
        if after and isinstance(after[1], nn.BatchNorm1d) and \
                consumer.get(node.output[0]) != "BatchNormalization":
            # folded into this convolution: the BatchNorm passes it on, adding its bias
            norm, eps = after[0], after[1].eps
            state.update({norm + ".weight": torch.ones_like(bias), norm + ".bias": bias,
                          norm + ".running_mean": torch.zeros_like(bias),
                          norm + ".running_var": torch.full_like(bias, 1 - eps)})
        elif name + ".bias" in state:
            state[name + ".bias"] = bias
        else:
            raise refuse(f"{name} has no bias and no BatchNorm to take the graph's")
    if next(convolutions, None) is not None:
        raise refuse("more convolutions than BBHnet's")
    network.load_state_dict(state)
    return network


def _layer_calls(network: nn.Module, expected: Mapping[str, Any]) -> list[tuple[str, nn.Module]]:
    """``network``'s convolutions, BatchNorms and linear layers in the order it calls them
    (on one zero window)."""
    calls: list[tuple[str, nn.Module]] = []
    hooks = [module.register_forward_hook(
                 lambda module, _inputs, _output, name=name: calls.append((name, module)))
             for name, module in network.named_modules()
             if isinstance(module, (nn.Conv1d, nn.ConvTranspose1d, nn.BatchNorm1d, nn.Linear))]
    try:
        with torch.no_grad():
            network(torch.zeros((1, *input_shape("bbhnet", expected))))
    finally:
        for hook in hooks:
            hook.remove()
    return calls


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
