"""A strided 1-D convolution stack evaluated on a stream instead of window by window.

For networks made of ``Conv1d(taps, stride, padding)`` + ReLU layers, a mean over time and a
head (the bench's toy CNN). Windows that advance by a multiple of the product of the strides
``P`` share every feature value except near their two ends, where a window's zero padding
stands in for the stream's neighbouring samples. ``ConvStream`` therefore

- computes each layer once per stream, on the new samples only (a valid convolution on the
  stream: the layer's output ``q`` reads its input ``stride * q - padding + [0, taps)``);
- recomputes the few final-layer positions at each end of every window from a short edge
  segment of the window run through the padded stack (``EdgePlan``);
- sums a window's final layer as left edge + stream interior + right edge, divides by its
  length (the network's mean) and runs the head.

Copied beside the fused model's ``model.py`` (it depends on numpy only; the graphs come in
as callables, their sessions from the caller), and imported in-process by the limit and the
tests.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

Run = Callable[[np.ndarray], np.ndarray]
"""A graph: one float32 array in, one out."""


@dataclass(frozen=True)
class ConvLayer:
    """One ``Conv1d`` of the stack (followed by its ReLU)."""

    taps: int
    stride: int
    padding: int

    def output_length(self, input_length: int) -> int:
        return (input_length + 2 * self.padding - self.taps) // self.stride + 1


@dataclass(frozen=True)
class EdgePlan:
    """Where a window's final layer differs from the stream's, and how to recompute it.

    Parameters
    ----------
    left, right
        Final-layer positions at the window's start and end that its zero padding reaches.
    edge_samples
        Length of the edge segments (a window's first and last samples) whose padded run
        gives those positions exactly.
    top_length
        Final-layer positions of a whole window.
    step
        Product of the strides: windows must start ``step`` samples apart (or a multiple).
    """

    left: int
    right: int
    edge_samples: int
    top_length: int
    step: int


def _padded_reach(layers: Sequence[ConvLayer], length: int) -> tuple[int, int, int]:
    """Final length, and how many final positions the padding reaches at each end."""
    left = right = 0
    for layer in layers:
        out = layer.output_length(length)
        left = math.ceil((left + layer.padding) / layer.stride)
        first_right = math.ceil((length - right - layer.taps + 1 + layer.padding) / layer.stride)
        right = max(0, out - first_right)
        length = out
    return length, left, right


def edge_plan(layers: Sequence[ConvLayer], kernel_samples: int) -> EdgePlan:
    """The ``EdgePlan`` of windows of ``kernel_samples``; ValueError if the stack cannot stream.

    A stack streams when every layer's taps cover its stride, the window is a multiple of
    the strides' product, the edges do not overlap, and a window's final layer lines up with
    the final layer of any shorter segment ending where it ends.
    """
    step = math.prod(layer.stride for layer in layers)
    if any(layer.taps < layer.stride for layer in layers) or kernel_samples % step:
        raise ValueError(
            f"cannot stream this stack over {kernel_samples}-sample windows "
            f"(strides' product {step}, taps must cover the stride)"
        )
    top_length, left, right = _padded_reach(layers, kernel_samples)
    if left + right > top_length:
        raise ValueError("the window is too short: its two padded edges overlap")
    for edge_samples in range(step, kernel_samples + 1, step):
        edge_top, edge_left, edge_right = _padded_reach(layers, edge_samples)
        aligned = top_length - edge_top == (kernel_samples - edge_samples) // step
        # the left edge must lie clear of the segment's own right padding, and the right
        # edge clear of its left padding
        if aligned and edge_top - edge_right >= left and edge_top - right >= edge_left:
            return EdgePlan(left, right, edge_samples, top_length, step)
    raise ValueError("no edge segment reproduces the window's padded edges")


class ConvStream:
    """The stack's state on one stream, and the outputs of the windows each update ends.

    Parameters
    ----------
    layers
        The stack's convolutions.
    run_layers
        Per layer, the graph of its valid (unpadded) convolution + ReLU, ``[1, C, n]`` in.
    run_edges
        The padded stack on a batch of segments ``[b, C, edge_samples]`` → final layer.
    run_head
        The head on the pooled features ``[n, C_final]`` → one output row per window.
    channels, kernel_samples, stride_samples
        The stream's channels, window and stride (a multiple of the strides' product).

    The stream starts with ``kernel_samples`` zeros, as the snapshotter's state does, so the
    first update's first window is zeros followed by one stride of samples.
    """

    def __init__(
        self, layers: Sequence[ConvLayer], run_layers: Sequence[Run], run_edges: Run,
        run_head: Run, channels: int, kernel_samples: int, stride_samples: int,
    ) -> None:
        self.layers = list(layers)
        self.plan = edge_plan(self.layers, kernel_samples)
        if stride_samples % self.plan.step:
            raise ValueError(
                f"stride of {stride_samples} samples is not a multiple of {self.plan.step}"
            )
        self.run_layers, self.run_edges, self.run_head = list(run_layers), run_edges, run_head
        self.kernel_samples, self.stride_samples = kernel_samples, stride_samples
        self.recent = np.zeros((channels, kernel_samples), np.float32)
        self.recent_start = 0  # stream index of recent[:, 0]
        # per layer: its inputs not yet consumed, from stream index pending_start; before the
        # stream, `padding` zeros (positions they reach are never inside a window's interior)
        self.pending: list[np.ndarray | None] = [None] * len(self.layers)
        self.pending_start = [-layer.padding for layer in self.layers]
        self.next_output = [0] * len(self.layers)
        self.top = np.zeros((0, 0), np.float32)
        self.top_start = 0
        self._advance(self.recent)

    def _advance(self, samples: np.ndarray) -> None:
        """Run every layer on what ``samples`` newly makes computable."""
        new = samples
        for index, layer in enumerate(self.layers):
            pending = self.pending[index]
            if pending is None:
                pending = np.zeros((new.shape[0], layer.padding), np.float32)
            pending = np.concatenate([pending, new], axis=1)
            start = self.pending_start[index]
            end = start + pending.shape[1]
            first = self.next_output[index]
            last = (end - layer.taps + layer.padding) // layer.stride
            if last < first:
                self.pending[index] = pending
                return
            lo = layer.stride * first - layer.padding - start
            hi = layer.stride * last - layer.padding + layer.taps - start
            new = self.run_layers[index](pending[None, :, lo:hi])[0]
            keep = layer.stride * (last + 1) - layer.padding - start
            self.pending[index] = pending[:, keep:]
            self.pending_start[index] = start + keep
            self.next_output[index] = last + 1
        self.top = new if self.top.shape[1] == 0 else np.concatenate([self.top, new], axis=1)

    def update(self, samples: np.ndarray) -> np.ndarray:
        """Append ``samples`` [channels, n * stride]; the head's output for the n windows.

        Window ``j`` ends after ``j + 1`` strides of ``samples``.
        """
        plan, stride, kernel = self.plan, self.stride_samples, self.kernel_samples
        n = samples.shape[1] // stride
        full = np.concatenate([self.recent, samples], axis=1)
        self._advance(samples)
        starts = self.recent_start + stride * np.arange(1, n + 1)  # stream index per window
        offsets = starts - self.recent_start
        sums = np.zeros((n, self.top.shape[0]))
        if plan.left or plan.right:  # an unpadded stack has no edges to recompute
            edge = plan.edge_samples
            segments = np.lib.stride_tricks.sliding_window_view(full, edge, axis=1)
            batch = np.concatenate([
                segments[:, offsets], segments[:, offsets + kernel - edge]
            ], axis=1).transpose(1, 0, 2)
            edges = self.run_edges(np.ascontiguousarray(batch))
            sums += edges[:n, :, : plan.left].sum(axis=2, dtype=np.float64)
            sums += edges[n:, :, edges.shape[2] - plan.right :].sum(axis=2, dtype=np.float64)
        interior = plan.top_length - plan.left - plan.right
        first = starts // plan.step + plan.left - self.top_start
        if first[0] < 0 or first[-1] + interior > self.top.shape[1]:
            raise RuntimeError("the stream's final layer does not cover the windows")
        cumulative = np.zeros((self.top.shape[0], self.top.shape[1] + 1))
        np.cumsum(self.top, axis=1, dtype=np.float64, out=cumulative[:, 1:])
        sums += (cumulative[:, first + interior] - cumulative[:, first]).T
        pooled = (sums / plan.top_length).astype(np.float32)
        # the next update's first window starts one stride after this update's last
        drop = (starts[-1] + stride) // plan.step + plan.left - self.top_start
        self.top = self.top[:, drop:]
        self.top_start += drop
        self.recent = full[:, n * stride :]
        self.recent_start += n * stride
        return self.run_head(pooled)


LAYERS_FILE = "conv_layers.json"
EDGES_FILE = "edges.onnx"
HEAD_FILE = "head.onnx"


def layer_file(index: int) -> str:
    """File name of layer ``index``'s valid convolution graph."""
    return f"conv{index}.onnx"


def open_graphs(
    directory: str, open_session: Callable[[str], object]
) -> tuple[list[ConvLayer], list[Run], Run, Run]:
    """The stack's layers and graphs (``export_streaming_graphs``' files) as runs.

    ``open_session`` gives an onnxruntime session for a graph's path, set up as the caller's
    other sessions. Returns ``(layers, run_layers, run_edges, run_head)`` for ``ConvStream``;
    the sessions are shared by every stream that uses them.
    """
    import json
    import os

    def run(name: str) -> Run:
        session = open_session(os.path.join(directory, name))
        input_name = session.get_inputs()[0].name
        return lambda values: session.run(None, {input_name: values})[0]

    with open(os.path.join(directory, LAYERS_FILE)) as handle:
        layers = [ConvLayer(**layer) for layer in json.load(handle)]
    run_layers = [run(layer_file(index)) for index in range(len(layers))]
    return layers, run_layers, run(EDGES_FILE), run(HEAD_FILE)
