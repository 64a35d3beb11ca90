"""The limit: the exported graphs run in-process with onnxruntime over every window.

No server, no network, no serialisation: the fused model's own code and graphs (for a
streaming workload ``ConvStream`` on the streaming graphs, else ``SnapshotState``'s windows
through the whole-window graph; a zero state at each share's start, so the same windows are
computed) and the same onnxruntime settings. For a streaming workload the whole-window graph
is measured too (path ``window-limit``): what the network costs as exported, window by
window. The server's compute layout is kept: one worker process per model instance (as each
instance is a python-backend stub process), each with its own session of
``intra_op_threads`` threads, over a contiguous share of the span. Processes, not threads:
threads of one interpreter share a GIL, and on a loaded machine a thread preempted while
holding it stalls the other (measured: 0.5-0.6 cores for two threads where two processes got
0.9).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from offline_iaas.bench.backend.streaming_conv import ConvStream, open_graphs
from offline_iaas.bench.clients import run_clients
from offline_iaas.bench.repository import ServerLayout
from offline_iaas.bench.results import Measurement
from offline_iaas.bench.workloads import Workload, split_strides
from offline_iaas.repository.backend.stateful import OnlineAverage, SnapshotState

CPU = ("CPUExecutionProvider",)


def onnx_session(path: Path, intra_op_threads: int, providers: tuple[str, ...] = CPU):
    """An onnxruntime session configured like the served models (CPU unless told)."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = intra_op_threads
    options.inter_op_num_threads = 1
    return onnxruntime.InferenceSession(str(path), options, providers=list(providers))


def run_share(session, load: Workload, samples: np.ndarray, batch_size: int) -> int:
    """Stream ``samples`` [channels, m * stride] through the network in batches; return m.

    ``session`` is the whole-window graph's session, or ``open_graphs``' tuple for
    ``ConvStream``. An averaging workload's outputs go through ``OnlineAverage`` too, as in
    the service.
    """
    step = batch_size * load.stride_samples
    if isinstance(session, tuple):
        conv = ConvStream(*session, load.channels, load.kernel_samples, load.stride_samples)
        for first in range(0, samples.shape[1], step):
            conv.update(samples[:, first : first + step])
        return samples.shape[1] // load.stride_samples
    stream = SnapshotState(load.channels, load.kernel_samples, load.stride_samples)
    averager = (
        OnlineAverage(load.kernel_samples, load.stride_samples, load.output_dims[0])
        if load.averaged else None
    )
    input_name = session.get_inputs()[0].name
    output_name = session.get_outputs()[0].name
    batch = np.zeros((batch_size, load.channels, load.kernel_samples), np.float32)
    windows = 0
    for first in range(0, samples.shape[1], step):
        update = samples[:, first : first + step]
        n = update.shape[1] // load.stride_samples
        stream.windows_into(update, batch[:n])
        output = session.run([output_name], {input_name: batch[:n]})[0]
        if averager is not None:  # and converted to float32, as the fused model sends it
            averager.update(output).astype(np.float32)
        windows += n
    return windows


@dataclass(frozen=True)
class LimitJob:
    """One worker of the limit: a share of the span through its own onnxruntime session."""

    load: Workload
    graphs: str
    """The whole-window ONNX file, or the directory of the streaming graphs."""
    intra_op_threads: int
    providers: tuple[str, ...]
    batch_size: int
    data_seconds: float
    seed: int

    def open(self) -> object:
        """The session, run once (first calls allocate; not part of the measurement)."""
        if Path(self.graphs).is_dir():
            session = tuple(open_graphs(self.graphs, self._session))
        else:
            session = self._session(self.graphs)
        warm = np.zeros((self.load.channels, self.load.stride_samples), np.float32)
        run_share(session, self.load, warm, self.batch_size)
        return session

    def close(self, handle: object) -> None:
        pass

    def _session(self, path: str):
        return onnx_session(Path(path), self.intra_op_threads, self.providers)


def stream_limit(session, job: LimitJob, samples: np.ndarray) -> int:
    """The limit worker's loop (``run_share``) as a ``clients.Streamer``."""
    return run_share(session, job.load, samples, job.batch_size)


def measure_limit(
    load: Workload, graphs: Path, layout: ServerLayout, batch_size: int,
    data_seconds: float, clients: int = 1, seed: int = 0, providers: tuple[str, ...] = CPU,
    path: str = "limit",
) -> Measurement:
    """Data seconds per wall second of the in-process loops over ``data_seconds`` of data.

    ``graphs`` is the whole-window ONNX file or the streaming graphs' directory. One worker
    process per server instance, each over a contiguous share. ``clients`` only
    labels the measurement with the sweep point's ``k``; ``providers`` are onnxruntime's
    execution providers (``CUDAExecutionProvider`` on a GPU node, where each batch of windows
    is built on the host and copied to the device, as a hand-written loop would).
    """
    strides = int(data_seconds * load.sample_rate_hz) // load.stride_samples
    stride_seconds = load.stride_samples / load.sample_rate_hz
    jobs = [
        LimitJob(load, str(graphs), layout.intra_op_threads, tuple(providers),
                 batch_size, share * stride_seconds, seed + index)
        for index, share in enumerate(split_strides(strides, layout.instances))
    ]
    run = run_clients(jobs, stream_limit)
    return Measurement(
        path=path,
        workload=load.name,
        batch_size=batch_size,
        clients=clients,
        threads=layout.threads,
        data_seconds=load.window_seconds(run.windows),
        wall_seconds=run.wall_seconds,
        client_cpu_seconds=run.client_cpu_seconds,
        other_cpu_seconds=max(0.0, run.machine_busy_seconds - run.client_cpu_seconds),
    )
