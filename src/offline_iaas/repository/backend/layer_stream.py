"""Layers run once per stream sample: the geometry and bookkeeping shared by the streamed
networks (issue #42; numpy only).

``streamed_network.py`` (BBHnet's) and a mode package's runner (DeepClean's
``science/deepclean/backend/streamed_deepclean.py``) run a network's
windows on a stream: every layer runs without padding on the stream, once on what new samples
make computable, and each window recomputes only the ends its zero padding reaches
(docs/networks.md, "Streamed graphs"). This module holds what they share: each layer's
geometry (``Conv``, ``ConvTranspose``), the stream graph (``Node``), where a window's padding
reaches and the edge spans that reproduce it (``edge_plan``), and one update of the stream's
layers (``StreamStep``). Self-contained (numpy and the standard library), so the server's
python stub can load it by path beside its users (``load_beside``).

Positions: output ``q`` of a layer reads its input around ``stride * q - padding`` (a
convolution) or ``(q + padding) / stride`` (a transposed convolution), on the stream as in a
window, so a window's position ``q`` of a layer with cumulative stride ``P_l`` is the stream's
``a / P_l + q`` (``a`` the window's first sample, a multiple of every ``P_l``).
"""

from __future__ import annotations

import importlib.util
import math
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

Run = Callable[[np.ndarray], np.ndarray]
"""One exported graph: a float32 array in, a float32 array out."""

STREAM_SPEC = "streamed.json"
"""The stream spec of a directory of streamed graphs: its runner, geometry and layers
(``repository/stream_layers.write_stream_spec`` writes it; not the repository's manifest)."""
DIRECTORY_SUFFIX = ".streamed"
"""A fused model's version holds network ``<name>``'s streamed graphs in ``<name>.streamed/``
(beside the whole-window ``<name>.onnx``), described by ``streamed.json``."""


@dataclass(frozen=True)
class Conv:
    """One ``Conv1d``'s geometry: output ``q`` reads input ``stride * q - padding + [0, taps)``.

    ``macs_per_output``: multiply-accumulates per output position (all output channels).
    Its stream run is the layer without padding: inputs ``[lo, hi)`` → outputs
    ``[first_output(lo), end_output(hi))``.
    """

    taps: int
    stride: int
    padding: int
    macs_per_output: int = 0

    @property
    def scale(self) -> Fraction:
        """Input samples per output sample."""
        return Fraction(self.stride)

    def output_length(self, input_length: int) -> int:
        """Outputs of the padded layer on ``input_length`` inputs (torch's formula)."""
        return (input_length + 2 * self.padding - self.taps) // self.stride + 1

    def first_output(self, input_start: int) -> int:
        """First stream output whose inputs all lie at or after ``input_start`` (no padding)."""
        return math.ceil((input_start + self.padding) / self.stride)

    def end_output(self, input_end: int) -> int:
        """One past the last stream output whose inputs all lie before ``input_end``."""
        return (input_end + self.padding - self.taps) // self.stride + 1

    def first_input(self, output: int) -> int:
        """The first input that stream output ``output`` reads."""
        return self.stride * output - self.padding

    def end_input(self, output_end: int) -> int:
        """One past the last input that the outputs before ``output_end`` read."""
        return self.stride * (output_end - 1) - self.padding + self.taps

    def reach(self, length: int, left: int, right: int) -> tuple[int, int, int]:
        """The padded layer on ``length`` inputs whose first ``left`` and last ``right``
        differ from the stream's: its output length, and how many outputs differ at each end
        (those reading padding or a differing input)."""
        out = self.output_length(length)
        first_clean = self.first_output(left)
        end_clean = self.end_output(length - right)
        return out, min(out, first_clean), max(0, min(out, out - end_clean))

    def spec(self) -> list:
        """The geometry as JSON (``layer_of`` reads it)."""
        return ["conv", self.taps, self.stride, self.padding]


@dataclass(frozen=True)
class ConvTranspose:
    """One ``ConvTranspose1d``'s geometry: output ``q`` sums ``w[t] x[i]`` over
    ``stride * i - padding + t = q``, so it reads inputs
    ``[ceil((q + padding - taps + 1) / stride), floor((q + padding) / stride)]``.

    Its stream run is the layer with padding 0 on inputs ``[lo, hi)``, cropped to the outputs
    ``[first_output(lo), end_output(hi))``: ``stride * (hi - lo - (taps - 1) // stride)`` of
    them (it drops the first complete outputs of a parity the previous run already gave, so
    that consecutive runs continue each other).
    """

    taps: int
    stride: int
    padding: int
    output_padding: int = 0
    macs_per_output: int = 0

    @property
    def scale(self) -> Fraction:
        return Fraction(1, self.stride)

    @property
    def crop(self) -> tuple[int, int]:
        """Outputs the unpadded torch layer gives beyond the stream run's, at each end."""
        return self.stride * ((self.taps - 1) // self.stride), self.taps - self.stride

    def output_length(self, input_length: int) -> int:
        return ((input_length - 1) * self.stride - 2 * self.padding + self.taps
                + self.output_padding)

    def first_output(self, input_start: int) -> int:
        return self.stride * (input_start + (self.taps - 1) // self.stride) - self.padding

    def end_output(self, input_end: int) -> int:
        return self.stride * input_end - self.padding

    def first_input(self, output: int) -> int:
        """The first input of the run that begins at ``output`` (``first_output``'s inverse)."""
        return (output + self.padding) // self.stride - (self.taps - 1) // self.stride

    def end_input(self, output_end: int) -> int:
        return (output_end + self.padding) // self.stride

    def reach(self, length: int, left: int, right: int) -> tuple[int, int, int]:
        out = self.output_length(length)
        # first output reading no input before ``left``; one past the last reading none
        # from ``length - right`` on
        first_clean = self.stride * left - self.stride + self.taps - self.padding
        end_clean = self.stride * (length - right) - self.padding
        return out, min(out, max(0, first_clean)), max(0, min(out, out - end_clean))

    def spec(self) -> list:
        return ["transposed", self.taps, self.stride, self.padding, self.output_padding]


Layer = Conv | ConvTranspose


def layer_of(spec: list) -> Layer:
    """The layer ``Conv.spec``/``ConvTranspose.spec`` wrote (a bare ``[taps, stride,
    padding]`` is a ``Conv``)."""
    if spec and spec[0] == "transposed":
        return ConvTranspose(*spec[1:])
    return Conv(*(spec[1:] if spec and spec[0] == "conv" else spec))


@dataclass(frozen=True)
class Node:
    """One step of the stream graph: a layer (+ pointwise ops) or a join.

    ``inputs`` names earlier nodes (the first node's input is the stream: ``"whitened"``,
    ``"raw"``); a join has two inputs and no ``conv``, and its run takes them concatenated
    along channels.
    """

    name: str
    inputs: tuple[str, ...]
    conv: Layer | None


def _reach(nodes: list[Node], length: int) -> tuple[int, int, int]:
    """Last-layer length of a padded run on ``length`` input samples, and how many of its
    positions the padding reaches at each end."""
    geometry = {nodes[0].inputs[0]: (length, 0, 0)}
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


def strides(nodes: list[Node]) -> dict[str, Fraction]:
    """Each node's cumulative stride in input samples (a transposed layer divides it)."""
    result = {nodes[0].inputs[0]: Fraction(1)}
    for node in nodes:
        scale = 1 if node.conv is None else node.conv.scale
        result[node.name] = result[node.inputs[0]] * scale
    return result


def phases_of(stride_samples: int, step: int) -> int:
    """How many phases of a cumulative stride ``step`` windows ``stride_samples`` apart fall
    on: 1 where the stride is a multiple of it (``streamed_network.PhasedNetwork``,
    ``streamed_deepclean.PhasedDeepClean`` stream each phase at stride ``phases * S``)."""
    return step // math.gcd(stride_samples, step)


def windows_ended(samples: np.ndarray, stride_samples: int, rows: str = "ifos") -> int:
    """How many windows an update of ``samples`` [``rows``, n S] ends; ValueError for another
    shape."""
    if samples.ndim != 2 or samples.shape[1] % stride_samples:
        raise ValueError(f"update of shape {samples.shape}: need [{rows}, n * {stride_samples}]")
    return samples.shape[1] // stride_samples


def interleave_phases(network, states: list, queued: list[np.ndarray], windows: int,
                      samples: np.ndarray, stride: int, out: np.ndarray) -> None:
    """One update of a stream whose windows fall on ``len(states)`` phases (``phases_of``):
    phase ``r`` is ``network`` (a runner of stride ``phases * stride``) on the stream
    delayed by its ``queued`` samples (``(phases - 1 - r) * stride`` at the start), so its
    windows are the stream's ``r, r + phases, ...``. Feeds each phase ``samples`` (after what
    it had queued; the rest stays queued) and writes its windows into ``out`` (the update's
    ``len(out)`` windows, the stream's first being window ``windows``); ``states`` and
    ``queued`` are updated in place."""
    phases = len(states)
    block = phases * stride
    filled = np.zeros(len(out), bool)
    for r, state in enumerate(states):
        pending = np.concatenate([queued[r], samples], axis=1)
        whole = pending.shape[1] // block * block
        before = state.windows
        values = network.update(state, pending[:, :whole])
        queued[r] = pending[:, whole:].copy()
        index = r + phases * np.arange(before, state.windows) - windows
        out[index], filled[index] = values, True
    if not filled.all():
        raise RuntimeError("the phases did not give every window of the update")


def phase_arrays(states: list, queued: list[np.ndarray]) -> dict[str, np.ndarray]:
    """The phases' states and queues as named arrays (``phase<r>/...``, ``queued/<r>``)."""
    arrays = {}
    for r, (state, waiting) in enumerate(zip(states, queued, strict=True)):
        arrays[f"queued/{r}"] = waiting
        arrays.update({f"phase{r}/{k}": v for k, v in state.to_arrays().items()})
    return arrays


def phases_from_arrays(arrays, from_arrays) -> tuple[list, list[np.ndarray]]:
    """The phases' states (each by ``from_arrays``) and queues ``phase_arrays`` wrote."""
    count = sum(1 for name in arrays if name.startswith("queued/"))
    states = [from_arrays({name.removeprefix(f"phase{r}/"): arrays[name] for name in arrays
                           if name.startswith(f"phase{r}/")}) for r in range(count)]
    return states, [np.array(arrays[f"queued/{r}"]) for r in range(count)]


def cumulative_stride(nodes: list[Node]) -> int:
    """The alignment ``P``: the least input stride on which every layer's grid falls (the
    last layer's stride for a downsampling network, the bottleneck's for an encoder-decoder)."""
    return math.lcm(*(stride.numerator for stride in strides(nodes).values()))


@dataclass(frozen=True)
class EdgePlan:
    """Where a window's last layer differs from the stream's, and the spans that give it.

    ``left``/``right``: last-layer positions at each end that the padding reaches;
    ``top_length``: last-layer positions of a window (``L_K``); ``edge_samples``: length of
    the input edge spans (``E``; ``input_samples - E`` is a multiple of ``step``);
    ``step``: the alignment ``P``; ``top_stride``: the last layer's stride in input samples.
    """

    left: int
    right: int
    top_length: int
    edge_samples: int
    step: int
    input_samples: int
    top_stride: int


def edge_plan(nodes: list[Node], input_samples: int) -> EdgePlan:
    """The ``EdgePlan`` of windows of ``input_samples``; ValueError if none (all edge)."""
    step = cumulative_stride(nodes)
    top_stride = strides(nodes)[nodes[-1].name]
    if top_stride.denominator != 1:
        raise ValueError(f"the last layer is finer than the input (stride {top_stride})")
    top_length, left, right = _reach(nodes, input_samples)
    if left + right >= top_length:
        raise ValueError(f"a window of {input_samples} samples is all edge: its last layer "
                         f"has {top_length} positions, {left} + {right} reached by the padding")
    for edge in range(input_samples % step or step, input_samples + 1, step):
        edge_top, edge_left, edge_right = _reach(nodes, edge)
        offset = (input_samples - edge) // top_stride.numerator
        if edge_top + offset != top_length:
            continue
        # the left edge must lie clear of the span's right padding, the right edge clear
        # of its left padding
        if edge_top - edge_right >= left and top_length - right - offset >= edge_left:
            return EdgePlan(left, right, top_length, edge, step, input_samples,
                            top_stride.numerator)
    raise ValueError("no edge span reproduces the window's padded edges")


def append_values(values: np.ndarray | None, start: int, new: np.ndarray, new_start: int
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


def drop_before(values: np.ndarray, start: int, first: int) -> tuple[np.ndarray, int]:
    """``values`` (from ``start``) without the positions before ``first``; never past their
    end, so that what comes next still continues them."""
    drop = min(max(0, first - start), values.shape[1])
    return values[:, drop:].copy(), start + drop


def pending_arrays(pending: dict[str, np.ndarray], pending_start: dict[str, int],
                   prefix: str = "") -> dict[str, np.ndarray]:
    """A stream's pending node inputs as named arrays (``pending_of`` reads them back)."""
    arrays = {}
    for key, values in pending.items():
        arrays[f"{prefix}pending/{key}"] = values
        arrays[f"{prefix}pending_start/{key}"] = np.array(pending_start[key])
    return arrays


def pending_of(arrays, prefix: str = "") -> tuple[dict[str, np.ndarray], dict[str, int]]:
    """The pending node inputs ``pending_arrays`` wrote (a dict or an ``NpzFile``)."""
    pending, pending_start = {}, {}
    for name in arrays:
        if name.startswith(f"{prefix}pending/"):
            key = name.removeprefix(f"{prefix}pending/")
            pending[key] = np.array(arrays[name])
            pending_start[key] = int(arrays[f"{prefix}pending_start/{key}"])
    return pending, pending_start


class StreamStep:
    """One update of a stream's layers: the new stream values of each node, from its pending
    inputs (``state.pending``/``state.pending_start``: node input ``"<node>:<input>"`` → its
    stream values not yet consumed, and the position of the first; updated in place).

    ``values``: the stream's input → (new samples, None: they continue the stream).
    """

    def __init__(self, state, runs: dict[str, Run], values: dict) -> None:
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
        values, first = append_values(state.pending.get(key), state.pending_start.get(key, 0),
                                      new, start)
        state.pending[key], state.pending_start[key] = values, first
        return values, first

    def _keep(self, key: str, first: int) -> None:
        """Drop node input ``key``'s values before stream position ``first``."""
        state = self.state
        state.pending[key], state.pending_start[key] = drop_before(
            state.pending[key], state.pending_start[key], first)

    def run(self, node: Node) -> None:
        """The node's new stream values (``values[node.name]``) from what is now computable."""
        if node.conv is None:
            self._join(node)
            return
        layer = node.conv
        key = f"{node.name}:{node.inputs[0]}"
        pending, start = self._take(key, node.inputs[0])
        first = layer.first_output(start)
        end = layer.end_output(start + pending.shape[1])
        if end <= first:
            out = np.zeros((0, 0), np.float32)  # channels unknown until the first output
        else:
            lo, hi = layer.first_input(first) - start, layer.end_input(end) - start
            out = self.runs[node.name](np.ascontiguousarray(pending[None, :, lo:hi]))[0]
            if out.shape[1] != end - first:
                raise RuntimeError(f"{node.name}: {out.shape[1]} outputs, expected {end - first}")
            self._keep(key, layer.first_input(end))
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


def onnx_runs(directory: str | os.PathLike, names: list[str], intra_op_threads: int = 1,
              device: str = "cpu", device_id: int = 0) -> dict[str, Run]:
    """Each ``<name>.onnx`` of ``directory`` as an onnxruntime session on ``device`` (input
    ``x``, output ``y``), opened as the fused model opens its graphs
    (``stateful.open_session``: on ``cuda`` the CUDA provider first, none is an error)."""
    stateful = _sibling("stateful")

    def run_of(name: str) -> Run:
        session = stateful.open_session(os.path.join(directory, f"{name}.onnx"), device,
                                        device_id, intra_op_threads)
        return lambda x: session.run(None, {"x": np.ascontiguousarray(x, np.float32)})[0]

    return {name: run_of(name) for name in names}


def _sibling(name: str):
    """The module ``name`` of this folder: a package import, or in the stub (which loads
    these files by path) the file beside this one."""
    import importlib

    if __package__:
        return importlib.import_module(f"{__package__}.{name}")
    return load_beside(__file__, name)


def load_beside(path: str, name: str):
    """Module ``name`` from the file ``name.py`` beside ``path``, loaded by path (the stub
    loads this folder's files so, outside any package); one module per file."""
    file = os.path.join(os.path.dirname(os.path.abspath(path)), f"{name}.py")
    loaded = sys.modules.get(name)
    if loaded is not None and getattr(loaded, "__file__", None) == file:
        return loaded
    spec = importlib.util.spec_from_file_location(name, file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


CORE_RUNNERS = ("streamed_network",)
"""This folder's runner of streamed graphs (a residual stack up to a global pool). A mode
package brings its own (``mode_packages.StreamedExport.runner``: DeepClean's encoder-decoder
with an online average), which ``export`` copies beside this file in the fused model.
``streamed.json``'s ``runner`` names the module (the exporter's ``spec``), whose
``open_<runner>`` opens the graphs."""


def runner_modules() -> dict[str, str]:
    """In the package: each runner's module name → its dotted name (this folder's, then the
    built-in mode packages', ``mode_packages.streamed_runners``)."""
    from offline_iaas.mode_packages import streamed_runners

    return {**{name: f"{__package__}.{name}" for name in CORE_RUNNERS}, **streamed_runners()}


def open_streamed(directory: str | os.PathLike, intra_op_threads: int = 1,
                  device: str = "cpu", device_id: int = 0):
    """The runner of the streamed graphs exported to ``directory``, on onnxruntime on
    ``device``: the module its stream spec's ``runner`` names, opened by its ``open_<runner>``;
    in the package one of ``runner_modules``, in the stub the file of that name beside this
    one (``load_beside``). ValueError naming the stream spec for another."""
    import json

    path = os.path.join(directory, STREAM_SPEC)
    with open(path) as file:
        runner = json.load(file).get("runner")
    if __package__:
        known = runner_modules()
        if runner not in known:
            raise ValueError(f"{path}: runner {runner!r} is none of {', '.join(known)}: "
                             "written by another version of offline-iaas? export the "
                             "repository again")
        module = importlib.import_module(known[runner])
    else:
        here = os.path.dirname(os.path.abspath(__file__))
        if not (isinstance(runner, str) and runner.isidentifier()
                and os.path.isfile(os.path.join(here, f"{runner}.py"))):
            raise ValueError(f"{path}: runner {runner!r} has no module beside {__file__}: "
                             "export the repository again")
        module = load_beside(__file__, runner)
    return getattr(module, f"open_{runner}")(directory, intra_op_threads, device, device_id)
