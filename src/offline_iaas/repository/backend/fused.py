"""The served model of both flavors: a mode's whole chain in one stateful step per sequence.

Copied verbatim into the model repository as ``<model>/<version>/model.py``, beside
``stateful.py`` (whose ``ModeStream`` is the step) and the mode's network graphs
``<network>.onnx`` (with ``model.streamed``, also ``streamed_network.py`` and the network's
layers in ``<network>.streamed/``, run by the ``streamed`` stage). Parameters: ``stages``
(JSON, ``pipeline.Stage.to_dict`` of each stage), ``outputs`` (JSON), ``time_shifts``,
``kernel_samples``, ``stride_samples``, ``idle_seconds``,
``intra_op_threads`` and ``device``: ``cpu`` (the cpu flavor) or ``cuda`` (the gpu flavor: the
networks on the GPU Triton gave this instance, everything else as on the CPU).

A request carries ``[1, channels, n * stride]`` new samples of one sequence (with the rolling
whitening, a foreground's requests also ``psd_update [1, ifos, n * stride]``, an optional input:
the clean strain whose PSD whitens them) (``direct``
sequence batching, START/END/CORRID controls) and is answered with every output of the chain
(``statistic [1, n]``, ``noise [1, ifos, n * stride]``, with time slides ``background
[1, n * time_shifts]``) in one call: the windows, predictions
and averages never leave the process, where the ensemble (``export --ensemble``) copies them
from model to model through the server. One instance holds a sequence's whole state, so
several instances cannot reorder a sequence's steps (they can in the ensemble, whose averager
follows the network). Requests with ``CORRID = 0`` fill idle batch slots; they get zeros.

State is freed on END, and a sequence without a request for ``idle_seconds`` (a client that
went away) is dropped by a sweep every few seconds: Triton does not tell a python model when
it evicts an idle sequence. The number of sequences held is Triton's custom metric
``offline_iaas_live_sequences`` (one gauge per instance, on the server's metrics port); the
gauge and its family are released in ``finalize``. A fatal signal in the stub prints its
Python stacks to tritonserver's log (``faulthandler``). The stub keeps what numpy frees in
its heap (``stateful.keep_freed_memory``: up to 64 MiB beyond what it holds), where glibc's
default would fault a request's arrays in again at every request.
"""

from __future__ import annotations

import faulthandler
import importlib.util
import json
import os
import sys
import threading
import time

import numpy as np


def _load_beside(directory: str, name: str):
    """The module ``name`` from ``directory/name.py``, loaded by path: the stub puts the
    version directory on ``sys.path``, but a test also runs this file in its own process,
    where it is not."""
    spec = importlib.util.spec_from_file_location(name, os.path.join(directory, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


class TritonPythonModel:
    """One ``ModeStream`` per live sequence, the network sessions shared by all of them."""

    def initialize(self, args: dict) -> None:
        import triton_python_backend_utils as pb_utils

        # a fatal signal in the stub prints its stacks to tritonserver's log (else it dies
        # silently: Triton does not report a stub that dies while it unloads the model)
        faulthandler.enable()
        self.pb = pb_utils
        config = json.loads(args["model_config"])
        params = {k: v["string_value"] for k, v in config["parameters"].items()}
        self.stages = json.loads(params["stages"])
        self.outputs = json.loads(params["outputs"])
        self.kernel_samples = int(params["kernel_samples"])
        self.stride_samples = int(params["stride_samples"])
        self.idle_seconds = float(params["idle_seconds"])
        self.ifos = int(params["ifos"])
        self.time_shifts = int(params.get("time_shifts", "0"))
        version_dir = os.path.join(args["model_repository"], args["model_version"])
        self.stateful = _load_beside(version_dir, "stateful")
        self.stateful.keep_freed_memory()
        _load_beside(version_dir, "server_watch").leave_with_server(args.get("model_name", ""))
        device = params.get("device", "cpu")
        device_id = int(args.get("model_instance_device_id") or 0) if device == "cuda" else 0
        self.sessions = {
            stage["model"]: self.stateful.open_session(
                os.path.join(version_dir, f"{stage['model']}.onnx"), device, device_id,
                int(params.get("intra_op_threads", "1")))
            for stage in self.stages if stage["kind"] == "network"
        }
        streamed_networks = {stage["params"]["network"] for stage in self.stages
                             if stage["kind"] in ("streamed", "streamed_timeslide")}
        if streamed_networks:  # model.streamed
            layers = _load_beside(version_dir, "layer_stream")
            self.sessions.update({
                network: layers.open_streamed(
                    os.path.join(version_dir, network + layers.DIRECTORY_SUFFIX),
                    int(params.get("intra_op_threads", "1")), device, device_id)
                for network in streamed_networks})
        self.streams: dict[int, tuple[object, float]] = {}
        self.lock = threading.Lock()
        # the family must outlive its metric (Triton deletes the metric with it)
        self.live_family, self.live = _live_gauge(pb_utils, args)
        self.live_reported = -1
        self.stopped = threading.Event()
        self.sweeper = threading.Thread(target=self._sweep, daemon=True)
        self.sweeper.start()

    def _sweep(self) -> None:
        """Drop idle sequences even when no request comes (a client that went away)."""
        while not self.stopped.wait(min(5.0, self.idle_seconds / 2)):
            with self.lock:
                self.stateful.drop_idle(self.streams, time.monotonic(), self.idle_seconds)
                self._count()

    def _count(self) -> None:
        # only on a change: each ``set`` is a message to tritonserver (~0.05 ms of stub CPU)
        if self.live is None or len(self.streams) == self.live_reported:
            return
        try:
            self.live.set(len(self.streams))
            self.live_reported = len(self.streams)
        except Exception:  # a metric must never fail a request: stop reporting it
            self.live = None

    def finalize(self) -> None:
        self.stopped.set()
        self.sweeper.join(timeout=10)
        # Release the gauge and its family now, while the stub can still reach Triton: left to
        # the stub's own teardown, the family's destructor segfaults it at every server stop
        # (triton-inference-server/python_backend pull request 429).
        with self.lock:
            self.live = None
            self.live_family = None

    def _zeros(self, n_samples: int) -> dict:
        n = n_samples // self.stride_samples
        shapes = {"statistic": (1, n), "background": (1, n * self.time_shifts)}
        # the raw strain's search (e2e: statistic_raw, background_raw) has the same shapes
        return {name: np.zeros(shapes.get(name.removesuffix("_raw"), (1, self.ifos, n_samples)),
                               np.float32)
                for name in self.outputs}

    def execute(self, requests: list) -> list:
        with self.lock:
            responses = self._execute(requests)
            self._count()
        return responses

    def _execute(self, requests: list) -> list:
        pb = self.pb
        now = time.monotonic()
        responses = []
        for request in requests:
            samples = pb.get_input_tensor_by_name(request, "update").as_numpy()[0]
            start = bool(pb.get_input_tensor_by_name(request, "START").as_numpy().ravel()[0])
            end = bool(pb.get_input_tensor_by_name(request, "END").as_numpy().ravel()[0])
            corrid = int(pb.get_input_tensor_by_name(request, "CORRID").as_numpy().ravel()[0])
            if corrid == 0:  # an idle slot's null request: its response is discarded
                responses.append(self._response(self._zeros(samples.shape[-1])))
                continue
            psd = pb.get_input_tensor_by_name(request, self.stateful.PSD_UPDATE)
            result, error = self.stateful.sequence_step(
                self.streams, corrid, start, end, now, self._new_stream, samples, "stream",
                None if psd is None else psd.as_numpy()[0])
            if error is not None:
                responses.append(pb.InferenceResponse(error=pb.TritonError(error)))
                continue
            responses.append(self._response({k: v[None] for k, v in result.items()}))
        self.stateful.drop_idle(self.streams, now, self.idle_seconds)
        return responses

    def _new_stream(self):
        return self.stateful.ModeStream(self.stages, self.kernel_samples, self.stride_samples,
                                        self.outputs, self.sessions)

    def _response(self, values: dict):
        tensors = [self.pb.Tensor(name, np.ascontiguousarray(value, np.float32))
                   for name, value in values.items()]
        return self.pb.InferenceResponse(tensors)


def _live_gauge(pb_utils, args: dict) -> tuple:
    """This instance's metric family and gauge of the sequences it holds (Nones where the
    backend has no custom metrics)."""
    family_type = getattr(pb_utils, "MetricFamily", None)
    if family_type is None:
        return None, None
    family = family_type(name="offline_iaas_live_sequences",
                         description="sequences whose state the fused model holds",
                         kind=family_type.GAUGE)
    return family, family.Metric(labels={"model": args.get("model_name", ""),
                                         "instance": args.get("model_instance_name", "")})
