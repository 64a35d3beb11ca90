"""The report's figures, drawn with matplotlib's Agg canvas and returned as PNG bytes.

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
from matplotlib.scale import LogScale

from offline_iaas.report.search import StatisticTrace
from offline_iaas.report.spectra import StrainSpectra
from offline_iaas.report.timeline import Bar, Coverage, MonitorRates
from offline_iaas.summary_physics import InjectionRow, SensitivePoint

WIDTH = 10.0
"""Figure width in inches (at 100 dpi: 1000 pixels)."""
DPI = 100
STATUS_COLOURS = {
    "done": "tab:green", "complete": "tab:green", "failed": "tab:red", "running": "tab:blue",
    "interrupted": "tab:purple", "prerun": "tab:cyan", "deferred": "tab:cyan",
    "stopped": "tab:gray", "exited": "tab:gray", "removed": "tab:orange", "not-run": "lightgray",
}
MAX_ROWS_LABELLED = 40
ASD_FMIN_HZ = 5.0
"""Lowest frequency shown in the ASD plots."""


P = ParamSpec("P")


def _default_style(draw: Callable[P, bytes]) -> Callable[P, bytes]:
    @functools.wraps(draw)
    def styled(*args: P.args, **kwargs: P.kwargs) -> bytes:
        with matplotlib.style.context("default"):
            return draw(*args, **kwargs)

    return styled


def _png(fig: Figure) -> bytes:
    FigureCanvasAgg(fig)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI)
    return buffer.getvalue()


def _subplots(fig: Figure, *args: Any, **kwargs: Any) -> Any:
    return fig.subplots(*args, subplot_kw={"axes_class": Axes}, **kwargs)


def _colour(index: int) -> Any:
    return f"C{index % 10}"


@_default_style
def asd_figure(ifo: str, spectra: StrainSpectra, band: tuple[float, float]) -> bytes:
    """ASD of raw and cleaned strain (log-log) and their ratio, the coupling band shaded."""
    fig = Figure(figsize=(WIDTH, 6.5), layout="constrained")
    top, bottom = _subplots(fig, 2, 1, sharex=True, height_ratios=(2, 1))
    keep = spectra.frequencies > 0
    f = spectra.frequencies[keep]
    # matplotlib's own log scale (gwpy registers another under the name "log")
    top.set_xscale(LogScale(top.xaxis))
    top.set_yscale(LogScale(top.yaxis))
    if spectra.raw is not None:
        top.plot(f, np.sqrt(spectra.raw[keep]), color="tab:gray", lw=1, label="raw")
    top.plot(f, np.sqrt(spectra.clean[keep]), color="tab:blue", lw=1, label="cleaned")
    for ax in (top, bottom):
        ax.axvspan(*band, color="tab:orange", alpha=0.2, lw=0)
        ax.grid(True, which="both", alpha=0.3)
    top.set_ylabel(r"ASD [strain/$\sqrt{\mathrm{Hz}}$]")
    top.set_title(f"{ifo}: {spectra.seconds:.0f} s of data; coupling band "
                  f"{band[0]:g}-{band[1]:g} Hz shaded")
    top.legend(loc="upper right")
    if spectra.raw is not None:
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.sqrt(spectra.clean[keep] / spectra.raw[keep])
        bottom.plot(f, ratio, color="tab:blue", lw=1)
    bottom.axhline(1.0, color="black", lw=0.8)
    bottom.set_ylabel("cleaned / raw")
    bottom.set_xlabel("Frequency [Hz]")
    bottom.set_xlim(max(f[0], ASD_FMIN_HZ), f[-1])
    return _png(fig)


@_default_style
def statistic_figure(
    traces: Sequence[StatisticTrace],
    triggers: np.ndarray | None,
    injections: Sequence[InjectionRow],
    threshold: float | None,
    t0: float,
) -> bytes:
    """BBHnet's statistic against time, triggers and injection times marked."""
    fig = Figure(figsize=(WIDTH, 4.5), layout="constrained")
    ax = _subplots(fig)
    for i, trace in enumerate(traces):
        label = "statistic" if trace.block == 1 else f"statistic (max of {trace.block})"
        ax.plot(trace.time - t0, trace.value, color="tab:blue", lw=0.7,
                label=label if i == 0 else None)
    if triggers is not None and len(triggers):
        ax.scatter(triggers["time"] - t0, triggers["statistic"], s=12, color="tab:purple",
                   zorder=3, label="triggers")
    for label, found, style in (("found injection", True, "-"), ("missed injection", False, "--")):
        times = [i.gps_time - t0 for i in injections if i.found == found]
        for j, time in enumerate(times):
            ax.axvline(time, color="tab:green" if found else "tab:red", ls=style, lw=1,
                       label=label if j == 0 else None)
    if threshold is not None:
        ax.axhline(threshold, color="black", lw=0.8, ls=":", label="threshold")
    ax.set_xlabel(f"Time [s] from GPS {t0:.0f}")
    ax.set_ylabel("statistic")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="small")  # hides no point
    return _png(fig)


@_default_style
def cumulative_rate_figure(background: np.ndarray, livetime_seconds: float,
                           zero_lag: np.ndarray, analysed_seconds: float,
                           threshold: float | None) -> bytes:
    """Rate of triggers at or above each statistic (per day): the time slides' background as
    a step line, the zero-lag triggers as points over it."""
    day = 86400.0
    fig = Figure(figsize=(WIDTH, 4.5), layout="constrained")
    ax = _subplots(fig)
    ordered = np.sort(background)[::-1]
    if len(ordered):
        ax.step(ordered, np.arange(1, len(ordered) + 1) / livetime_seconds * day, where="post",
                color="tab:gray", label=f"background ({livetime_seconds:.0f} s of time slides)")
    loud = np.sort(zero_lag)[::-1]
    if len(loud):
        ax.scatter(loud, np.arange(1, len(loud) + 1) / analysed_seconds * day, s=10,
                   color="tab:purple", zorder=3, label=f"zero lag ({analysed_seconds:.0f} s)")
    if threshold is not None:
        ax.axvline(threshold, color="black", lw=0.8, ls=":", label="IFAR threshold")
    ax.set_yscale("log")
    ax.set_xlabel("statistic")
    ax.set_ylabel("rate of triggers at or above [1/day]")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="upper right", fontsize="small")
    return _png(fig)


@_default_style
def sensitivity_figure(curve: Sequence[SensitivePoint], reach_years: float) -> bytes:
    """VT (or the found fraction, without the population's volume) against the IFAR
    threshold with its interval (``sensitivity.py``) where the background measures it; the
    background's reach marked (beyond it nothing is drawn: not measurable)."""
    with_volume = any(p.vt_gpc3_years is not None for p in curve)

    def value(p: SensitivePoint) -> float | None:
        return p.vt_gpc3_years if with_volume else p.found_fraction

    def interval(p: SensitivePoint) -> tuple[float, float] | None:
        return p.vt_interval_gpc3_years if with_volume else p.found_fraction_interval

    shown = [p for p in curve if p.measurable and value(p) is not None]
    fig = Figure(figsize=(WIDTH, 4.5), layout="constrained")
    ax = _subplots(fig)
    if shown:
        ifar = np.array([p.ifar_threshold_years for p in shown])
        low, high = np.array([interval(p) for p in shown]).T
        ax.fill_between(ifar, low, high, color="tab:blue", alpha=0.25, lw=0,
                        label="interval")
        ax.plot(ifar, [value(p) for p in shown], "o-", ms=3, color="tab:blue",
                label="measured")
    ax.axvline(reach_years, color="black", lw=0.8, ls=":",
               label=f"background livetime {reach_years:.2g} yr (not measurable beyond)")
    ax.set_xscale("log")
    ax.set_xlabel("IFAR threshold [yr]")
    ax.set_ylabel("VT [Gpc$^3$ yr]" if with_volume else "found fraction")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="upper right", fontsize="small")
    return _png(fig)


@_default_style
def found_missed_figure(rows: Sequence[InjectionRow], ifar_threshold_years: float) -> bytes:
    """Each injection in analysed time at its luminosity distance and source-frame chirp
    mass: found (IFAR at least the threshold) or missed."""
    fig = Figure(figsize=(WIDTH, 4.5), layout="constrained")
    ax = _subplots(fig)
    for found, style in ((True, {"marker": "o", "color": "tab:blue", "label": "found"}),
                         (False, {"marker": "x", "color": "tab:red", "label": "missed"})):
        chosen = [r for r in rows if r.found == found]
        if chosen:
            ax.scatter([r.distance_mpc for r in chosen], [r.chirp_mass for r in chosen],
                       **style)
    ax.set_xlabel("luminosity distance [Mpc]")
    ax.set_ylabel("source-frame chirp mass [M$_\\odot$]")
    ax.set_title(f"found at IFAR >= {ifar_threshold_years:.2g} yr", fontsize="medium")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="upper right", fontsize="small")
    return _png(fig)


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


@_default_style
def coverage_figure(cov: Coverage) -> bytes:
    """Analysable stretches and gaps, then each client's pieces coloured by its server."""
    clients = list(dict.fromkeys(bar.row for bar in cov.pieces))
    rows = ["analysable", *clients]
    servers = list(dict.fromkeys(bar.group for bar in cov.pieces))
    t0 = cov.span[0]
    fig = Figure(figsize=(WIDTH, _row_height(len(rows))), layout="constrained")
    ax = _subplots(fig)
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
    return _png(fig)


@_default_style
def gantt_figure(bars: Sequence[Bar]) -> bytes:
    """One row per DAG node, one bar per attempt coloured by how it ended."""
    rows = list(dict.fromkeys(bar.row for bar in bars))
    t0 = min(bar.start for bar in bars)
    fig = Figure(figsize=(WIDTH, _row_height(len(rows))), layout="constrained")
    ax = _subplots(fig)
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
    return _png(fig)


@_default_style
def monitor_figure(rates: dict[str, dict[str, MonitorRates]]) -> bytes:
    """Throughput and mean queue time over time, one row of panels per server."""
    servers = list(rates)
    t0 = min((float(r.time[0]) for models in rates.values() for r in models.values()
              if len(r.time)), default=0.0)
    fig = Figure(figsize=(WIDTH, 1.0 + 2.4 * len(servers)), layout="constrained")
    axes = np.atleast_2d(_subplots(fig, len(servers), 2, sharex=True, squeeze=False))
    for row, server in enumerate(servers):
        left, right = axes[row]
        for i, (model, r) in enumerate(sorted(rates[server].items())):
            left.plot(r.time - t0, r.throughput, color=_colour(i), lw=1, label=model)
            right.plot(r.time - t0, r.queue_ms, color=_colour(i), lw=1, label=model)
        left.set_ylabel(f"{server}\ninferences/s")
        right.set_ylabel("queue [ms/request]")
        for ax in (left, right):
            ax.grid(True, alpha=0.3)
        left.legend(loc="upper right", fontsize="x-small")
    for ax in axes[-1]:
        ax.set_xlabel("Wall time [s] from the first poll")
    return _png(fig)
