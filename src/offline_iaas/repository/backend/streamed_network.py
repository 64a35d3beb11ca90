"""A network's windows evaluated on a stream, each layer once per sample (numpy, onnxruntime).

Issue #42: the ``streamed`` stage of ``stateful.ModeStream``, served by the fused model with
``model.streamed`` (BBHnet; docs/networks.md, "Streamed graphs"). Self-contained like the
other files of this folder (numpy; onnxruntime only in ``open_streamed_network``), so the
server's python stub can load it by path beside ``stateful.py``: ``layer_stream.open_streamed``
(the geometry and layer bookkeeping it shares with ``streamed_deepclean.py``) loads it and is
the module it takes from ``sys.modules`` there; ``repository/streamed.py`` runs the same
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
import math
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
MANIFEST, DIRECTORY_SUFFIX = layer_stream.MANIFEST, layer_stream.DIRECTORY_SUFFIX
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


class StreamedNetwork:
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
        if kernel_samples % stride_samples or whitened < 1:
            raise ValueError(f"kernel {kernel_samples} must be a multiple of the stride "
                             f"{stride_samples} and longer than the whitening ({taps} taps)")
        self.plan = edge_plan(nodes, whitened)
        if stride_samples % self.plan.step:
            raise ValueError(
                f"stride of {stride_samples} samples is not a multiple of the network's "
                f"cumulative stride {self.plan.step}: windows fall on "
                f"{self.plan.step // math.gcd(stride_samples, self.plan.step)} downsampling "
                "phases (stream one graph per phase: docs/networks.md, 'Streamed graphs')")
        self.whitening = Node(WHITENING, ("raw",), Conv(taps, 1, 0, ifos * taps))

    def spec(self) -> dict:
        """The geometry as JSON-able values (``streamed.json``; ``from_spec`` reads it)."""
        return {"ifos": self.ifos, "kernel_samples": self.kernel_samples,
                "stride_samples": self.stride_samples, "whitening_taps": self.whitening_taps,
                "nodes": [{"name": node.name, "inputs": list(node.inputs),
                           "conv": None if node.conv is None else
                           [node.conv.taps, node.conv.stride, node.conv.padding]}
                          for node in self.nodes]}

    @classmethod
    def from_spec(cls, spec: dict, runs: dict[str, Run]) -> StreamedNetwork:
        """The network ``spec()`` describes, running ``runs``."""
        nodes = [Node(n["name"], tuple(n["inputs"]), None if n["conv"] is None
                      else Conv(*n["conv"])) for n in spec["nodes"]]
        return cls(nodes, spec["ifos"], spec["kernel_samples"], spec["stride_samples"],
                   spec["whitening_taps"], runs)

    def initial_state(self) -> StreamState:
        """A stream's state at START: ``K`` zeros already streamed, as the snapshotter's."""
        state = StreamState()
        self._advance(state, np.zeros((self.ifos, self.kernel_samples), np.float32))
        return state

    def update(self, state: StreamState, samples: np.ndarray) -> np.ndarray:
        """Append ``samples`` [ifos, n S] to the stream (``state`` is updated in place);
        return the statistics of the ``n`` windows they end, ``[n]`` float32."""
        stride, plan = self.stride_samples, self.plan
        if samples.ndim != 2 or samples.shape[1] % stride:
            raise ValueError(f"update of shape {samples.shape}: need [ifos, n * {stride}]")
        n = samples.shape[1] // stride
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
        segments = np.lib.stride_tricks.sliding_window_view(state.whitened, edge, axis=1)
        batch = np.concatenate([segments[:, offsets],
                                segments[:, offsets + plan.input_samples - edge]], axis=1)
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
                          device: str = "cpu", device_id: int = 0) -> StreamedNetwork:
    """The network exported to ``directory`` (``streamed.json`` and its graphs), each graph
    an onnxruntime session on ``device`` (``layer_stream.onnx_runs``)."""
    with open(os.path.join(directory, MANIFEST)) as file:
        spec = json.load(file)
    names = [WHITENING, EDGES, HEAD, *(node["name"] for node in spec["nodes"])]
    return StreamedNetwork.from_spec(
        spec, layer_stream.onnx_runs(directory, names, intra_op_threads, device, device_id))
