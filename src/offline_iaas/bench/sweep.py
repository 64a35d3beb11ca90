"""The whole measurement: for each workload, its repositories, servers and every path.

Per workload: seeded weights are written and ``export`` writes the campaign's repository for
the workload's config (the fused model) once per swept ``server.instances`` and, for the naive
path, the ``--ensemble`` one whose network model takes whole windows, and for a ``streamed``
workload the same weights with ``model.streamed = false`` at the most instances (the
``whole-window`` path: what a whole-window server does; ``whole-window-limit``: its graphs
in-process, a user's own whole-window loop); one tritonserver serves each (the
service's at the most instances with a statistics monitor). Each served path is
warmed up once, then at every point ``(batch_size, clients, instances)`` of the sweep the
limit, the service, the naive and the whole-window paths are measured in turn, ``repeats``
times, interleaved so that load from other processes falls on all of them alike. Every
measurement is kept; the report judges each target with the service's median repeat against
the best opponent measured at that batch size (``bench/targets.py``).

``device`` is the switch between the cpu flavor and the gpu flavor: with ``cuda`` the
repository is ``export --flavor gpu`` (the same fused model, its networks on the GPU) and the
limit's sessions run on CUDA too; the naive path (``--ensemble``, CPU models) is not measured.
``cpu`` runs the very same steps on onnxruntime's CPU provider (CI's run).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

from offline_iaas.bench.limit import measure_limit
from offline_iaas.bench.naive import has_naive_path, measure_naive
from offline_iaas.bench.results import MAX_LAYOUT_COUNT, Measurement, best_by_path
from offline_iaas.bench.server import BenchServer, bench_server
from offline_iaas.bench.service import measure_service
from offline_iaas.bench.workloads import DEFAULT_WORKLOADS, Workload, workload, write_weights
from offline_iaas.config import CampaignConfig
from offline_iaas.config_numbers import MAX_SECONDS, MAX_SECONDS_TEXT
from offline_iaas.errors import ConfigError
from offline_iaas.manifest import read_manifest
from offline_iaas.repository.export import FLAVOR_DEVICE, export_repository
from offline_iaas.rundir import RunDir
from offline_iaas.serve.monitor import start_monitor

logger = logging.getLogger(__name__)

DEFAULT_DATA_SECONDS: dict[str, float] = {
    "toy": 4000.0, "deepclean": 240.0, "o3-deepclean": 64.0, "bbhnet": 4000.0,
    "aframe": 1000.0, "e2e": 64.0,
    "e2e-inject": 64.0, "tiny": 120.0,
}
"""Data streamed per measurement: about 2-5 s of wall time each on 2 cores (``o3-deepclean``
at a reduced duration: a GPU node streams minutes in that time, ``--data-scale`` sets it)."""
FLAVOR_OF_DEVICE = {device: flavor for flavor, device in FLAVOR_DEVICE.items()}
"""The repository flavor whose fused model runs its networks on each device."""
MONITOR_INTERVAL_SECONDS = 0.5
WARMUP_FRACTION = 0.1


@dataclass(frozen=True)
class SweepPlan:
    """What ``offline-iaas bench`` measures."""

    workloads: tuple[str, ...] = DEFAULT_WORKLOADS
    """Workload names."""
    batch_sizes: tuple[int, ...] = (8, 32, 128)
    """Swept at ``default_clients`` and the most ``instances``."""
    clients: tuple[int, ...] = (1, 2, 4)
    """Swept at the default batch size, for each of ``instances``."""
    default_batch_size: int | None = None
    """The batch size the targets are judged at (None: each workload's own)."""
    default_clients: int = 2
    """The clients the targets are judged at."""
    in_flight: int = 4
    """Requests outstanding per client stream."""
    repeats: int = 3
    """Measurements of each path at each point (the best is reported)."""
    instances: tuple[int, ...] = (1, 2)
    """Server instances of the served model swept (``server.instances``; one onnxruntime
    thread each); the limit runs as many worker processes. The targets are judged at the
    most."""
    data_seconds: dict[str, float] = field(default_factory=dict)
    """Data per measurement, per workload (default ``DEFAULT_DATA_SECONDS``)."""
    device: str = "cpu"
    """``cpu`` or ``cuda``: where the served model and the limit run their networks."""

    def batch_size_of(self, load: Workload) -> int:
        """The default point's batch size for ``load``."""
        return self.default_batch_size or load.batch_size

    @property
    def default_instances(self) -> int:
        """The instances the batch sweep and the targets use: the most swept."""
        return max(self.instances)

    def points(self, load: Workload) -> list[tuple[int, int, int]]:
        """(batch_size, clients, instances): the batch-size sweep, then the client sweep at
        each number of instances."""
        points = [(b, self.default_clients, self.default_instances) for b in self.batch_sizes]
        points += [(self.batch_size_of(load), k, n) for n in sorted(self.instances)
                   for k in self.clients]
        return list(dict.fromkeys(points))

    def seconds_for(self, load: Workload) -> float:
        return self.data_seconds.get(load.name, DEFAULT_DATA_SECONDS.get(load.name, 60.0))

    def check(self) -> None:
        """ConfigError for an impossible plan."""
        for name in self.workloads:
            workload(name)
        batch_size = 1 if self.default_batch_size is None else self.default_batch_size
        layout = [*self.batch_sizes, *self.clients, batch_size, self.default_clients,
                  *self.instances]
        if not self.instances or min(*layout, self.in_flight, self.repeats) < 1:
            raise ConfigError(
                "bench batch sizes, clients, in-flight, repeats and instances must be >= 1"
            )
        if max(layout) > MAX_LAYOUT_COUNT:  # plan would refuse the results.json it wrote
            raise ConfigError(f"bench batch sizes, clients and instances must be at most "
                              f"{MAX_LAYOUT_COUNT}, got {max(layout)}")
        for name in self.workloads:
            seconds = self.seconds_for(workload(name))
            if not 0 < seconds <= MAX_SECONDS:  # NaN too: a count of samples it cannot be
                raise ConfigError(f"bench data per measurement of {name} must be above 0 s and "
                                  f"at most {MAX_SECONDS_TEXT} (--data-scale), got {seconds:g} s")
        if self.device not in FLAVOR_OF_DEVICE:
            raise ConfigError(f"bench device {self.device!r} is not one of "
                              f"{', '.join(FLAVOR_OF_DEVICE)}")


@dataclass(frozen=True)
class Served:
    """A workload's service: its config and server at each swept number of instances, the
    naive path's server and a streamed workload's whole-window server."""

    load: Workload
    configs: dict[int, CampaignConfig]
    """The workload's config (its exported repository) at each number of instances."""
    services: dict[int, BenchServer]
    naive: BenchServer | None
    whole_window: BenchServer | None = None
    whole_window_config: CampaignConfig | None = None
    """A streamed workload's config with ``model.streamed = false`` (its repository)."""
    streamed: bool = False
    """The service and the limit stream the networks (a ``streamed`` workload)."""

    def measure(self, path: str, plan: SweepPlan, batch_size: int, clients: int,
                instances: int, seconds: float) -> Measurement:
        load, config = self.load, self.configs[instances]
        if path in ("limit", "whole-window-limit"):
            found = measure_limit(load, config if path == "limit" else
                                  self.whole_window_config, batch_size, seconds, clients,
                                  device=plan.device)
        elif path == "limit-threads":  # the same threads in one process
            found = measure_limit(load, config, batch_size, seconds, clients, processes=1,
                                  device=plan.device)
        elif path in ("service", "whole-window"):
            server = self.services[instances] if path == "service" else self.whole_window
            found = dataclasses.replace(measure_service(
                load, server, config.model.name, config.outputs.names,
                batch_size, clients, plan.in_flight, seconds, instances,
            ), path=path)
        else:
            return measure_naive(load, self.naive, batch_size, clients, plan.in_flight,
                                 seconds, instances)
        return dataclasses.replace(found, path="limit" if path == "limit-threads" else path,
                                   streamed=self.streamed and not path.startswith("whole"))

    def paths(self, plan: SweepPlan, instances: int) -> tuple[str, ...]:
        """What is measured at a point, in turn (``limit-threads`` is recorded as limit; the
        naive and whole-window paths at the most instances only)."""
        limits = ("limit", "limit-threads") if instances > 1 else ("limit",)
        most = instances == plan.default_instances
        naive = ("naive",) if self.naive is not None and most else ()
        whole = (("whole-window-limit", "whole-window")
                 if self.whole_window is not None and most else ())
        return (*limits, "service", *whole, *naive)


def export_workload(load: Workload, plan: SweepPlan, work_dir: Path, weights: Path | None,
                    instances: int, ensemble: bool = False, streamed: bool | None = None
                    ) -> CampaignConfig:
    """Write the workload's repository with ``instances`` in ``work_dir``: the flavor of
    ``plan.device`` (the cpu flavor's ``--ensemble`` layout if asked; ``streamed``:
    ``model.streamed``, the workload's own unless given)."""
    flavor = "cpu" if ensemble else FLAVOR_OF_DEVICE[plan.device]
    streamed = load.streamed and not ensemble if streamed is None else streamed
    layout = "ensemble" if ensemble else "fused" if streamed == load.streamed else "whole"
    name = f"{load.name}-{flavor}-{layout}-{instances}-repository"
    config = load.config(work_dir / name, instances, max(plan.clients), streamed=streamed)
    export_repository(config, weights, flavor=flavor, ensemble=ensemble)
    return config


def run_workload(
    load: Workload, plan: SweepPlan, work_dir: Path, monitor_csv: Path | None = None,
) -> list[Measurement]:
    """Every measurement of one workload (one server per served layout for all of them)."""
    weights = write_weights(load, work_dir / f"{load.name}-weights")
    configs = {n: export_workload(load, plan, work_dir, weights, n) for n in plan.instances}
    found: list[Measurement] = []
    with ExitStack() as stack:
        services = {
            n: stack.enter_context(bench_server(
                config.model.repository, RunDir(work_dir / f"{load.name}-{n}-run"),
                list(read_manifest(config.model.repository).models),
            ))
            for n, config in configs.items()
        }
        naive = None
        if has_naive_path(load) and plan.device == "cpu":
            repo = export_workload(load, plan, work_dir, weights, plan.default_instances,
                                   ensemble=True).model.repository
            naive = stack.enter_context(bench_server(
                repo, RunDir(work_dir / f"{load.name}-naive-run"), list(read_manifest(repo).models)
            ))
        whole, whole_config = None, None
        if load.streamed:  # the same weights served whole-window: the peer's path
            whole_config = export_workload(load, plan, work_dir, weights,
                                           plan.default_instances, streamed=False)
            repo = whole_config.model.repository
            whole = stack.enter_context(bench_server(
                repo, RunDir(work_dir / f"{load.name}-whole-run"), list(read_manifest(repo).models)
            ))
        served = Served(load, configs, services, naive, whole, whole_config,
                        load.streamed)
        if monitor_csv is not None:
            main = services[plan.default_instances]
            monitor_csv.unlink(missing_ok=True)
            monitor = start_monitor(main.url, main.headers, monitor_csv,
                                    MONITOR_INTERVAL_SECONDS)
            stack.callback(monitor.stop)
        seconds = plan.seconds_for(load)
        for n in plan.instances:  # sessions and buffers allocated before timing
            for path in served.paths(plan, n):
                if not path.startswith("limit"):
                    served.measure(path, plan, plan.batch_size_of(load), plan.default_clients,
                                   n, seconds * WARMUP_FRACTION)
        for batch_size, clients, instances in plan.points(load):
            started = time.monotonic()
            point = [served.measure(path, plan, batch_size, clients, instances, seconds)
                     for _ in range(plan.repeats) for path in served.paths(plan, instances)]
            found += point
            logger.info(
                f"bench: {load.name} batch {batch_size} clients {clients} instances "
                f"{instances}: "
                + ", ".join(
                    f"{p} {m.data_seconds_per_second:.1f}" for p, m in best_by_path(point).items()
                )
                + f" data-s/s ({time.monotonic() - started:.0f} s)"
            )
    return found
