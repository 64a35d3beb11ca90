"""A network's windows evaluated on a stream, each layer once per sample (numpy, onnxruntime).

Issue #42: the ``streamed`` stage of ``stateful.ModeStream``, served by the fused model with
``model.streamed`` (BBHnet; docs/networks.md, "Streamed graphs"). Self-contained like the
other files of this folder (numpy; onnxruntime only in ``open_streamed_network``), so the
server's python stub can load it by path beside ``stateful.py``: ``layer_stream.open_streamed``
(the geometry and layer bookkeeping it shares with ``streamed_deepclean.py``) loads it and is
the module it takes from ``sys.modules`` there; ``science/bbhnet/streamed.py`` runs the same
bookkeeping on torch modules.

A stream's window ``j`` covers raw stream samples ``[a_j, a_j + K)`` with ``a_j = (j + 1) S``,
the stream starting with ``K`` zeros as the snapshotter's state does. The network is a "valid"
whitening FIR (``T`` taps, the input scale included), a graph of padded convolutions and joins
(``Node``), a mean over its last layer and a head. Every layer is shift-equivariant on the
stream, so with the cumulative stride ``P`` dividing ``S``:

- the whitened window is the whitened stream's ``[a_j, a_j + L0)`` (``L0 = K - T + 1``);
- layer ``l`` of the window (cumulative stride ``P_l``) equals the layer run without padding
  on the stream, at stream positions ``a_j / P_l + q``, except for the few positions at each
  end whose receptive field reaches the window's zero padding (``EdgePlan.left``/``right``);
- so the stream runs each layer once, on the new samples only, and each window recomputes
  only its edges: its first and last ``edge_samples`` whitened samples through the padded
  layers, of which the last layer's first ``left`` and last ``right`` positions are kept;
- a window's pool is (left edge + stream interior + right edge) / ``L_K``, then the head.

The per-stream state is ``StreamState``: numpy arrays and integers (``to_arrays``/
``from_arrays``: what a server keeps per sequence and a checkpoint saves).

Exported layout (``repository/streamed.export_streamed``): a directory with ``streamed.json``
(``StreamedNetwork.spec``) and one ONNX graph per run, input ``x``, output ``y``:
``whitened.onnx`` (raw ``[1, ifos, n]`` → ``[1, ifos, n - T + 1]``), ``<node>.onnx`` (the layer
without padding; a join takes its inputs concatenated along channels), ``edges.onnx`` (the
padded layers on ``[b, ifos, E]``) and ``head.onnx`` (``[n, C]`` → ``[n, 1]``).
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field

import numpy as np

try:
    from . import layer_stream
except ImportError:  # loaded by path (the server's python stub) by layer_stream.open_streamed,
    layer_stream = sys.modules["layer_stream"]  # the one way in: the loader lives there

Conv, Node, Run, EdgePlan = layer_stream.Conv, layer_stream.Node, layer_stream.Run, \
    layer_stream.EdgePlan
cumulative_stride, edge_plan = layer_stream.cumulative_stride, layer_stream.edge_plan
phases_of = layer_stream.phases_of
STREAM_SPEC, DIRECTORY_SUFFIX = layer_stream.STREAM_SPEC, layer_stream.DIRECTORY_SUFFIX
"""The fused model's version holds network ``<name>``'s streamed graphs in
``<name>.streamed/`` (beside the whole-window ``<name>.onnx``)."""
WHITENING, EDGES, HEAD = "whitened", "edges", "head"
"""Names of the runs besides the nodes' (and of their graphs, ``<name>.onnx``)."""


@dataclass
class StreamState:
    """What one stream carries between requests (all numpy; ``to_arrays`` to checkpoint).

    Stream positions count from the first of the ``K`` zeros a stream starts with.
    """

    windows: int = 0
    """Windows emitted since the start."""
    pending: dict[str, np.ndarray] = field(default_factory=dict)
    """Per node input (``"<node>:<input>"``): its stream values not yet consumed."""
    pending_start: dict[str, int] = field(default_factory=dict)
    """Stream position of each pending array's first value."""
    whitened: np.ndarray | None = None
    """The whitened stream from the next window's start (its edges are cut from it)."""
    whitened_start: int = 0
    top: np.ndarray | None = None
    """The last layer on the stream, from the next window's first interior position."""
    top_start: int = 0

    def to_arrays(self) -> dict[str, np.ndarray]:
        """The state as named arrays (``numpy.savez``)."""
        arrays = {"windows": np.array(self.windows), "whitened": self.whitened,
                  "whitened_start": np.array(self.whitened_start), "top": self.top,
                  "top_start": np.array(self.top_start)}
        arrays.update(layer_stream.pending_arrays(self.pending, self.pending_start))
        return arrays

    @classmethod
    def from_arrays(cls, arrays) -> StreamState:
        """The state ``to_arrays`` wrote (a dict or an ``NpzFile``)."""
        state = cls(windows=int(arrays["windows"]), whitened=np.array(arrays["whitened"]),
                    whitened_start=int(arrays["whitened_start"]), top=np.array(arrays["top"]),
                    top_start=int(arrays["top_start"]))
        state.pending, state.pending_start = layer_stream.pending_of(arrays)
        return state


class StreamWhitening:
    """A network's whitening FIR alone on a stream (``split_whitening``; a phased network's
    shared one): ``update(state, [ifos, m])`` → the whitened stream's next ``m`` values, one
    per sample, the stream starting with ``K`` zeros (whose whitened values each network on
    the whitened stream starts with itself)."""

    def __init__(self, ifos: int, kernel_samples: int, whitening_taps: int,
                 runs: dict[str, Run]) -> None:
        self.ifos, self.kernel_samples, self.runs = ifos, kernel_samples, runs
        self.node = Node(WHITENING, ("raw",), Conv(whitening_taps, 1, 0, ifos * whitening_taps))

    def initial_state(self) -> StreamState:
        """The FIR's state at START: ``K`` zeros streamed (their whitened values dropped)."""
        state = StreamState()
        self.update(state, np.zeros((self.ifos, self.kernel_samples), np.float32))
        return state

    def update(self, state: StreamState, samples: np.ndarray) -> np.ndarray:
        """The whitened values ``samples`` [ifos, m] make computable (``m`` of them once
        ``T - 1`` samples are pending)."""
        if samples.shape[1] == 0:
            return np.zeros((self.ifos, 0), np.float32)
        step = layer_stream.StreamStep(state, self.runs,
                                       {"raw": (np.asarray(samples, np.float32), None)})
        step.run(self.node)
        return step.values[WHITENING][0]


def _passed_on(whitened: np.ndarray) -> np.ndarray:
    return whitened


class _SplitsItsWhitening:
    """``split_whitening`` for ``StreamedNetwork`` and ``PhasedNetwork``."""

    def split_whitening(self) -> tuple[StreamWhitening, StreamedNetwork | PhasedNetwork]:
        """This network's whitening as a stream of its own, and the same network on the
        whitened stream (a one-tap whitening that passes it on): the same windows, so that
        streams sharing a detector's samples whiten them once (``StreamedTimeSlides``: a
        slide is the second detector's whitened stream delayed; the FIR is per detector and
        linear, and before the stream everything is zeros). Made once per runner."""
        split = getattr(self, "_split", None)
        if split is None:
            whitened = streamed_runner(
                self.nodes, self.ifos, self.kernel_samples - self.whitening_taps + 1,
                self.stride_samples, 1, dict(self.runs, **{WHITENING: _passed_on}))
            split = self._split = (StreamWhitening(self.ifos, self.kernel_samples,
                                                   self.whitening_taps, self.runs), whitened)
        return split


class StreamedNetwork(_SplitsItsWhitening):
    """A network's windows on a stream: ``update(state, [ifos, n S])`` → ``[n]`` statistics.

    Parameters
    ----------
    nodes
        The stream graph after the whitening (convolutions and joins, in order).
    ifos, kernel_samples, stride_samples, whitening_taps
        Input channels, window ``K``, stride ``S`` and whitening FIR length ``T``; ``S`` must
        be a multiple of the graph's cumulative stride ``P`` (else a window's downsampled grid
        is not the stream's).
    runs
        ``"whitened"``, each node's name, ``"edges"`` and ``"head"`` → its ``Run`` (module
        docstring); shared by every stream.
    """

    def __init__(self, nodes: list[Node], ifos: int, kernel_samples: int,
                 stride_samples: int, whitening_taps: int, runs: dict[str, Run]) -> None:
        self.nodes, self.ifos, self.runs = nodes, ifos, runs
        self.kernel_samples, self.stride_samples = kernel_samples, stride_samples
        self.whitening_taps = taps = whitening_taps
        whitened = kernel_samples - taps + 1
        if stride_samples < 1 or whitened < 1:
            raise ValueError(f"kernel {kernel_samples} must be longer than the whitening "
                             f"({taps} taps), the stride {stride_samples} positive")
        self.plan = edge_plan(nodes, whitened)
        if stride_samples % self.plan.step:
            raise ValueError(
                f"stride of {stride_samples} samples is not a multiple of the network's "
                f"cumulative stride {self.plan.step}: windows fall on "
                f"{phases_of(stride_samples, self.plan.step)} downsampling phases "
                "(``PhasedNetwork`` streams one per phase)")
        self.whitening = Node(WHITENING, ("raw",), Conv(taps, 1, 0, ifos * taps))

    def spec(self) -> dict:
        """The geometry as JSON-able values (``streamed.json``; ``network_of_spec`` reads
        it)."""
        return spec_of(self.nodes, self.ifos, self.kernel_samples, self.stride_samples,
                       self.whitening_taps)

    def initial_state(self) -> StreamState:
        """A stream's state at START: ``K`` zeros already streamed, as the snapshotter's."""
        state = StreamState()
        self._advance(state, np.zeros((self.ifos, self.kernel_samples), np.float32))
        return state

    def update(self, state: StreamState, samples: np.ndarray) -> np.ndarray:
        """Append ``samples`` [ifos, n S] to the stream (``state`` is updated in place);
        return the statistics of the ``n`` windows they end, ``[n]`` float32."""
        stride, plan = self.stride_samples, self.plan
        n = layer_stream.windows_ended(samples, stride)
        if n == 0:  # an empty request (a sequence's START or END alone)
            return np.zeros(0, np.float32)
        self._advance(state, samples)
        starts = stride * (state.windows + 1 + np.arange(n))  # raw == whitened position
        pooled = self._interior_sums(state, starts)
        if plan.left or plan.right:
            pooled += self._edge_sums(state, starts)
        pooled /= plan.top_length
        statistic = self.runs[HEAD](pooled.astype(np.float32))[:, 0]
        state.windows += n
        self._trim(state)
        return statistic

    def _advance(self, state: StreamState, samples: np.ndarray) -> None:
        """Run every layer on what ``samples`` newly makes computable."""
        streamed = layer_stream.StreamStep(
            state, self.runs, {"raw": (np.asarray(samples, np.float32), None)})
        streamed.run(self.whitening)
        state.whitened, state.whitened_start = layer_stream.append_values(
            state.whitened, state.whitened_start, *streamed.values[WHITENING])
        for node in self.nodes:
            streamed.run(node)
        state.top, state.top_start = layer_stream.append_values(state.top, state.top_start,
                                             *streamed.values[self.nodes[-1].name])

    def _interior_sums(self, state: StreamState, starts: np.ndarray) -> np.ndarray:
        """Per window, the sum of its last layer's interior (the stream's), float64."""
        plan = self.plan
        interior = plan.top_length - plan.left - plan.right
        first = starts // plan.top_stride + plan.left - state.top_start
        if first[0] < 0 or first[-1] + interior > state.top.shape[1]:
            raise RuntimeError("the stream's last layer does not cover the windows' interiors")
        return _window_sums(state.top, first, interior,
                            self.stride_samples // plan.top_stride).T

    def _edge_sums(self, state: StreamState, starts: np.ndarray) -> np.ndarray:
        """Per window, the sum of its last layer's padded edges, recomputed from its first and
        last ``edge_samples`` whitened samples through the padded layers."""
        plan, n = self.plan, len(starts)
        edge, offsets = plan.edge_samples, starts - state.whitened_start
        spans = np.lib.stride_tricks.sliding_window_view(state.whitened, edge, axis=1)
        batch = np.concatenate([spans[:, offsets],
                                spans[:, offsets + plan.input_samples - edge]], axis=1)
        edges = self.runs[EDGES](np.ascontiguousarray(batch.transpose(1, 0, 2)))
        sums = edges[:n, :, : plan.left].sum(axis=2, dtype=np.float64)
        return sums + edges[n:, :, edges.shape[2] - plan.right :].sum(axis=2, dtype=np.float64)

    def _trim(self, state: StreamState) -> None:
        """Forget what no later window reads: before the next window's start."""
        start = self.stride_samples * (state.windows + 1)
        state.whitened, state.whitened_start = layer_stream.drop_before(
            state.whitened, state.whitened_start, start)
        state.top, state.top_start = layer_stream.drop_before(
            state.top, state.top_start, start // self.plan.top_stride + self.plan.left)


def spec_of(nodes: list[Node], ifos: int, kernel_samples: int, stride_samples: int,
            whitening_taps: int) -> dict:
    """A streamed network's geometry as JSON-able values (``streamed.json``)."""
    return {"runner": "streamed_network", "ifos": ifos, "kernel_samples": kernel_samples,
            "stride_samples": stride_samples, "whitening_taps": whitening_taps,
            "nodes": [{"name": node.name, "inputs": list(node.inputs),
                       "conv": None if node.conv is None else
                       [node.conv.taps, node.conv.stride, node.conv.padding]}
                      for node in nodes]}


def network_of_spec(spec: dict, runs: dict[str, Run]) -> StreamedNetwork | PhasedNetwork:
    """The runner ``spec_of`` describes, running ``runs``: a ``StreamedNetwork`` where the
    stride is on the network's grid, a ``PhasedNetwork`` where it is not."""
    nodes = [Node(n["name"], tuple(n["inputs"]), None if n["conv"] is None
                  else Conv(*n["conv"])) for n in spec["nodes"]]
    return streamed_runner(nodes, spec["ifos"], spec["kernel_samples"], spec["stride_samples"],
                           spec["whitening_taps"], runs)


def streamed_runner(nodes: list[Node], ifos: int, kernel_samples: int, stride_samples: int,
                    whitening_taps: int, runs: dict[str, Run]
                    ) -> StreamedNetwork | PhasedNetwork:
    """A ``StreamedNetwork`` of this geometry where the stride is on the network's grid, a
    ``PhasedNetwork`` where it is not."""
    kind = (PhasedNetwork if phases_of(stride_samples, cumulative_stride(nodes)) > 1
            else StreamedNetwork)
    return kind(nodes, ifos, kernel_samples, stride_samples, whitening_taps, runs)


@dataclass
class PhasedState:
    """What one stream off the network's grid carries (``PhasedNetwork``)."""

    whitening: StreamState
    """The whitening's pending raw samples (its ``pending``)."""
    phases: list[StreamState]
    """Each phase's stream state."""
    queued: list[np.ndarray]
    """Per phase, whitened samples not yet a whole phase stride."""
    windows: int = 0

    def to_arrays(self) -> dict[str, np.ndarray]:
        """The state as named arrays (``numpy.savez``)."""
        arrays = {"windows": np.array(self.windows)}
        arrays.update(layer_stream.pending_arrays(self.whitening.pending,
                                                  self.whitening.pending_start, "whitening/"))
        arrays.update(layer_stream.phase_arrays(self.phases, self.queued))
        return arrays

    @classmethod
    def from_arrays(cls, arrays) -> PhasedState:
        """The state ``to_arrays`` wrote (a dict or an ``NpzFile``)."""
        whitening = StreamState()
        whitening.pending, whitening.pending_start = layer_stream.pending_of(arrays,
                                                                             "whitening/")
        phases, queued = layer_stream.phases_from_arrays(arrays, StreamState.from_arrays)
        return cls(whitening, phases, queued, int(arrays["windows"]))


class PhasedNetwork(_SplitsItsWhitening):
    """A network's windows on a stream whose stride ``S`` is not a multiple of the network's
    cumulative stride ``P``: ``update(state, [ifos, n S])`` → ``[n]``, as ``StreamedNetwork``.

    The windows then fall on ``g = P / gcd(S, P)`` phases of the downsampled grid: window
    ``j`` on phase ``j mod g``. The whitening (stride 1, on every grid) runs once on the
    stream; each phase ``r`` is a ``StreamedNetwork`` of stride ``g S`` (a multiple of ``P``)
    on the whitened stream delayed by ``(g - 1 - r) S`` samples, so that its windows are
    windows ``r, r + g, ...``. The layers run ``g`` times per sample, so a window costs what
    ``g S`` new samples cost on the grid (worth it while ``g S < K``), plus its edges.
    """

    def __init__(self, nodes: list[Node], ifos: int, kernel_samples: int,
                 stride_samples: int, whitening_taps: int, runs: dict[str, Run]) -> None:
        self.nodes, self.ifos, self.runs = nodes, ifos, runs
        self.kernel_samples, self.stride_samples = kernel_samples, stride_samples
        self.whitening_taps = whitening_taps
        self.phases = phases_of(stride_samples, cumulative_stride(nodes))
        # each phase takes the whitened stream: a whitening of one tap that passes it on
        passed_on = dict(runs, **{WHITENING: _passed_on})
        self.network = StreamedNetwork(nodes, ifos, kernel_samples - whitening_taps + 1,
                                       self.phases * stride_samples, 1, passed_on)
        self.plan = self.network.plan
        self.whitening = StreamWhitening(ifos, kernel_samples, whitening_taps, runs)

    def spec(self) -> dict:
        """As ``StreamedNetwork.spec``: the same stream spec, with the stride off the grid."""
        return spec_of(self.nodes, self.ifos, self.kernel_samples, self.stride_samples,
                       self.whitening_taps)

    def initial_state(self) -> PhasedState:
        """A stream's state at START: ``K`` zeros streamed (each phase begins with its own
        whitened zeros, the later phases with their delay)."""
        stride = self.stride_samples
        return PhasedState(self.whitening.initial_state(),
                           [self.network.initial_state() for _ in range(self.phases)],
                           [np.zeros((self.ifos, (self.phases - 1 - r) * stride), np.float32)
                            for r in range(self.phases)])

    def update(self, state: PhasedState, samples: np.ndarray) -> np.ndarray:
        """Append ``samples`` [ifos, n S]; return the statistics of the ``n`` windows they
        end, ``[n]`` float32."""
        stride = self.stride_samples
        n = layer_stream.windows_ended(samples, stride)
        if n == 0:  # an empty request (a sequence's START or END alone)
            return np.zeros(0, np.float32)
        whitened = self.whitening.update(state.whitening, samples)
        out = np.zeros(n, np.float32)
        layer_stream.interleave_phases(self.network, state.phases, state.queued, state.windows,
                                       whitened, stride, out)
        state.windows += n
        return out


def _window_sums(values: np.ndarray, first: np.ndarray, length: int, step: int
                 ) -> np.ndarray:
    """``values[:, f : f + length]`` summed in float64 for each ``f`` of ``first`` (``step``
    apart): whole blocks of ``step`` positions summed once and shared by the windows that
    contain them, plus each window's remainder (a running sum over everything costs ~6x)."""
    whole, rest = divmod(length, step)
    n = len(first)
    sums = np.zeros((values.shape[0], n))
    if whole:
        starts = first[0] + step * np.arange(n + whole - 1)
        blocks = np.add.reduceat(values[:, : starts[-1] + step], starts, axis=1,
                                 dtype=np.float64)
        for k in range(whole):
            sums += blocks[:, k : k + n]
    if rest:
        bounds = np.stack([first + whole * step, first + length], axis=1).ravel()
        if bounds[-1] >= values.shape[1]:  # the last window ends with the array: reduceat's
            bounds = bounds[:-1]           # last sum runs to the end (an index must be inside)
        sums += np.add.reduceat(values, bounds, axis=1, dtype=np.float64)[:, 0::2]
    return sums


def open_streamed_network(directory: str | os.PathLike, intra_op_threads: int = 1,
                          device: str = "cpu", device_id: int = 0
                          ) -> StreamedNetwork | PhasedNetwork:
    """The network exported to ``directory`` (``streamed.json`` and its graphs), each graph
    an onnxruntime session on ``device`` (``layer_stream.onnx_runs``)."""
    with open(os.path.join(directory, STREAM_SPEC)) as file:
        spec = json.load(file)
    names = [WHITENING, EDGES, HEAD, *(node["name"] for node in spec["nodes"])]
    return network_of_spec(
        spec, layer_stream.onnx_runs(directory, names, intra_op_threads, device, device_id))
