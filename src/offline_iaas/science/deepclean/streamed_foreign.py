"""A user's cleaning network of another architecture cut into DeepClean's stream graph, from
its own ONNX operators (issue #42).

The DeepClean counterpart of ``streamed_foreign.py`` (which cuts BBHnet-mode graphs): a
graph from a window of witnesses ``[n, W, K]`` to a prediction per sample ``[n, K]`` that is a
chain of 1-D convolutions (``Conv``, ``ConvTranspose``: equal padding at both ends; a
transposed convolution undilated) with operators on
each sample alone between them (a standardisation of the witnesses, BatchNorm in inference,
activations, a scale to strain) runs on ``backend/streamed_deepclean.py``'s runner as our
DeepClean does: each layer a node run without its padding (the per-sample operators before
the first layer and after each folded into it; a transposed layer's run cropped as
``ConvTranspose`` says), and each window's edges recomputed from its raw samples alone
(``edge_features`` false: the first layer's stream values are not reused, its channels need
not be the witnesses'), through the window's padding (``Cut``: zeros where it reads past the
window). The channel axis of one is dropped at the end (``Squeeze``, ``Reshape``,
``Flatten``, ``Gather``, ``Slice``). Every interferometer's graph must cut to the same
layers. The cut graphs answer probe streams as each graph does on its whole windows before
they are kept.
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
from offline_iaas.repository.backend.layer_stream import ConvTranspose, Node
from offline_iaas.repository.onnx_subgraph import (
    Made,
    attribute,
    fresh,
    has_subgraph,
    opset,
    subgraph,
    tensor_names,
)
from offline_iaas.repository.stream_layers import write_stream_spec
from offline_iaas.repository.streamed_foreign import (
    PROBE_TOLERANCE,
    inferred_for,
    layer_of_op,
    per_sample_op,
    shapes_of,
    unpadded,
)
from offline_iaas.science.deepclean.backend.streamed_deepclean import (
    EDGES,
    Cut,
    deepclean_runner,
    open_streamed_deepclean,
    run_name,
)

_LAYERS = frozenset({"Conv", "ConvTranspose"})
"""Pools are not: an edge pads with zeros, where a max pool pads with -inf."""
_CHANNEL_DROPS = frozenset({"Squeeze", "Reshape", "Flatten", "Gather", "Slice", "Identity"})
PROBE_SCALES = (1.0, 1e3)
"""Amplitudes of the probe streams: witnesses are physical channels of order one."""
_PROBE_FILLED = 6
"""Probe windows checked past the first whole window of noise (the earlier windows, and the
first one's left edge, begin on the stream's zeros)."""
_TINY = 1e-30
"""A probe whose predictions vary less than this (float32's subnormals are near) tells
nothing."""


@dataclass
class _Layer:
    """One layer of the chain with the per-sample operators before (the first's) and after
    it."""

    op: onnx.NodeProto
    node: Node
    before: list[onnx.NodeProto] = field(default_factory=list)
    after: list[onnx.NodeProto] = field(default_factory=list)


@dataclass
class ChainCut:
    """A cleaning graph cut into a chain of stream layers."""

    model: onnx.ModelProto
    output: str
    layers: list[_Layer]
    source: str
    """The graph's input."""

    @property
    def nodes(self) -> list[Node]:
        return [layer.node for layer in self.layers]


def cut_chain(model: onnx.ModelProto, witnesses: int, kernel_samples: int, output: str,
              where: str) -> ChainCut:
    """``model`` (``[n, witnesses, K]`` → ``output`` ``[n, K]``) cut into its chain of
    layers; NotStreamable naming the operator that stops it."""
    shapes = shapes_of(inferred_for(model, witnesses, kernel_samples))
    readers: dict[str, int] = {}
    for op in model.graph.node:
        for name in set(op.input):
            readers[name] = readers.get(name, 0) + 1
    constants = {i.name for i in model.graph.initializer}
    if opset(model) < 11:
        raise NotStreamable(f"{where}: its opset {opset(model)} is older than 11 (the cut's "
                            "Pad and Slice read their bounds as inputs)")
    source = current = model.graph.input[0].name
    layers: list[_Layer] = []
    before: list[onnx.NodeProto] = []
    dropped = False
    chain_end = current  # the chain's last tensor with the channel axis

    def refuse(op, why: str) -> NotStreamable:
        label = op.op_type + (f" {op.name!r}" if op.name else "")
        return NotStreamable(f"{where}: {label} {why}")

    for op in model.graph.node:
        if current not in op.input:
            if has_subgraph(op) or not all(not n or n in constants for n in op.input):
                raise refuse(op, "is off the chain of layers from the witnesses")
            constants.update(op.output)
            continue
        others = [name for name in op.input if name and name != current]
        if readers.get(current, 0) != 1 or any(name not in constants for name in others):
            raise refuse(op, "branches the chain (only a chain of layers is streamed)")
        if dropped:
            if not (op.op_type in _CHANNEL_DROPS or per_sample_op(op, others, shapes, refuse)
                    and all(np.prod(shapes.get(name, (2,))) == 1 for name in others)):
                raise refuse(op, "follows the prediction's channel (only per-sample "
                                 "operators with a scalar follow it)")
            if op.op_type not in _CHANNEL_DROPS:  # on the channel, before it is dropped
                moved = onnx.NodeProto()
                moved.CopyFrom(op)
                moved.input[:] = [chain_end if name == current else name for name in op.input]
                layers[-1].after.append(moved)
                chain_end = op.output[0]
        elif per_sample_op(op, others, shapes, refuse):
            (layers[-1].after if layers else before).append(op)
            chain_end = op.output[0]
        elif op.op_type in _LAYERS and op.input[0] == current:
            layers.append(_Layer(op, Node(f"n{len(layers):03d}_{op.op_type.lower()}",
                                          (layers[-1].node.name if layers else "raw",),
                                          _geometry(op, shapes, refuse)), before))
            before, chain_end = [], op.output[0]
        elif op.op_type in _CHANNEL_DROPS and layers and _channels(shapes, current) == 1:
            dropped = True
        else:
            raise refuse(op, "is none of what stream layers are cut from (convolutions, "
                             "transposed convolutions, per-sample operators, the channel "
                             "dropped at the end)")
        current = op.output[0]
    if not layers:
        raise NotStreamable(f"{where}: no layer on the witnesses")
    if current != output:
        raise NotStreamable(f"{where}: its chain of layers does not end at the output "
                            f"{output!r}")
    return ChainCut(model, output, layers, source)


def _channels(shapes: dict, tensor: str) -> int | None:
    shape = shapes.get(tensor)
    return shape[1] if shape and len(shape) == 3 else None


def _geometry(op: onnx.NodeProto, shapes: dict, refuse):
    """A layer's geometry: ``layer_of_op``'s, or ``ConvTranspose``'s for a transposed one."""
    if op.op_type != "ConvTranspose":
        return layer_of_op(op, shapes, refuse)
    kernel = attribute(op, "kernel_shape") or list(shapes.get(op.input[1], ())[2:])
    pads = attribute(op, "pads", [0, 0])
    if len(kernel) != 1 or len(pads) != 2 or pads[0] != pads[1]:
        raise refuse(op, f"is not one-dimensional with equal pads ({kernel}, {pads})")
    auto_pad = attribute(op, "auto_pad", b"NOTSET")
    auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad
    if attribute(op, "dilations", [1]) != [1] or auto_pad not in ("NOTSET", "VALID") \
            or attribute(op, "output_shape") is not None:
        raise refuse(op, "is dilated or sized by auto_pad/output_shape")
    (stride,) = attribute(op, "strides", [1])
    (output_padding,) = attribute(op, "output_padding", [0])
    if kernel[0] < stride:
        raise refuse(op, f"has fewer taps ({kernel[0]}) than its stride ({stride}): its "
                         "outputs do not overlap, which the stream run's crop assumes")
    return ConvTranspose(kernel[0], stride, pads[0] if auto_pad == "NOTSET" else 0,
                         output_padding)


def _layer_run(layer: _Layer, cut: Cut | None, taken: set[str]) -> list:
    """The layer's operators on its stream run (``cut`` None: inputs ``[lo, hi)``, no
    padding, a transposed layer cropped) or on an edge's ``cut`` (the window's zeros added
    where it reads past the window)."""
    geometry, ops = layer.node.conv, list(layer.before)
    entry = ops[-1].output[0] if ops else layer.op.input[0]
    padded, pads = (fresh(taken, f"{name}.{layer.node.name}") for name in ("padded", "pads"))
    if cut is None:
        before = after = 0
    elif isinstance(geometry, ConvTranspose):
        head = cut.lo - geometry.stride * cut.in_lo + geometry.padding
        before = max(0, -(head // geometry.stride))
        head += geometry.stride * before
        length = (cut.in_hi - cut.in_lo + before - 1) * geometry.stride + geometry.taps
        after = max(0, -((length - head - (cut.hi - cut.lo)) // geometry.stride))
    else:
        before, after = cut.before, cut.after
    if before or after:
        ops.append(Made(helper.make_node("Pad", [entry, pads], [padded]),
                        kept=frozenset({padded}),
                        constants={pads: np.array([0, 0, before, 0, 0, after],
                                                              np.int64)}))
        entry = padded
    core = unpadded(layer.op)
    core.input[0] = entry
    if isinstance(geometry, ConvTranspose):
        del core.attribute[:]
        core.attribute.extend(a for a in layer.op.attribute
                              if a.name not in ("pads", "output_padding"))
        raw, first, last, axis = (fresh(taken, f"{name}.{layer.node.name}")
                                  for name in ("full", "starts", "ends", "axes"))
        start, end = ((geometry.crop[0], -geometry.crop[1] if geometry.crop[1] else 2**62)
                      if cut is None else (head, head + cut.hi - cut.lo))
        core.output[0] = raw
        ops += [Made(core, kept=frozenset({entry, raw} - {layer.op.input[0]})),
                Made(helper.make_node("Slice", [raw, first, last, axis],
                                      [layer.op.output[0]]),
                     kept=frozenset({raw}),
                     constants={first: np.array([start], np.int64),
                                last: np.array([end], np.int64),
                                axis: np.array([2], np.int64)})]
    else:
        ops.append(Made(core, kept=frozenset({entry} - {layer.op.input[0]})))
    return ops + layer.after


def _end(layers: list[_Layer]) -> str:
    last = layers[-1]
    return (last.after[-1] if last.after else last.op).output[0]


def _edge_graph(cut: ChainCut, cones_cuts: tuple[Cut, ...], witnesses: int
                ) -> onnx.ModelProto:
    """An edge's graph: the chain on the window's raw samples ``[b, W, m]`` through each
    layer's ``Cut``, the channel dropped: ``[b, hi - lo]``."""
    ops: list = []
    taken = tensor_names(cut.model)
    for layer, layer_cut in zip(cut.layers, cones_cuts, strict=True):
        ops += _layer_run(layer, layer_cut, taken)
    end = _end(cut.layers)
    edge, axis = fresh(taken, "prediction_edge"), fresh(taken, "channel_axis")
    squeeze = (Made(helper.make_node("Squeeze", [end, axis], [edge]), kept=frozenset({edge}),
                    constants={axis: np.array([1], np.int64)})
               if opset(cut.model) >= 13 else
               Made(helper.make_node("Squeeze", [end], [edge], axes=[1]), kept=frozenset({edge})))
    return subgraph(cut.model, [*ops, squeeze], cut.source, edge,
                    ["batch", witnesses, "samples"], 2)


def _node_graphs(cut: ChainCut, witnesses: int) -> dict[str, onnx.ModelProto]:
    graphs, entry, width = {}, cut.source, witnesses
    taken = tensor_names(cut.model)
    for layer in cut.layers:
        graphs[layer.node.name] = subgraph(cut.model, _layer_run(layer, None, taken), entry,
                                           (layer.after[-1] if layer.after
                                            else layer.op).output[0],
                                           ["batch", width, "samples"], 3)
        entry, width = (layer.after[-1] if layer.after else layer.op).output[0], "channels"
    return graphs


def write_chain_cuts(cuts: dict[str, ChainCut], witnesses: dict[str, list[int]],
                     kernel_samples: int, stride_samples: int, directory: Path, where: str
                     ) -> Path:
    """Each interferometer's ``ChainCut`` written to ``directory`` (which must not exist) as
    ``open_streamed_deepclean`` reads it, once checked against whole windows; return it.
    NotStreamable, nothing written, where the layers differ between interferometers, the
    geometry cannot stream or the check fails."""
    nodes = next(iter(cuts.values())).nodes

    def geometry(cut: ChainCut) -> list:
        return [(node.name, node.inputs, node.conv.spec()) for node in cut.nodes]

    for ifo, cut in cuts.items():
        if geometry(cut) != geometry(next(iter(cuts.values()))):
            raise NotStreamable(f"{where}: {ifo}'s layers are not the other interferometers'")
    try:
        runner = deepclean_runner(nodes, witnesses, kernel_samples, stride_samples, {},
                                  edge_features=False)
    except ValueError as err:
        raise NotStreamable(f"{where}: its layers cannot stream this geometry ({err})"
                            ) from None
    directory = Path(directory)
    staging = Path(tempfile.mkdtemp(prefix=".cut-", dir=directory.parent))
    try:
        for ifo, cut in cuts.items():
            count = len(witnesses[ifo])
            graphs = {**_node_graphs(cut, count),
                      **{edge: _edge_graph(cut, runner.cones[edge].cuts, count)
                         for edge in EDGES}}
            for run, graph in graphs.items():
                onnx.save(graph, str(staging / f"{run_name(ifo, run)}.onnx"))
        write_stream_spec(staging, runner.spec())
        _check(staging, cuts, witnesses, kernel_samples, stride_samples, where)
        staging.rename(directory)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return directory


def _check(directory: Path, cuts: dict[str, ChainCut], witnesses: dict[str, list[int]],
           kernel_samples: int, stride_samples: int, where: str) -> None:
    """The streamed predictions of probe streams against each graph on their whole windows,
    within ``PROBE_TOLERANCE`` of the predictions' spread (about their median)."""
    import onnxruntime

    try:
        streamed = open_streamed_deepclean(directory)
    except (ValueError, RuntimeError) as err:
        raise NotStreamable(f"{where}: so cut, its layers do not run together ({err})"
                            ) from None
    channels = 1 + max(max(rows) for rows in witnesses.values())
    rng = np.random.default_rng(0)
    windows = -(-kernel_samples // stride_samples) + _PROBE_FILLED
    checked: set[str] = set()
    for scale in PROBE_SCALES:
        samples = (scale * rng.standard_normal((channels, windows * stride_samples))
                   ).astype(np.float32)
        state = streamed.initial_state()
        half = windows // 2 * stride_samples
        out = np.concatenate([streamed.update(state, samples[:, :half]),
                              streamed.update(state, samples[:, half:])])
        stream = np.concatenate([np.zeros((channels, kernel_samples), np.float32), samples], 1)
        for i, ifo in enumerate(streamed.ifos):
            cut = cuts[ifo]
            session = onnxruntime.InferenceSession(cut.model.SerializeToString(),
                                                   providers=["CPUExecutionProvider"])
            inputs = [stream[witnesses[ifo], (j + 1) * stride_samples:][:, :kernel_samples]
                      for j in range(windows)]
            whole = np.concatenate([session.run([cut.output], {cut.source: w[None]})[0]
                                    for w in inputs]).reshape(windows, -1)
            spread = float(np.max(np.abs(whole - np.median(whole))))
            if not np.all(np.isfinite(whole)) or spread < _TINY:
                continue
            checked.add(ifo)
            error = float(np.max(np.abs(out[:, i] - whole)))
            if not error <= PROBE_TOLERANCE * spread:  # NaN fails too
                raise NotStreamable(
                    f"{where}: so cut, {ifo}'s prediction differs from the graph on the whole "
                    f"windows of a probe of amplitude {scale:g} by {error:.3g} "
                    f"({PROBE_TOLERANCE * spread:.3g} allowed)")
    unchecked = [ifo for ifo in streamed.ifos if ifo not in checked]
    if unchecked:
        raise NotStreamable(f"{where}: on no probe ({', '.join(map(str, PROBE_SCALES))}) are "
                            f"{' and '.join(unchecked)}'s predictions finite and varying, so "
                            "a cut cannot be checked")
