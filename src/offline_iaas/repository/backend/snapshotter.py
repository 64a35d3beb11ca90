"""Snapshotter: keeps the latest kernel of every channel per sequence (Triton python backend).

This file is copied verbatim into the model repository as ``snapshotter/<version>/model.py``;
the in-process reference imports ``SnapshotState`` from it, so the server and the reference run
the same code. It depends on numpy only (``triton_python_backend_utils`` is imported inside the
Triton model, which exists only in the server's python stub).

A request carries ``[1, channels, n * stride]`` new samples and yields ``[1, n, channels,
kernel]``: the window after each stride of new samples. State starts at zeros on START, is freed
on END, and is dropped after ``idle_seconds`` without a request (Triton does not tell a python
model when it evicts an idle sequence).
"""

from __future__ import annotations

import time

import numpy as np


class SnapshotState:
    """The latest ``kernel_samples`` of each channel of one stream.

    Parameters
    ----------
    channels, kernel_samples, stride_samples
        Shape of the state and of the updates.
    """

    def __init__(self, channels: int, kernel_samples: int, stride_samples: int) -> None:
        self.kernel_samples = kernel_samples
        self.stride_samples = stride_samples
        self.state = np.zeros((channels, kernel_samples), dtype=np.float32)

    def update(self, samples: np.ndarray) -> np.ndarray:
        """Append ``samples`` [channels, n * stride]; return the n windows [n, channels, kernel]."""
        n_samples = samples.shape[-1]
        if n_samples % self.stride_samples:
            raise ValueError(
                f"update of {n_samples} samples is not a multiple of the stride "
                f"({self.stride_samples} samples)"
            )
        full = np.concatenate([self.state, samples.astype(np.float32, copy=False)], axis=1)
        # window j ends after (j + 1) strides of new samples: full[:, (j+1)s : (j+1)s + kernel]
        views = np.lib.stride_tricks.sliding_window_view(full, self.kernel_samples, axis=1)
        windows = views[:, self.stride_samples :: self.stride_samples]
        self.state = full[:, n_samples:].copy()
        return np.ascontiguousarray(windows.transpose(1, 0, 2))


class TritonPythonModel:
    """Triton python-backend model around ``SnapshotState``, one state per correlation ID."""

    def initialize(self, args: dict) -> None:
        import json

        import triton_python_backend_utils as pb_utils

        self.pb = pb_utils
        params = {
            k: v["string_value"]
            for k, v in json.loads(args["model_config"])["parameters"].items()
        }
        self.channels = int(params["channels"])
        self.kernel_samples = int(params["kernel_samples"])
        self.stride_samples = int(params["stride_samples"])
        self.idle_seconds = float(params["idle_seconds"])
        self.streams: dict[int, tuple[SnapshotState, float]] = {}

    def execute(self, requests: list) -> list:
        pb = self.pb
        now = time.monotonic()
        responses = []
        for request in requests:
            samples = pb.get_input_tensor_by_name(request, "update").as_numpy()[0]
            start = bool(pb.get_input_tensor_by_name(request, "START").as_numpy().ravel()[0])
            end = bool(pb.get_input_tensor_by_name(request, "END").as_numpy().ravel()[0])
            corrid = int(pb.get_input_tensor_by_name(request, "CORRID").as_numpy().ravel()[0])
            n_windows = samples.shape[-1] // self.stride_samples
            if corrid == 0:
                # Triton's direct batcher fills idle slots with null requests (CORRID 0); their
                # responses are discarded, so answer with zeros and touch no state.
                shape = (1, n_windows, self.channels, self.kernel_samples)
                responses.append(self._response(np.zeros(shape, np.float32)))
                continue
            if start:
                stream = SnapshotState(self.channels, self.kernel_samples, self.stride_samples)
            elif corrid in self.streams:
                stream = self.streams[corrid][0]
            else:
                message = (
                    f"sequence {corrid} has no snapshot state on this server (evicted or the "
                    "server restarted): send START again"
                )
                responses.append(pb.InferenceResponse(error=pb.TritonError(message)))
                continue
            try:
                windows = stream.update(samples)
            except ValueError as err:
                responses.append(pb.InferenceResponse(error=pb.TritonError(str(err))))
                continue
            if end:
                self.streams.pop(corrid, None)
            else:
                self.streams[corrid] = (stream, now)
            responses.append(self._response(windows[None]))
        self._expire(now)
        return responses

    def _response(self, windows: np.ndarray):
        return self.pb.InferenceResponse([self.pb.Tensor("windows", windows)])

    def _expire(self, now: float) -> None:
        stale = [k for k, (_, seen) in self.streams.items() if now - seen > self.idle_seconds]
        for key in stale:
            del self.streams[key]
