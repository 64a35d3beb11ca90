"""The whole measurement: for each workload, one server, every path at every sweep point.

Per workload: the repository is written, one tritonserver started (with a statistics monitor),
each path warmed up once, then at every point ``(batch_size, clients)`` of the sweep the limit,
the service and the naive path are measured in turn, ``repeats`` times, interleaved so that
load from other processes falls on all of them alike; the cpu flavor's ensemble is measured at
the default point. Every measurement is kept; the report takes the best repeat of each.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from offline_iaas.bench.limit import measure_limit
from offline_iaas.bench.naive import measure_naive
from offline_iaas.bench.repository import (
    FUSED,
    NETWORK,
    PIPELINE,
    ServerLayout,
    limit_graphs,
    network_path,
    write_repository,
)
from offline_iaas.bench.results import Measurement, best_by_path
from offline_iaas.bench.server import BenchServer, bench_server
from offline_iaas.bench.service import measure_service
from offline_iaas.bench.workloads import Workload, workload
from offline_iaas.errors import ConfigError
from offline_iaas.serve.monitor import start_monitor

DEFAULT_DATA_SECONDS: dict[str, float] = {"toy": 1600.0, "deepclean": 120.0, "tiny": 120.0}
"""Data streamed per measurement: about 1-10 s of wall time each on 2 cores."""
WINDOW_LIMIT = "window-limit"
"""A streaming workload's whole-window graph in-process, measured beside its limit."""
MONITOR_INTERVAL_SECONDS = 0.5
WARMUP_FRACTION = 0.1


@dataclass(frozen=True)
class SweepPlan:
    """What ``offline-iaas bench`` measures.

    Parameters
    ----------
    workloads
        Workload names.
    batch_sizes
        Swept at ``default_clients``.
    clients
        Swept at ``default_batch_size``.
    default_batch_size, default_clients
        The point the targets are judged at (and where the ensemble is measured).
    in_flight
        Requests outstanding per client stream.
    repeats
        Measurements of each path at each point (the best is reported).
    layout
        Server instances and onnxruntime threads (the limit gets the same threads).
    data_seconds
        Data per measurement, per workload (default ``DEFAULT_DATA_SECONDS``).
    ensemble
        Also measure the cpu flavor's snapshotter → network ensemble at the default point.
    """

    workloads: tuple[str, ...] = ("toy", "deepclean")
    batch_sizes: tuple[int, ...] = (8, 32, 128)
    clients: tuple[int, ...] = (1, 2, 4)
    default_batch_size: int = 32
    default_clients: int = 2
    in_flight: int = 4
    repeats: int = 3
    layout: ServerLayout = field(default_factory=lambda: ServerLayout(instances=2))
    data_seconds: dict[str, float] = field(default_factory=dict)
    ensemble: bool = True

    def points(self) -> list[tuple[int, int]]:
        """(batch_size, clients) pairs: the batch-size sweep, then the client sweep."""
        pairs = [(b, self.default_clients) for b in self.batch_sizes]
        pairs += [(self.default_batch_size, k) for k in self.clients]
        return list(dict.fromkeys(pairs))

    def seconds_for(self, load: Workload) -> float:
        return self.data_seconds.get(load.name, DEFAULT_DATA_SECONDS.get(load.name, 60.0))

    def check(self) -> None:
        """ConfigError for an impossible plan."""
        for name in self.workloads:
            workload(name)
        values = [*self.batch_sizes, *self.clients, self.default_batch_size,
                  self.default_clients, self.in_flight, self.repeats]
        if min(values) < 1:
            raise ConfigError("bench batch sizes, clients, in-flight and repeats must be >= 1")
        if self.layout.instances < 1 or self.layout.intra_op_threads < 1:
            raise ConfigError("bench instances and threads must be >= 1")


def _measure_point(
    load: Workload, server: BenchServer, repo: Path, plan: SweepPlan, batch_size: int,
    clients: int, ensemble: bool,
) -> list[Measurement]:
    seconds = plan.seconds_for(load)
    threads = plan.layout.threads
    found: list[Measurement] = []
    for _ in range(plan.repeats):
        found.append(measure_limit(
            load, limit_graphs(load, repo), plan.layout, batch_size, seconds, clients
        ))
        if load.streaming:
            found.append(measure_limit(
                load, network_path(repo), plan.layout, batch_size, seconds, clients,
                path=WINDOW_LIMIT,
            ))
        found.append(measure_service(
            load, server, FUSED, batch_size, clients, plan.in_flight, seconds, threads
        ))
        found.append(measure_naive(
            load, server, batch_size, clients, plan.in_flight, seconds, threads
        ))
        if ensemble:
            found.append(measure_service(
                load, server, PIPELINE, batch_size, clients, plan.in_flight, seconds, threads,
                path="ensemble",
            ))
    return found


def _warm_up(load: Workload, server: BenchServer, plan: SweepPlan) -> None:
    """One short run of each served path: sessions and buffers are allocated before timing."""
    seconds = plan.seconds_for(load) * WARMUP_FRACTION
    k, b, threads = plan.default_clients, plan.default_batch_size, plan.layout.threads
    measure_service(load, server, FUSED, b, k, plan.in_flight, seconds, threads)
    measure_naive(load, server, b, k, plan.in_flight, seconds, threads)
    if plan.ensemble:
        measure_service(load, server, PIPELINE, b, k, plan.in_flight, seconds, threads)


def run_workload(
    load: Workload, plan: SweepPlan, work_dir: Path, monitor_csv: Path | None = None,
    log: Callable[[str], None] = print,
) -> list[Measurement]:
    """Every measurement of one workload (one server for all of them)."""
    repo = write_repository(load, plan.layout, work_dir / f"{load.name}-repository")
    models = [FUSED, NETWORK, PIPELINE]
    found: list[Measurement] = []
    with bench_server(repo, work_dir / f"{load.name}-run", models) as server:
        monitor = None
        if monitor_csv is not None:
            monitor_csv.unlink(missing_ok=True)
            monitor = start_monitor(
                server.url, server.headers, monitor_csv, MONITOR_INTERVAL_SECONDS
            )
        try:
            _warm_up(load, server, plan)
            for batch_size, clients in plan.points():
                started = time.monotonic()
                default = (batch_size, clients) == (plan.default_batch_size, plan.default_clients)
                point = _measure_point(
                    load, server, repo, plan, batch_size, clients, plan.ensemble and default
                )
                found += point
                best = best_by_path(point)
                log(
                    f"bench: {load.name} batch {batch_size} clients {clients}: "
                    + ", ".join(
                        f"{p} {m.data_seconds_per_second:.1f}" for p, m in best.items()
                    )
                    + f" data-s/s ({time.monotonic() - started:.0f} s)"
                )
        finally:
            if monitor is not None:
                monitor.stop()
    return found
