"""The naive baseline: whole windows per request to the mode's network model.

What a first as-a-service attempt does: the client cuts its data into windows itself and
sends ``[1, n, channels, kernel]`` to the network model of the ``export --ensemble``
repository (no snapshotter, no sequence), so every sample crosses the wire ``kernel /
stride`` times. Batch size, clients and in-flight depth are the service's. DeepClean's
per-window predictions come back whole and the client averages them itself, in request order
(responses of two instances may overtake each other). Only the single-network modes have a
naive path: a chained mode's client would run the chain itself.
"""

from __future__ import annotations

import numpy as np

from offline_iaas.bench.clients import ClientJob
from offline_iaas.bench.results import Measurement
from offline_iaas.bench.server import BenchServer
from offline_iaas.bench.service import client_jobs, measure_streams, open_stream
from offline_iaas.bench.workloads import Workload
from offline_iaas.repository.backend.stateful import OnlineAverage, SnapshotState


def has_naive_path(load: Workload) -> bool:
    """A single-network mode (a chained mode's client would have to run the chain)."""
    return len(load.mode.networks) == 1


def network_of(load: Workload) -> tuple[str, str]:
    """The network model a naive client calls, and its output."""
    (network,) = load.mode.networks
    return network, "prediction" if load.mode.averages else "statistic"


def stream_windows(client, job: ClientJob, samples: np.ndarray) -> int:
    """Send ``samples`` as batches of whole windows; return the windows answered."""
    load = job.load
    windower = SnapshotState(load.channels, load.kernel_samples, load.stride_samples)
    step = job.batch_size * load.stride_samples
    ordered = _InOrder(load, job.outputs[0])

    with open_stream(client, job, ordered.add) as stream:
        for index, first in enumerate(range(0, samples.shape[1], step)):
            update = samples[:, first : first + step]
            windows = np.empty(
                (1, update.shape[1] // load.stride_samples, load.channels, load.kernel_samples),
                np.float32,
            )
            windower.windows_into(update, windows[0])
            stream.send("windows", windows, str(index))
        stream.drain()
    return samples.shape[1] // load.stride_samples


class _InOrder:
    """Reads each response; feeds DeepClean's predictions to its average in request order."""

    def __init__(self, load: Workload, output: str) -> None:
        self.output = output
        self.averager = (
            OnlineAverage(load.kernel_samples, load.stride_samples, len(load.ifos))
            if load.mode.averages else None
        )
        self.pending: dict[int, np.ndarray] = {}
        self.next = 0

    def add(self, request_id: str, result) -> None:
        values = result.as_numpy(self.output)
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
    network, output = network_of(load)
    jobs = client_jobs(load, server, network, (output,), batch_size, clients, in_flight,
                       data_seconds, seed, sequences=False)
    return measure_streams("naive", stream_windows, jobs, server, batch_size, threads)
