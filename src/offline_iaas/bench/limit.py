"""The limit: the exported graph run in-process with onnxruntime over every window.

No server, no network, no serialisation: the same windowing code as the fused model
(``FusedStream``, a zero state at each share's start, so the same windows are computed) and
the same onnxruntime settings. The server's compute layout is kept: one worker thread per
model instance, each with its own session of ``intra_op_threads`` threads, over a contiguous
share of the span (onnxruntime releases the GIL while it runs).
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import numpy as np

from offline_iaas.bench.accounting import machine_busy_seconds
from offline_iaas.bench.backend.fused import FusedStream
from offline_iaas.bench.repository import ServerLayout
from offline_iaas.bench.results import Measurement
from offline_iaas.bench.workloads import Workload, split_strides, synthetic_samples


def onnx_session(path: Path, intra_op_threads: int):
    """An onnxruntime CPU session configured like the served models."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = intra_op_threads
    options.inter_op_num_threads = 1
    return onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def run_share(session, load: Workload, samples: np.ndarray, batch_size: int) -> int:
    """Stream ``samples`` [channels, m * stride] through the network in batches; return m."""
    stream = FusedStream(load.channels, load.kernel_samples, load.stride_samples)
    input_name = session.get_inputs()[0].name
    output_name = session.get_outputs()[0].name
    batch = np.zeros((batch_size, load.channels, load.kernel_samples), np.float32)
    step = batch_size * load.stride_samples
    windows = 0
    for first in range(0, samples.shape[1], step):
        update = samples[:, first : first + step]
        n = update.shape[1] // load.stride_samples
        stream.windows_into(update, batch[:n])
        session.run([output_name], {input_name: batch[:n]})
        windows += n
    return windows


def measure_limit(
    load: Workload, network_onnx: Path, layout: ServerLayout, batch_size: int,
    data_seconds: float, clients: int = 1, seed: int = 0,
) -> Measurement:
    """Data seconds per wall second of the in-process loop over ``data_seconds`` of data.

    ``clients`` only labels the measurement with the sweep point's ``k``.
    """
    samples = synthetic_samples(load, data_seconds, seed)
    shares = split_strides(samples.shape[1] // load.stride_samples, layout.instances)
    bounds = np.cumsum([0, *shares]) * load.stride_samples
    sessions = [onnx_session(network_onnx, layout.intra_op_threads) for _ in shares]
    for session in sessions:  # first call allocates; not part of the measurement
        run_share(session, load, samples[:, : load.stride_samples], batch_size)
    counts = [0] * len(shares)

    def work(i: int) -> None:
        counts[i] = run_share(sessions[i], load, samples[:, bounds[i] : bounds[i + 1]], batch_size)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(shares))]
    cpu_before = sum(os.times()[:2])
    busy_before = machine_busy_seconds()
    started = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - started
    cpu = sum(os.times()[:2]) - cpu_before
    busy = machine_busy_seconds() - busy_before
    return Measurement(
        path="limit",
        workload=load.name,
        batch_size=batch_size,
        clients=clients,
        threads=layout.threads,
        data_seconds=load.window_seconds(sum(counts)),
        wall_seconds=wall,
        client_cpu_seconds=cpu,
        other_cpu_seconds=max(0.0, busy - cpu),
    )
