"""Our architectures recognised inside the graphs users bring, so that they can be streamed.

A streamed network needs its layers (``science/bbhnet/streamed.py``): a state_dict gives them
directly. A TorchScript graph carries its parameters under the names of the module it was
traced or scripted from, so one made from our DeepClean or BBHnet (``torch.jit.trace`` of a
trained network, as the field ships them) holds exactly a fresh network's state_dict, under
the wrapper's attribute where a training wrapper holds it (``inner.``: ``_unwrapped``). That is
necessary, not enough: a user's subclass may compute something else with the same
parameters. So the network rebuilt from them must also answer two probes (seeded noise at
strain scale and at unit scale) as the graph does, to float tolerance.

An ONNX graph exported from our BBHnet or DeepClean (``torch.onnx.export`` in eval mode)
keeps the names of what it does not fold and folds each BatchNorm that follows a
convolution into it, renaming both (and DeepClean's witness standardisation into the two
constants its input is first reduced and divided by). Its convolutions, in the graph's order,
are our convolutions in the order the network calls them; so the network is rebuilt with
each convolution's folded weights and bias and its BatchNorm made the identity plus that bias
(``_rebuilt_from_onnx``), and must then answer the probes as the graph does, run by
onnxruntime. A graph that fails is cut into stream layers from its own operators instead
(``repository/streamed_foreign.py``, ``science/deepclean/streamed_foreign.py``); one that cannot be
cut is served on whole windows (``model.streamed = "auto"``; ``true`` refuses it with the
reason).

The reason names what stands in the way. Some layers make a window's every output depend on
the whole window (a group, instance or layer normalisation computing its statistics over the
window, or one written out as reductions over the samples, as ml4gw's ``ResNet1D`` has by
default; attention over the window's samples; a recurrent layer that starts each window from
a zero state): no graph with one of them can be streamed, whoever's it is, and the reason
names it (``per_window_layer``, raised as ``WholeWindowLayer``).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from offline_iaas.errors import ModelError, NotStreamable, WholeWindowLayer
from offline_iaas.mode_packages import network_kind
from offline_iaas.models.weight_files import load_torchscript
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
    rebuilt from a TorchScript graph's parameters or an ONNX graph's layers when it computes
    what the graph does.

    Raises
    ------
    NotStreamable
        For a graph with a layer that needs the whole window (``per_window_layer``), and a
        graph that is not one of ours; the reason names the file and what was found.
    """
    called = network_kind(kind).title
    with torch.random.fork_rng(devices=[]):  # building one must not move the caller's seed
        ours = type(build_network(kind, expected))
    if isinstance(loaded, ours):  # a state_dict's (``weights.load_network``)
        return loaded
    form = "TorchScript" if isinstance(loaded, nn.Module) else "ONNX"
    graph = _load_graph(path, form)  # as the file has it (``loaded`` may be adapted)
    found = per_window_layer(path, form, graph)
    if found is not None:
        layer, why = found
        raise WholeWindowLayer(f"{path}: {_a(form)} graph with a layer that {why} ({layer}): "
                            "a window's outputs then depend on the whole window, which "
                            "streaming cannot share between windows")
    if form == "ONNX":
        rebuilt = _rebuilt_from_onnx(kind, path, graph.graph, expected)
        run_graph = _onnx_run(loaded, path)
    else:
        state = _unwrapped(dict(graph.state_dict()))
        try:
            rebuilt = network_for_state(kind, state, path, expected)
        except ModelError:
            raise NotStreamable(f"{path}: a TorchScript graph whose parameters are not "
                                f"{called}'s") from None
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
                f"{path}: {_a(form)} graph with {called}'s {held} that computes something "
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


def _unwrapped(state: dict) -> dict:
    """``state`` without the names of the modules it is wrapped in: a training wrapper holds
    the network as one attribute (``inner.``, ``model.``), and every name then begins with
    it; stripped while all names share one first part."""
    while state and all("." in name for name in state) and \
            len({name.split(".", 1)[0] for name in state}) == 1:
        state = {name.split(".", 1)[1]: value for name, value in state.items()}
    return state


def _load_graph(path: Path, form: str):
    """The TorchScript module or the ONNX ``ModelProto`` at ``path``."""
    if form == "TorchScript":
        return load_torchscript(path)
    import onnx

    return onnx.load(str(path), load_external_data=False)


def _rebuilt_from_onnx(kind: str, path: Path, graph, expected: Mapping[str, Any]
                       ) -> nn.Module:
    """Our ``kind`` network with the layers of ``graph`` (the ONNX ``GraphProto`` at
    ``path``; module docstring); NotStreamable where the graph's convolutions are not ours."""
    called = network_kind(kind).title
    value = _onnx_values(graph)
    whitening = value("whitening")
    taps = int(whitening.shape[-1]) if whitening is not None and whitening.dim() == 3 else None
    network = build_network(kind, expected, taps).eval()
    state = network.state_dict()
    named = {name: value(name) for name in state}  # what the exporter kept under our names
    kept = {name for name, found in named.items()
            if found is not None and tuple(found.shape) == tuple(state[name].shape)}
    state.update({name: named[name] for name in kept})

    def refuse(why: str) -> NotStreamable:
        return NotStreamable(f"{path}: an ONNX graph whose layers are not {called}'s "
                             f"({why})")

    if "witness_mean" in state:  # DeepClean's standardisation, folded into constants
        state.update(_standardisation(graph, value, state, refuse))
    calls = _layer_calls(network, kind, expected)
    consumer = {name: node.op_type for node in graph.node for name in node.input}
    convolutions = iter([node for node in graph.node if node.op_type == "Conv"
                         and node.input[1] not in kept])
    for index, (name, module) in enumerate(calls):
        if not isinstance(module, nn.Conv1d) or name + ".weight" in kept:
            continue
        node = next(convolutions, None)
        if node is None:
            raise refuse(f"no convolution for {name}")
        weight = value(node.input[1])
        bias = value(node.input[2]) if len(node.input) > 2 else None
        if weight is None or tuple(weight.shape) != tuple(state[name + ".weight"].shape):
            raise refuse(f"{node.name or node.op_type} is not {name}: weight shape "
                         f"{None if weight is None else tuple(weight.shape)}, {called}'s "
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
            if name + ".bias" in state:  # the folded bias holds it already
                state[name + ".bias"] = torch.zeros_like(bias)
        elif name + ".bias" in state:
            state[name + ".bias"] = bias
        else:
            raise refuse(f"{name} has no bias and no BatchNorm to take the graph's")
    if next(convolutions, None) is not None:
        raise refuse(f"more convolutions than {called}'s")
    network.load_state_dict(state)
    return network


def _a(form: str) -> str:
    return "an ONNX" if form == "ONNX" else f"a {form}"


def _onnx_values(graph):
    """``name`` → the constant tensor of that name in ``graph`` (an initializer, a Constant
    node's value, through Identity nodes: the exporter shares equal initializers so), or
    None."""
    from onnx import numpy_helper

    initializers = {i.name: i for i in graph.initializer}
    producer = {name: node for node in graph.node for name in node.output}

    def value(name: str):
        if name in initializers:
            return torch.from_numpy(numpy_helper.to_array(initializers[name]).copy())
        node = producer.get(name)
        if node is not None and node.op_type == "Identity":
            return value(node.input[0])
        if node is not None and node.op_type == "Constant" and node.attribute:
            return torch.from_numpy(numpy_helper.to_array(node.attribute[0].t).copy())
        return None

    return value


def _standardisation(graph, value, state: dict, refuse) -> dict:
    """DeepClean's ``witness_mean`` and ``witness_std`` from the graph: the constants its
    input is first reduced by (Sub) and divided by (Div)."""
    graph_input = graph.input[0].name
    sub = next((node for node in graph.node if node.op_type == "Sub"
                and node.input[0] == graph_input), None)
    div = sub and next((node for node in graph.node if node.op_type == "Div"
                        and node.input[0] == sub.output[0]), None)
    found = [value(node.input[1]) if node else None for node in (sub, div)]
    shape = tuple(state["witness_mean"].shape)
    if any(v is None or tuple(v.reshape(-1).shape) != shape for v in found):
        raise refuse("its input is not standardised by one constant per witness first")
    return {"witness_mean": found[0].reshape(-1), "witness_std": found[1].reshape(-1)}


def _layer_calls(network: nn.Module, kind: str, expected: Mapping[str, Any]
                 ) -> list[tuple[str, nn.Module]]:
    """``network``'s convolutions, BatchNorms and linear layers in the order it calls them
    (on one zero window)."""
    calls: list[tuple[str, nn.Module]] = []
    hooks = [module.register_forward_hook(
                 lambda module, _inputs, _output, name=name: calls.append((name, module)))
             for name, module in network.named_modules()
             if isinstance(module, (nn.Conv1d, nn.ConvTranspose1d, nn.BatchNorm1d, nn.Linear))]
    try:
        with torch.no_grad():
            network(torch.zeros((1, *input_shape(kind, expected))))
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


def per_window_layer(path: Path, form: str, loaded: Any = None) -> tuple[str, str] | None:
    """The first layer of the ``form`` (``TorchScript``, ``ONNX``) graph at ``path`` whose
    outputs depend on the whole window, and why; None if none is found (``loaded``: the
    TorchScript module or ONNX ``ModelProto`` already loaded from ``path``).

    Read from the graph's operators in order (TorchScript's inlined graph, sub-blocks
    included; the ONNX graph's nodes, subgraphs included): a normalisation, attention or
    recurrent operator (``_PER_WINDOW``), or a reduction over the samples (any axis past the
    channels, or all of them) ahead of a later convolution, as a normalisation written out by
    hand computes (ml4gw's ``GroupNorm1D``, its ``ResNet1D``'s default: each channel's mean
    and mean square over the window). A reduction after the last convolution is the global
    pool every classifier ends with, ours included."""
    graph = loaded if loaded is not None else _load_graph(path, form)
    if form == "TorchScript":
        ops = _torchscript_ops(graph.inlined_graph.nodes())
    else:
        ops = _onnx_ops(graph.graph)
    convolutions = [index for index, (op, _) in enumerate(ops) if op in _CONVOLUTIONS]
    last_convolution = convolutions[-1] if convolutions else -1
    for index, (op, axes) in enumerate(ops):
        if op in _WHY:
            return op, _WHY[op]
        over_samples = axes is None or any(axis < 0 or axis >= 2 for axis in axes)
        if op in _REDUCTIONS and over_samples and index < last_convolution:
            return op, ("reduces over the window's samples ahead of a later convolution (a "
                        "normalisation by the window's own statistics)")
    return None


_CONVOLUTIONS = {"aten::_convolution", "aten::conv1d", "aten::conv_transpose1d", "Conv",
                 "ConvTranspose"}
_REDUCTIONS = {"aten::mean", "aten::sum", "aten::var", "aten::std", "aten::var_mean",
               "aten::std_mean", "aten::amax", "aten::amin", "aten::norm",
               "aten::linalg_vector_norm", "ReduceMean", "ReduceSum", "ReduceSumSquare",
               "ReduceL1", "ReduceL2", "ReduceMax", "ReduceMin", "ReduceLogSumExp",
               "GlobalAveragePool", "GlobalMaxPool"}


def _torchscript_ops(nodes) -> list[tuple[str, list[int] | None]]:
    """Each operator in order, with a reduction's axes (None: unknown or all)."""
    ops = []
    for node in nodes:
        axes = None
        if node.kind() in _REDUCTIONS:
            inputs = list(node.inputs())
            axes = _constant_ints(inputs[1]) if len(inputs) > 1 else None
        ops.append((node.kind(), axes))
        for block in node.blocks():
            ops += _torchscript_ops(block.nodes())
    return ops


def _constant_ints(value) -> list[int] | None:
    """A TorchScript value's constant ints (a list or one int), else None."""
    constant = value.toIValue()
    if constant is None and value.node().kind() == "prim::ListConstruct":
        constant = [item.toIValue() for item in value.node().inputs()]
    if isinstance(constant, int):
        return [constant]
    if isinstance(constant, list | tuple) and constant and \
            all(isinstance(item, int) for item in constant):
        return list(constant)
    return None


def _onnx_ops(graph) -> list[tuple[str, list[int] | None]]:
    """Each operator in order, with a reduction's axes (None: unknown or all)."""
    from onnx import helper, numpy_helper

    initializers = {i.name: i for i in graph.initializer}
    ops = []
    for node in graph.node:
        axes = None
        attributes = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        if node.op_type not in _REDUCTIONS:
            pass
        elif "axes" in attributes:
            axes = [int(axis) for axis in np.atleast_1d(attributes["axes"])]
        elif len(node.input) > 1 and node.input[1] in initializers:  # opset 18: an input
            axes = [int(axis) for axis in
                    np.atleast_1d(numpy_helper.to_array(initializers[node.input[1]]))]
        ops.append((node.op_type, axes))
        for attribute in node.attribute:
            for sub in ([attribute.g] if attribute.HasField("g") else []) + list(attribute.graphs):
                ops += _onnx_ops(sub)
    return ops
