"""The campaign's time axes as plain data: coverage map, node timeline, server monitor rates.

Pure functions over what the run directory holds (``jobs/*.json``, ``local-state.json``,
``monitor/<server>.csv``); the plots draw what they return.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
from igwn_segments import segment, segmentlist

from offline_iaas.lifetime import is_running
from offline_iaas.local_state import Attempt, LocalState, unix_seconds
from offline_iaas.records import ClientShare


@dataclass(frozen=True)
class Bar:
    """One horizontal bar of a coverage map or timeline."""

    row: str
    """Label of the bar's row (a client node, a DAG node)."""
    start: float
    end: float
    group: str
    """What colours it: the server of a client share, the status of an attempt."""
    label: str = ""


@dataclass(frozen=True)
class Coverage:
    """Analysable time, gaps and client shares of a campaign, in GPS seconds."""

    span: tuple[float, float]
    stretches: list[tuple[float, float]]
    gaps: list[tuple[float, float]]
    pieces: list[Bar]
    """One bar per piece streamed; row = client node, group = its server."""
    bad_files: list[tuple[float, float]] = ()
    """Spans of frame files left out as gaps (``data.on_bad_file = "gap"``)."""


def span_gaps(
    span: tuple[float, float], stretches: Iterable[tuple[float, float]]
) -> list[tuple[float, float]]:
    """The parts of ``span`` that no stretch covers, in time order (exact: ends as given)."""
    covered = segmentlist(segment(a, b) for a, b in stretches).coalesce()
    return [(a, b) for a, b in segmentlist([segment(*span)]) - covered]


def coverage(
    span: tuple[float, float],
    shares: list[ClientShare],
    stretches: list[tuple[float, float]] | None = None,
    bad_files: list[tuple[float, float]] = (),
) -> Coverage:
    """Coverage map data of a campaign.

    Parameters
    ----------
    span
        GPS start and end of the configured span.
    shares
        The client shares (``RUN/jobs/<client>.json``).
    stretches
        Analysable stretches; when None, those the pieces name.
    bad_files
        GPS spans of the bad frame files whose spans are gaps.
    """
    if stretches is None:
        found = {(p.stretch_gps_start, p.stretch_gps_end) for s in shares for p in s.pieces}
        stretches = sorted(found)
    pieces = [
        Bar(share.node, p.gps_start, p.gps_end, share.server, f"sequence {p.sequence_id}")
        for share in sorted(shares, key=lambda s: s.index)
        for p in share.pieces
    ]
    return Coverage(span, sorted(stretches), span_gaps(span, stretches), pieces,
                    sorted(bad_files))


def node_attempts(state: LocalState) -> list[Bar]:
    """Timeline bars from run-local's ``local-state.json``: one per attempt of each node.

    Attempts come from each node's ``history``; a node without one (a state file from before
    it was kept) gives its last attempt. An attempt still running ends at the file's
    ``updated`` time; one recorded running whose process is gone (run-local killed) is
    ``interrupted``, as ``status`` shows it. Times are Unix seconds; the row order is the
    file's node order.
    """
    updated = unix_seconds(state.updated)
    bars: list[Bar] = []
    for name, node in state.nodes.items():
        history = list(node.history)
        if node.started and node.attempts not in {h.attempt for h in history}:
            status = node.status  # the attempt under way or last
            if status == "running" and node.pid is not None and not is_running(
                    node.pid, node.pid_start):
                status = "interrupted"
            history.append(Attempt(attempt=node.attempts, started=node.started,
                                   ended=node.ended, status=status))
        for item in history:
            start = unix_seconds(item.started)
            if start is None:
                continue
            end = unix_seconds(item.ended) or updated or start
            bars.append(Bar(name, start, max(end, start), item.status,
                            f"attempt {item.attempt}"))
    return bars


@dataclass(frozen=True)
class MonitorRates:
    """Rates of one model on one server between consecutive polls."""

    time: np.ndarray
    """Unix time at the end of each interval."""
    throughput: np.ndarray
    """Inferences per second."""
    queue_ms: np.ndarray
    """Mean queue time per successful request in the interval (ms; NaN without requests)."""


def monitor_rates(columns: dict[str, np.ndarray], max_points: int = 2000) -> MonitorRates:
    """Differences of cumulative counters between consecutive polls of one model.

    With more than ``max_points`` polls, every k-th poll (and the last) is used, so each rate
    is the exact mean over k poll intervals. An interval where a counter goes down (the server
    restarted) or the time does not advance is left out.
    """
    order = np.argsort(columns["unix_time"], kind="stable")
    step = max(1, -(-(len(order) - 1) // max_points))
    if step > 1:
        order = np.concatenate([order[:-1:step], order[-1:]])
    t = columns["unix_time"][order]
    inferences = np.diff(columns["inference_count"][order])
    successes = np.diff(columns["success_count"][order])
    queue = np.diff(columns["queue_ns"][order])
    dt = np.diff(t)
    keep = (dt > 0) & (inferences >= 0) & (successes >= 0) & (queue >= 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        throughput = inferences[keep] / dt[keep]
        queue_ms = np.where(successes[keep] > 0, queue[keep] / successes[keep] / 1e6, np.nan)
    return MonitorRates(t[1:][keep], throughput, queue_ms)
