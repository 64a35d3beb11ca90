"""DeepClean's windows evaluated on a stream, each layer once per sample (numpy, onnxruntime).

Issue #42, DeepClean's part (docs/networks.md, "Streamed graphs"). Self-contained like the
other files of this folder (numpy; onnxruntime only in ``open_streamed_deepclean``), so the
server's python stub can load it by path; it loads ``layer_stream.py`` (the layer geometry and
bookkeeping it shares with ``streamed_network.py``) from beside itself.
``repository/streamed_deepclean.py`` cuts a torch DeepClean into the runs and exports them.

A stream's window ``j`` covers raw stream samples ``[a_j, a_j + K)``, ``a_j = (j + 1) S``, the
stream starting with ``K`` zeros (the snapshotter's state). DeepClean is a chain of padded
layers (input conv, four strided convs, four transposed convs, output conv; BatchNorm in eval
mode is a per-channel affine map, tanh pointwise), each shift-equivariant on the stream, so
with its alignment ``P`` (16: the bottleneck's stride) dividing ``S`` a window's prediction at
``q`` is the stream's unpadded chain at ``a_j + q``, except within ``left`` samples of its
start and ``right`` of its end, where the window's zero padding reaches. Per stream, each
layer runs once on what the new samples make computable; per window, the interior is copied
from the stream's prediction and the edges are recomputed: its first and last ``E`` raw
samples through the padded network, of which the first ``left`` and last ``right`` outputs
are kept (``layer_stream.edge_plan``).

Several interferometers: one DeepClean each, fed by its witnesses out of the streamed channels
(``[channels, n S]``, as the served ``deepclean`` graph's Gather); ``update`` returns
``[n, ifos, K]`` like that graph on the snapshotter's windows.

Exported layout (``repository/streamed_deepclean.export_streamed_deepclean``): a directory
with ``streamed.json`` (``StreamedDeepClean.spec``) and per interferometer one ONNX graph per
run, input ``x``, output ``y``: ``<ifo>-<node>.onnx`` (the layer without padding on
``[1, C, m]``; the first standardises the witnesses, the last scales to strain) and
``<ifo>-edges.onnx`` (the whole padded network on ``[b, witnesses, E]`` → ``[b, E]``).
"""

from __future__ import annotations

import json
import math
import os
import sys
from dataclasses import dataclass, field

import numpy as np

try:
    from . import layer_stream
except ImportError:  # loaded by path (the server's python stub): beside this file
    import importlib.util as _util

    _spec = _util.spec_from_file_location(
        "layer_stream", os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                     "layer_stream.py"))
    layer_stream = _util.module_from_spec(_spec)
    sys.modules["layer_stream"] = layer_stream
    _spec.loader.exec_module(layer_stream)

Run, Node = layer_stream.Run, layer_stream.Node
EDGES = "edges"
"""The padded network's run on edge segments (beside the nodes')."""
RAW = "raw"
"""The first node's input: the interferometer's witnesses."""


def run_name(ifo: str, run: str) -> str:
    """Name of interferometer ``ifo``'s run ``run`` (and of its graph, ``<name>.onnx``)."""
    return f"{ifo}-{run}"


@dataclass
class DeepCleanState:
    """What one stream carries between requests (all numpy; ``to_arrays`` to checkpoint).

    Stream positions count from the first of the ``K`` zeros a stream starts with.
    """

    windows: int = 0
    """Windows emitted since the start."""
    raw: np.ndarray | None = None
    """The streamed channels from the next window's start (its edges are cut from it)."""
    raw_start: int = 0
    pending: list[dict[str, np.ndarray]] = field(default_factory=list)
    """Per interferometer, per node input (``"<node>:<input>"``): values not yet consumed."""
    pending_start: list[dict[str, int]] = field(default_factory=list)
    prediction: list[np.ndarray] = field(default_factory=list)
    """Per interferometer, the stream's prediction [1, m] from the next window's interior."""
    prediction_start: list[int] = field(default_factory=list)

    def to_arrays(self) -> dict[str, np.ndarray]:
        """The state as named arrays (``numpy.savez``)."""
        arrays = {"windows": np.array(self.windows), "raw": self.raw,
                  "raw_start": np.array(self.raw_start), "ifos": np.array(len(self.pending))}
        for i, (pending, starts) in enumerate(zip(self.pending, self.pending_start,
                                                  strict=True)):
            arrays.update(layer_stream.pending_arrays(pending, starts, f"{i}/"))
            arrays[f"{i}/prediction"] = self.prediction[i]
            arrays[f"{i}/prediction_start"] = np.array(self.prediction_start[i])
        return arrays

    @classmethod
    def from_arrays(cls, arrays) -> DeepCleanState:
        """The state ``to_arrays`` wrote (a dict or an ``NpzFile``)."""
        state = cls(windows=int(arrays["windows"]), raw=np.array(arrays["raw"]),
                    raw_start=int(arrays["raw_start"]))
        for i in range(int(arrays["ifos"])):
            pending, starts = layer_stream.pending_of(arrays, f"{i}/")
            state.pending.append(pending)
            state.pending_start.append(starts)
            state.prediction.append(np.array(arrays[f"{i}/prediction"]))
            state.prediction_start.append(int(arrays[f"{i}/prediction_start"]))
        return state


@dataclass
class _Inputs:
    """One interferometer's pending node inputs (what ``layer_stream.StreamStep`` updates)."""

    pending: dict[str, np.ndarray]
    pending_start: dict[str, int]


class StreamedDeepClean:
    """DeepClean's windows on a stream: ``update(state, [channels, n S])`` → ``[n, ifos, K]``.

    Parameters
    ----------
    nodes
        The stream graph (DeepClean's layers in order; the first reads ``"raw"``), the same
        for every interferometer.
    witnesses
        Interferometer → indices of its witnesses among the streamed channels.
    kernel_samples, stride_samples
        Window ``K`` and stride ``S``; ``S`` must be a multiple of the alignment ``P`` (else a
        window's downsampled grid is not the stream's) and ``K`` of ``S``.
    runs
        ``run_name(ifo, node)`` for each node and ``run_name(ifo, "edges")`` → its ``Run``
        (module docstring); shared by every stream.
    """

    def __init__(self, nodes: list[Node], witnesses: dict[str, list[int]], kernel_samples: int,
                 stride_samples: int, runs: dict[str, Run]) -> None:
        self.nodes, self.runs = nodes, runs
        self.witnesses = {ifo: list(map(int, index)) for ifo, index in witnesses.items()}
        self.ifos = list(self.witnesses)
        self.kernel_samples, self.stride_samples = kernel_samples, stride_samples
        if stride_samples < 1 or kernel_samples % stride_samples:
            raise ValueError(f"kernel {kernel_samples} must be a multiple of the stride "
                             f"{stride_samples}")
        step = layer_stream.cumulative_stride(nodes)
        if stride_samples % step:
            raise ValueError(
                f"stride of {stride_samples} samples is not a multiple of DeepClean's "
                f"alignment {step} (its bottleneck's stride): windows fall on "
                f"{step // math.gcd(stride_samples, step)} downsampling phases "
                "(docs/networks.md, 'Streamed graphs')")
        self.plan = layer_stream.edge_plan(nodes, kernel_samples)
        if self.plan.top_stride != 1 or self.plan.top_length != kernel_samples:
            raise ValueError(f"the stream graph predicts {self.plan.top_length} samples per "
                             f"{kernel_samples}-sample window, not one per sample")

    def spec(self) -> dict:
        """The geometry as JSON-able values (``streamed.json``; ``from_spec`` reads it)."""
        return {"network": "deepclean", "kernel_samples": self.kernel_samples,
                "stride_samples": self.stride_samples, "witnesses": self.witnesses,
                "nodes": [{"name": node.name, "inputs": list(node.inputs),
                           "layer": node.conv.spec()} for node in self.nodes]}

    @classmethod
    def from_spec(cls, spec: dict, runs: dict[str, Run]) -> StreamedDeepClean:
        """The network ``spec()`` describes, running ``runs``."""
        nodes = [Node(n["name"], tuple(n["inputs"]), layer_stream.layer_of(n["layer"]))
                 for n in spec["nodes"]]
        return cls(nodes, spec["witnesses"], spec["kernel_samples"], spec["stride_samples"],
                   runs)

    def run_names(self) -> list[str]:
        """Every run the network needs (``runs``' keys)."""
        return [run_name(ifo, run) for ifo in self.ifos
                for run in (*(node.name for node in self.nodes), EDGES)]

    def initial_state(self) -> DeepCleanState:
        """A stream's state at START: ``K`` zeros already streamed, as the snapshotter's."""
        channels = 1 + max(max(index) for index in self.witnesses.values())
        state = DeepCleanState(pending=[{} for _ in self.ifos],
                               pending_start=[{} for _ in self.ifos],
                               prediction=[None] * len(self.ifos),
                               prediction_start=[0] * len(self.ifos))
        self._advance(state, np.zeros((channels, self.kernel_samples), np.float32))
        return state

    def update(self, state: DeepCleanState, samples: np.ndarray) -> np.ndarray:
        """Append ``samples`` [channels, n S] to the stream (``state`` is updated in place);
        return the predictions of the ``n`` windows they end, ``[n, ifos, K]`` float32."""
        stride, plan, kernel = self.stride_samples, self.plan, self.kernel_samples
        if samples.ndim != 2 or samples.shape[1] % stride:
            raise ValueError(f"update of shape {samples.shape}: need [channels, n * {stride}]")
        n = samples.shape[1] // stride
        if n == 0:
            return np.zeros((0, len(self.ifos), kernel), np.float32)
        self._advance(state, samples)
        starts = stride * (state.windows + 1 + np.arange(n))
        out = np.empty((n, len(self.ifos), kernel), np.float32)
        interior = kernel - plan.left - plan.right
        edge, offsets = plan.edge_samples, starts - state.raw_start
        for i, ifo in enumerate(self.ifos):
            prediction = state.prediction[i][0]
            first = starts + plan.left - state.prediction_start[i]
            if first[0] < 0 or first[-1] + interior > prediction.shape[0]:
                raise RuntimeError("the stream's prediction does not cover the windows' "
                                   "interiors")
            inner = np.lib.stride_tricks.sliding_window_view(prediction, interior)
            out[:, i, plan.left : kernel - plan.right] = inner[first]
            if plan.left or plan.right:
                segments = np.lib.stride_tricks.sliding_window_view(
                    state.raw[self.witnesses[ifo]], edge, axis=1)
                batch = np.concatenate([segments[:, offsets],
                                        segments[:, offsets + kernel - edge]], axis=1)
                edges = self.runs[run_name(ifo, EDGES)](
                    np.ascontiguousarray(batch.transpose(1, 0, 2)))
                out[:, i, : plan.left] = edges[:n, : plan.left]
                out[:, i, kernel - plan.right :] = edges[n:, edge - plan.right :]
        state.windows += n
        self._trim(state)
        return out

    def _advance(self, state: DeepCleanState, samples: np.ndarray) -> None:
        """Run every interferometer's layers on what ``samples`` newly makes computable."""
        samples = np.asarray(samples, np.float32)
        state.raw, state.raw_start = layer_stream.append_values(
            state.raw, state.raw_start, samples,
            0 if state.raw is None else state.raw_start + state.raw.shape[1])
        for i, ifo in enumerate(self.ifos):
            inputs = _Inputs(state.pending[i], state.pending_start[i])
            runs = {node.name: self.runs[run_name(ifo, node.name)] for node in self.nodes}
            step = layer_stream.StreamStep(inputs, runs,
                                           {RAW: (samples[self.witnesses[ifo]], None)})
            for node in self.nodes:
                step.run(node)
            state.prediction[i], state.prediction_start[i] = layer_stream.append_values(
                state.prediction[i], state.prediction_start[i], *step.values[self.nodes[-1].name])

    def _trim(self, state: DeepCleanState) -> None:
        """Forget what no later window reads: before the next window's start."""
        start = self.stride_samples * (state.windows + 1)
        state.raw, state.raw_start = layer_stream.drop_before(state.raw, state.raw_start, start)
        for i in range(len(self.ifos)):
            state.prediction[i], state.prediction_start[i] = layer_stream.drop_before(
                state.prediction[i], state.prediction_start[i], start + self.plan.left)


def open_streamed_deepclean(directory: str | os.PathLike, intra_op_threads: int = 1,
                            device: str = "cpu", device_id: int = 0) -> StreamedDeepClean:
    """The DeepCleans exported to ``directory`` (``streamed.json`` and their graphs), each
    graph an onnxruntime session on ``device`` (``layer_stream.onnx_runs``)."""
    with open(os.path.join(directory, layer_stream.MANIFEST)) as file:
        spec = json.load(file)
    names = StreamedDeepClean.from_spec(spec, {}).run_names()
    return StreamedDeepClean.from_spec(
        spec, layer_stream.onnx_runs(directory, names, intra_op_threads, device, device_id))
