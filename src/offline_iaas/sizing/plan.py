"""``offline-iaas plan``: servers, clients per server and batch size for a campaign.

From a pilot (``--from-run RUN``, a finished campaign of the same config over a shorter span)
it takes what the campaign path itself measured (``sizing/pilot.py``): the streaming rate of
the pilot's servers, the start-up before the first request and the merge time, and scales
them to the campaign's span:

    per server  = pilot data seconds / pilot streaming seconds / pilot servers
    servers     = ceil(needed x headroom / per server)
    wall        = start-up + data seconds / (servers x per server)
                  + pilot merge seconds x (data seconds / pilot data seconds) + the rest

From a bench results file (``results.json`` of ``offline-iaas bench``) it takes the measured
service throughput of one server for the workload that matches the campaign's mode, at the
(batch size, clients) point where it was highest, scales it to the campaign's stream, and
divides the campaign's data by the throughput the deadline needs:

    needed      = data seconds / (target hours x 3600)                   [data-s / s]
    per server  = measured x (bench window work / campaign window work)  [data-s / s]
    servers     = ceil(needed x headroom / per server)

where window work = windows per data second x window samples x streamed channels (the cost
of a convolutional network grows with each; an assumption the output states), and the
headroom covers server start-up, the warm-up windows every piece streams again, and
stragglers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from offline_iaas.bench.report import points
from offline_iaas.bench.results import read_results
from offline_iaas.bench.workloads import WORKLOAD_OF_MODE, Workload, workload
from offline_iaas.config import CampaignConfig
from offline_iaas.errors import ConfigError
from offline_iaas.repository.pipeline import ensemble_outputs
from offline_iaas.sizing.pilot import PilotRun, check_same_stream

HEADROOM = 1.25


@dataclass(frozen=True)
class CapacityPlan:
    """What ``plan`` recommends, and why (one line per step of the arithmetic)."""

    servers: int
    clients_per_server: int
    batch_size: int
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
    merge_chunk_seconds: float | None = None
    """The recommended ``merge.chunk_seconds`` (``--from-run``: from the pilot's merge)."""
    stages: dict[str, float] = field(default_factory=dict)
    """Expected wall time of each stage on the critical path (``--from-run``)."""

    def to_dict(self) -> dict:
        """The plan as ``plan --json`` prints it."""
        return {
            "servers": self.servers, "clients_per_server": self.clients_per_server,
            "batch_size": self.batch_size,
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
            *([f"merge.chunk_seconds={self.merge_chunk_seconds:g}"]
              if self.merge_chunk_seconds is not None else []),
        ]


def window_work_per_data_second(channels: int, rate_hz: float, kernel_samples: int) -> float:
    """Samples the network reads per data second: windows/s x window samples x channels."""
    return rate_hz * kernel_samples * channels


def plan_from_bench(
    config: CampaignConfig, target_hours: float, results_path: Path
) -> CapacityPlan:
    """Recommend a layout finishing ``config``'s span within ``target_hours``.

    Raises
    ------
    ConfigError
        A non-positive target, an unreadable results file, or one without a service
        measurement of the workload matching the campaign's mode.
    """
    if not target_hours > 0:
        raise ConfigError(f"--target-hours must be positive, got {target_hours}")
    header, measurements = read_results(results_path)
    name = WORKLOAD_OF_MODE[config.model.mode]
    load: Workload = workload(name)
    served = [p for p in points(measurements) if p.workload == name and "service" in p.best]
    if not served:
        raise ConfigError(
            f"{results_path}: no service measurement of the {name!r} workload (the bench "
            f"workload of mode {config.model.mode!r}): run offline-iaas bench with it"
        )
    best = max(served, key=lambda p: p.best["service"].data_seconds_per_second)
    measured = best.best["service"].data_seconds_per_second

    channels = len(config.stream_channels)
    bench_work = window_work_per_data_second(
        load.channels, load.inference_rate_hz, load.kernel_samples
    )
    campaign_work = window_work_per_data_second(
        channels, config.model.inference_rate, config.kernel_samples
    )
    per_server = measured * bench_work / campaign_work
    data_seconds = config.data.duration
    needed = data_seconds / (target_hours * 3600)
    servers = max(1, math.ceil(needed * HEADROOM / per_server))
    hours = data_seconds / (servers * per_server) / 3600

    device = header.get("device", "cpu")
    lines = [
        f"campaign: {config.source or 'config'}: mode {config.model.mode}, "
        f"{data_seconds:,.0f} s of data ({data_seconds / 86400:.1f} days), {channels} streamed "
        f"channel(s) at {config.data.sample_rate:g} Hz, {config.kernel_samples}-sample windows "
        f"at {config.model.inference_rate:g} Hz",
        f"needed: {data_seconds:,.0f} data-s / ({target_hours:g} h x 3600 s/h) = "
        f"{needed:,.2f} data-s/s",
        f"bench: {results_path} ({device}, {header.get('machine', {}).get('cpu', 'unknown CPU')}"
        f"): best service throughput of one server on the {name!r} workload: "
        f"{measured:,.1f} data-s/s at batch {best.batch_size}, {best.clients} client(s)",
        f"scaling: window work per data second = windows/s x window samples x channels: bench "
        f"{load.inference_rate_hz:g} x {load.kernel_samples} x {load.channels} = "
        f"{bench_work:,.0f}, campaign {config.model.inference_rate:g} x "
        f"{config.kernel_samples} x {channels} = {campaign_work:,.0f}; per server "
        f"{measured:,.1f} x {bench_work:,.0f} / {campaign_work:,.0f} = {per_server:,.2f} "
        "data-s/s (assumes the network's cost grows linearly with each)",
        f"servers: ceil({needed:,.2f} x headroom {HEADROOM:g} / {per_server:,.2f}) = {servers} "
        "(headroom: server start-up, warm-up windows streamed again per piece, stragglers)",
        f"clients per server: {best.clients}, batch size: {best.batch_size} (the bench's best "
        "point)",
        f"expected: {data_seconds:,.0f} / ({servers} x {per_server:,.2f}) = "
        f"{hours * 3600:,.0f} s = {hours:.2f} h of streaming (target {target_hours:g} h)",
    ]
    warnings = []
    if config.server.gpus > 0 and "gpu" not in str(device).lower():
        warnings.append(
            f"the campaign asks for {config.server.gpus} GPU(s) per server but the "
            "bench ran on a CPU server: measure on the GPU node and "
            "pass its results with --from-bench"
        )
    clients = servers * best.clients
    if config.total_windows < clients:
        raise ConfigError(
            f"the recommended {clients} clients exceed the campaign's {config.total_windows} "
            "windows: the span is too short for this deadline's layout"
        )
    return CapacityPlan(servers, best.clients, best.batch_size, hours, lines, per_server,
                        hours * 3600, str(results_path), warnings=warnings)


def plan_from_run(config: CampaignConfig, target_hours: float, pilot: PilotRun) -> CapacityPlan:
    """Recommend a layout for ``config`` from a finished pilot campaign of the same config.

    Raises
    ------
    ConfigError
        A non-positive target, a pilot that is not finished, or one of another mode or
        stream (its rate would not apply).
    """
    if not target_hours > 0:
        raise ConfigError(f"--target-hours must be positive, got {target_hours}")
    check_same_stream(pilot, config)
    per_server = pilot.streaming_rate / pilot.servers
    data_seconds = config.data.duration
    needed = data_seconds / (target_hours * 3600)
    servers = max(1, math.ceil(needed * HEADROOM / per_server))
    scale = data_seconds / pilot.data_seconds

    chunk_seconds = recommend_chunk_seconds(config, pilot.merge_rate,
                                            data_seconds / (servers * per_server))
    tail, tail_line = merge_tail(config, pilot, chunk_seconds, scale)

    def wall_with(n_servers: int) -> tuple[float, float]:
        streaming = data_seconds / (n_servers * per_server)
        return streaming, pilot.start_seconds + streaming + tail + pilot.other_seconds

    streaming, wall = wall_with(servers)
    lines = [
        f"campaign: {config.source or 'config'}: mode {config.model.mode}, "
        f"{data_seconds:,.0f} s of data",
        f"pilot: {pilot.run.path}: {pilot.data_seconds:,.0f} s of data on {pilot.servers} "
        f"server(s) x {pilot.clients_per_server} client(s), batch {pilot.batch_size}: "
        f"{pilot.run_seconds:.1f} s in all = start-up {pilot.start_seconds:.1f} s + streaming "
        f"{pilot.streaming_seconds:.1f} s + merge {pilot.merge_seconds:.1f} s + rest "
        f"{pilot.other_seconds:.1f} s",
        f"per server: {pilot.data_seconds:,.0f} / {pilot.streaming_seconds:.1f} s / "
        f"{pilot.servers} = {per_server:,.2f} data-s/s (the campaign path as it ran)",
        f"needed: {data_seconds:,.0f} data-s / ({target_hours:g} h x 3600 s/h) = "
        f"{needed:,.2f} data-s/s",
        f"servers: ceil({needed:,.2f} x headroom {HEADROOM:g} / {per_server:,.2f}) = {servers}",
        f"clients per server: {pilot.clients_per_server}, batch size: {pilot.batch_size} (the "
        "pilot's)",
        tail_line,
        f"critical path: servers start {pilot.start_seconds:,.1f} s -> clients stream "
        f"{data_seconds:,.0f} / ({servers} x {per_server:,.2f}) = {streaming:,.1f} s -> merge "
        f"{tail:,.1f} s -> rest {pilot.other_seconds:.1f} s = {wall:,.1f} s "
        f"({wall / 3600:.2f} h; target {target_hours:g} h)",
        f"with the pilot's layout ({pilot.servers} server(s)): expected wall "
        f"{wall_with(pilot.servers)[1]:,.1f} s",
    ]
    return CapacityPlan(servers, pilot.clients_per_server, pilot.batch_size, streaming / 3600,
                        lines, per_server, wall, str(pilot.run.path),
                        {"servers": pilot.servers, "wall_seconds": wall_with(pilot.servers)[1]},
                        merge_chunk_seconds=chunk_seconds,
                        stages={"start_seconds": pilot.start_seconds,
                                "streaming_seconds": streaming, "merge_seconds": tail,
                                "rest_seconds": pilot.other_seconds})


CHUNK_CHOICES_SECONDS: tuple[float, ...] = tuple(2.0 ** k for k in range(10, 17))
"""``merge.chunk_seconds`` that ``plan`` considers: 1024 s to 65536 s, powers of two."""
MERGE_TAIL_FRACTION = 0.02
"""``plan`` picks the largest chunk whose merge after the last client takes at most this
fraction of the streaming time (fewer, larger files and DAG nodes; a short tail)."""


def recommend_chunk_seconds(config: CampaignConfig, merge_rate: float,
                            streaming_seconds: float) -> float:
    """The largest ``merge.chunk_seconds`` (a power of two, a multiple of the frame files) whose
    chunk merge takes at most ``MERGE_TAIL_FRACTION`` of the streaming time; the default when
    the merge's throughput is unknown."""
    if merge_rate <= 0:
        return config.merge.chunk_seconds
    frame = config.deepclean.frame_seconds if "noise" in ensemble_outputs(config) else 1.0
    fitting = [c for c in CHUNK_CHOICES_SECONDS if abs(c / frame - round(c / frame)) < 1e-9]
    within = [c for c in fitting if c / merge_rate <= MERGE_TAIL_FRACTION * streaming_seconds]
    return max(within) if within else min(fitting, default=config.merge.chunk_seconds)


def merge_tail(config: CampaignConfig, pilot: PilotRun, chunk_seconds: float, scale: float
               ) -> tuple[float, str]:
    """The merge's time after the last client (seconds) and the line that explains it: the
    last chunk merge and the index, or the single merge of all the data."""
    data_seconds = config.data.duration
    if pilot.merge_rate <= 0:
        tail = pilot.merge_seconds * scale
        return tail, (f"merge: {pilot.merge_seconds:.1f} s x {scale:.3g} = {tail:,.1f} s (the "
                      "pilot records no merge throughput)")
    single = data_seconds / pilot.merge_rate
    if chunk_seconds <= 0:
        return single, (f"merge: one node, {data_seconds:,.0f} / {pilot.merge_rate:,.1f} "
                        f"data-s/s = {single:,.1f} s after the last client")
    last = min(chunk_seconds, data_seconds) / pilot.merge_rate
    tail = last + pilot.index_seconds + pilot.job_start_seconds
    chunks = math.ceil(data_seconds / chunk_seconds)
    return tail, (
        f"merge: {pilot.merge_rate:,.1f} data-s/s per chunk merge (the pilot's); recommend "
        f"merge.chunk_seconds={chunk_seconds:g} (~{chunks} chunk merges): the last takes "
        f"{chunk_seconds:g} / {pilot.merge_rate:,.1f} = {last:,.1f} s after the last client, the "
        f"index {pilot.index_seconds:.1f} s, start-up {pilot.job_start_seconds:.1f} s = "
        f"{tail:,.1f} s (one merge node: {single:,.1f} s)")
