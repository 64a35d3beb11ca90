"""The report's figures, drawn with matplotlib's Agg canvas and returned as PNG bytes (a mode
package's own figures, e.g. ``science/deepclean/figures.py``, are drawn with the same helpers:
``default_style``, ``subplots``, ``png_bytes``).

No pyplot: each figure is its own object, freed when the function returns. Every figure is
drawn in matplotlib's default style with matplotlib's own Axes, whatever an imported library
set globally (importing gwpy changes rcParams and registers its Axes as "rectilinear").
"""

from __future__ import annotations

import functools
import io
from collections.abc import Callable, Sequence
from typing import Any, ParamSpec

import matplotlib.style
import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from offline_iaas.report.search import StatisticTrace
from offline_iaas.report.timeline import Bar, Coverage, MonitorRates

WIDTH = 10.0
"""Figure width in inches (at 100 dpi: 1000 pixels)."""
DPI = 100
STATUS_COLOURS = {
    "done": "tab:green", "complete": "tab:green", "failed": "tab:red", "running": "tab:blue",
    "interrupted": "tab:purple", "prerun": "tab:cyan", "deferred": "tab:cyan",
    "stopped": "tab:gray", "exited": "tab:gray", "removed": "tab:orange", "not-run": "lightgray",
}
MAX_ROWS_LABELLED = 40


P = ParamSpec("P")


def default_style(draw: Callable[P, bytes]) -> Callable[P, bytes]:
    """``draw`` run in matplotlib's default style, whatever an imported library set."""
    @functools.wraps(draw)
    def styled(*args: P.args, **kwargs: P.kwargs) -> bytes:
        with matplotlib.style.context("default"):
            return draw(*args, **kwargs)

    return styled


def png_bytes(fig: Figure) -> bytes:
    """``fig`` drawn on the Agg canvas, as PNG bytes."""
    FigureCanvasAgg(fig)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI)
    return buffer.getvalue()


def subplots(fig: Figure, *args: Any, **kwargs: Any) -> Any:
    """``fig.subplots`` with matplotlib's own Axes (not the one gwpy registers)."""
    return fig.subplots(*args, subplot_kw={"axes_class": Axes}, **kwargs)


def _colour(index: int) -> Any:
    return f"C{index % 10}"


@default_style
def statistic_figure(
    traces: Sequence[StatisticTrace],
    triggers: np.ndarray | None,
    injections: Sequence[tuple[float, bool]],
    threshold: float | None,
    t0: float,
) -> bytes:
    """A statistic against time, its triggers and the injections (GPS time, found) marked."""
    fig = Figure(figsize=(WIDTH, 4.5), layout="constrained")
    ax = subplots(fig)
    for i, trace in enumerate(traces):
        label = "statistic" if trace.block == 1 else f"statistic (max of {trace.block})"
        ax.plot(trace.time - t0, trace.value, color="tab:blue", lw=0.7,
                label=label if i == 0 else None)
    if triggers is not None and len(triggers):
        ax.scatter(triggers["time"] - t0, triggers["statistic"], s=12, color="tab:purple",
                   zorder=3, label="triggers")
    for label, found, style in (("found injection", True, "-"), ("missed injection", False, "--")):
        times = [gps - t0 for gps, was_found in injections if was_found == found]
        for j, time in enumerate(times):
            ax.axvline(time, color="tab:green" if found else "tab:red", ls=style, lw=1,
                       label=label if j == 0 else None)
    if threshold is not None:
        ax.axhline(threshold, color="black", lw=0.8, ls=":", label="threshold")
    ax.set_xlabel(f"Time [s] from GPS {t0:.0f}")
    ax.set_ylabel("statistic")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="small")  # hides no point
    return png_bytes(fig)


def _row_height(rows: int) -> float:
    return min(12.0, 1.5 + 0.3 * rows)


def _label_rows(ax: Any, rows: list[str]) -> None:
    ax.set_ylim(-0.5, len(rows) - 0.5)
    ax.invert_yaxis()
    if len(rows) <= MAX_ROWS_LABELLED:
        ax.set_yticks(range(len(rows)), rows)
    else:
        ax.set_ylabel(f"{len(rows)} rows")
        ax.set_yticks([])


@default_style
def coverage_figure(cov: Coverage) -> bytes:
    """Analysable stretches and gaps, then each client's pieces coloured by its server."""
    clients = list(dict.fromkeys(bar.row for bar in cov.pieces))
    rows = ["analysable", *clients]
    servers = list(dict.fromkeys(bar.group for bar in cov.pieces))
    t0 = cov.span[0]
    fig = Figure(figsize=(WIDTH, _row_height(len(rows))), layout="constrained")
    ax = subplots(fig)
    ax.broken_barh([(a - t0, b - a) for a, b in cov.stretches], (-0.4, 0.8), color="tab:green")
    ax.broken_barh([(a - t0, b - a) for a, b in cov.gaps], (-0.4, 0.8), color="tab:red",
                   alpha=0.5, hatch="//")
    ax.broken_barh([(a - t0, b - a) for a, b in cov.bad_files], (-0.4, 0.8), color="black",
                   hatch="xx")
    for bar in cov.pieces:
        y = rows.index(bar.row)
        colour = _colour(servers.index(bar.group))
        ax.broken_barh([(bar.start - t0, bar.end - bar.start)], (y - 0.4, 0.8), color=colour)
    _label_rows(ax, rows)
    handles = [Patch(color="tab:green", label="analysable"),
               Patch(color="tab:red", alpha=0.5, hatch="//", label="gap")]
    if cov.bad_files:
        handles.append(Patch(color="black", hatch="xx", label="bad frame file"))
    handles += [Patch(color=_colour(i), label=s) for i, s in enumerate(servers)]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="small")
    ax.set_xlim(0, cov.span[1] - t0)
    ax.set_xlabel(f"Time [s] from GPS {t0:.0f}")
    ax.grid(True, axis="x", alpha=0.3)
    return png_bytes(fig)


@default_style
def gantt_figure(bars: Sequence[Bar]) -> bytes:
    """One row per DAG node, one bar per attempt coloured by how it ended."""
    rows = list(dict.fromkeys(bar.row for bar in bars))
    t0 = min(bar.start for bar in bars)
    fig = Figure(figsize=(WIDTH, _row_height(len(rows))), layout="constrained")
    ax = subplots(fig)
    statuses: list[str] = []
    for bar in bars:
        colour = STATUS_COLOURS.get(bar.group, "black")
        statuses += [] if bar.group in statuses else [bar.group]
        y = rows.index(bar.row)
        ax.broken_barh([(bar.start - t0, max(bar.end - bar.start, 1e-3))], (y - 0.4, 0.8),
                       color=colour, edgecolor="white", lw=0.5)
    _label_rows(ax, rows)
    handles = [Patch(color=STATUS_COLOURS.get(s, "black"), label=s) for s in statuses]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="small")
    ax.set_xlabel("Wall time [s] from the first start")
    ax.grid(True, axis="x", alpha=0.3)
    return png_bytes(fig)


@default_style
def monitor_figure(rates: dict[str, dict[str, MonitorRates]]) -> bytes:
    """Throughput and mean queue time over time, one row of panels per server."""
    servers = list(rates)
    t0 = min((float(r.time[0]) for models in rates.values() for r in models.values()
              if len(r.time)), default=0.0)
    fig = Figure(figsize=(WIDTH, 1.0 + 2.4 * len(servers)), layout="constrained")
    axes = np.atleast_2d(subplots(fig, len(servers), 2, sharex=True, squeeze=False))
    for row, server in enumerate(servers):
        left, right = axes[row]
        for i, (model, r) in enumerate(sorted(rates[server].items())):
            left.plot(r.time - t0, r.throughput, color=_colour(i), lw=1, label=model)
            right.plot(r.time - t0, r.queue_ms, color=_colour(i), lw=1, label=model)
        left.set_ylabel(f"{server}\ninferences/s")
        right.set_ylabel("queue [ms/request]")
        for ax in (left, right):
            ax.grid(True, alpha=0.3)
        if rates[server]:  # a server stopped before its first poll has no lines
            left.legend(loc="upper right", fontsize="x-small")
    for ax in axes[-1]:
        ax.set_xlabel("Wall time [s] from the first poll")
    return png_bytes(fig)
