"""The service: one server, ``k`` clients streaming batched snapshot updates.

Each client streams its contiguous share of the span on one gRPC bidirectional stream under
its own sequence ID, as campaign clients do: a request carries ``batch_size x stride`` new
samples per channel (the last one fewer), START on the first, END on the last, at most
``in_flight`` requests outstanding; it reads every response's output.
"""

from __future__ import annotations

import queue
import random

import numpy as np

from offline_iaas.bench.clients import ClientJob, run_clients, take_response
from offline_iaas.bench.results import Measurement
from offline_iaas.bench.server import BenchServer
from offline_iaas.bench.workloads import Workload, split_strides

SEQUENCE_BASE_STEP = 2**20


def stream_updates(client, job: ClientJob, samples: np.ndarray) -> int:
    """Stream ``samples`` as snapshot updates on one sequence; return the windows answered."""
    import tritonclient.grpc as grpcclient

    load = job.load
    responses: queue.Queue = queue.Queue()
    step = job.batch_size * load.stride_samples
    firsts = range(0, samples.shape[1], step)
    output = [grpcclient.InferRequestedOutput(load.served_output)]
    client.start_stream(
        callback=lambda result, error: responses.put((result, error)), headers=job.headers
    )
    sent = received = 0
    try:
        for index, first in enumerate(firsts):
            while sent - received >= job.in_flight:
                take_response(responses, load.served_output)
                received += 1
            update = samples[None, :, first : first + step]
            tensor = grpcclient.InferInput("update", list(update.shape), "FP32")
            tensor.set_data_from_numpy(np.ascontiguousarray(update))
            client.async_stream_infer(
                job.model,
                [tensor],
                sequence_id=job.sequence_id,
                sequence_start=index == 0,
                sequence_end=index == len(firsts) - 1,
                outputs=output,
            )
            sent += 1
        while received < sent:
            take_response(responses, load.served_output)
            received += 1
    finally:
        client.stop_stream(cancel_requests=received < sent)
    return samples.shape[1] // load.stride_samples


def client_jobs(
    load: Workload, server: BenchServer, model: str, batch_size: int, clients: int,
    in_flight: int, data_seconds: float, seed: int,
) -> list[ClientJob]:
    """One job per client: contiguous shares of ``data_seconds``, distinct sequence IDs."""
    strides = int(data_seconds * load.sample_rate_hz) // load.stride_samples
    base = random.Random(seed).randrange(1, 2**11) * SEQUENCE_BASE_STEP
    stride_seconds = load.stride_samples / load.sample_rate_hz
    return [
        ClientJob(
            model=model,
            url=server.url,
            headers=server.headers,
            load=load,
            data_seconds=share * stride_seconds,
            batch_size=batch_size,
            in_flight=in_flight,
            sequence_id=base + index + 1,
            seed=seed + index,
        )
        for index, share in enumerate(split_strides(strides, clients))
    ]


def measure_streams(
    path: str, streamer, load: Workload, server: BenchServer, model: str, batch_size: int,
    clients: int, in_flight: int, data_seconds: float, threads: int, seed: int = 0,
) -> Measurement:
    """Run ``clients`` clients of ``model`` with ``streamer`` and record the measurement."""
    jobs = client_jobs(load, server, model, batch_size, clients, in_flight, data_seconds, seed)
    run = run_clients(jobs, streamer, server.cpu_seconds, server.ports.grpc)
    return Measurement(
        path=path,
        workload=load.name,
        batch_size=batch_size,
        clients=clients,
        threads=threads,
        data_seconds=load.window_seconds(run.windows),
        wall_seconds=run.wall_seconds,
        client_cpu_seconds=run.client_cpu_seconds,
        server_cpu_seconds=run.server_cpu_seconds,
        bytes_sent=run.bytes_sent,
        bytes_received=run.bytes_received,
        other_cpu_seconds=max(
            0.0, run.machine_busy_seconds - run.client_cpu_seconds - run.server_cpu_seconds
        ),
        extra={"in_flight": in_flight, "model": model},
    )


def measure_service(
    load: Workload, server: BenchServer, model: str, batch_size: int, clients: int,
    in_flight: int, data_seconds: float, threads: int, path: str = "service", seed: int = 0,
) -> Measurement:
    """The service path: snapshot updates to ``model`` (the fused model, or the ensemble)."""
    return measure_streams(
        path, stream_updates, load, server, model, batch_size, clients, in_flight,
        data_seconds, threads, seed,
    )
