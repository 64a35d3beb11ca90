"""BBHnet's figures in the report: the cumulative rate of background and zero-lag triggers,
the sensitive time-volume against the IFAR threshold, and found/missed injections."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from matplotlib.figure import Figure

from offline_iaas.report.plots import WIDTH, default_style, png_bytes, subplots
from offline_iaas.science.bbhnet.summary import InjectionRow, SensitivePoint

DAY_SECONDS = 86400.0


@dataclass(frozen=True)
class CumulativeRate:
    """One curve of the cumulative-rate figure: each trigger's statistic, loudest first, and
    the rate (per day) of triggers at least as loud in ``seconds`` (``cumulative_rate``)."""

    statistic: np.ndarray
    per_day: np.ndarray
    seconds: float


def cumulative_rate(statistic: np.ndarray, seconds: float) -> CumulativeRate:
    """The rate of ``statistic``'s triggers at or above each of them (equal ones counted
    alike) in ``seconds`` of time, per day; no points without time."""
    loud = np.sort(np.asarray(statistic, np.float64))[::-1] if seconds > 0 else np.zeros(0)
    at_least = len(loud) - np.searchsorted(loud[::-1], loud, "left")
    per_day = at_least / seconds * DAY_SECONDS if len(loud) else np.zeros(0)
    return CumulativeRate(loud, per_day, float(seconds))


@default_style
def cumulative_rate_figure(background: CumulativeRate, zero_lag: CumulativeRate | None,
                           threshold: float | None) -> bytes:
    """Rate of triggers at or above each statistic (per day, ``cumulative_rate``): the time
    slides' background as a step line, the zero-lag triggers as points over it (None: not
    drawn)."""
    fig = Figure(figsize=(WIDTH, 4.5), layout="constrained")
    ax = subplots(fig)
    if len(background.statistic):
        ax.step(background.statistic, background.per_day, where="post", color="tab:gray",
                label=f"background ({background.seconds:.0f} s of time slides)")
    if zero_lag is not None and len(zero_lag.statistic):
        ax.scatter(zero_lag.statistic, zero_lag.per_day, s=10, color="tab:purple", zorder=3,
                   label=f"zero lag ({zero_lag.seconds:.0f} s outside the cuts)")
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
