"""Worker processes started together: each streams its share, all timed from one signal.

Each worker (a client of the server, or one of the limit's in-process loops) is a separate
spawned process, so its CPU time (``time.process_time``, all its threads; ``os.times`` counts
10 ms ticks, and a short limit run measured 0) and its TCP connection are its own, and no two
share a GIL. A worker generates its share of synthetic data, opens its
job (a client connects, so the TCP connection exists before the start signal; the limit builds
its onnxruntime session), reports ready, waits for the signal, streams with the given
function, reports its CPU time and the monotonic time of its last response, and keeps its
connection open until released, so that the parent can read the byte counters before they
close.
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from offline_iaas.bench import accounting
from offline_iaas.bench.workloads import Workload, synthetic_samples
from offline_iaas.errors import ServerError

RESPONSE_TIMEOUT_SECONDS = 120.0
START_TIMEOUT_SECONDS = 120.0


class Job(Protocol):
    """What one worker process streams, and how it gets ready."""

    load: Workload
    data_seconds: float
    seed: int

    def open(self) -> object:
        """Get ready (connect, build a session); return what the streamer works with."""

    def close(self, handle: object) -> None:
        """Release what ``open`` returned."""


@dataclass(frozen=True)
class ClientJob:
    """What one client streams, and where.

    Parameters
    ----------
    model
        The served model it calls.
    outputs
        The outputs it requests (and reads from every response).
    url, headers
        Server address and the gRPC headers carrying the token.
    load
        The workload.
    data_seconds
        Length of its share (rounded down to whole strides).
    batch_size
        Windows per request.
    in_flight
        Requests outstanding on its stream.
    sequence_id
        Its sequence ID (0: none, for the naive path's stateless network model).
    seed
        Seed of its synthetic data.
    """

    model: str
    outputs: tuple[str, ...]
    url: str
    headers: dict[str, str]
    load: Workload
    data_seconds: float
    batch_size: int
    in_flight: int
    sequence_id: int
    seed: int

    def open(self) -> object:
        """A gRPC client of the server, its connection open."""
        import tritonclient.grpc as grpcclient

        client = grpcclient.InferenceServerClient(self.url)
        try:
            client.is_server_ready(headers=self.headers)
        except Exception:
            client.close()
            raise
        return client

    def close(self, handle: object) -> None:
        handle.close()


@dataclass(frozen=True)
class ClientReport:
    """What a client measured of itself."""

    pid: int
    windows: int
    cpu_seconds: float
    started: float
    finished: float
    """``time.monotonic()`` at the start signal and at its last response."""
    error: str = ""


Streamer = Callable[[object, Job, object], int]
"""``streamer(handle, job, samples)``: stream the share, return the windows answered."""


@dataclass
class ClientRun:
    """The clients of one measurement, and what they cost."""

    reports: list[ClientReport]
    started: float
    finished: float
    server_cpu_seconds: float
    bytes_sent: int
    bytes_received: int
    machine_busy_seconds: float
    """CPU time of every process of the machine during the run."""

    @property
    def windows(self) -> int:
        return sum(r.windows for r in self.reports)

    @property
    def wall_seconds(self) -> float:
        return self.finished - self.started

    @property
    def client_cpu_seconds(self) -> float:
        return sum(r.cpu_seconds for r in self.reports)

    @property
    def cpu_seconds(self) -> float:
        """The clients' and the server's CPU time."""
        return self.client_cpu_seconds + self.server_cpu_seconds

    @property
    def other_cpu_seconds(self) -> float:
        """CPU time the machine's other processes took during the run (contention)."""
        return max(0.0, self.machine_busy_seconds - self.cpu_seconds)


def _worker_main(job: Job, streamer: Streamer, ready, go, done, release) -> None:
    pid = os.getpid()
    samples = synthetic_samples(job.load, job.data_seconds, job.seed)
    handle = job.open()
    try:
        ready.put(pid)
        go.wait()
        cpu_before = _own_cpu_seconds(pid)
        started = time.monotonic()
        try:
            windows = streamer(handle, job, samples)
        except Exception as err:  # reported to the parent, which raises it
            done.put(ClientReport(pid, 0, 0.0, started, time.monotonic(), error=str(err)))
            return
        finished = time.monotonic()
        cpu = _own_cpu_seconds(pid) - cpu_before
        done.put(ClientReport(pid, windows, cpu, started, finished))
        release.wait(START_TIMEOUT_SECONDS)
    finally:
        job.close(handle)


def _own_cpu_seconds(pid: int) -> float:
    """CPU seconds of this worker and its live children (a campaign client's frame reader
    process is part of what the client costs)."""
    return time.process_time() + accounting.tree_cpu_seconds(accounting.children_of(pid))


def _no_server() -> float:
    return 0.0


def run_clients(
    jobs: list[Job], streamer: Streamer, server_cpu: Callable[[], float] = _no_server,
    grpc_port: int | None = None,
) -> ClientRun:
    """Start one process per job, start them together, and measure them.

    Parameters
    ----------
    jobs
        One per worker (picklable).
    streamer
        A module-level function (it is pickled into the spawned processes).
    server_cpu
        Returns the server's CPU seconds so far (read at the start signal and at the end).
    grpc_port
        The server's gRPC port: the workers' connections to it are counted (None: no
        connections, no bytes).
    """
    context = multiprocessing.get_context("spawn")
    ready, done = context.Queue(), context.Queue()
    go, release = context.Event(), context.Event()
    procs = [
        context.Process(target=_worker_main, args=(job, streamer, ready, go, done, release))
        for job in jobs
    ]
    for proc in procs:
        proc.start()
    try:
        pids = [_get(ready, procs, "ready", START_TIMEOUT_SECONDS) for _ in procs]
        before_bytes = _tcp_bytes(grpc_port, pids)
        before_cpu = server_cpu()
        before_busy = accounting.machine_busy_seconds()
        started = time.monotonic()
        go.set()
        reports = [_get(done, procs, "done", None) for _ in procs]
        finished = max(r.finished for r in reports)
        server_cpu_seconds = server_cpu() - before_cpu
        busy = accounting.machine_busy_seconds() - before_busy
        after_bytes = _tcp_bytes(grpc_port, pids)
        errors = [r.error for r in reports if r.error]
        if errors:
            raise ServerError(f"{len(errors)} bench client(s) failed: {errors[0]}")
        return ClientRun(
            reports=reports,
            started=started,
            finished=finished,
            server_cpu_seconds=server_cpu_seconds,
            bytes_sent=after_bytes.sent - before_bytes.sent,
            bytes_received=after_bytes.received - before_bytes.received,
            machine_busy_seconds=busy,
        )
    finally:
        release.set()
        go.set()
        for proc in procs:
            proc.join(30)
            if proc.is_alive():
                proc.kill()
                proc.join()


def _tcp_bytes(port: int | None, pids: list[int]) -> accounting.TcpBytes:
    if port is None:
        return accounting.TcpBytes(sent=0, received=0)
    return accounting.client_tcp_bytes(port, pids)


def _get(source, procs: list, what: str, timeout_seconds: float | None):
    """The next item of a clients' queue; ServerError if a client died before sending it.

    ``timeout_seconds`` None waits as long as the clients live (they time out themselves).
    """
    deadline = None if timeout_seconds is None else time.monotonic() + timeout_seconds
    while True:
        try:
            return source.get(timeout=0.5)
        except queue.Empty:
            dead = [p for p in procs if p.exitcode not in (None, 0)]
            if dead:
                raise ServerError(
                    f"a bench client exited with code {dead[0].exitcode} before it was {what}"
                ) from None
            if deadline is not None and time.monotonic() > deadline:
                raise ServerError(
                    f"bench clients not {what} within {timeout_seconds:.0f} s"
                ) from None
