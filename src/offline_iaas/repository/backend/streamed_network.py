"""A network's windows evaluated on a stream, each layer once per sample (numpy, onnxruntime).

Issue #42: the ``streamed`` stage of ``stateful.ModeStream``, served by the fused model with
``model.streamed`` (mode bbhnet; docs/networks.md, "Streamed graphs"). Self-contained like the
other files of this folder
(numpy; onnxruntime only in ``open_streamed_network``), so the server's python stub can load it
beside ``stateful.py``; ``repository/streamed.py`` runs the same bookkeeping on torch modules.

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
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

Run = Callable[[np.ndarray], np.ndarray]
"""One exported graph: a float32 array in, a float32 array out."""

MANIFEST = "streamed.json"
DIRECTORY_SUFFIX = ".streamed"
"""The fused model's version holds network ``<name>``'s streamed graphs in
``<name>.streamed/`` (beside the whole-window ``<name>.onnx``)."""
WHITENING, EDGES, HEAD = "whitened", "edges", "head"
"""Names of the runs besides the nodes' (and of their graphs, ``<name>.onnx``)."""


@dataclass(frozen=True)
class Conv:
    """One ``Conv1d``'s geometry: output ``q`` reads input ``stride * q - padding + [0, taps)``.

    ``macs_per_output``: multiply-accumulates per output position (all output channels).
    """

    taps: int
    stride: int
    padding: int
    macs_per_output: int = 0

    def output_length(self, input_length: int) -> int:
        """Outputs of the padded layer on ``input_length`` inputs (torch's formula)."""
        return (input_length + 2 * self.padding - self.taps) // self.stride + 1

    def first_output(self, input_start: int) -> int:
        """First stream output whose inputs all lie at or after ``input_start`` (no padding)."""
        return math.ceil((input_start + self.padding) / self.stride)

    def end_output(self, input_end: int) -> int:
        """One past the last stream output whose inputs all lie before ``input_end``."""
        return (input_end + self.padding - self.taps) // self.stride + 1

    def reach(self, length: int, left: int, right: int) -> tuple[int, int, int]:
        """The padded layer on ``length`` inputs whose first ``left`` and last ``right``
        differ from the stream's: its output length, and how many outputs differ at each end
        (those reading padding or a differing input)."""
        out = self.output_length(length)
        first_clean = self.first_output(left)
        end_clean = self.end_output(length - right)
        return out, min(out, first_clean), max(0, min(out, out - end_clean))


@dataclass(frozen=True)
class Node:
    """One step of the stream graph: a convolution (+ pointwise ops) or a join.

    ``inputs`` names earlier nodes (``"whitened"`` is the whitened stream); a join has two
    inputs and no ``conv``, and its run takes them concatenated along channels.
    """

    name: str
    inputs: tuple[str, ...]
    conv: Conv | None


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
        for key, values in self.pending.items():
            arrays[f"pending/{key}"] = values
            arrays[f"pending_start/{key}"] = np.array(self.pending_start[key])
        return arrays

    @classmethod
    def from_arrays(cls, arrays) -> StreamState:
        """The state ``to_arrays`` wrote (a dict or an ``NpzFile``)."""
        state = cls(windows=int(arrays["windows"]), whitened=np.array(arrays["whitened"]),
                    whitened_start=int(arrays["whitened_start"]), top=np.array(arrays["top"]),
                    top_start=int(arrays["top_start"]))
        for name in arrays:
            if name.startswith("pending/"):
                key = name.removeprefix("pending/")
                state.pending[key] = np.array(arrays[name])
                state.pending_start[key] = int(arrays[f"pending_start/{key}"])
        return state


@dataclass(frozen=True)
class EdgePlan:
    """Where a window's last layer differs from the stream's, and the segments that give it.

    ``left``/``right``: last-layer positions at each end that the padding reaches;
    ``top_length``: last-layer positions of a window (``L_K``); ``edge_samples``: length of
    the whitened edge segments (``E``; ``L0 - E`` is a multiple of ``step``); ``step``: the
    cumulative stride ``P``.
    """

    left: int
    right: int
    top_length: int
    edge_samples: int
    step: int
    whitened_samples: int


def _reach(nodes: list[Node], length: int) -> tuple[int, int, int]:
    """Last-layer length of a padded run on ``length`` whitened samples, and how many of its
    positions the padding reaches at each end."""
    geometry = {"whitened": (length, 0, 0)}
    for node in nodes:
        if node.conv is None:
            shapes = [geometry[name] for name in node.inputs]
            if len({shape[0] for shape in shapes}) != 1:
                raise ValueError(f"{node.name}: its inputs have different lengths {shapes}")
            geometry[node.name] = (shapes[0][0], max(s[1] for s in shapes),
                                   max(s[2] for s in shapes))
        else:
            geometry[node.name] = node.conv.reach(*geometry[node.inputs[0]])
    return geometry[nodes[-1].name]


def cumulative_stride(nodes: list[Node]) -> int:
    """The last layer's stride in whitened samples (``P``)."""
    strides = {"whitened": 1}
    for node in nodes:
        step = 1 if node.conv is None else node.conv.stride
        strides[node.name] = strides[node.inputs[0]] * step
    return strides[nodes[-1].name]


def edge_plan(nodes: list[Node], whitened_samples: int) -> EdgePlan:
    """The ``EdgePlan`` of windows of ``whitened_samples`` (``L0``); ValueError if none."""
    step = cumulative_stride(nodes)
    top_length, left, right = _reach(nodes, whitened_samples)
    if left + right >= top_length:
        raise ValueError(f"a window of {whitened_samples} whitened samples is all edge: its "
                         f"last layer has {top_length} positions, {left} + {right} reached by "
                         "the padding")
    for edge in range(whitened_samples % step or step, whitened_samples + 1, step):
        edge_top, edge_left, edge_right = _reach(nodes, edge)
        offset = (whitened_samples - edge) // step
        if edge_top + offset != top_length:
            continue
        # the left edge must lie clear of the segment's right padding, the right edge clear
        # of its left padding
        if edge_top - edge_right >= left and top_length - right - offset >= edge_left:
            return EdgePlan(left, right, top_length, edge, step, whitened_samples)
    raise ValueError("no edge segment reproduces the window's padded edges")


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
        streamed = _Stream(state, self.runs, {"raw": (np.asarray(samples, np.float32), None)})
        streamed.run(self.whitening)
        state.whitened, state.whitened_start = _append(
            state.whitened, state.whitened_start, *streamed.values[WHITENING])
        for node in self.nodes:
            streamed.run(node)
        state.top, state.top_start = _append(state.top, state.top_start,
                                             *streamed.values[self.nodes[-1].name])

    def _interior_sums(self, state: StreamState, starts: np.ndarray) -> np.ndarray:
        """Per window, the sum of its last layer's interior (the stream's), float64."""
        plan = self.plan
        interior = plan.top_length - plan.left - plan.right
        first = starts // plan.step + plan.left - state.top_start
        if first[0] < 0 or first[-1] + interior > state.top.shape[1]:
            raise RuntimeError("the stream's last layer does not cover the windows' interiors")
        cumulative = np.zeros((state.top.shape[0], state.top.shape[1] + 1))
        np.cumsum(state.top, axis=1, dtype=np.float64, out=cumulative[:, 1:])
        return (cumulative[:, first + interior] - cumulative[:, first]).T

    def _edge_sums(self, state: StreamState, starts: np.ndarray) -> np.ndarray:
        """Per window, the sum of its last layer's padded edges, recomputed from its first and
        last ``edge_samples`` whitened samples through the padded layers."""
        plan, n = self.plan, len(starts)
        edge, offsets = plan.edge_samples, starts - state.whitened_start
        segments = np.lib.stride_tricks.sliding_window_view(state.whitened, edge, axis=1)
        batch = np.concatenate([segments[:, offsets],
                                segments[:, offsets + plan.whitened_samples - edge]], axis=1)
        edges = self.runs[EDGES](np.ascontiguousarray(batch.transpose(1, 0, 2)))
        sums = edges[:n, :, : plan.left].sum(axis=2, dtype=np.float64)
        return sums + edges[n:, :, edges.shape[2] - plan.right :].sum(axis=2, dtype=np.float64)

    def _trim(self, state: StreamState) -> None:
        """Forget what no later window reads: before the next window's start."""
        start = self.stride_samples * (state.windows + 1)
        state.whitened, state.whitened_start = _drop_before(
            state.whitened, state.whitened_start, start)
        state.top, state.top_start = _drop_before(
            state.top, state.top_start, start // self.plan.step + self.plan.left)


def _append(values: np.ndarray | None, start: int, new: np.ndarray, new_start: int
            ) -> tuple[np.ndarray, int]:
    """``values`` (from stream position ``start``) followed by ``new`` (from ``new_start``,
    where ``values`` ends)."""
    if values is None or values.shape[1] == 0:
        return new, new_start
    if new.shape[1] == 0:
        return values, start
    if new_start != start + values.shape[1]:
        raise RuntimeError(f"stream values at {new_start} do not continue those ending at "
                           f"{start + values.shape[1]}")
    return np.concatenate([values, new], axis=1), start


def _drop_before(values: np.ndarray, start: int, first: int) -> tuple[np.ndarray, int]:
    """``values`` (from ``start``) without the positions before ``first``; never past their
    end, so that what comes next still continues them."""
    drop = min(max(0, first - start), values.shape[1])
    return values[:, drop:].copy(), start + drop


class _Stream:
    """One ``_advance``: the new stream values of each node, from its pending inputs."""

    def __init__(self, state: StreamState, runs: dict[str, Run], values: dict) -> None:
        self.state, self.runs = state, runs
        self.values = values
        """Node → (new values [C, m], stream position of the first; None: continues)."""

    def _take(self, key: str, source: str) -> tuple[np.ndarray, int]:
        """Node input ``key``'s pending values with ``source``'s new ones appended."""
        new, start = self.values[source]
        state = self.state
        if start is None:  # the raw input continues the stream by definition
            start = (state.pending_start[key] + state.pending[key].shape[1]
                     if key in state.pending else 0)
        values, first = _append(state.pending.get(key), state.pending_start.get(key, 0),
                                new, start)
        state.pending[key], state.pending_start[key] = values, first
        return values, first

    def _keep(self, key: str, first: int) -> None:
        """Drop node input ``key``'s values before stream position ``first``."""
        state = self.state
        state.pending[key], state.pending_start[key] = _drop_before(
            state.pending[key], state.pending_start[key], first)

    def run(self, node: Node) -> None:
        if node.conv is None:
            self._join(node)
            return
        conv = node.conv
        key = f"{node.name}:{node.inputs[0]}"
        pending, start = self._take(key, node.inputs[0])
        first = conv.first_output(start)
        end = conv.end_output(start + pending.shape[1])
        if end <= first:
            out = np.zeros((0, 0), np.float32)  # channels unknown until the first output
        else:
            lo = conv.stride * first - conv.padding - start
            hi = conv.stride * (end - 1) - conv.padding + conv.taps - start
            out = self.runs[node.name](np.ascontiguousarray(pending[None, :, lo:hi]))[0]
            self._keep(key, conv.stride * end - conv.padding)
        self.values[node.name] = (out, first)

    def _join(self, node: Node) -> None:
        """Both inputs' common positions, concatenated along channels, through the node's
        run; the rest kept for later."""
        keys = [f"{node.name}:{source}" for source in node.inputs]
        taken = [self._take(key, source) for key, source in zip(keys, node.inputs, strict=True)]
        first = max(start for _, start in taken)
        end = min(start + values.shape[1] for values, start in taken)
        if end <= first:
            self.values[node.name] = (np.zeros((0, 0), np.float32), first)
            return
        joined = np.concatenate([values[None, :, first - start : end - start]
                                 for values, start in taken], axis=1)
        self.values[node.name] = (self.runs[node.name](joined)[0], first)
        for key in keys:
            self._keep(key, end)


def open_streamed_network(directory: str | os.PathLike, intra_op_threads: int = 1
                          ) -> StreamedNetwork:
    """The network exported to ``directory`` (``streamed.json`` and its graphs), each graph
    an onnxruntime session on the CPU."""
    import onnxruntime

    with open(os.path.join(directory, MANIFEST)) as file:
        spec = json.load(file)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = intra_op_threads
    options.inter_op_num_threads = 1

    def run_of(name: str) -> Run:
        session = onnxruntime.InferenceSession(
            os.path.join(directory, f"{name}.onnx"), options,
            providers=["CPUExecutionProvider"])
        return lambda x: session.run(None, {"x": np.ascontiguousarray(x, np.float32)})[0]

    names = [WHITENING, EDGES, HEAD, *(node["name"] for node in spec["nodes"])]
    return StreamedNetwork.from_spec(spec, {name: run_of(name) for name in names})
