"""Fused snapshotter + network: one python-backend model, windows never leave the process.

Copied verbatim into the bench's model repository as ``fused/<version>/model.py`` beside
``model.onnx`` and the repository's ``stateful.py``, whose ``SnapshotState`` (and, when the
model averages, ``OnlineAverage``) it loads from that directory. Depends on numpy and
onnxruntime only.

With ``streaming = 1`` (the toy CNN) there are no windows at all: each sequence keeps a
``streaming_conv.ConvStream`` (loaded from ``streaming_conv.py`` beside this file, with the
graphs ``streaming.export_streaming_graphs`` wrote there), which runs every layer once on the
new samples and gives each window's output from the stream's features.

A request carries ``[1, channels, n * stride]`` new samples of one sequence (START/END/CORRID
controls, ``direct`` sequence batching) and yields the network's output for the ``n`` windows
that end after each stride: ``[1, n, *output_dims]``, or with ``average = 1`` (DeepClean)
the sequence's online average of those outputs, ``[1, c, n * stride]`` for outputs
``[c, kernel]`` per window. Each request's windows are written
straight into a preallocated batch (one copy per window sample) and run through onnxruntime
in one call of the client's batch size, as the limit does (requests of several sequences in
one ``execute`` are run one after the other: a batch of all of them is slower for a network
whose activations then leave the cache, as DeepClean's do); the ensemble instead sends every
window through the server to a second model (two more copies of ``n x channels x kernel``
floats per request).

Sequence state is per model instance: Triton's sequence batcher keeps a sequence on the
instance that holds its slot, so several instances may serve several sequences. Requests with
``CORRID = 0`` fill idle batch slots (Triton's direct batcher); they get zeros and no compute.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import time

import numpy as np


def _load_beside(directory: str, name: str):
    """The module ``name`` from ``directory/name.py`` (the stub's path does not include it)."""
    spec = importlib.util.spec_from_file_location(name, os.path.join(directory, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


class TritonPythonModel:
    """One onnxruntime session and one ``SnapshotState`` per live sequence, per instance."""

    def initialize(self, args: dict) -> None:
        import onnxruntime
        import triton_python_backend_utils as pb_utils

        self.pb = pb_utils
        config = json.loads(args["model_config"])
        params = {k: v["string_value"] for k, v in config["parameters"].items()}
        self.channels = int(params["channels"])
        self.kernel_samples = int(params["kernel_samples"])
        self.stride_samples = int(params["stride_samples"])
        self.idle_seconds = float(params["idle_seconds"])
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = int(params.get("intra_op_threads", "1"))
        options.inter_op_num_threads = 1
        version_dir = os.path.join(args["model_repository"], args["model_version"])

        def open_session(path: str):
            return onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])

        self.output_dims = [int(d) for d in json.loads(params["output_dims"])]
        self.response_name = config["output"][0]["name"]
        stateful = _load_beside(version_dir, "stateful")
        self.snapshot = stateful.SnapshotState
        self.average = stateful.OnlineAverage if params.get("average", "0") == "1" else None
        self.conv_stream = None
        if params.get("streaming", "0") == "1":  # the stream's graphs, not the window's
            streaming_conv = _load_beside(version_dir, "streaming_conv")
            graphs = streaming_conv.open_graphs(version_dir, open_session)

            def conv_stream():
                return streaming_conv.ConvStream(
                    *graphs, self.channels, self.kernel_samples, self.stride_samples
                )

            self.conv_stream = conv_stream
        else:
            self.session = open_session(os.path.join(version_dir, "model.onnx"))
            self.input_name = self.session.get_inputs()[0].name
            self.output_name = self.session.get_outputs()[0].name
        self.streams: dict[int, tuple[object, object, float]] = {}
        self.batch = np.zeros((0, self.channels, self.kernel_samples), np.float32)

    def execute(self, requests: list) -> list:
        pb = self.pb
        now = time.monotonic()
        responses = []
        for request in requests:
            samples = pb.get_input_tensor_by_name(request, "update").as_numpy()[0]
            start = bool(pb.get_input_tensor_by_name(request, "START").as_numpy().ravel()[0])
            end = bool(pb.get_input_tensor_by_name(request, "END").as_numpy().ravel()[0])
            corrid = int(pb.get_input_tensor_by_name(request, "CORRID").as_numpy().ravel()[0])
            n = samples.shape[-1] // self.stride_samples
            if corrid == 0:  # an idle slot's null request: its response is discarded
                shape = (
                    (1, self.output_dims[0], n * self.stride_samples) if self.average
                    else (1, n, *self.output_dims)
                )
                responses.append(self._response(np.zeros(shape, np.float32)))
                continue
            if samples.shape[-1] % self.stride_samples:
                message = (
                    f"update of {samples.shape[-1]} samples is not a multiple of the stride "
                    f"({self.stride_samples} samples)"
                )
                responses.append(pb.InferenceResponse(error=pb.TritonError(message)))
                continue
            if start and self.conv_stream is not None:
                stream, averager = self.conv_stream(), None
            elif start:
                stream = self.snapshot(self.channels, self.kernel_samples, self.stride_samples)
                averager = None if self.average is None else self.average(
                    self.kernel_samples, self.stride_samples, self.output_dims[0]
                )
            elif corrid in self.streams:
                stream, averager = self.streams[corrid][:2]
            else:
                message = f"sequence {corrid} has no state on this instance: send START again"
                responses.append(pb.InferenceResponse(error=pb.TritonError(message)))
                continue
            if self.conv_stream is not None:
                output = stream.update(samples)
            else:
                if self.batch.shape[0] < n:
                    self.batch = np.zeros((n, self.channels, self.kernel_samples), np.float32)
                stream.windows_into(samples, self.batch[:n])
                output = self.session.run(
                    [self.output_name], {self.input_name: self.batch[:n]}
                )[0]
            if averager is not None:
                output = averager.update(output).astype(np.float32)
            responses.append(self._response(output[None]))
            if end:
                self.streams.pop(corrid, None)
            else:
                self.streams[corrid] = (stream, averager, now)
        self._expire(now)
        return responses

    def _response(self, values: np.ndarray):
        return self.pb.InferenceResponse([self.pb.Tensor(self.response_name, values)])

    def _expire(self, now: float) -> None:
        stale = [k for k, (*_, seen) in self.streams.items() if now - seen > self.idle_seconds]
        for key in stale:
            del self.streams[key]
