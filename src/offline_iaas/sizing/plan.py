"""``offline-iaas plan``: servers, clients per server and batch size for a campaign.

From a pilot (``--from-run RUN``, a finished campaign of the same config over a shorter span)
it takes what the campaign path itself measured (``sizing/pilot.py``): the streaming rate of
the pilot's servers, the start-up before the first request and the merge time, and scales
them to the campaign's span:

    per server  = pilot data seconds / pilot streaming seconds / pilot servers
    servers     = ceil(needed x headroom / per server)
    wall        = start-up + data seconds / (servers x per server)
                  + pilot merge seconds x (data seconds / pilot data seconds) + the rest

The pilot's rate holds for the pilot's layout, so ``plan`` recommends the pilot's
``server.instances``, clients per server and batch size with the number of servers.

From a bench results file (``results.json`` of ``offline-iaas bench``) it takes the measured
service throughput of one server for the workload that streams what the campaign streams (else
the workload of its mode, scaled), at the point (batch size, clients, ``server.instances``)
whose median repeat was highest among those a server of the campaign can run (instances at
most the cores it gets, ``server.cpus``; clients at most the exported repository's sequence
slots), and divides the campaign's data by the throughput the deadline needs:

    needed      = data seconds / (target hours x 3600)                   [data-s / s]
    per server  = measured x (bench window work / campaign window work)  [data-s / s]
    servers     = ceil(needed x headroom / per server)

where window work = windows per data second x window samples x streamed channels (the cost
of a convolutional network grows with each; an assumption the output states, and 1 when the
workload is the campaign's stream), and the headroom covers server start-up, the warm-up
windows every piece streams again, and stragglers. It recommends that point's instances,
clients and batch size: the rate it used is the rate of exactly that layout. With
``search.inject`` the rate is divided by 1 + the foreground's extra windows
(``sizing/foreground.py``), and an e2e campaign's search on the raw strain is in it: measured
(the ``e2e-inject`` workload) or, where the bench has no measurement of it, estimated from the
``bbhnet`` workload's limit (``sizing/raw_search.py``).

Either way the recommendation is checked with ``make-dag``'s own planning
(``sizing/feasible.py``) before it is printed, and ``merge.shard_seconds`` is never below what
keeps the longest stretch within the index's ``MAX_SHARDS_PER_STRETCH`` shards.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from offline_iaas.bench.results import Measurement, read_results
from offline_iaas.bench.targets import Spread
from offline_iaas.bench.workloads import (
    Workload,
    mode_workload,
    same_stream,
    without_raw_search,
    workload_of,
)
from offline_iaas.config import CampaignConfig
from offline_iaas.config_sections import ServerConfig
from offline_iaas.errors import ConfigError
from offline_iaas.merge.tree import least_shard_seconds
from offline_iaas.mode_packages import mode_package
from offline_iaas.network_streaming import streams
from offline_iaas.sizing.feasible import (
    longest_stretch_seconds,
    refusal,
    sequence_slots,
)
from offline_iaas.sizing.foreground import foreground_work
from offline_iaas.sizing.pilot import PilotRun, check_same_stream
from offline_iaas.sizing.raw_search import raw_search_cost, window_work_per_data_second

HEADROOM = 1.25


@dataclass(frozen=True)
class CapacityPlan:
    """What ``plan`` recommends, and why (one line per step of the arithmetic)."""

    servers: int
    clients_per_server: int
    batch_size: int
    instances: int
    """``server.instances``: the layout the rate was measured with."""
    hours: float
    """Expected streaming time with the recommended layout (without the headroom)."""
    explanation: list[str] = field(default_factory=list)
    per_server_rate: float = 0.0
    """Expected data seconds per wall second of one server."""
    wall_seconds: float = 0.0
    """Expected wall time of the whole campaign (start-up, streaming, merge)."""
    source: str = ""
    pilot_layout: dict | None = None
    """``plan --from-run``: the expected wall time with the pilot's own number of servers."""
    warnings: list[str] = field(default_factory=list)
    """What makes the plan doubtful (``plan`` logs them as warnings)."""
    merge_shard_seconds: float | None = None
    """The recommended ``merge.shard_seconds`` (``--from-run``: from the pilot's merge)."""
    stages: dict[str, float] = field(default_factory=dict)
    """Expected wall time of each stage on the critical path (``--from-run``)."""

    def to_dict(self) -> dict:
        """The plan as ``plan --json`` prints it."""
        return {
            "servers": self.servers, "clients_per_server": self.clients_per_server,
            "batch_size": self.batch_size, "instances": self.instances,
            "expected_data_seconds_per_second_per_server": round(self.per_server_rate, 3),
            "expected_streaming_hours": round(self.hours, 4),
            "expected_wall_seconds": round(self.wall_seconds, 1),
            "from": self.source, "overrides": self.overrides(), "explanation": self.explanation,
            "warnings": self.warnings,
            **({"with_pilot_layout": self.pilot_layout} if self.pilot_layout else {}),
            **({"critical_path": {k: round(v, 1) for k, v in self.stages.items()}}
               if self.stages else {}),
        }

    def overrides(self) -> list[str]:
        """``--set`` options applying the recommendation to the campaign config."""
        return [
            f"layout.servers={self.servers}",
            f"layout.clients_per_server={self.clients_per_server}",
            f"model.batch_size={self.batch_size}",
            f"server.instances={self.instances}",
            *([f"merge.shard_seconds={self.merge_shard_seconds:g}"]
              if self.merge_shard_seconds is not None else []),
        ]


def _bench_layouts(measurements: list[Measurement], name: str, streamed: bool
                   ) -> tuple[dict[tuple[int, int, int], Spread], str]:
    """The served repeats of workload ``name`` at each (batch size, clients, instances) that
    run the networks as a campaign with ``model.streamed = streamed`` does: the service, or
    for a whole-window campaign of a streamed workload its ``whole-window`` path; the
    service whatever it ran where the bench measured no path of that kind; and the path's
    description."""
    served = [m for m in measurements if m.workload == name
              and m.path in ("service", "whole-window")]
    alike = [m for m in served if m.streamed == streamed] or [
        m for m in served if m.path == "service"]
    groups: dict[tuple[int, int, int], list[Measurement]] = {}
    for m in alike:
        groups.setdefault((m.batch_size, m.clients, m.threads), []).append(m)
    described = "service"
    if alike:
        networks = "streamed layer by layer" if alike[0].streamed else "on whole windows"
        described = f"{alike[0].path} path (networks {networks})"
    return {point: Spread.of(group) for point, group in groups.items()}, described


def check_target_hours(target_hours: float) -> None:
    """ConfigError unless ``target_hours`` is a positive number of hours (not NaN nor inf)."""
    if not 0 < target_hours < math.inf:
        raise ConfigError(f"--target-hours must be positive and finite, got {target_hours:g}")


def plan_from_bench(
    config: CampaignConfig, target_hours: float, results_path: Path
) -> CapacityPlan:
    """Recommend a layout finishing ``config``'s span within ``target_hours``.

    Raises
    ------
    ConfigError
        A non-positive target, an unreadable results file, one without a service
        measurement of the workload matching the campaign, none a server of the campaign can
        run, or a layout ``make-dag`` would refuse.
    """
    check_target_hours(target_hours)
    header, measurements = read_results(results_path)
    wanted, load, exact, layouts, path = _measured_workload(config, measurements, results_path)
    cores = config.server.cpus
    (batch_size, clients, instances), spread = _best_runnable(
        layouts, load.name, cores, sequence_slots(config.model.repository), results_path)
    measured = spread.median

    channels = len(config.stream_channels)
    bench_work = window_work_per_data_second(
        load.channels, load.inference_rate_hz, load.kernel_samples
    )
    campaign_work = window_work_per_data_second(
        channels, config.model.inference_rate, config.kernel_samples
    )
    scaled = measured * bench_work / campaign_work
    raw = (raw_search_cost(config, measurements, batch_size, instances, scaled, results_path,
                           wanted.name) if wanted is not load else None)
    with_raw = scaled / (raw.factor if raw else 1.0)
    foreground = foreground_work(config)
    per_server = with_raw / (1 + (foreground.extra if foreground else 0.0))
    data_seconds = config.data.duration
    needed = data_seconds / (target_hours * 3600)
    servers = servers_needed(needed, per_server, target_hours)
    hours = data_seconds / (servers * per_server) / 3600
    shard_seconds = allowed_shard_seconds(config)

    device = header.get("device", "cpu")
    same = ", ".join(f"{n} instance(s) {s.median:,.1f}" for (b, k, n), s in sorted(
        layouts.items()) if (b, k) == (batch_size, clients))
    lines = [
        f"campaign: {config.source or 'config'}: mode {config.model.mode}, "
        f"{data_seconds:,.0f} s of data ({data_seconds / 86400:.1f} days), {channels} streamed "
        f"channel(s) at {config.data.sample_rate:g} Hz, {config.kernel_samples}-sample windows "
        f"at {config.model.inference_rate:g} Hz",
        f"needed: {data_seconds:,.0f} data-s / ({target_hours:g} h x 3600 s/h) = "
        f"{needed:,.2f} data-s/s",
        f"bench: {results_path} ({device}, {header.get('machine', {}).get('cpu', 'unknown CPU')}"
        f", {header.get('machine', {}).get('cores', '?')} cores, commit "
        f"{header.get('commit', 'unknown')}): the {load.name!r} workload's {path}, median of "
        f"{len(spread.rates)} repeat(s), at its best layout a campaign server can run "
        f"(instances <= server.cpus = {cores or 'instances + 1'}): {measured:,.1f} data-s/s "
        f"[{min(spread.rates):,.1f}-{max(spread.rates):,.1f}] at batch {batch_size}, "
        f"{clients} client(s), {instances} instance(s) (at this batch and clients: {same})",
        (f"scaling: none, the {load.name!r} workload streams the campaign's channels, rate and "
         f"windows: per server {scaled:,.2f} data-s/s" if exact else
         f"scaling: window work per data second = windows/s x window samples x channels: bench "
         f"{load.inference_rate_hz:g} x {load.kernel_samples} x {load.channels} = "
         f"{bench_work:,.0f}, campaign {config.model.inference_rate:g} x "
         f"{config.kernel_samples} x {channels} = {campaign_work:,.0f}; per server "
         f"{measured:,.1f} x {bench_work:,.0f} / {campaign_work:,.0f} = {scaled:,.2f} "
         "data-s/s (assumes the network's cost grows linearly with each)"),
        *([(raw.line if raw else f"raw-strain search: e2e with search.inject runs BBHnet again "
            f"on the raw strain (statistic_raw): measured, the {load.name!r} workload serves it")
           + f": per server {with_raw:,.2f} data-s/s"] if wanted.searches_raw_strain else []),
        *([foreground.line() + f": per server {per_server:,.2f} data-s/s"]
          if foreground else []),
        f"servers: ceil({needed:,.2f} x headroom {HEADROOM:g} / {per_server:,.2f}) = {servers} "
        "(headroom: server start-up, warm-up windows streamed again per piece, stragglers)",
        f"per server: {instances} instance(s), {clients} client(s), batch size {batch_size} "
        "(the layout measured)",
        f"expected: {data_seconds:,.0f} / ({servers} x {per_server:,.2f}) = "
        f"{hours * 3600:,.0f} s = {hours:.2f} h of streaming (target {target_hours:g} h)",
    ]
    if shard_seconds != config.merge.shard_seconds:
        lines.append(f"merge: merge.shard_seconds={shard_seconds:g} (the config's "
                     f"{config.merge.shard_seconds:g} s would put more shards in the longest "
                     "stretch than the index holds)")
    return checked(config, CapacityPlan(
        servers, clients, batch_size, instances, hours, lines, per_server, hours * 3600,
        str(results_path), warnings=_bench_warnings(config.server, header, device),
        merge_shard_seconds=None if shard_seconds == config.merge.shard_seconds
        else shard_seconds))


def _measured_workload(
    config: CampaignConfig, measurements: list[Measurement], results_path: Path
) -> tuple[Workload, Workload, bool, dict[tuple[int, int, int], Spread], str]:
    """The bench workload whose service measurements stand for ``config``'s stream: the
    campaign's own, else its mode's, else (a raw-strain search) the graph without the raw
    search, whose cost ``raw_search_cost`` adds. Returns the workload wanted, the one measured,
    whether it streams the campaign's channels, rate and windows, its layouts and its path."""
    load, exact = workload_of(config)
    streamed = streams(config)
    layouts, path = _bench_layouts(measurements, load.name, streamed)
    if not layouts and exact:  # the campaign's own stream was not measured: its mode's
        load, exact = mode_workload(config.model.mode, config.outputs.searches_raw_strain), False
        layouts, path = _bench_layouts(measurements, load.name, streamed)
    wanted = load
    if not layouts and load.searches_raw_strain:  # the graph without it, the raw search added
        load = without_raw_search(load)
        layouts, path = _bench_layouts(measurements, load.name, streamed)
        exact = same_stream(load, config)
    if not layouts:
        raise ConfigError(
            f"{results_path}: no service measurement of the {load.name!r} workload (the bench "
            f"workload of mode {config.model.mode!r}): run offline-iaas bench with it"
        )
    return wanted, load, exact, layouts, path


def _best_runnable(
    layouts: dict[tuple[int, int, int], Spread], workload: str, cores: int, slots: int | None,
    results_path: Path,
) -> tuple[tuple[int, int, int], Spread]:
    """The fastest measured layout (batch size, clients, instances) and its spread that a
    campaign server can run: at most ``cores`` (``server.cpus``; 0: any) instances, at most
    the repository's ``slots`` sequence slots (None: unknown) of clients."""
    runnable = {point: spread for point, spread in layouts.items()
                if (not cores or point[2] <= cores) and (slots is None or point[1] <= slots)}
    if not runnable:
        raise ConfigError(
            f"{results_path}: every {workload!r} layout measured needs more than the campaign's "
            f"server gives (server.cpus = {cores}: at most that many instances; the repository's "
            f"{slots} sequence slots: at most that many clients per server)")
    return max(runnable.items(), key=lambda item: item[1].median)


def _bench_warnings(server: ServerConfig, header: dict[str, Any], device: str) -> list[str]:
    """Where the bench's machine (``header``, its ``device``) is not the campaign's
    ``server``: a CPU bench for a GPU campaign, a bench server sharing other cores than
    ``server.cpus``."""
    warnings = []
    cores = server.cpus
    if server.gpus > 0 and "gpu" not in str(device).lower():
        warnings.append(
            f"the campaign asks for {server.gpus} GPU(s) per server but the "
            "bench ran on a CPU server: measure on the GPU node and "
            "pass its results with --from-bench"
        )
    if cores and cores != header.get("machine", {}).get("cores", cores):
        warnings.append(
            f"the bench's server shared {header['machine']['cores']} cores with its clients; a "
            f"campaign server gets server.cpus = {cores}: measure on such a node, or run a pilot "
            "(--from-run) for its rate")
    return warnings


MOST_SERVERS = 100_000
"""``plan`` recommends at most this many servers: a deadline that needs more (``--target-hours
1e-300``) is refused in one line, not answered with a number of hundreds of digits."""


def servers_needed(needed: float, per_server: float, target_hours: float) -> int:
    """``ceil(needed x HEADROOM / per_server)`` servers, at least one (data seconds per second
    needed, data seconds per second of one server); ConfigError beyond ``MOST_SERVERS``."""
    servers = needed * HEADROOM / per_server
    if not servers <= MOST_SERVERS:
        raise ConfigError(f"--target-hours {target_hours:g} needs {servers:.3g} servers of "
                          f"{per_server:,.2f} data-s/s (more than {MOST_SERVERS:,} plan "
                          "recommends): give the campaign a longer deadline")
    return max(1, math.ceil(servers))


def checked(config: CampaignConfig, plan: CapacityPlan) -> CapacityPlan:
    """``plan`` if ``make-dag`` accepts ``config`` with its overrides; ConfigError otherwise."""
    reason = refusal(config, plan.overrides())
    if reason is not None:
        raise ConfigError(f"plan: make-dag would refuse the layout that meets this deadline "
                          f"({' '.join(plan.overrides())}): {reason}")
    return plan


def plan_from_run(config: CampaignConfig, target_hours: float, pilot: PilotRun) -> CapacityPlan:
    """Recommend a layout for ``config`` from a finished pilot campaign of the same config.

    Raises
    ------
    ConfigError
        A non-positive target, a pilot that is not finished, or one of another mode or
        stream (its rate would not apply).
    """
    check_target_hours(target_hours)
    check_same_stream(pilot, config)
    layout, batch_size = pilot.config.layout, pilot.config.model.batch_size  # the pilot's
    # the pilot's rate holds for its own foreground: scaled to the campaign's
    foreground, pilot_foreground = foreground_work(config), foreground_work(pilot.config)
    scale_foreground = ((1 + (pilot_foreground.extra if pilot_foreground else 0.0))
                        / (1 + (foreground.extra if foreground else 0.0)))
    per_server = pilot.streaming_rate / layout.servers * scale_foreground
    data_seconds = config.data.duration
    needed = data_seconds / (target_hours * 3600)
    servers = servers_needed(needed, per_server, target_hours)
    scale = data_seconds / pilot.data_seconds

    shard_seconds = recommend_shard_seconds(config, pilot.merge_rate,
                                            data_seconds / (servers * per_server))
    tail, tail_line = merge_tail(config.data.duration, pilot, shard_seconds, scale)

    def wall_with(n_servers: int) -> tuple[float, float]:
        streaming = data_seconds / (n_servers * per_server)
        return streaming, pilot.start_seconds + streaming + tail + pilot.other_seconds

    streaming, wall = wall_with(servers)
    lines = [
        f"campaign: {config.source or 'config'}: mode {config.model.mode}, "
        f"{data_seconds:,.0f} s of data",
        f"pilot: {pilot.run.path}: {pilot.data_seconds:,.0f} s of data on {layout.servers} "
        f"server(s) x {layout.clients_per_server} client(s), batch {batch_size}: "
        f"{pilot.run_seconds:.1f} s in all = start-up {pilot.start_seconds:.1f} s + streaming "
        f"{pilot.streaming_seconds:.1f} s + merge {pilot.merge_seconds:.1f} s + rest "
        f"{pilot.other_seconds:.1f} s",
        f"per server: {pilot.data_seconds:,.0f} / {pilot.streaming_seconds:.1f} s / "
        f"{layout.servers}" + (f" x {scale_foreground:.3f}" if scale_foreground != 1 else "")
        + f" = {per_server:,.2f} data-s/s (the campaign path as it ran)",
        *([foreground.line() + (f"; the pilot's {pilot_foreground.extra:.1%}"
                                if pilot_foreground else "")] if foreground else []),
        f"needed: {data_seconds:,.0f} data-s / ({target_hours:g} h x 3600 s/h) = "
        f"{needed:,.2f} data-s/s",
        f"servers: ceil({needed:,.2f} x headroom {HEADROOM:g} / {per_server:,.2f}) = {servers}",
        f"per server: {pilot.config.server.instances} instance(s), {layout.clients_per_server} "
        f"client(s), batch size {batch_size} (the pilot's: its rate is that layout's"
        + (f"; the config has server.instances = {config.server.instances}"
           if config.server.instances != pilot.config.server.instances else "") + ")",
        tail_line,
        f"critical path: servers start {pilot.start_seconds:,.1f} s -> clients stream "
        f"{data_seconds:,.0f} / ({servers} x {per_server:,.2f}) = {streaming:,.1f} s -> merge "
        f"{tail:,.1f} s -> rest {pilot.other_seconds:.1f} s = {wall:,.1f} s "
        f"({wall / 3600:.2f} h; target {target_hours:g} h)",
        f"with the pilot's layout ({layout.servers} server(s)): expected wall "
        f"{wall_with(layout.servers)[1]:,.1f} s",
    ]
    return checked(config, CapacityPlan(
        servers, layout.clients_per_server, batch_size, pilot.config.server.instances,
        streaming / 3600, lines, per_server, wall, str(pilot.run.path),
        {"servers": layout.servers, "wall_seconds": wall_with(layout.servers)[1]},
        merge_shard_seconds=shard_seconds,
        stages={"start_seconds": pilot.start_seconds, "streaming_seconds": streaming,
                "merge_seconds": tail, "rest_seconds": pilot.other_seconds}))


MOST_SHARD_SECONDS = 65536.0
"""``plan``'s shard choices are powers of two from 1024 s to this (beyond it only where a
stretch needs longer shards to stay within ``MAX_SHARDS_PER_STRETCH``)."""
MERGE_TAIL_FRACTION = 0.02
"""``plan`` picks the largest shard whose merge after the last client takes at most this
fraction of the streaming time (fewer, larger files and DAG nodes; a short tail)."""


def shard_choices(config: CampaignConfig) -> list[float]:
    """``merge.shard_seconds`` that ``plan`` considers: powers of two from 1024 s, multiples of
    the output frame files, none putting more shards in the longest stretch than the index
    holds."""
    package = mode_package(config.model.mode)
    parts = package.built_in if package is not None else None
    frame = (parts.file_seconds(config.mode_section)
             if parts is not None and parts.file_seconds is not None else 1.0)
    least = least_shard_seconds(longest_stretch_seconds(config))
    powers = [2.0 ** k for k in range(10, 48) if 2.0 ** k >= least
              and abs(2.0 ** k / frame - round(2.0 ** k / frame)) < 1e-9]
    choices = [c for c in powers if c <= MOST_SHARD_SECONDS] or powers[:1]
    return choices or [frame * max(1, math.ceil(least / frame))]


def allowed_shard_seconds(config: CampaignConfig) -> float:
    """The config's ``merge.shard_seconds`` if ``make-dag`` takes it (0, one merge node, always
    is), else the least of ``shard_choices``."""
    size = config.merge.shard_seconds
    if size <= 0 or size >= least_shard_seconds(longest_stretch_seconds(config)):
        return size
    return min(shard_choices(config))


def recommend_shard_seconds(config: CampaignConfig, merge_rate: float,
                            streaming_seconds: float) -> float:
    """The largest of ``shard_choices`` whose shard merge takes at most ``MERGE_TAIL_FRACTION``
    of the streaming time, the least of them when none is that fast; the config's own (if
    ``make-dag`` takes it) when the merge's throughput is unknown."""
    if merge_rate <= 0:
        return allowed_shard_seconds(config)
    fitting = shard_choices(config)
    within = [c for c in fitting if c / merge_rate <= MERGE_TAIL_FRACTION * streaming_seconds]
    return max(within) if within else min(fitting)


def merge_tail(data_seconds: float, pilot: PilotRun, shard_seconds: float, scale: float
               ) -> tuple[float, str]:
    """The merge's time after the last client (seconds) and the line that explains it: the
    last shard merge and the index, or the single merge of all the ``data_seconds``."""
    if pilot.merge_rate <= 0:
        tail = pilot.merge_seconds * scale
        return tail, (f"merge: {pilot.merge_seconds:.1f} s x {scale:.3g} = {tail:,.1f} s (the "
                      "pilot records no merge throughput)")
    single = data_seconds / pilot.merge_rate
    if shard_seconds <= 0:
        return single, (f"merge: one node, {data_seconds:,.0f} / {pilot.merge_rate:,.1f} "
                        f"data-s/s = {single:,.1f} s after the last client")
    setup = pilot.merge_setup_seconds
    last = setup + min(shard_seconds, data_seconds) / pilot.merge_rate
    tail = last + pilot.index_seconds + pilot.job_start_seconds
    shards = math.ceil(data_seconds / shard_seconds)
    return tail, (
        f"merge: {pilot.merge_rate:,.1f} data-s/s per shard merge after a {setup:.1f} s set-up "
        f"(the pilot's); recommend merge.shard_seconds={shard_seconds:g} (~{shards} shard "
        f"merges): the last takes {setup:.1f} + {min(shard_seconds, data_seconds):g} / "
        f"{pilot.merge_rate:,.1f} = {last:,.1f} s after the last client, the index "
        f"{pilot.index_seconds:.1f} s, start-up {pilot.job_start_seconds:.1f} s = "
        f"{tail:,.1f} s (one merge node: {single:,.1f} s)")
