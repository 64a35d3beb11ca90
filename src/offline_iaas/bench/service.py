"""The service: the campaign's served model and ``k`` clients streaming snapshot updates.

The server serves the repository ``export`` writes for the workload's config (the fused
model, the cpu flavor's default). Each client streams its contiguous share of the span through
the campaign client's ``RequestStream`` under its own sequence ID, as campaign clients do: a
request carries ``batch_size x stride`` new samples per channel (the last one fewer), START on
the first, END on the last, at most ``in_flight`` requests outstanding; it reads every output
of every response. What a campaign client does besides (frames in, checkpoints out) is left
out: the bench measures the service, not the disks.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import numpy as np

from offline_iaas.bench.clients import RESPONSE_TIMEOUT_SECONDS, ClientJob, run_clients
from offline_iaas.bench.results import Measurement
from offline_iaas.bench.server import BenchServer
from offline_iaas.bench.workloads import Workload, split_strides
from offline_iaas.client.transport import RequestStream
from offline_iaas.workflow.make_dag import SEQUENCE_BLOCK


def open_stream(client, job: ClientJob,
                on_response: Callable[[str, object], None] | None = None) -> RequestStream:
    """The campaign client's request stream to ``job.model``; without ``on_response`` it
    reads every output of every response, as a campaign client does."""
    def read(request_id: str, result) -> None:
        for name in job.outputs:
            result.as_numpy(name)

    return RequestStream(client, job.model, job.outputs, job.in_flight,
                         RESPONSE_TIMEOUT_SECONDS, job.headers, on_response or read, job.url)


def stream_updates(client, job: ClientJob, samples: np.ndarray) -> int:
    """Stream ``samples`` as snapshot updates on one sequence; return the windows answered."""
    step = job.batch_size * job.load.stride_samples
    firsts = range(0, samples.shape[1], step)
    with open_stream(client, job) as stream:
        for _ in stream.send_piece(({"update": samples[:, first : first + step]}
                                    for first in firsts), len(firsts), "0", job.sequence_id):
            pass
        stream.drain()
    return samples.shape[1] // job.load.stride_samples


def client_jobs(
    load: Workload, server: BenchServer, model: str, outputs: tuple[str, ...],
    batch_size: int, clients: int, in_flight: int, data_seconds: float, seed: int,
    sequences: bool = True,
) -> list[ClientJob]:
    """One job per client: contiguous shares of ``data_seconds``, distinct sequence IDs
    (none when ``sequences`` is False)."""
    strides = int(data_seconds * load.sample_rate_hz) // load.stride_samples
    base = random.Random(seed).randrange(1, 2**11) * SEQUENCE_BLOCK  # as a campaign's
    stride_seconds = load.stride_samples / load.sample_rate_hz
    return [
        ClientJob(
            model=model,
            outputs=outputs,
            url=server.url,
            headers=server.headers,
            load=load,
            data_seconds=share * stride_seconds,
            batch_size=batch_size,
            in_flight=in_flight,
            sequence_id=base + index + 1 if sequences else 0,
            seed=seed + index,
        )
        for index, share in enumerate(split_strides(strides, clients))
    ]


def measure_streams(path: str, streamer, jobs: list[ClientJob], server: BenchServer,
                    batch_size: int, threads: int) -> Measurement:
    """Run the clients ``jobs`` with ``streamer`` and record the measurement."""
    run = run_clients(jobs, streamer, server.cpu_seconds, server.ports.grpc)
    load = jobs[0].load
    return Measurement(
        path=path,
        workload=load.name,
        batch_size=batch_size,
        clients=len(jobs),
        threads=threads,
        data_seconds=load.window_seconds(run.windows),
        wall_seconds=run.wall_seconds,
        client_cpu_seconds=run.client_cpu_seconds,
        server_cpu_seconds=run.server_cpu_seconds,
        bytes_sent=run.bytes_sent,
        bytes_received=run.bytes_received,
        other_cpu_seconds=run.other_cpu_seconds,
        extra={"in_flight": jobs[0].in_flight, "model": jobs[0].model},
    )


def measure_service(
    load: Workload, server: BenchServer, model: str, outputs: tuple[str, ...],
    batch_size: int, clients: int, in_flight: int, data_seconds: float, threads: int,
    seed: int = 0,
) -> Measurement:
    """The service path: snapshot updates to the served ``model``."""
    jobs = client_jobs(load, server, model, outputs, batch_size, clients, in_flight,
                       data_seconds, seed)
    return measure_streams("service", stream_updates, jobs, server, batch_size, threads)
