"""The naive baseline: the same server and network, each request carrying whole windows.

What a first as-a-service attempt does: the client cuts its data into windows itself and
sends ``[1, n, channels, kernel]`` to the network model (no snapshotter, no sequence), so
every sample crosses the wire ``kernel / stride`` times. Batch size, clients and in-flight
depth are the service's. An averaging workload's per-window outputs come back whole and the
client averages them itself, in request order (responses of two instances may overtake each
other).
"""

from __future__ import annotations

import queue

import numpy as np

from offline_iaas.bench.clients import ClientJob, take_response
from offline_iaas.bench.repository import NETWORK
from offline_iaas.bench.results import Measurement
from offline_iaas.bench.server import BenchServer
from offline_iaas.bench.service import measure_streams
from offline_iaas.bench.workloads import INPUT_NAME, Workload
from offline_iaas.repository.backend.stateful import OnlineAverage, SnapshotState


def stream_windows(client, job: ClientJob, samples: np.ndarray) -> int:
    """Send ``samples`` as batches of whole windows; return the windows answered."""
    import tritonclient.grpc as grpcclient

    load = job.load
    responses: queue.Queue = queue.Queue()
    windower = SnapshotState(load.channels, load.kernel_samples, load.stride_samples)
    step = job.batch_size * load.stride_samples
    output = [grpcclient.InferRequestedOutput(load.output_name)]
    ordered = _InOrder(load)

    def take() -> None:
        ordered.add(*take_response(responses, load.output_name))

    client.start_stream(
        callback=lambda result, error: responses.put((result, error)), headers=job.headers
    )
    sent = received = 0
    try:
        for first in range(0, samples.shape[1], step):
            while sent - received >= job.in_flight:
                take()
                received += 1
            update = samples[:, first : first + step]
            windows = np.empty(
                (1, update.shape[1] // load.stride_samples, load.channels, load.kernel_samples),
                np.float32,
            )
            windower.windows_into(update, windows[0])
            tensor = grpcclient.InferInput(INPUT_NAME, list(windows.shape), "FP32")
            tensor.set_data_from_numpy(windows)
            client.async_stream_infer(NETWORK, [tensor], request_id=str(sent), outputs=output)
            sent += 1
        while received < sent:
            take()
            received += 1
    finally:
        client.stop_stream(cancel_requests=received < sent)
    return samples.shape[1] // load.stride_samples


class _InOrder:
    """Feeds responses to the online average in request order (when the load averages)."""

    def __init__(self, load: Workload) -> None:
        self.averager = (
            OnlineAverage(load.kernel_samples, load.stride_samples, load.output_dims[0])
            if load.averaged else None
        )
        self.pending: dict[int, np.ndarray] = {}
        self.next = 0

    def add(self, request_id: str, values: np.ndarray) -> None:
        if self.averager is None:
            return
        self.pending[int(request_id)] = values
        while self.next in self.pending:
            self.averager.update(self.pending.pop(self.next)[0])
            self.next += 1


def measure_naive(
    load: Workload, server: BenchServer, batch_size: int, clients: int, in_flight: int,
    data_seconds: float, threads: int, seed: int = 0,
) -> Measurement:
    """The naive path at the service's batch size, clients and in-flight depth."""
    return measure_streams(
        "naive", stream_windows, load, server, NETWORK, batch_size, clients, in_flight,
        data_seconds, threads, seed,
    )
