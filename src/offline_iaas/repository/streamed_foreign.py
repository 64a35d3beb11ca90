"""A user's graph of another architecture cut into the stream graph, from its own operators
(issue #42).

``models/recognised.py`` rebuilds our networks from the graphs users bring. A graph of any
other architecture (ml4gw's ``ResNet1D`` with BatchNorm, a TorchScript graph whose parameters
are named otherwise: converted to ONNX first) is streamed from its ONNX operators when they
have the shape the stream graph needs (``backend/streamed_network.py``, which runs the result
as it runs BBHnet's):

- operators on each raw sample alone (an input scale): the whitening, of one tap;
- then 1-D convolutions and max/average pools (``Conv``, ``MaxPool``, ``AveragePool``;
  symmetric padding, no ceil mode), each a stream node run without its padding, with the
  operators on each sample alone that follow it (activations, ``BatchNormalization``,
  arithmetic with a constant that does not vary along the samples) folded in; joins of two
  streams (a residual ``Add``, a ``Concat`` of channels); a per-sample operator on a stream
  that several read is a node of its own;
- one mean over the samples (``GlobalAveragePool``, ``ReduceMean`` of the last axis);
- after it, anything: the head (``[n, C]`` → ``[n, 1]``).

The edges run is the graph's own operators from the whitening to the mean, padding kept. Any
other operator reading the samples (a reshape, a dense layer over the window, a max over it)
stops the cut, and the reason names it. The cut graphs are checked on probe streams against the
user's graph on whole windows before they are kept (``check_against_whole_windows``).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from offline_iaas.atomic import write_text_atomic
from offline_iaas.errors import NotStreamable
from offline_iaas.repository.backend.streamed_network import (
    EDGES,
    HEAD,
    MANIFEST,
    WHITENING,
    Conv,
    Node,
    open_streamed_network,
    spec_of,
)

_EACH_SAMPLE = frozenset({
    "Relu", "LeakyRelu", "Sigmoid", "Tanh", "Elu", "Selu", "Celu", "Softplus", "Softsign",
    "HardSigmoid", "HardSwish", "Gelu", "Mish", "Erf", "Identity", "Dropout", "Abs", "Neg",
    "Exp", "Log", "Sqrt", "Reciprocal", "Clip", "BatchNormalization", "ThresholdedRelu",
    "Sin", "Cos", "Sign", "Floor", "Ceil", "Round"})
"""Operators on each value alone (their other inputs constants per channel)."""
_ARITHMETIC = frozenset({"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "PRelu"})
"""Two-input operators: per sample with a constant, a join of two streams."""
_LAYERS = frozenset({"Conv", "MaxPool", "AveragePool"})
PROBE_SCALES = (1e-21, 1.0)
"""Amplitudes of the probe streams the cut graphs must answer as the whole-window graph."""
PROBE_TOLERANCE = 1e-4
"""``max |streamed - whole| ≤ tolerance × max |whole|`` on each probe: float32 rounding in
another order passes, a layer cut at the wrong sample does not (its errors are of order 1)."""
_PROBE_WINDOWS = 9
_NOT_CUT = ("is none of what stream layers are cut from (convolutions, pools, per-sample "
            "operators, joins of two streams, then one mean over the samples)")


@dataclass
class _Part:
    """One stream node as it is cut: its first operator and those folded after it."""

    node: Node
    ops: list = field(default_factory=list)
    output: str = ""
    """The tensor it ends at (the last folded operator's output)."""


@dataclass
class StreamCut:
    """A graph cut into the stream graph: its nodes and each run's ONNX graph."""

    nodes: list[Node]
    graphs: dict[str, onnx.ModelProto]


def cut_into_stream(model: onnx.ModelProto, ifos: int, kernel_samples: int, where: str
                    ) -> StreamCut:
    """``model`` (input ``[n, ifos, K]``, one value per window out) cut into the stream graph.

    Raises
    ------
    NotStreamable
        Naming the operator that stops the cut (``where`` begins the reason).
    """
    graph = model.graph
    inferred = _inferred(model, ifos, kernel_samples)
    channels, shapes = _channels(inferred), _shapes(inferred)
    consumers: dict[str, int] = {}
    for op in graph.node:
        for name in op.input:
            consumers[name] = consumers.get(name, 0) + 1
    for output in graph.output:
        consumers[output.name] = consumers.get(output.name, 0) + 1
    constants = {i.name for i in graph.initializer}

    def refuse(op, why: str) -> NotStreamable:
        label = op.op_type + (f" {op.name!r}" if op.name else "")
        return NotStreamable(f"{where}: {label} {why}")

    whitening_ops: list = []
    whitened = graph.input[0].name
    parts: list[_Part] = []
    part_of: dict[str, _Part] = {}  # a stream tensor ending a part → the part
    head_tensors: set[str] = set()
    pool = None
    for op in graph.node:
        streams = [name for name in op.input if name == whitened or name in part_of]
        if not streams:
            if any(name in head_tensors for name in op.input):
                head_tensors.update(op.output)
            elif all(not name or name in constants for name in op.input):
                constants.update(op.output)
            else:
                raise refuse(op, "reads a value made from the window other than by the stream")
            continue
        if pool is not None or any(name in head_tensors for name in op.input):
            raise refuse(op, "reads the samples beside the mean over them")
        distinct = list(dict.fromkeys(streams))
        others = [name for name in op.input if name and name not in distinct]
        if any(name not in constants for name in others):
            raise refuse(op, "reads a value that is neither the stream nor a constant")
        if _is_mean_over_samples(op, shapes, constants, model):
            pool = op
            head_tensors.update(op.output)
            continue
        per_sample = len(distinct) == 1 and (
            op.op_type in _EACH_SAMPLE and op.input[0] == distinct[0]
            or op.op_type in _ARITHMETIC and all(
                _constant_along_samples(shapes.get(name)) for name in others))
        if len(op.output) != 1 and op.op_type != "Dropout":
            raise refuse(op, "has more than one output")
        source = distinct[0]
        if per_sample and not parts and source == whitened and consumers.get(source) == 1:
            whitening_ops.append(op)  # still on the raw samples: the whitening's
            whitened = op.output[0]
            continue
        if per_sample and source in part_of and consumers.get(source) == 1:
            part = part_of.pop(source)  # folded into the node that made its input
            part.ops.append(op)
        elif per_sample:
            part = _Part(Node(_node_name(op, len(parts)), (_node_of(source, part_of),),
                              Conv(1, 1, 0)), [op])
            parts.append(part)
        elif op.op_type in _LAYERS and op.input[0] == source and len(distinct) == 1:
            part = _Part(Node(_node_name(op, len(parts)), (_node_of(source, part_of),),
                              _layer(op, shapes, refuse)), [_unpadded(op)])
            parts.append(part)
        elif len(distinct) == 2 and not others and (
                op.op_type in _ARITHMETIC - {"PRelu"}
                or op.op_type == "Concat" and _attribute(op, "axis") in (1, -2)):
            part = _Part(Node(_node_name(op, len(parts)), tuple(
                _node_of(name, part_of) for name in distinct), None), [op])
            parts.append(part)
        else:
            raise refuse(op, _NOT_CUT)
        part.output = op.output[0]
        part_of[part.output] = part
    if pool is None:
        raise NotStreamable(f"{where}: no mean over the samples ends its layers (stream "
                            "layers end in one)")
    top = part_of.get(pool.input[0])
    if top is None:
        raise refuse(pool, "is not preceded by a convolution")
    nodes = [part.node for part in parts]
    read = {name for node in nodes for name in node.inputs}
    dangling = [node.name for node in nodes if node.name not in read and node is not top.node]
    if dangling:
        raise refuse(pool, f"is not the only end of the stream layers ({dangling} too)")
    return StreamCut(nodes, _run_graphs(model, parts, whitening_ops, whitened, pool,
                                        channels, ifos))


def _node_name(op, index: int) -> str:
    return f"n{index:03d}_{op.op_type.lower()}"


def _node_of(tensor: str, part_of: dict[str, _Part]) -> str:
    return part_of[tensor].node.name if tensor in part_of else WHITENING


def _attribute(op, name: str, default: Any = None) -> Any:
    found = next((a for a in op.attribute if a.name == name), None)
    return default if found is None else helper.get_attribute_value(found)


def _layer(op, shapes: dict, refuse) -> Conv:
    """A convolution's or pool's geometry (``Conv``: the stream graph's layer)."""
    kernel = _attribute(op, "kernel_shape") or list(shapes.get(op.input[1], ())[2:])
    auto_pad = _attribute(op, "auto_pad", b"NOTSET")
    auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad
    pads = _attribute(op, "pads", [0, 0])
    if len(kernel) != 1:
        raise refuse(op, f"is not one-dimensional (kernel {list(kernel)})")
    if auto_pad not in ("NOTSET", "VALID") or len(pads) != 2 or pads[0] != pads[1]:
        raise refuse(op, f"pads the two ends unequally ({auto_pad}, {list(pads)})")
    if _attribute(op, "ceil_mode", 0):
        raise refuse(op, "rounds its output length up (ceil_mode)")
    (dilation,) = _attribute(op, "dilations", [1])
    (stride,) = _attribute(op, "strides", [1])
    taps = dilation * (kernel[0] - 1) + 1
    macs = 0
    if op.op_type == "Conv":
        out_channels, per_group = shapes[op.input[1]][:2]
        macs = int(out_channels * per_group * kernel[0])
    return Conv(taps, stride, pads[0] if auto_pad == "NOTSET" else 0, macs)


def _unpadded(op):
    """A copy of the layer ``op`` without its padding (the stream supplies the
    neighbours)."""
    copy = onnx.NodeProto()
    copy.CopyFrom(op)
    del copy.attribute[:]
    copy.attribute.extend(a for a in op.attribute if a.name not in ("pads", "auto_pad"))
    return copy


def _is_mean_over_samples(op, shapes: dict, constants: set[str], model) -> bool:
    """``op`` is a mean over the last (samples) axis alone."""
    if op.op_type == "GlobalAveragePool":
        return True
    if op.op_type != "ReduceMean":
        return False
    axes = _attribute(op, "axes")
    if axes is None and len(op.input) > 1 and op.input[1] in constants:
        axes = _constant_value(model, op.input[1])
    return axes is not None and [int(a) for a in np.atleast_1d(axes)] in ([2], [-1])


def _constant_value(model, name: str):
    for initializer in model.graph.initializer:
        if initializer.name == name:
            return numpy_helper.to_array(initializer)
    for op in model.graph.node:
        if op.op_type == "Constant" and op.output[0] == name and op.attribute:
            return numpy_helper.to_array(op.attribute[0].t)
    return None


def _constant_along_samples(shape: tuple[int, ...] | None) -> bool:
    """A constant of ``shape`` broadcast against ``[n, C, samples]`` is the same at every
    sample (its last axis, if any, is 1; it has no window axis of its own)."""
    if shape is None:
        return False
    return len(shape) == 0 or (shape[-1] == 1 and len(shape) <= 3
                               and (len(shape) < 3 or shape[0] == 1))


def _inferred(model, ifos: int, kernel_samples: int) -> onnx.ModelProto:
    """A copy of ``model`` with its tensors' shapes inferred for one window of the
    campaign's shape."""
    fixed = onnx.ModelProto()
    fixed.CopyFrom(model)
    dims = fixed.graph.input[0].type.tensor_type.shape.dim
    for dim, value in zip(dims, (1, ifos, kernel_samples), strict=False):
        dim.Clear()
        dim.dim_value = value
    del fixed.graph.value_info[:]
    return onnx.shape_inference.infer_shapes(fixed)


def _shapes(inferred) -> dict[str, tuple[int, ...]]:
    """Shapes of the graph's initializers and of the tensors whose shape is inferred."""
    shapes = {i.name: tuple(i.dims) for i in inferred.graph.initializer}
    for value in inferred.graph.value_info:
        dims = value.type.tensor_type.shape.dim
        if all(d.HasField("dim_value") for d in dims):
            shapes.setdefault(value.name, tuple(d.dim_value for d in dims))
    return shapes


def _channels(inferred) -> dict[str, int]:
    """Each tensor's channel count (axis 1)."""
    found = {}
    for value in [*inferred.graph.input, *inferred.graph.value_info]:
        dims = value.type.tensor_type.shape.dim
        if len(dims) >= 2 and dims[1].HasField("dim_value"):
            found[value.name] = dims[1].dim_value
    return found


def _run_graphs(model, parts: list[_Part], whitening_ops: list, whitened: str, pool,
                channels: dict[str, int], ifos: int) -> dict[str, onnx.ModelProto]:
    """Each run's graph: the whitening, every node, the edges and the head (input ``x``,
    output ``y``)."""
    source = model.graph.input[0].name
    graphs = {WHITENING: _graph(model, whitening_ops, {source: "x"}, whitened, ifos)}
    tensor_of = {WHITENING: whitened, **{part.node.name: part.output for part in parts}}
    for part in parts:
        first, *folded = part.ops
        if part.node.conv is not None:
            stream = tensor_of[part.node.inputs[0]]
            entry, width, preamble = {stream: "x"}, channels[stream], []
        else:
            inputs = [tensor_of[name] for name in part.node.inputs]
            widths = [channels[name] for name in inputs]
            preamble = [_split(model, widths, inputs)]
            entry, width = {}, sum(widths)
        graphs[part.node.name] = _graph(model, [*preamble, first, *folded], entry,
                                        part.output, width)
    outputs = {op.output[0] for part in parts for op in part.ops}
    stream_ops = [op for op in model.graph.node if op.output and op.output[0] in outputs]
    graphs[EDGES] = _graph(model, stream_ops, {whitened: "x"}, pool.input[0],
                           channels[whitened] if whitened in channels else ifos)
    graphs[HEAD] = _head(model, pool, channels[pool.input[0]])
    return graphs


def _split(model, widths: list[int], outputs: list[str]):
    """``x`` split along channels into a join's two inputs."""
    if _opset(model) >= 13:
        return ("split", widths, helper.make_node("Split", ["x", "split_widths"], outputs,
                                                  axis=1))
    return ("split", None, helper.make_node("Split", ["x"], outputs, axis=1, split=widths))


def _opset(model) -> int:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 13)


def _head(model, pool, width: int) -> onnx.ModelProto:
    """The graph after the mean: ``[n, C]`` → ``[n, 1]``."""
    keeps = _attribute(pool, "keepdims", 1) if pool.op_type == "ReduceMean" else 1
    after = _downstream(model, pool.output[0])
    pooled = pool.output[0]
    entry = helper.make_node("Unsqueeze", ["x", "axis_2"], [pooled]) if keeps else \
        helper.make_node("Identity", ["x"], [pooled])
    if keeps and _opset(model) < 13:
        entry = helper.make_node("Unsqueeze", ["x"], [pooled], axes=[2])
    out = model.graph.output[0].name
    reshape = helper.make_node("Reshape", [out, "column"], ["statistic_column"])
    return _graph(model, [("entry", None, entry), *after, ("reshape", None, reshape)],
                  {}, "statistic_column", width, extra={
                      "column": np.array([-1, 1], np.int64),
                      **({"axis_2": np.array([2], np.int64)} if "axis_2" in entry.input
                         else {})}, time_axis=False)


def _downstream(model, tensor: str) -> list:
    """The graph's operators that depend on ``tensor``, in order."""
    reached, ops = {tensor}, []
    for op in model.graph.node:
        if any(name in reached for name in op.input):
            ops.append(op)
            reached.update(op.output)
    return ops


def _graph(model, ops: list, entry: dict[str, str], output: str, width: int,
           extra: dict[str, np.ndarray] | None = None, time_axis: bool = True
           ) -> onnx.ModelProto:
    """A graph of ``ops`` (and the constants they read) from input ``x`` (``entry``: the
    original tensors it stands for) to ``output`` (renamed ``y``). An op may be a tuple
    ``(kind, widths, node)`` made here: its inputs are ``x`` and ``extra``'s constants."""
    rename = {name: "x" for name in entry}
    extra = dict(extra or {})

    def named(name: str) -> str:
        return rename.get(name, f"v.{name}" if name else "")

    body, produced = [], set()
    for op in ops:
        if isinstance(op, tuple):
            kind, widths, made = op
            if kind == "split" and widths is not None:
                extra["split_widths"] = np.array(widths, np.int64)
            copy = onnx.NodeProto()
            copy.CopyFrom(made)
            copy.output[:] = [named(name) for name in made.output]
            copy.input[:] = [name if name == "x" or name in extra else named(name)
                             for name in made.input]
        else:
            copy = onnx.NodeProto()
            copy.CopyFrom(op)
            copy.input[:] = [named(name) for name in op.input]
            copy.output[:] = [named(name) for name in op.output]
        body.append(copy)
        produced.update(copy.output)
    needed = {name for op in body for name in op.input} - produced - {"x", "", *extra}
    constants = _constants_for(model, needed)
    body = [*constants[1], *body, helper.make_node("Identity", [named(output)], ["y"])]
    initializers = [*constants[0], *(numpy_helper.from_array(value, name)
                                     for name, value in extra.items())]
    shape = ["batch", width, "samples"] if time_axis else ["batch", width]
    graph = helper.make_graph(
        body, "stream_run", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "y_channels",
                                                                 "y_samples"][:len(shape)])],
        initializers)
    made = helper.make_model(graph, opset_imports=list(model.opset_import),
                             ir_version=model.ir_version)
    onnx.checker.check_model(made)
    return made


def _constants_for(model, needed: set[str]) -> tuple[list, list]:
    """The initializers and constant-making operators that ``needed`` (renamed ``v.*``)
    come from, renamed so."""
    initializers = {i.name: i for i in model.graph.initializer}
    producer = {name: op for op in model.graph.node for name in op.output}
    found_initializers, found_ops, seen = [], [], set()

    def visit(name: str) -> None:
        if not name or name in seen:
            return
        seen.add(name)
        if name in initializers:
            copy = onnx.TensorProto()
            copy.CopyFrom(initializers[name])
            copy.name = f"v.{name}"
            found_initializers.append(copy)
            return
        op = producer[name]
        for source in op.input:
            visit(source)
        copy = onnx.NodeProto()
        copy.CopyFrom(op)
        copy.input[:] = [f"v.{n}" if n else "" for n in op.input]
        copy.output[:] = [f"v.{n}" for n in op.output]
        found_ops.append(copy)

    for name in sorted(name[2:] for name in needed):
        visit(name)
    return found_initializers, found_ops


def check_against_whole_windows(directory: Path, model: onnx.ModelProto, ifos: int,
                                kernel_samples: int, stride_samples: int, where: str) -> None:
    """The graphs cut into ``directory`` answer probe streams (seeded noise at each
    ``PROBE_SCALES``, sent in uneven requests) as ``model`` does on their whole windows;
    NotStreamable naming the difference where they do not."""
    import onnxruntime

    session = onnxruntime.InferenceSession(model.SerializeToString(),
                                           providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name

    def whole_window(window: np.ndarray) -> float:
        return float(np.asarray(session.run(None, {name: window[None]})[0]).reshape(-1)[0])

    try:
        streamed = open_streamed_network(directory)
    except (ValueError, RuntimeError) as err:
        raise NotStreamable(f"{where}: so cut, its stream layers do not fit together "
                            f"({err})") from None
    rng = np.random.default_rng(0)
    total = _PROBE_WINDOWS * stride_samples
    for scale in PROBE_SCALES:
        samples = (scale * rng.standard_normal((ifos, total))).astype(np.float32)
        stream = np.concatenate([np.zeros((ifos, kernel_samples), np.float32), samples], 1)
        windows = np.stack([stream[:, (j + 1) * stride_samples:][:, :kernel_samples]
                            for j in range(_PROBE_WINDOWS)])
        whole = np.array([whole_window(window) for window in windows])
        state, out = streamed.initial_state(), []
        for first, end in ((0, 2), (2, 3), (3, 7), (7, _PROBE_WINDOWS)):
            out.append(streamed.update(state, samples[:, first * stride_samples:
                                                      end * stride_samples]))
        error = float(np.abs(np.concatenate(out) - whole).max()) \
            if sum(map(len, out)) == len(whole) else np.inf
        allowed = PROBE_TOLERANCE * float(np.abs(whole).max())
        if not error <= allowed:  # NaN fails too
            raise NotStreamable(
                f"{where}: so cut, it differs from the graph on the whole windows of a probe "
                f"of amplitude {scale:g} by {error:.3g} ({allowed:.3g} allowed)")


def write_cut(cut: StreamCut, model: onnx.ModelProto, ifos: int, kernel_samples: int,
              stride_samples: int, directory: Path, where: str) -> Path:
    """``cut`` (of ``model``: ``cut_into_stream``) written to ``directory`` as
    ``streamed_network.open_streamed_network`` reads it, once checked against whole windows
    (``check_against_whole_windows``); return ``directory``. NotStreamable, nothing
    written, where it fails."""
    directory = Path(directory)
    staging = Path(tempfile.mkdtemp(prefix=".cut-", dir=directory.parent))
    try:
        for run, graph in cut.graphs.items():
            onnx.save(graph, str(staging / f"{run}.onnx"))
        spec = spec_of(cut.nodes, ifos, kernel_samples, stride_samples, 1)
        write_text_atomic(staging / MANIFEST, json.dumps(spec, indent=1) + "\n")
        check_against_whole_windows(staging, model, ifos, kernel_samples, stride_samples,
                                    where)
        staging.rename(directory)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return directory
