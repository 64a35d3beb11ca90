"""Sensitive time-volume against the inverse false-alarm rate (pure math, plain arrays).

Given the injections that fell in analysed time, each with the largest IFAR of a trigger
within ``found_seconds`` of it (``best_ifars``; none: never found), an injection is found at
a threshold when that IFAR is at least the threshold, and

    VT(threshold) = V x T x f,   f = found / N

with ``T`` the analysed (zero-lag) time in years and ``V`` the population's volume. For a
population drawn uniform in comoving volume and source-frame time (``data/population.py``),
``V`` is ``time_volume_gpc3`` = ``int dVc/dz / (1 + z) dz``: then ``VT`` is in Gpc^3 years of
source-frame time and a rate ``R`` (Gpc^-3 yr^-1) gives ``R VT`` detections. ``Vc(z_max)``
(``comoving_volume_gpc3``) in its place would overstate it by the neglected time dilation.
The result is only a sensitive volume when ``z_max`` reaches beyond the search's horizon;
otherwise it is bounded by ``V T``.

Uncertainty
    The found fraction's binomial standard error ``sqrt(f (1 - f) / N)`` (the normal
    approximation; it is 0 at ``f = 0`` or ``1``, where it understates the uncertainty of a
    small ``N``), times ``V T``: the Monte-Carlo error of the injection campaign only, not
    of calibration or waveform systematics.
Sensitive distance
    The radius of a sphere of volume ``VT / T``: ``(3 VT / (4 pi T))^(1/3)``.
Background
    ``N`` time slides of ``T`` give a background livetime ``L``; a trigger louder than the
    whole background has ``FAR = 1 / L`` (``physics.false_alarm_rates``), so no IFAR above
    ``L`` (years) can be measured: VT at an IFAR threshold above ``L`` only counts
    injections louder than every background trigger, and is flagged as not measurable.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from offline_iaas.physics import SECONDS_PER_YEAR


@dataclass(frozen=True)
class SensitivePoint:
    """VT at one IFAR threshold (module docstring)."""

    ifar_threshold_years: float
    found: int
    injections: int
    found_fraction: float
    found_fraction_error: float
    """Binomial standard error ``sqrt(f (1 - f) / N)``."""
    vt_gpc3_years: float
    vt_error_gpc3_years: float
    sensitive_distance_mpc: float
    background_needed_years: float
    """Background livetime that can measure this IFAR (the threshold itself)."""
    measurable: bool
    """The background's livetime reaches the threshold (True when no livetime was given)."""


def ifar_thresholds(lowest_years: float, highest_years: float, per_decade: int = 4
                    ) -> np.ndarray:
    """Log grid of IFAR thresholds (years) from ``lowest_years`` to at least ``highest_years``,
    ``per_decade`` points per factor of 10."""
    if not 0 < lowest_years <= highest_years or per_decade < 1:
        raise ValueError(f"need 0 < lowest <= highest and per_decade >= 1, got {lowest_years}, "
                         f"{highest_years}, {per_decade}")
    decades = math.log10(highest_years / lowest_years)
    steps = math.ceil(decades * per_decade - 1e-9)
    return lowest_years * 10.0 ** (np.arange(steps + 1) / per_decade)


def best_ifars(
    injection_gps: Sequence[float],
    trigger_gps: np.ndarray,
    trigger_ifar_years: np.ndarray,
    found_seconds: float,
) -> np.ndarray:
    """The largest IFAR (years) of a trigger within ``found_seconds`` of each injection; 0
    where no trigger is that close (found at no threshold)."""
    trigger_gps = np.asarray(trigger_gps, np.float64)
    trigger_ifar_years = np.asarray(trigger_ifar_years, np.float64)
    out = np.zeros(len(injection_gps))
    for i, t in enumerate(injection_gps):
        near = np.abs(trigger_gps - t) <= found_seconds
        if near.any():
            out[i] = float(trigger_ifar_years[near].max())
    return out


def sensitive_distance_mpc(volume_gpc3: float) -> float:
    """Radius (Mpc) of a sphere of ``volume_gpc3``."""
    return 1000.0 * (3.0 * volume_gpc3 / (4.0 * math.pi)) ** (1.0 / 3.0)


def max_measurable_ifar_years(background_livetime_seconds: float) -> float:
    """The largest IFAR (years) a background of this livetime can assign: its livetime."""
    return background_livetime_seconds / SECONDS_PER_YEAR


def sensitive_volume(
    ifar_years: Sequence[float | None],
    volume_gpc3: float,
    analysed_years: float,
    thresholds_years: Sequence[float],
    background_livetime_seconds: float | None = None,
) -> list[SensitivePoint]:
    """VT at each IFAR threshold (module docstring).

    Parameters
    ----------
    ifar_years
        Per injection in analysed time, the largest IFAR of a trigger near it (``best_ifars``);
        ``None`` or 0: not near any trigger.
    volume_gpc3
        The population's volume (``population.time_volume_gpc3(z_max)``).
    analysed_years
        Zero-lag time analysed (years).
    thresholds_years
        IFAR thresholds (``ifar_thresholds``).
    background_livetime_seconds
        Time-slide livetime, to flag thresholds the background cannot measure.
    """
    values = np.array([0.0 if v is None else float(v) for v in ifar_years])
    n = len(values)
    if n == 0:
        raise ValueError("no injections in the analysed time: VT is undefined")
    if np.isnan(values).any():
        raise ValueError("an injection's IFAR is NaN")
    if not (volume_gpc3 > 0 and analysed_years > 0):
        raise ValueError(f"volume and analysed time must be positive, got {volume_gpc3} Gpc^3, "
                         f"{analysed_years} yr")
    ceiling = (math.inf if background_livetime_seconds is None
               else max_measurable_ifar_years(background_livetime_seconds))
    points = []
    for threshold in thresholds_years:
        found = int(np.sum(values >= threshold))
        fraction = found / n
        error = math.sqrt(fraction * (1.0 - fraction) / n)
        vt = volume_gpc3 * analysed_years * fraction
        points.append(SensitivePoint(
            ifar_threshold_years=float(threshold), found=found, injections=n,
            found_fraction=fraction, found_fraction_error=error, vt_gpc3_years=vt,
            vt_error_gpc3_years=volume_gpc3 * analysed_years * error,
            sensitive_distance_mpc=sensitive_distance_mpc(vt / analysed_years),
            background_needed_years=float(threshold), measurable=bool(threshold <= ceiling),
        ))
    return points


def background_note(threshold_years: float, background_livetime_seconds: float) -> str:
    """``VT at IFAR 1 yr needs 1 yr of background, have 0.02 yr`` (or ``... has ...``)."""
    have = max_measurable_ifar_years(background_livetime_seconds)
    verdict = "has" if have >= threshold_years else "needs"
    return (f"VT at IFAR {threshold_years:g} yr {verdict} {threshold_years:g} yr of background, "
            f"have {have:.3g} yr")
