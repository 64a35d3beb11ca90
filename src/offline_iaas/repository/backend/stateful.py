"""Stateful steps of a stream, one state per sequence (Triton python backend).

This file is copied verbatim into the model repository as ``<model>/<version>/model.py`` of
every stateful model of the cpu flavor; the in-process reference imports ``SnapshotState`` and
``OnlineAverage`` from it, so the server and the reference run the same code. It depends on
numpy only (``triton_python_backend_utils`` exists only in the server's python stub).

``snapshot`` (parameter ``kind``)
    A request carries ``[1, channels, n * stride]`` new samples and yields ``[1, n, channels,
    kernel]``: the window after each stride of new samples.
``average``
    DeepClean's online averaging: ``[1, n, ifos, kernel]`` window predictions in, ``[1, ifos,
    n * stride]`` averaged samples out, ``kernel - stride`` samples behind the windows' ends.

State starts at zeros on START, is freed on END, and is dropped after ``idle_seconds`` without a
request (Triton does not tell a python model when it evicts an idle sequence).

Averaging: a stream's window ``j`` covers stream samples ``[(j + 1) S - K, (j + 1) S)``; with
``m = K / S`` (a whole number) every sample is covered by ``m`` windows. After window ``j`` the
oldest stride of that window is covered by no later window: it is emitted as the sum of its
``m`` predictions divided by ``m``. The first ``m - 1`` strides a stream emits lie before its
first sample; the averaged strides are clean (every window in them holds real data) from the
stream's window ``2 (m - 1)`` on — the campaign's ``warmup_windows`` in the DeepClean modes.
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
        n = samples.shape[-1] // self.stride_samples
        windows = np.empty((n, self.state.shape[0], self.kernel_samples), np.float32)
        self.windows_into(samples, windows)
        return windows

    def windows_into(self, samples: np.ndarray, out: np.ndarray) -> None:
        """``update``, writing the n windows into ``out`` [n, channels, kernel] (a caller's
        preallocated batch) instead of a new array."""
        n_samples = samples.shape[-1]
        if n_samples % self.stride_samples:
            raise ValueError(
                f"update of {n_samples} samples is not a multiple of the stride "
                f"({self.stride_samples} samples)"
            )
        full = np.concatenate([self.state, samples.astype(np.float32, copy=False)], axis=1)
        # window j ends after (j + 1) strides of new samples: full[:, (j+1)s : (j+1)s + kernel]
        views = np.lib.stride_tricks.sliding_window_view(full, self.kernel_samples, axis=1)
        np.copyto(out, views[:, self.stride_samples :: self.stride_samples].transpose(1, 0, 2))
        self.state = full[:, n_samples:].copy()



class OnlineAverage:
    """Averages a stream's overlapping window predictions as the windows arrive.

    Parameters
    ----------
    kernel_samples, stride_samples
        Window length ``K`` and stride ``S``; ``K`` must be a multiple of ``S`` and longer.
    channels
        Predictions per window (``[n, channels, K]`` in, ``[channels, n * S]`` out); ``None``
        for ``[n, K]`` in, ``[n * S]`` out.
    """

    def __init__(self, kernel_samples: int, stride_samples: int, channels: int | None = None):
        if kernel_samples % stride_samples or kernel_samples <= stride_samples:
            raise ValueError(
                f"online averaging needs a kernel ({kernel_samples}) that is a multiple of the "
                f"stride ({stride_samples}) and longer"
            )
        self.kernel_samples = kernel_samples
        self.stride_samples = stride_samples
        self.overlap = kernel_samples // stride_samples
        self.lead = () if channels is None else (channels,)
        # partial sums of the next m - 1 strides
        self.state = np.zeros((self.overlap - 1, *self.lead, stride_samples), dtype=np.float64)

    def update(self, predictions: np.ndarray) -> np.ndarray:
        """Add ``[n, (channels,) K]`` predictions; return the ``n * S`` samples now complete."""
        n, kernel, s, m = len(predictions), predictions.shape[-1], self.stride_samples, self.overlap
        if kernel != self.kernel_samples or predictions.shape[1:-1] != self.lead:
            raise ValueError(
                f"predictions of shape {predictions.shape[1:]}, expected "
                f"{(*self.lead, self.kernel_samples)} per window"
            )
        strides = predictions.reshape(n, *self.lead, m, s)
        total = np.zeros((n + m - 1, *self.lead, s))
        total[: m - 1] += self.state
        for offset in range(m):  # stride `offset` of window j lands on stride j + offset
            total[offset : offset + n] += strides[..., offset, :]
        self.state = total[n:].copy()
        done = total[:n] / m  # [n, (channels,) S]
        return np.moveaxis(done, 0, -2).reshape(*self.lead, n * s)


class TritonPythonModel:
    """Triton python-backend model around one stateful step, one state per correlation ID."""

    def initialize(self, args: dict) -> None:
        import json

        import triton_python_backend_utils as pb_utils

        self.pb = pb_utils
        config = json.loads(args["model_config"])
        params = {k: v["string_value"] for k, v in config["parameters"].items()}
        self.kind = params["kind"]
        self.input_name = config["input"][0]["name"]
        self.output_name = config["output"][0]["name"]
        self.channels = int(params["channels"])
        self.kernel_samples = int(params["kernel_samples"])
        self.stride_samples = int(params["stride_samples"])
        self.idle_seconds = float(params["idle_seconds"])
        self.streams: dict[int, tuple[SnapshotState | OnlineAverage, float]] = {}

    def _new_state(self) -> SnapshotState | OnlineAverage:
        if self.kind == "snapshot":
            return SnapshotState(self.channels, self.kernel_samples, self.stride_samples)
        return OnlineAverage(self.kernel_samples, self.stride_samples, self.channels)

    def _zeros(self, values: np.ndarray) -> np.ndarray:
        if self.kind == "snapshot":
            n_windows = values.shape[-1] // self.stride_samples
            return np.zeros((1, n_windows, self.channels, self.kernel_samples), np.float32)
        return np.zeros((1, self.channels, values.shape[0] * self.stride_samples), np.float32)

    def execute(self, requests: list) -> list:
        pb = self.pb
        now = time.monotonic()
        responses = []
        for request in requests:
            values = pb.get_input_tensor_by_name(request, self.input_name).as_numpy()[0]
            start = bool(pb.get_input_tensor_by_name(request, "START").as_numpy().ravel()[0])
            end = bool(pb.get_input_tensor_by_name(request, "END").as_numpy().ravel()[0])
            corrid = int(pb.get_input_tensor_by_name(request, "CORRID").as_numpy().ravel()[0])
            if corrid == 0:
                # Triton's direct batcher fills idle slots with null requests (CORRID 0); their
                # responses are discarded, so answer with zeros and touch no state.
                responses.append(self._response(self._zeros(values)))
                continue
            if start:
                stream = self._new_state()
            elif corrid in self.streams:
                stream = self.streams[corrid][0]
            else:
                message = (
                    f"sequence {corrid} has no {self.kind} state on this server (evicted or the "
                    "server restarted): send START again"
                )
                responses.append(pb.InferenceResponse(error=pb.TritonError(message)))
                continue
            try:
                result = stream.update(values)
            except ValueError as err:
                responses.append(pb.InferenceResponse(error=pb.TritonError(str(err))))
                continue
            if end:
                self.streams.pop(corrid, None)
            else:
                self.streams[corrid] = (stream, now)
            responses.append(self._response(result[None].astype(np.float32, copy=False)))
        self._expire(now)
        return responses

    def _response(self, values: np.ndarray):
        return self.pb.InferenceResponse([self.pb.Tensor(self.output_name, values)])

    def _expire(self, now: float) -> None:
        stale = [k for k, (_, seen) in self.streams.items() if now - seen > self.idle_seconds]
        for key in stale:
            del self.streams[key]
