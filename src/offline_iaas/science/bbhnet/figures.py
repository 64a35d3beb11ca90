"""BBHnet's figures in the report: the cumulative rate of background and zero-lag triggers,
the sensitive time-volume against the IFAR threshold, and found/missed injections."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from matplotlib.figure import Figure

from offline_iaas.report.plots import WIDTH, default_style, png_bytes, subplots
from offline_iaas.science.bbhnet.summary import InjectionRow, SensitivePoint


@default_style
def cumulative_rate_figure(background: np.ndarray, livetime_seconds: float,
                           zero_lag: np.ndarray, analysed_seconds: float,
                           threshold: float | None) -> bytes:
    """Rate of triggers at or above each statistic (per day): the time slides' background as
    a step line, the zero-lag triggers as points over it."""
    day = 86400.0
    fig = Figure(figsize=(WIDTH, 4.5), layout="constrained")
    ax = subplots(fig)
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
    return png_bytes(fig)


@default_style
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
    ax = subplots(fig)
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
    return png_bytes(fig)


@default_style
def found_missed_figure(rows: Sequence[InjectionRow], ifar_threshold_years: float) -> bytes:
    """Each injection in analysed time at its luminosity distance and source-frame chirp
    mass: found (IFAR at least the threshold) or missed."""
    fig = Figure(figsize=(WIDTH, 4.5), layout="constrained")
    ax = subplots(fig)
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
    return png_bytes(fig)
