"""The merge tree: which part of the campaign each shard merge owns, and what it reads (pure
logic, no I/O).

With ``merge.shard_seconds = C > 0`` the analysis is cut at the multiples of ``C`` seconds of
GPS time (``C`` a multiple of ``deepclean.frame_seconds``, so a cleaned frame file never spans
two shards). Shard ``shard<i>`` owns, of every output, the values whose time lies in its
interval: the statistic (and the time slides) by the GPS time stamped on each window, the
band-passed prediction and the cleaned strain by sample time. It writes only those, but the
post-processing of a value reads beyond it: the zero-phase band-pass reads the 64 s blocks
holding the shard's samples, padded by 16 s (``physics.zero_phase_reach``), the trigger
clustering ``cluster_seconds / 2`` either way (``physics.cluster_reach_windows``); a time
slide is clustered over its formed windows only (from ``stretches.first_formed_window``), so
it reaches no further than the zero lag, and its rows are the statistic's (each client's part
holds its kept windows' slides, formed on the server from the history it streamed). A shard
therefore stages the kept windows ``rows`` of each stretch (its own widened by that padding)
from the parts, and is the DAG child of exactly the clients whose pieces hold any of them.
With ``data.on_bad_file = "gap"`` a bad frame file met while streaming cuts its stretch in
two, which moves where the band-pass blocks of the rest of it start: a shard merge is then the
child of every client of the stretches it touches, whose parts record every such file.

Positions are kept-window indices within a stretch (``rows``, the parts' and the output's
row numbering) and sample indices within a stretch's per-sample series (``samples``: the
band-passed prediction and the cleaned strain).
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass

from offline_iaas.config import CampaignConfig
from offline_iaas.errors import ConfigError
from offline_iaas.geometry import StreamGeometry
from offline_iaas.gps import gps_span_text
from offline_iaas.physics import cluster_reach_windows, zero_phase_reach
from offline_iaas.records import ClientShare, MergeShard
from offline_iaas.rundir import SHARD_PREFIX
from offline_iaas.stretches import Stretch, output_x0

Range = tuple[int, int]

MAX_SHARDS_PER_STRETCH = 2000
"""The index gives each stretch's series one HDF5 external-storage entry per shard, and HDF5
holds at most about 2,700 of them (a 64 KiB object header message)."""


def least_shard_seconds(longest_seconds: float) -> float:
    """The shortest ``merge.shard_seconds`` that keeps a stretch of ``longest_seconds`` within
    ``MAX_SHARDS_PER_STRETCH`` shards (however it falls on the shard grid)."""
    return longest_seconds / (MAX_SHARDS_PER_STRETCH - 1)


def shard_node(index: int) -> str:
    """The DAG node name of shard merge ``index`` (``shard0``...)."""
    return f"{SHARD_PREFIX}{index}"


@dataclass(frozen=True)
class StretchExtent:
    """What one merge (a shard, or the single merge) does with one stretch."""

    stretch: Stretch
    rows: Range
    """Kept windows staged from the parts (owned ones and the padding)."""
    statistic_rows: Range
    """Kept windows of the statistic and slides it writes."""
    samples: Range
    """Samples of its per-sample series (the band-passed prediction and the cleaned strain)
    it writes."""


def owned_range(x0: float, dx: float, n: int, gps_start: float, gps_end: float) -> Range:
    """Indices ``[a, b)`` of a series (``x0 + i dx``, ``n`` values) with times in
    ``[gps_start, gps_end)``."""

    def first_at_or_after(gps: float) -> int:
        return min(n, max(0, math.ceil((gps - x0) / dx - 1e-6)))

    return first_at_or_after(gps_start), first_at_or_after(gps_end)


def stretch_series(config: CampaignConfig, stretch: Stretch
                   ) -> dict[str, tuple[float, float, int]]:
    """``x0, dx, length`` of a stretch's series of each shape the campaign writes:
    ``windows`` (the statistic's; ``slides`` follows it) and ``samples`` (the per-sample
    outputs' and the groups of their shape)."""
    outputs = config.outputs
    kept = stretch.kept_windows(config.geometry)
    found = {}
    if "statistic" in outputs.names:
        found["windows"] = (output_x0(config.geometry, stretch, "statistic"),
                            config.stride_seconds, kept)
    if outputs.sample_series:
        rate = config.data.sample_rate
        found["samples"] = (output_x0(config.geometry, stretch, outputs.sample_series[0]),
                            1 / rate, kept * config.stride_samples)
    return found


def _needed_rows(config: CampaignConfig, kept: int, windows: Range, samples: Range) -> Range:
    """Kept windows the post-processing of the owned ranges reads."""
    lo, hi = kept, 0
    if windows[1] > windows[0]:
        reach = (cluster_reach_windows(config.search.cluster_seconds, config.stride_seconds)
                 if config.mode.triggers else 0)
        lo, hi = max(0, windows[0] - reach), min(kept, windows[1] + reach)
    if samples[1] > samples[0]:
        s = config.stride_samples
        a, b = zero_phase_reach(samples[0], samples[1], kept * s, config.data.sample_rate)
        lo, hi = min(lo, a // s), max(hi, -(-b // s))
    return (lo, hi) if hi > lo else (0, 0)


def whole_extents(geometry: StreamGeometry, stretches: list[Stretch]) -> list[StretchExtent]:
    """The single merge's (and the reference's) extents: every stretch, all of it."""
    extents = []
    for stretch in stretches:
        kept = stretch.kept_windows(geometry)
        extents.append(StretchExtent(stretch, (0, kept), (0, kept),
                                     (0, kept * geometry.stride_samples)))
    return extents


def shard_extents(config: CampaignConfig, stretches: list[Stretch], gps_start: float,
                  gps_end: float) -> list[StretchExtent]:
    """The extents of the shard ``[gps_start, gps_end)``: the stretches it owns values of."""
    extents = []
    starts = [s.gps_start for s in stretches]
    # a stretch's outputs lie within its own bounds
    first = max(0, bisect.bisect_right(starts, gps_start) - 1)
    for stretch in stretches[first:]:
        if stretch.gps_start >= gps_end:
            break
        series = stretch_series(config, stretch)
        owned = {name: owned_range(*xs, gps_start, gps_end) for name, xs in series.items()}
        windows, samples = owned.get("windows", (0, 0)), owned.get("samples", (0, 0))
        if windows[1] <= windows[0] and samples[1] <= samples[0]:
            continue
        rows = _needed_rows(config, stretch.kept_windows(config.geometry), windows, samples)
        extents.append(StretchExtent(stretch, rows, windows, samples))
    return extents


def extent_data_seconds(config: CampaignConfig, extents: list[StretchExtent]) -> float:
    """Seconds of data whose outputs the extents write."""
    seconds = 0.0
    by_sample = bool(config.outputs.sample_series)
    for e in extents:
        if by_sample:
            seconds += (e.samples[1] - e.samples[0]) / config.data.sample_rate
        else:
            seconds += (e.statistic_rows[1] - e.statistic_rows[0]) * config.stride_seconds
    return seconds


def shard_bounds(shard_seconds: float, stretches: list[Stretch]) -> list[tuple[float, float]]:
    """The shard intervals ``[k C, (k + 1) C)`` (``C``: ``merge.shard_seconds``) that meet the
    stretches, in order."""
    if not stretches or shard_seconds <= 0:
        return []
    first = math.floor(stretches[0].gps_start / shard_seconds)
    last = math.floor(stretches[-1].gps_end / shard_seconds) + 1
    found, stretch_at = [], 0
    for k in range(first, last):
        lo, hi = k * shard_seconds, (k + 1) * shard_seconds
        # a window is stamped with its end: the last stamp of a stretch is its end
        while stretch_at < len(stretches) and stretches[stretch_at].gps_end < lo:
            stretch_at += 1
        if stretch_at < len(stretches) and stretches[stretch_at].gps_start < hi:
            found.append((float(lo), float(hi)))
    return found


def shard_merges(config: CampaignConfig, stretches: list[Stretch],
                shares: list[ClientShare]) -> list[MergeShard]:
    """The shard merges of a campaign (none when ``merge.shard_seconds`` is 0), each with the
    clients whose kept windows it reads."""
    warmup = config.stretch_warmup_windows
    # per stretch, the clients' kept windows in order: (first kept, end kept, node)
    held: dict[int, list[tuple[int, int, str]]] = {}
    for share in shares:
        for p in share.pieces:
            held.setdefault(p.stretch, []).append(
                (p.output_start - warmup, p.output_stop - warmup, share.node))
    for pieces in held.values():
        pieces.sort()
    order = {share.node: share.index for share in shares}
    size = config.merge.shard_seconds
    for stretch in stretches if size > 0 else []:
        count = math.floor(stretch.gps_end / size) - math.floor(stretch.gps_start / size) + 1
        length = stretch.gps_end - stretch.gps_start
        if count > MAX_SHARDS_PER_STRETCH:
            raise ConfigError(
                f"{config.source}: stretch GPS "
                f"{gps_span_text(stretch.gps_start, stretch.gps_end)} "
                f"spans {count} shards of merge.shard_seconds = {size:g} s; the index holds at "
                f"most {MAX_SHARDS_PER_STRETCH} per stretch: raise merge.shard_seconds to at "
                f"least {math.ceil(least_shard_seconds(length))}")
    shards = []
    for gps_start, gps_end in shard_bounds(config.merge.shard_seconds, stretches):
        extents = shard_extents(config, stretches, gps_start, gps_end)
        if not extents:
            continue
        clients: set[str] = set()
        for e in extents:
            pieces = held.get(e.stretch.index, [])
            if config.data.on_bad_file == "gap":  # a bad file anywhere in the stretch moves
                clients.update(node for *_, node in pieces)  # its parts' edges: all of it
                continue
            at = max(0, bisect.bisect_right(pieces, (e.rows[0], math.inf, "")) - 1)
            for lo, hi, node in pieces[at:]:
                if lo >= e.rows[1]:
                    break
                if hi > e.rows[0]:
                    clients.add(node)
        shards.append(MergeShard(
            index=len(shards), node=shard_node(len(shards)), gps_start=float(gps_start),
            gps_end=float(gps_end), clients=tuple(sorted(clients, key=order.__getitem__)),
            data_seconds=float(extent_data_seconds(config, extents))))
    return shards
