"""A user's graph of another architecture cut into the stream graph, from its own operators
(issue #42).

``models/recognised.py`` rebuilds our networks from the graphs users bring. A graph of any
other architecture (ml4gw's ``ResNet1D`` with BatchNorm; a TorchScript graph is converted to
ONNX first) is streamed from its ONNX operators when they have the shape the stream graph
needs (``backend/streamed_network.py``, which runs the result as it runs BBHnet's):

- 1-D convolutions and max/average pools (``Conv``, ``MaxPool``, ``AveragePool``: equal
  padding at both ends, any groups or dilation, no ceil mode), each a stream node run
  without its padding, with the operators on each sample alone that follow it folded in
  (activations, ``BatchNormalization`` in inference, arithmetic with a constant that does
  not vary along the samples);
- joins of two streams (a residual ``Add``, a channel ``Concat``); a per-sample operator on
  the input or on a tensor several operators read is a node of its own;
- one mean over the samples (``GlobalAveragePool``, ``ReduceMean`` of the last axis);
- after it, what computes the campaign's output (the head, ``[n, C]`` → ``[n, 1]``).

The whitening is the identity (one tap; a scale on the raw samples is a per-sample node, so
the runners' streams of zeros stay zeros). The edges run is the graph's own operators from
the input to the mean, padding kept. Any other operator reading the samples (a reshape, a
dense layer over the window, a max over it) stops the cut, and the reason names it. The cut
graphs are checked on probe streams against the graph on whole windows before they are kept
(``check_against_whole_windows``).
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
from onnx import helper

from offline_iaas.errors import NotStreamable
from offline_iaas.repository.backend.streamed_network import (
    EDGES,
    HEAD,
    WHITENING,
    Conv,
    Node,
    open_streamed_network,
    spec_of,
)
from offline_iaas.repository.onnx_subgraph import (
    INPUT,
    Made,
    attribute,
    constant_value,
    fresh,
    has_subgraph,
    opset,
    subgraph,
    tensor_names,
)
from offline_iaas.repository.stream_layers import write_stream_spec

_EACH_SAMPLE = frozenset({
    "Relu", "LeakyRelu", "Sigmoid", "Tanh", "Elu", "Selu", "Celu", "Softplus", "Softsign",
    "HardSigmoid", "HardSwish", "Gelu", "Mish", "Erf", "Identity", "Dropout", "Abs", "Neg",
    "Exp", "Log", "Sqrt", "Reciprocal", "Clip", "BatchNormalization", "ThresholdedRelu",
    "Sin", "Cos", "Sign", "Floor", "Ceil", "Round"})
"""Operators on each value alone (their other inputs constants per channel)."""
_ARITHMETIC = frozenset({"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "PRelu"})
"""Two-input operators: per sample with a constant, a join of two streams."""
_LAYERS = frozenset({"Conv", "MaxPool", "AveragePool"})
_NOT_CUT = ("is none of what stream layers are cut from (convolutions, pools, per-sample "
            "operators, joins of two streams, then one mean over the samples)")
PROBE_SCALES = (1e-21, 1.0)
"""Amplitudes of the probe streams the cut graphs must answer as the whole-window graph."""
PROBE_TOLERANCE = 1e-4
"""``max |streamed - whole| ≤ tolerance × max |whole - median(whole)|`` on each probe (the
statistic's spread over the probe's windows, which begin on the stream's zeros): float32
rounding in another order passes, a layer cut wrong does not (of the order of the spread)."""
_PROBE_FILLED = 6
"""Probe windows checked past the first whole window of noise (the stream begins on ``K``
zeros: the earlier windows' starts, and the edges of the first, are zeros)."""


@dataclass
class _Part:
    """One stream node as it is cut: its first operator and those folded after it."""

    node: Node
    ops: list[onnx.NodeProto] = field(default_factory=list)
    output: str = ""
    """The tensor it ends at (the last folded operator's output)."""


@dataclass
class StreamCut:
    """A graph cut into the stream graph: its nodes and each run's ONNX graph."""

    nodes: list[Node]
    graphs: dict[str, onnx.ModelProto]


def cut_into_stream(model: onnx.ModelProto, ifos: int, kernel_samples: int, output: str,
                    where: str) -> StreamCut:
    """``model`` (input ``[n, ifos, K]``; ``output``, one value per window) cut into the
    stream graph.

    Raises
    ------
    NotStreamable
        Naming the operator that stops the cut (``where`` begins the reason).
    """
    cutter = _Cutter(model, ifos, kernel_samples, where)
    for op in model.graph.node:
        cutter.take(op)
    parts, pool = cutter.finished()
    head = _head(model, pool, output, cutter.channels[pool.input[0]], cutter.refuse)
    return StreamCut([part.node for part in parts],
                     {**_stream_graphs(model, parts, pool, cutter.channels, ifos), HEAD: head})


class _Cutter:
    """The bookkeeping of ``cut_into_stream``: the operators taken in the graph's order."""

    def __init__(self, model: onnx.ModelProto, ifos: int, kernel_samples: int,
                 where: str) -> None:
        self.model, self.where = model, where
        inferred = inferred_for(model, ifos, kernel_samples)
        self.channels, self.shapes = channels_of(inferred), shapes_of(inferred)
        self.readers: dict[str, int] = {}  # tensor → operators (and graph outputs) reading it
        for op in model.graph.node:
            for name in set(op.input):
                self.readers[name] = self.readers.get(name, 0) + 1
        for graph_output in model.graph.output:
            self.readers[graph_output.name] = self.readers.get(graph_output.name, 0) + 1
        self.constants = {i.name for i in model.graph.initializer}
        self.source = model.graph.input[0].name
        self.parts: list[_Part] = []
        self.part_of: dict[str, _Part] = {}  # a stream tensor ending a part → the part
        self.after_pool: set[str] = set()
        self.pool: onnx.NodeProto | None = None

    def refuse(self, op: onnx.NodeProto, why: str) -> NotStreamable:
        label = op.op_type + (f" {op.name!r}" if op.name else "")
        return NotStreamable(f"{self.where}: {label} {why}")

    def take(self, op: onnx.NodeProto) -> None:
        """Classify ``op`` and add it to the stream graph, the head or the constants."""
        streams = list(dict.fromkeys(name for name in op.input
                                     if name == self.source or name in self.part_of))
        if has_subgraph(op):
            raise self.refuse(op, "holds a subgraph")
        if not streams:
            if any(name in self.after_pool for name in op.input):
                self.after_pool.update(op.output)
            elif all(not name or name in self.constants for name in op.input):
                self.constants.update(op.output)
            else:
                raise self.refuse(op, "reads a value made from the window other than by the "
                                      "stream")
            return
        if self.pool is not None or any(name in self.after_pool for name in op.input):
            raise self.refuse(op, "reads the samples beside the mean over them")
        others = [name for name in op.input if name and name not in streams]
        if any(name not in self.constants for name in others):
            raise self.refuse(op, "reads a value that is neither the stream nor a constant")
        if _is_mean_over_samples(op, self.constants, self.model):
            self.pool = op
            self.after_pool.update(op.output)
            return
        if len(op.output) != 1 and op.op_type != "Dropout":
            raise self.refuse(op, "has more than one output")
        self._add(op, streams, others)

    def _add(self, op: onnx.NodeProto, streams: list[str], others: list[str]) -> None:
        """``op`` (reading the stream tensors ``streams`` and constants ``others``) folded
        into the part that made its input, or a new part."""
        source = streams[0]
        if len(streams) == 1 and per_sample_op(op, others, self.shapes, self.refuse):
            if source in self.part_of and self.readers.get(source) == 1:
                part = self.part_of.pop(source)  # folded into the node that made its input
                part.ops.append(op)
            else:
                part = self._new(op, (source,), Conv(1, 1, 0))
        elif op.op_type in _LAYERS and len(streams) == 1 and op.input[0] == source:
            part = self._new(unpadded(op), (source,), layer_of_op(op, self.shapes, self.refuse))
        elif len(streams) == 2 and not others and (
                op.op_type in _ARITHMETIC - {"PRelu"}
                or op.op_type == "Concat" and attribute(op, "axis") in (1, -2)):
            part = self._new(op, tuple(streams), None)
        else:
            raise self.refuse(op, _NOT_CUT)
        part.output = op.output[0]
        self.part_of[part.output] = part

    def _new(self, op: onnx.NodeProto, sources: tuple[str, ...], layer: Conv | None
             ) -> _Part:
        name = f"n{len(self.parts):03d}_{op.op_type.lower()}"
        inputs = tuple(self.part_of[s].node.name if s in self.part_of else WHITENING
                       for s in sources)
        part = _Part(Node(name, inputs, layer), [op])
        self.parts.append(part)
        return part

    def finished(self) -> tuple[list[_Part], onnx.NodeProto]:
        """The parts and the mean over the samples, once every operator is taken."""
        if self.pool is None:
            raise NotStreamable(f"{self.where}: no mean over the samples ends its layers "
                                "(stream layers end in one)")
        top = self.part_of.get(self.pool.input[0])
        if top is None:
            raise self.refuse(self.pool, "is not preceded by a convolution")
        read = {name for part in self.parts for name in part.node.inputs}
        dangling = [p.node.name for p in self.parts if p.node.name not in read and p is not top]
        if dangling:
            raise self.refuse(self.pool, f"is not the only end of the stream layers "
                                         f"({dangling} too)")
        return self.parts, self.pool


def per_sample_op(op: onnx.NodeProto, others: list[str], shapes: dict, refuse) -> bool:
    """``op`` acts on each sample of its one stream alone (``others``: its constant
    inputs); ``refuse(op, why)`` for arithmetic with a constant that may vary along the
    samples."""
    if op.op_type in _EACH_SAMPLE:
        training = op.op_type == "BatchNormalization" and attribute(op, "training_mode", 0)
        return not training and op.input[0] not in others
    if op.op_type not in _ARITHMETIC:
        return False
    for name in others:
        shape = shapes.get(name)
        if not _constant_along_samples(shape):
            raise refuse(op, f"reads a constant {name!r} that may vary along the samples "
                             f"(shape {shape})")
    return True


def layer_of_op(op: onnx.NodeProto, shapes: dict, refuse) -> Conv:
    """A convolution's or pool's geometry (``Conv``: the stream graph's layer)."""
    kernel = attribute(op, "kernel_shape") or list(shapes.get(op.input[1], ())[2:])
    auto_pad = attribute(op, "auto_pad", b"NOTSET")
    auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad
    pads = attribute(op, "pads", [0, 0])
    if len(kernel) != 1:
        raise refuse(op, f"is not one-dimensional (kernel {list(kernel)})")
    if auto_pad not in ("NOTSET", "VALID"):
        raise refuse(op, f"pads by auto_pad {auto_pad} (equal explicit pads are streamed)")
    if len(pads) != 2 or pads[0] != pads[1]:
        raise refuse(op, f"pads the two ends unequally ({list(pads)})")
    if attribute(op, "ceil_mode", 0):
        raise refuse(op, "rounds its output length up (ceil_mode)")
    (dilation,) = attribute(op, "dilations", [1])
    (stride,) = attribute(op, "strides", [1])
    macs = 0
    if op.op_type == "Conv":
        out_channels, per_group = shapes[op.input[1]][:2]
        macs = int(out_channels * per_group * kernel[0])
    return Conv(dilation * (kernel[0] - 1) + 1, stride,
                pads[0] if auto_pad == "NOTSET" else 0, macs)


def unpadded(op: onnx.NodeProto) -> onnx.NodeProto:
    """A copy of the layer ``op`` without its padding (the stream supplies the
    neighbours)."""
    copy = onnx.NodeProto()
    copy.CopyFrom(op)
    del copy.attribute[:]
    copy.attribute.extend(a for a in op.attribute if a.name not in ("pads", "auto_pad"))
    return copy


def _is_mean_over_samples(op: onnx.NodeProto, constants: set[str], model) -> bool:
    """``op`` is a mean over the last (samples) axis alone."""
    if op.op_type == "GlobalAveragePool":
        return True
    if op.op_type != "ReduceMean":
        return False
    axes = attribute(op, "axes")
    if axes is None and len(op.input) > 1 and op.input[1] in constants:
        axes = constant_value(model, op.input[1])
    return axes is not None and [int(a) for a in np.atleast_1d(axes)] in ([2], [-1])


def _constant_along_samples(shape: tuple[int, ...] | None) -> bool:
    """A constant of ``shape`` broadcast against ``[n, C, samples]`` is the same at every
    sample (its last axis, if any, is 1; it has no window axis of its own)."""
    if shape is None:
        return False
    return len(shape) == 0 or (shape[-1] == 1 and len(shape) <= 3
                               and (len(shape) < 3 or shape[0] == 1))


def inferred_for(model: onnx.ModelProto, ifos: int, kernel_samples: int) -> onnx.ModelProto:
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


def _values(inferred: onnx.ModelProto) -> list:
    graph = inferred.graph
    return [*graph.input, *graph.value_info, *graph.output]


def shapes_of(inferred: onnx.ModelProto) -> dict[str, tuple[int, ...]]:
    """Shapes of the graph's initializers and of the tensors whose shape is inferred."""
    shapes = {i.name: tuple(i.dims) for i in inferred.graph.initializer}
    for value in _values(inferred):
        dims = value.type.tensor_type.shape.dim
        if all(d.HasField("dim_value") for d in dims):
            shapes.setdefault(value.name, tuple(d.dim_value for d in dims))
    return shapes


def channels_of(inferred: onnx.ModelProto) -> dict[str, int]:
    """Each tensor's channel count (axis 1), where shape inference knows it."""
    found = {}
    for value in _values(inferred):
        dims = value.type.tensor_type.shape.dim
        if len(dims) >= 2 and dims[1].HasField("dim_value"):
            found[value.name] = dims[1].dim_value
    return found


def _stream_graphs(model: onnx.ModelProto, parts: list[_Part], pool: onnx.NodeProto,
                   channels: dict[str, int], ifos: int) -> dict[str, onnx.ModelProto]:
    """The whitening's (the identity), every node's and the edges' graphs (input ``x``,
    output ``y``; KeyError where a tensor's channels are unknown)."""
    source, taken = model.graph.input[0].name, tensor_names(model)
    samples = ["batch", "channels", "samples"]
    graphs = {WHITENING: subgraph(model, [], source, source, ["batch", ifos, "samples"], 3)}
    tensor_of = {WHITENING: source, **{part.node.name: part.output for part in parts}}
    for part in parts:
        inputs = [tensor_of[name] for name in part.node.inputs]
        if part.node.conv is not None:
            graphs[part.node.name] = subgraph(model, part.ops, inputs[0], part.output,
                                              ["batch", channels[inputs[0]], "samples"], 3)
            continue
        widths = [channels[name] for name in inputs]  # a join: its inputs along channels
        sizes = fresh(taken, "split_widths")
        split = (Made(helper.make_node("Split", [INPUT, sizes], inputs, axis=1),
                      kept=frozenset({INPUT}), constants={sizes: np.array(widths, np.int64)})
                 if opset(model) >= 13 else
                 Made(helper.make_node("Split", [INPUT], inputs, axis=1, split=widths),
                      kept=frozenset({INPUT})))
        graphs[part.node.name] = subgraph(model, [split, *part.ops], None, part.output,
                                          ["batch", sum(widths), "samples"], 3)
    outputs = {op.output[0] for part in parts for op in part.ops}
    stream_ops = [op for op in model.graph.node if op.output and op.output[0] in outputs]
    samples[1] = ifos
    graphs[EDGES] = subgraph(model, stream_ops, source, pool.input[0], samples, 3)
    return graphs


def _head(model: onnx.ModelProto, pool: onnx.NodeProto, output: str, width: int, refuse
          ) -> onnx.ModelProto:
    """The graph from the mean to ``output``: ``[n, C]`` → ``[n, 1]``."""
    if output not in {o.name for o in model.graph.output}:
        raise refuse(pool, f"is not followed by the output {output!r}")
    pooled = pool.output[0]
    keeps = attribute(pool, "keepdims", 1) if pool.op_type == "ReduceMean" else 1
    reads_input, taken = frozenset({INPUT}), tensor_names(model)
    axis, shape, column = (fresh(taken, name) for name in ("axis_2", "column",
                                                          "statistic_column"))
    if not keeps:
        entry = Made(helper.make_node("Identity", [INPUT], [pooled]), kept=reads_input)
    elif opset(model) >= 13:
        entry = Made(helper.make_node("Unsqueeze", [INPUT, axis], [pooled]),
                     kept=reads_input, constants={axis: np.array([2], np.int64)})
    else:
        entry = Made(helper.make_node("Unsqueeze", [INPUT], [pooled], axes=[2]),
                     kept=reads_input)
    reshape = Made(helper.make_node("Reshape", [output, shape], [column]),
                   kept=frozenset({column}), constants={shape: np.array([-1, 1], np.int64)})
    between = _between(model, pooled, output)
    if output != pooled and not any(output in op.output for op in between):
        raise refuse(pool, f"is not followed by the output {output!r}")
    return subgraph(model, [entry, *between, reshape], None, column, ["batch", width], 2)


def _between(model: onnx.ModelProto, tensor: str, output: str) -> list[onnx.NodeProto]:
    """The graph's operators that depend on ``tensor`` and that ``output`` depends on, in
    order."""
    reached, after = {tensor}, []
    for op in model.graph.node:
        if any(name in reached for name in op.input):
            after.append(op)
            reached.update(op.output)
    needed, kept = {output}, []
    for op in reversed(after):
        if needed & set(op.output):
            kept.insert(0, op)
            needed.update(op.input)
    return kept


def check_against_whole_windows(directory: Path, model: onnx.ModelProto, ifos: int,
                                kernel_samples: int, stride_samples: int, output: str,
                                where: str) -> None:
    """The graphs cut into ``directory`` answer probe streams (seeded noise at each
    ``PROBE_SCALES``, sent in uneven requests) as ``model``'s ``output`` does on their whole
    windows; NotStreamable naming the difference where they do not. A probe whose statistic
    is not finite or does not vary tells nothing and is skipped; one must remain."""
    import onnxruntime

    session = onnxruntime.InferenceSession(model.SerializeToString(),
                                           providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name

    def whole_window(window: np.ndarray) -> float:
        return float(np.asarray(session.run([output], {name: window[None]})[0]).reshape(-1)[0])

    streamed = open_streamed_network(directory)
    rng = np.random.default_rng(0)
    windows = -(-kernel_samples // stride_samples) + _PROBE_FILLED
    total, checked = windows * stride_samples, 0
    for scale in PROBE_SCALES:
        samples = (scale * rng.standard_normal((ifos, total))).astype(np.float32)
        stream = np.concatenate([np.zeros((ifos, kernel_samples), np.float32), samples], 1)
        whole = np.array([whole_window(stream[:, (j + 1) * stride_samples:][:, :kernel_samples])
                          for j in range(windows)])
        spread = float(np.max(np.abs(whole - np.median(whole))))
        if not np.all(np.isfinite(whole)) or spread == 0:
            continue
        state, out, first = streamed.initial_state(), [], 0
        for size in [2, 1, 4, 3] * windows:  # uneven requests
            if first >= windows:
                break
            out.append(streamed.update(state, samples[:, first * stride_samples:
                                                      (first + size) * stride_samples]))
            first += size
        error = float(np.abs(np.concatenate(out) - whole).max()) \
            if sum(map(len, out)) == len(whole) else np.inf
        if not error <= PROBE_TOLERANCE * spread:  # NaN fails too
            raise NotStreamable(
                f"{where}: so cut, it differs from the graph on the whole windows of a probe "
                f"of amplitude {scale:g} by {error:.3g} ({PROBE_TOLERANCE * spread:.3g} "
                "allowed)")
        checked += 1
    if not checked:
        raise NotStreamable(f"{where}: on no probe ({', '.join(map(str, PROBE_SCALES))}) is "
                            "its statistic finite and varying, so a cut cannot be checked")


def write_cut(cut: StreamCut, model: onnx.ModelProto, ifos: int, kernel_samples: int,
              stride_samples: int, output: str, directory: Path, where: str) -> Path:
    """``cut`` (of ``model``: ``cut_into_stream``) written to ``directory`` (which must not
    exist) as ``streamed_network.open_streamed_network`` reads it, once checked against
    whole windows (``check_against_whole_windows``); return ``directory``. NotStreamable,
    nothing written, where the check fails or the cut graphs do not run."""
    directory = Path(directory)
    staging = Path(tempfile.mkdtemp(prefix=".cut-", dir=directory.parent))
    try:
        for run, graph in cut.graphs.items():
            onnx.save(graph, str(staging / f"{run}.onnx"))
        spec = spec_of(cut.nodes, ifos, kernel_samples, stride_samples, 1)
        write_stream_spec(staging, spec)
        try:
            check_against_whole_windows(staging, model, ifos, kernel_samples,
                                        stride_samples, output, where)
        except NotStreamable:
            raise
        except Exception as err:  # noqa: BLE001 - the cut graphs' own failure is the reason
            raise NotStreamable(f"{where}: so cut, its stream layers do not run together "
                                f"({type(err).__name__}: {err})") from None
        staging.rename(directory)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return directory
