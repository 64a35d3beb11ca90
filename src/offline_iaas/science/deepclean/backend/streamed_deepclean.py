"""DeepClean's windows evaluated on a stream, each layer once per sample (numpy, onnxruntime).

Issue #42, DeepClean's part (docs/networks.md, "Streamed graphs"). DeepClean's runner
(``BuiltInParts.streamed``'s ``runner``), self-contained like ``repository/backend``'s files
(numpy; onnxruntime only in ``open_streamed_deepclean``): ``export`` copies it beside
``layer_stream.py`` in the fused model, where the server's python stub loads it by path
(``layer_stream.open_streamed``, the layer geometry and bookkeeping it shares with
``streamed_network.py``, is the module it takes from ``sys.modules`` there).
``science/deepclean/streamed.py`` cuts a torch DeepClean into the runs and exports them.

A stream's window ``j`` covers raw stream samples ``[a_j, a_j + K)``, ``a_j = (j + 1) S``, the
stream starting with ``K`` zeros (the snapshotter's state). DeepClean is a chain of padded
layers (input conv, four strided convs, four transposed convs, output conv; BatchNorm in eval
mode is a per-channel affine map, tanh pointwise), each shift-equivariant on the stream, so
with its alignment ``P`` (16: the bottleneck's stride) dividing ``S`` a window's prediction at
``q`` is the stream's unpadded chain at ``a_j + q``, except within ``left`` samples of its
start and ``right`` of its end, where the window's zero padding reaches. Per stream, each
layer runs once on what the new samples make computable; per window, the interior is copied
from the stream's prediction and the edges are recomputed: the first ``left`` and last
``right`` outputs (``layer_stream.edge_plan``), each edge by the padded network cut to the cone
they depend on (``EdgeCone``: per layer only the outputs its successor reads, zeros where the
window pads), the first node's outputs taken from the stream (``features``) except where the
window's padding reaches them, which it computes from the window's raw samples (with
``edge_features`` false, as for a cleaning network of another architecture whose first layer
does not keep the witnesses' channels, every edge is computed from the raw samples alone).

A stride off the alignment puts the windows on ``g = P / gcd(S, P)`` phases of the
bottleneck's grid: ``PhasedDeepClean`` streams each phase ``r`` (windows ``r, r + g, ...``) as a
``StreamedDeepClean`` of stride ``g S`` on the stream delayed by ``(g - 1 - r) S`` samples, and
interleaves their windows (``deepclean_runner`` picks the runner for a geometry).

Several interferometers: one DeepClean each, fed by its witnesses out of the streamed channels
(``[channels, n S]``, as the served ``deepclean`` graph's Gather); ``update`` returns
``[n, ifos, K]`` like that graph on the snapshotter's windows.

Exported layout (``science/deepclean/streamed.export_streamed_deepclean``): a directory
with ``streamed.json`` (``StreamedDeepClean.spec``) and per interferometer one ONNX graph per
run, input ``x``, output ``y``: ``<ifo>-<node>.onnx`` (the layer without padding on
``[1, C, m]``; the first standardises the witnesses, the last scales to strain) and
``<ifo>-left.onnx``, ``<ifo>-right.onnx`` (an edge's cone on ``[b, witnesses,
cone.input_samples()]``, ``EdgeCone.spans`` along time → its ``[b, left]`` or
``[b, right]`` outputs).
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field

import numpy as np

if __package__:
    from offline_iaas.repository.backend import layer_stream
else:  # loaded by path (the server's python stub) by layer_stream.open_streamed, beside it:
    layer_stream = sys.modules["layer_stream"]  # the one way in: the loader lives there

Run, Node = layer_stream.Run, layer_stream.Node
Conv, Layer = layer_stream.Conv, layer_stream.Layer
EDGES = ("left", "right")
"""The runs of a window's edges (beside the nodes'): its first ``left`` and last ``right``
predictions."""
RAW = "raw"
"""The first node's input: the interferometer's witnesses."""
FEATURES = "features"
"""The first node's stream values (what the edge graphs take where no padding reaches)."""


@dataclass(frozen=True)
class Cut:
    """One layer of an edge graph: its outputs ``[lo, hi)`` (window positions) from its inputs
    ``[in_lo, in_hi)`` (those they read, clipped to the window) with ``before`` zeros ahead and
    ``after`` behind: the window's padding, only where the outputs read it."""

    lo: int
    hi: int
    in_lo: int
    in_hi: int
    before: int
    after: int

    def spec(self) -> list[int]:
        return [self.lo, self.hi, self.in_lo, self.in_hi, self.before, self.after]


def cut_of(layer: Layer, lo: int, hi: int, input_length: int) -> Cut:
    """The cut of ``layer`` (on a window's ``input_length`` inputs) giving outputs ``[lo, hi)``:
    for a convolution output ``q`` reads inputs ``s q - p + [0, k)``, for a transposed one the
    inputs ``i`` with ``s i - p + t = q``, ``t`` in ``[0, k)``."""
    s, p, k = layer.stride, layer.padding, layer.taps
    if isinstance(layer, Conv):
        first, end = s * lo - p, s * (hi - 1) - p + k
    else:
        first, end = -((k - 1 - lo - p) // s), (hi - 1 + p) // s + 1
    in_lo, in_hi = max(first, 0), min(end, input_length)
    return Cut(lo, hi, in_lo, in_hi, in_lo - first, end - in_hi)


@dataclass(frozen=True)
class EdgeCone:
    """What one edge graph computes: per node, the outputs that the kept ones (the last
    node's ``[lo, hi)``) depend on (``cuts``), the first node's taken from the stream where no
    padding reaches (``features``: its outputs ``[first, end)``) and from the raw samples at
    the window's ends (``head``, ``tail``: cuts of the first node, or None).

    The graph's input is ``[b, witnesses, input_samples()]``: the parts ``spans()`` names
    (the head's raw samples, the stream's first-node values, the tail's raw samples) along time.
    """

    cuts: tuple[Cut, ...]
    features: tuple[int, int]
    head: Cut | None
    tail: Cut | None

    def spec(self) -> dict:
        """The cone as JSON (``streamed.json``'s ``edges``)."""
        return {"cuts": [cut.spec() for cut in self.cuts], "features": list(self.features),
                "head": self.head and self.head.spec(), "tail": self.tail and self.tail.spec()}

    def spans(self) -> list[tuple[str, int, int]]:
        """The graph input's parts in order: (``"raw"`` or ``"features"``, window positions
        ``[first, end)``)."""
        parts = [(RAW, self.head.in_lo, self.head.in_hi)] if self.head else []
        if self.features[1] > self.features[0]:
            parts.append((FEATURES, *self.features))
        return parts + ([(RAW, self.tail.in_lo, self.tail.in_hi)] if self.tail else [])

    def input_samples(self) -> int:
        """The graph input's length."""
        return sum(end - first for _, first, end in self.spans())


def edge_cone(nodes: list[Node], kernel_samples: int, lo: int, hi: int,
              from_features: bool = True) -> EdgeCone:
    """The ``EdgeCone`` giving a window's last-node outputs ``[lo, hi)``: backwards through
    the chain ``nodes``, each node's outputs its successor reads; the first node's from the
    stream where its padding does not reach (its stride must be 1, its input and output
    channels the same: the raw and stream parts are concatenated), or with
    ``from_features`` false all from the window's raw samples."""
    lengths = [kernel_samples]
    for node in nodes:
        lengths.append(node.conv.output_length(lengths[-1]))
    cuts = []
    for index in range(len(nodes) - 1, -1, -1):
        cut = cut_of(nodes[index].conv, lo, hi, lengths[index])
        cuts.insert(0, cut)
        lo, hi = cut.in_lo, cut.in_hi
    if not from_features:
        return EdgeCone(tuple(cuts), (cuts[0].lo, cuts[0].lo), cuts[0], None)
    first = nodes[0].conv
    clean_lo, clean_hi = first.first_output(0), first.end_output(kernel_samples)
    lo, hi = cuts[0].lo, cuts[0].hi
    head = (cut_of(first, lo, min(hi, clean_lo), kernel_samples) if lo < clean_lo else None)
    tail = (cut_of(first, max(lo, clean_hi), hi, kernel_samples) if hi > clean_hi else None)
    return EdgeCone(tuple(cuts), (max(lo, clean_lo), max(min(hi, clean_hi), max(lo, clean_lo))),
                    head, tail)


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
    features: list[np.ndarray] = field(default_factory=list)
    """Per interferometer, the first node's stream values [witnesses, m] from the next
    window's start (the edge graphs read them)."""
    features_start: list[int] = field(default_factory=list)

    def to_arrays(self) -> dict[str, np.ndarray]:
        """The state as named arrays (``numpy.savez``)."""
        arrays = {"windows": np.array(self.windows), "raw": self.raw,
                  "raw_start": np.array(self.raw_start), "ifos": np.array(len(self.pending))}
        for i, (pending, starts) in enumerate(zip(self.pending, self.pending_start,
                                                  strict=True)):
            arrays.update(layer_stream.pending_arrays(pending, starts, f"{i}/"))
            arrays[f"{i}/prediction"] = self.prediction[i]
            arrays[f"{i}/prediction_start"] = np.array(self.prediction_start[i])
            arrays[f"{i}/features"] = self.features[i]
            arrays[f"{i}/features_start"] = np.array(self.features_start[i])
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
            state.features.append(np.array(arrays[f"{i}/features"]))
            state.features_start.append(int(arrays[f"{i}/features_start"]))
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
        ``run_name(ifo, node)`` for each node and ``run_name(ifo, "left")``,
        ``run_name(ifo, "right")`` → its ``Run`` (module docstring); shared by every stream.
    """

    def __init__(self, nodes: list[Node], witnesses: dict[str, list[int]], kernel_samples: int,
                 stride_samples: int, runs: dict[str, Run], edge_features: bool = True) -> None:
        self.nodes, self.runs, self.edge_features = nodes, runs, edge_features
        self.witnesses = {ifo: list(map(int, index)) for ifo, index in witnesses.items()}
        self.ifos = list(self.witnesses)
        self.witness_rows = {ifo: np.array(index) for ifo, index in self.witnesses.items()}
        self.channels = 1 + max(max(index) for index in self.witnesses.values())
        """Streamed channels the update has at least (one past the last witness's index)."""
        self.kernel_samples, self.stride_samples = kernel_samples, stride_samples
        if stride_samples < 1 or kernel_samples % stride_samples:
            raise ValueError(f"kernel {kernel_samples} must be a multiple of the stride "
                             f"{stride_samples}")
        step = layer_stream.cumulative_stride(nodes)
        if stride_samples % step:
            raise ValueError(
                f"stride of {stride_samples} samples is not a multiple of DeepClean's "
                f"alignment {step} (its bottleneck's stride): windows fall on "
                f"{layer_stream.phases_of(stride_samples, step)} downsampling phases "
                "(``PhasedDeepClean`` streams them)")
        self.plan = layer_stream.edge_plan(nodes, kernel_samples)
        if self.plan.top_stride != 1 or self.plan.top_length != kernel_samples:
            raise ValueError(f"the stream graph predicts {self.plan.top_length} samples per "
                             f"{kernel_samples}-sample window, not one per sample")
        if edge_features and (not isinstance(nodes[0].conv, Conv) or nodes[0].conv.stride != 1):
            raise ValueError(f"{nodes[0].name}: the edges take the first node's stream values, "
                             "which needs a convolution of stride 1")
        self.cones = {EDGES[0]: edge_cone(nodes, kernel_samples, 0, self.plan.left,
                                          edge_features),
                      EDGES[1]: edge_cone(nodes, kernel_samples,
                                          kernel_samples - self.plan.right, kernel_samples,
                                          edge_features)}
        """Edge → what its graph computes (``EdgeCone``), fixed by the geometry."""

    def spec(self) -> dict:
        """The geometry as JSON-able values (``streamed.json``; ``deepclean_of_spec`` reads it)."""
        return {"runner": "streamed_deepclean", "kernel_samples": self.kernel_samples,
                "stride_samples": self.stride_samples, "witnesses": self.witnesses,
                "nodes": [{"name": node.name, "inputs": list(node.inputs),
                           "layer": node.conv.spec()} for node in self.nodes],
                "edges": {edge: cone.spec() for edge, cone in self.cones.items()},
                **({} if self.edge_features else {"edge_features": False})}

    def run_names(self) -> list[str]:
        """Every run the network needs (``runs``' keys)."""
        return [run_name(ifo, run) for ifo in self.ifos
                for run in (*(node.name for node in self.nodes), *EDGES)]

    def initial_state(self) -> DeepCleanState:
        """A stream's state at START: ``K`` zeros already streamed, as the snapshotter's."""
        state = DeepCleanState(pending=[{} for _ in self.ifos],
                               pending_start=[{} for _ in self.ifos],
                               prediction=[None] * len(self.ifos),
                               prediction_start=[0] * len(self.ifos),
                               features=[None] * len(self.ifos),
                               features_start=[0] * len(self.ifos))
        self._advance(state, np.zeros((self.channels, self.kernel_samples), np.float32))
        return state

    def update(self, state: DeepCleanState, samples: np.ndarray) -> np.ndarray:
        """Append ``samples`` [channels, n S] to the stream (``state`` is updated in place);
        return the predictions of the ``n`` windows they end, ``[n, ifos, K]`` float32."""
        stride, plan, kernel = self.stride_samples, self.plan, self.kernel_samples
        n = layer_stream.windows_ended(samples, stride, "channels")
        if n == 0:
            return np.zeros((0, len(self.ifos), kernel), np.float32)
        self._advance(state, samples)
        starts = stride * (state.windows + 1 + np.arange(n))
        out = np.empty((n, len(self.ifos), kernel), np.float32)
        interior = kernel - plan.left - plan.right
        for i, ifo in enumerate(self.ifos):
            prediction = state.prediction[i][0]
            first = starts + plan.left - state.prediction_start[i]
            if first[0] < 0 or first[-1] + interior > prediction.shape[0]:
                raise RuntimeError("the stream's prediction does not cover the windows' "
                                   "interiors")
            inner = np.lib.stride_tricks.sliding_window_view(prediction, interior)
            out[:, i, plan.left : kernel - plan.right] = inner[first]
            sources = {RAW: (state.raw, state.raw_start, self.witness_rows[ifo]),
                       FEATURES: (state.features[i], state.features_start[i],
                                  np.arange(state.features[i].shape[0]))}
            left, right = (self.runs[run_name(ifo, edge)](self._edge_input(
                self.cones[edge], sources, starts)) for edge in EDGES)
            out[:, i, : plan.left] = left[:, : plan.left]
            out[:, i, kernel - plan.right :] = right[:, right.shape[1] - plan.right :]
        state.windows += n
        self._trim(state)
        return out

    @staticmethod
    def _edge_input(cone: EdgeCone, sources: dict, starts: np.ndarray) -> np.ndarray:
        """The input of ``cone``'s graph for the windows starting at stream positions
        ``starts``: ``[n, witnesses, cone.input_samples()]`` (``sources``: ``RAW`` and
        ``FEATURES`` → their stream values, the position of the first, the rows to take)."""
        parts = []
        for source, first, end in cone.spans():
            values, values_start, rows = sources[source]
            offsets = starts + first - values_start
            if offsets[0] < 0 or offsets[-1] + end - first > values.shape[1]:
                raise RuntimeError(f"the stream's {source} values do not cover the windows' "
                                   "edges")
            view = np.lib.stride_tricks.sliding_window_view(values, end - first, axis=1)
            # [n, witnesses, end - first], gathered in one copy
            parts.append(view.transpose(1, 0, 2)[offsets[:, None], rows])
        return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=2)

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
            state.features[i], state.features_start[i] = layer_stream.append_values(
                state.features[i], state.features_start[i], *step.values[self.nodes[0].name])

    def _trim(self, state: DeepCleanState) -> None:
        """Forget what no later window reads: before the next window's start."""
        start = self.stride_samples * (state.windows + 1)
        state.raw, state.raw_start = layer_stream.drop_before(state.raw, state.raw_start, start)
        for i in range(len(self.ifos)):
            state.prediction[i], state.prediction_start[i] = layer_stream.drop_before(
                state.prediction[i], state.prediction_start[i], start + self.plan.left)
            state.features[i], state.features_start[i] = layer_stream.drop_before(
                state.features[i], state.features_start[i], start)


@dataclass
class PhasedDeepCleanState:
    """What one stream off DeepClean's grid carries (``PhasedDeepClean``)."""

    phases: list[DeepCleanState]
    """Each phase's stream state."""
    queued: list[np.ndarray]
    """Per phase, samples not yet a whole phase stride."""
    windows: int = 0

    def to_arrays(self) -> dict[str, np.ndarray]:
        """The state as named arrays (``numpy.savez``)."""
        return {"windows": np.array(self.windows),
                **layer_stream.phase_arrays(self.phases, self.queued)}

    @classmethod
    def from_arrays(cls, arrays) -> PhasedDeepCleanState:
        """The state ``to_arrays`` wrote (a dict or an ``NpzFile``)."""
        phases, queued = layer_stream.phases_from_arrays(arrays, DeepCleanState.from_arrays)
        return cls(phases, queued, int(arrays["windows"]))


class PhasedDeepClean:
    """DeepClean's windows on a stream whose stride ``S`` is off its alignment ``P``:
    ``update(state, [channels, n S])`` → ``[n, ifos, K]``, as ``StreamedDeepClean``.

    Window ``j`` falls on phase ``j mod g`` (``g = P / gcd(S, P)``). Phase ``r`` is a
    ``StreamedDeepClean`` of stride ``g S`` (a multiple of ``P``) on the stream delayed by
    ``(g - 1 - r) S`` samples, so that its windows are windows ``r, r + g, ...``; its layers
    run on every sample, so a window costs what ``g S`` new samples cost on the grid (worth it
    while ``g S < K``), plus its edges, which are the same graphs as on the grid.
    """

    def __init__(self, nodes: list[Node], witnesses: dict[str, list[int]], kernel_samples: int,
                 stride_samples: int, runs: dict[str, Run], edge_features: bool = True) -> None:
        self.kernel_samples, self.stride_samples = kernel_samples, stride_samples
        alignment = layer_stream.cumulative_stride(nodes)
        self.phases = layer_stream.phases_of(stride_samples, alignment)
        if stride_samples < 1 or kernel_samples % stride_samples:
            raise ValueError(f"kernel {kernel_samples} must be a multiple of the stride "
                             f"{stride_samples}")
        if self.phases * stride_samples >= kernel_samples:
            raise ValueError(
                f"a stride of {stride_samples} samples puts the windows on {self.phases} "
                f"phases of DeepClean's alignment {alignment}: "
                f"each phase would stream {self.phases * stride_samples} samples a window, "
                f"not less than the window of {kernel_samples}")
        self.network = StreamedDeepClean(nodes, witnesses, kernel_samples,
                                         self.phases * stride_samples, runs, edge_features)
        self.nodes, self.ifos = nodes, self.network.ifos
        self.plan, self.cones = self.network.plan, self.network.cones

    def spec(self) -> dict:
        """As ``StreamedDeepClean.spec``: the same stream spec, with the stride off the grid."""
        return {**self.network.spec(), "stride_samples": self.stride_samples}

    def run_names(self) -> list[str]:
        return self.network.run_names()

    def initial_state(self) -> PhasedDeepCleanState:
        """A stream's state at START: ``K`` zeros streamed (the later phases with their
        delay besides)."""
        return PhasedDeepCleanState(
            [self.network.initial_state() for _ in range(self.phases)],
            [np.zeros((self.network.channels, (self.phases - 1 - r) * self.stride_samples),
                      np.float32)
             for r in range(self.phases)])

    def update(self, state: PhasedDeepCleanState, samples: np.ndarray) -> np.ndarray:
        """Append ``samples`` [channels, n S]; return the predictions of the ``n`` windows
        they end, ``[n, ifos, K]`` float32."""
        stride = self.stride_samples
        n = layer_stream.windows_ended(samples, stride, "channels")
        out = np.zeros((n, len(self.ifos), self.kernel_samples), np.float32)
        if n == 0:
            return out
        layer_stream.interleave_phases(self.network, state.phases, state.queued, state.windows,
                                       np.asarray(samples, np.float32), stride, out)
        state.windows += n
        return out


def deepclean_runner(nodes: list[Node], witnesses: dict[str, list[int]], kernel_samples: int,
                     stride_samples: int, runs: dict[str, Run], edge_features: bool = True
                     ) -> StreamedDeepClean | PhasedDeepClean:
    """A ``StreamedDeepClean`` of this geometry where the stride is on DeepClean's grid, a
    ``PhasedDeepClean`` where it is not (``edge_features``: ``edge_cone``'s); ValueError for
    a geometry neither streams."""
    off_grid = layer_stream.phases_of(stride_samples, layer_stream.cumulative_stride(nodes)) > 1
    kind = PhasedDeepClean if off_grid else StreamedDeepClean
    return kind(nodes, witnesses, kernel_samples, stride_samples, runs, edge_features)


def deepclean_of_spec(spec: dict, runs: dict[str, Run]) -> StreamedDeepClean | PhasedDeepClean:
    """The runner ``spec()`` describes, running ``runs`` (``deepclean_runner``); ValueError if
    the stream spec's edge graphs are not the ones it computes."""
    nodes = [Node(n["name"], tuple(n["inputs"]), layer_stream.layer_of(n["layer"]))
             for n in spec["nodes"]]
    network = deepclean_runner(nodes, spec["witnesses"], spec["kernel_samples"],
                               spec["stride_samples"], runs, spec.get("edge_features", True))
    if spec.get("edges") != network.spec()["edges"]:
        raise ValueError(f"{layer_stream.STREAM_SPEC}: its edge graphs are not the ones this "
                         "runner computes (exported by another version): export again")
    return network


def open_streamed_deepclean(directory: str | os.PathLike, intra_op_threads: int = 1,
                            device: str = "cpu", device_id: int = 0
                            ) -> StreamedDeepClean | PhasedDeepClean:
    """The DeepCleans exported to ``directory`` (``streamed.json`` and their graphs), each
    graph an onnxruntime session on ``device`` (``layer_stream.onnx_runs``)."""
    with open(os.path.join(directory, layer_stream.STREAM_SPEC)) as file:
        spec = json.load(file)
    names = deepclean_of_spec(spec, {}).run_names()
    return deepclean_of_spec(
        spec, layer_stream.onnx_runs(directory, names, intra_op_threads, device, device_id))
