"""What e2e's search on the raw strain adds to a server's work, where the bench did not measure
the graph that runs it.

An e2e campaign with ``search.inject`` serves BBHnet twice per window, on the cleaned strain
and on the raw strain (``pipeline.searches_raw_strain``): the second run is a snapshotter and
BBHnet inside the same request, nothing more on the wire. The bench's ``e2e-inject`` workload
measures that graph; without it ``plan`` takes the ``e2e`` workload's rate and adds, per data
second, what BBHnet alone takes on the raw strain's windows: the ``bbhnet`` workload's limit
(``pipeline.mode_stream`` in-process, the snapshotter and BBHnet with no server, one process per
instance as the server runs them) at the same batch size and instances, scaled by window work
like any workload mismatch (``bench.workloads.network_workload`` finds that workload: the
one of the mode whose record serves the campaign's statistic network alone)::

    raw seconds per data second = (campaign's BBHnet work / bbhnet workload's work) / limit rate
    per server = rate without / (1 + rate without x raw seconds per data second)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from offline_iaas.bench.results import Measurement
from offline_iaas.bench.targets import Spread
from offline_iaas.bench.workloads import Workload, network_workload
from offline_iaas.config import CampaignConfig
from offline_iaas.errors import ConfigError
from offline_iaas.mode_packages import network_kind
from offline_iaas.network_streaming import streams


def window_work_per_data_second(channels: int, rate_hz: float, kernel_samples: int) -> float:
    """Samples the network reads per data second: windows/s x window samples x channels."""
    return rate_hz * kernel_samples * channels


@dataclass(frozen=True)
class RawSearchCost:
    """The raw search's estimated share of a server's time, and how it was estimated."""

    factor: float
    """The rate without the raw search is divided by this."""
    line: str
    """``plan``'s line, before the rate it leads to."""


def _limit_spreads(measurements: list[Measurement], load: Workload, instances: int,
                   streamed: bool) -> dict[int, Spread]:
    """Workload ``load``'s limit repeats at ``instances``, one process per instance (the
    server's layout), by batch size: its network streamed layer by layer or on whole windows
    as ``streamed`` says (the bench's ``limit`` of a streamed workload, its
    ``whole-window-limit``)."""
    groups: dict[int, list[Measurement]] = {}
    for m in measurements:
        if (m.path in ("limit", "whole-window-limit") and m.streamed == streamed
                and m.workload == load.name and m.threads == instances
                and m.extra.get("processes", instances) == instances):
            groups.setdefault(m.batch_size, []).append(m)
    return {batch: Spread.of(group) for batch, group in groups.items()}


def raw_search_cost(config: CampaignConfig, measurements: list[Measurement], batch_size: int,
                    instances: int, rate_without: float, results_path: Path,
                    measured_name: str) -> RawSearchCost:
    """The raw search's cost over ``rate_without`` (data seconds per second of one server
    serving the graph without it, at ``batch_size`` and ``instances``), from the ``bbhnet``
    workload's limit in ``measurements``: at the same batch size, else the slowest batch
    size measured at ``instances`` (the estimate errs towards more servers).

    Raises
    ------
    ConfigError
        No ``bbhnet`` limit at ``instances`` in the results file.
    """
    streamed = streams(config)
    load = network_workload(config.mode.statistic_network)
    title = network_kind(config.mode.statistic_network).title
    spreads = _limit_spreads(measurements, load, instances, streamed)
    if not spreads:
        raise ConfigError(
            f"{results_path}: no measurement of the {measured_name!r} workload (e2e with "
            f"search.inject also searches the raw strain), nor the {load.name!r} workload's "
            f"{'streamed' if streamed else 'whole-window'} limit at {instances} "
            f"instance(s) to estimate that search from: run offline-iaas "
            f"bench --workloads {measured_name}")
    same = batch_size in spreads
    batch, spread = ((batch_size, spreads[batch_size]) if same
                     else min(spreads.items(), key=lambda item: item[1].median))
    limit_rate = spread.median
    bench_work = window_work_per_data_second(
        len(load.ifos), load.inference_rate_hz, load.kernel_samples)
    raw_work = window_work_per_data_second(
        len(config.ifos), config.model.inference_rate, config.kernel_samples)
    raw_seconds = raw_work / bench_work / limit_rate
    factor = 1 + rate_without * raw_seconds
    return RawSearchCost(factor, (
        f"raw-strain search: {config.model.mode} with search.inject runs {title} again on the "
        f"raw strain (statistic_raw), which the bench did not measure (no {measured_name!r} "
        f"workload): "
        f"estimated from the {load.name!r} workload's limit (the snapshotter and {title} "
        f"in-process, no server), median {limit_rate:,.1f} data-s/s at batch {batch}"
        + ("" if same else f" (none at batch {batch_size}: the slowest batch measured)")
        + f", {instances} instance(s), scaled by window work {raw_work:,.0f} / "
        f"{bench_work:,.0f}: {raw_seconds * 1000:.3g} ms per data second beside "
        f"{1000 / rate_without:.3g} ms without it; the rate per data second is divided by "
        f"1 + {rate_without:,.2f} x {raw_seconds:.4g} = {factor:.3f}"))
