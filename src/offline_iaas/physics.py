"""The campaign's physics on plain arrays: band-pass, ASD ratio, triggers, found/missed,
sensitive time-volume against the inverse false-alarm rate.

Used by the merge's post-processing (``merge/postprocess.py``), the reference and the demo
networks' evaluation (``models/evaluation.py``); it depends on the config and the numerical
libraries only, so both can import it.

DeepClean
    The averaged prediction is band-passed (Butterworth, ``[deepclean]`` band and order,
    forward and backward: zero phase) block by block (``BLOCK_SECONDS``) with ``PAD_SECONDS`` of
    real data on both sides, on a grid fixed by the stretch's start. The cleaned/raw ASD ratio
    (gwpy ``asd(method="median")``) is read at the strongest raw line in the band, and the worst
    deviation from 1 outside the band beyond a guard.
BBHnet
    Triggers: every value of the statistic that is the largest within ``+-cluster_seconds/2``
    in its stretch. With an injection list: the background is every trigger farther than
    ``exclusion_seconds`` from all injections; an injection is *found* when a trigger within
    ``found_seconds`` of its time beats the background's largest.
BBHnet with time slides (``bbhnet.time_shifts = N``)
    Slide ``k`` is formed at a window only where both of its windows (the first detector's at
    ``t``, the second's at ``t - kΔ``) lie in the stretch's analysed time, so in each stretch
    it starts ``kΔ`` after the zero lag; its formed windows are clustered like the zero lag,
    and its livetime is the stride times the windows it formed (``slide_livetime``); the
    background livetime is the sum over the slides. A trigger's false-alarm rate is the
    number of background triggers at least as loud per second of livetime; one louder than
    the whole background gets the bound ``1 / livetime``.
    An injection is found when a trigger within ``found_seconds`` has an inverse FAR of at
    least ``ifar_threshold_years``. With an injection list, as for the zero-lag background,
    a slide's trigger is left out when either detector's time (``t``, or ``t - kΔ`` for the
    second) lies within ``exclusion_seconds`` of an injection or inside the network's training
    span, and that time leaves the slide's livetime (``slide_livetime``): otherwise every
    injection would stand in the background once per slide, one detector's signal against
    the other's slid noise.
Sensitive time-volume against the inverse false-alarm rate
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
        whole background has ``FAR = 1 / L`` (``false_alarm_rates``), so no IFAR above
        ``L`` (years) can be measured: VT at an IFAR threshold above ``L`` only counts
        injections louder than every background trigger, and is flagged as not measurable.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import signal

from offline_iaas.config import CampaignConfig

BLOCK_SECONDS = 64.0
"""Samples band-passed at a time (s)."""
PAD_SECONDS = 16.0
"""Real data on each side of a block that the filter also sees (its transients decay in it)."""
ASD_MAX_SECONDS = 4096.0
"""At most this much of each stretch enters the ASD ratio (memory)."""


def bandpass_sos(config: CampaignConfig) -> np.ndarray:
    d = config.deepclean
    return signal.butter(d.filter_order, (d.band_low_hz, d.band_high_hz), btype="bandpass",
                         fs=config.data.sample_rate, output="sos")


def zero_phase_blocks(
    read: Callable[[int, int], np.ndarray], n_samples: int, sos: np.ndarray, sample_rate: float,
    first: int = 0, last: int | None = None,
) -> Iterator[tuple[int, np.ndarray]]:
    """Band-pass samples ``[first, last)`` of a stretch of ``n_samples`` block by block; yield
    ``(first sample, values)``.

    The blocks lie on a grid anchored at the stretch's first sample, each filtered with
    ``PAD_SECONDS`` of its neighbours, so a value depends only on the stretch and not on which
    part of it is asked for (a merge chunk gets the same values as the whole stretch).
    ``read(a, b)`` returns samples ``[a, b)`` of the stretch (float64).
    """
    last = n_samples if last is None else last
    block = int(round(BLOCK_SECONDS * sample_rate))
    for a in range(first - first % block, last, block):
        b = min(a + block, n_samples)
        lo, hi = zero_phase_reach(a, b, n_samples, sample_rate)
        values = signal.sosfiltfilt(sos, read(lo, hi))
        keep_from, keep_to = max(a, first), min(b, last)
        yield keep_from, values[keep_from - lo : keep_to - lo]


def zero_phase_reach(a: int, b: int, n_samples: int, sample_rate: float) -> tuple[int, int]:
    """The samples the band-pass of samples ``[a, b)`` reads: the blocks holding them, padded
    by ``PAD_SECONDS``, within the stretch."""
    block = int(round(BLOCK_SECONDS * sample_rate))
    pad = int(round(PAD_SECONDS * sample_rate))
    start = a - a % block
    end = min(n_samples, -(-b // block) * block)
    return max(0, start - pad), min(n_samples, end + pad)


def asd_ratio(
    raw: np.ndarray,
    cleaned: np.ndarray,
    sample_rate: float,
    fftlength: float,
    band_hz: tuple[float, float],
    guard_hz: float = 0.0,
    line_hz: float | None = None,
) -> dict[str, float]:
    """Cleaned/raw ASD ratio at the line (default: the strongest raw line in the band) and
    its extremes outside the band, ``guard_hz`` beyond its edges; also the worst deviation
    right outside the edges (no guard).

    "Outside" starts ``guard_hz`` beyond the band edges because the coupling's side bands reach
    past the band and the band-pass rolls off over about a hertz: even subtracting the true
    coupled noise changes the ASD by a few per cent within ~1.5 Hz of the edges.
    """
    from gwpy.timeseries import TimeSeries

    asds = [TimeSeries(x, sample_rate=sample_rate).asd(fftlength, method="median")
            for x in (raw, cleaned)]
    freqs = asds[0].frequencies.value
    ratio = asds[1].value / asds[0].value
    inside = (freqs >= band_hz[0]) & (freqs <= band_hz[1])
    if line_hz is None:
        line = int(np.flatnonzero(inside)[np.argmax(asds[0].value[inside])])
    else:
        line = int(np.argmin(np.abs(freqs - line_hz)))
    outside = (freqs > 0) & ((freqs < band_hz[0] - guard_hz) | (freqs > band_hz[1] + guard_hz))
    next_to_band = (freqs > 0) & ~inside
    return {
        "fftlength": fftlength,
        "guard_hz": guard_hz,
        "line_hz": float(freqs[line]),
        "ratio_at_line": float(ratio[line]),
        "max_ratio_in_band": float(ratio[inside].max()),
        "min_ratio_outside_band": float(ratio[outside].min()),
        "max_ratio_outside_band": float(ratio[outside].max()),
        "max_deviation_outside_band": float(np.abs(ratio[outside] - 1).max()),
        "max_deviation_at_band_edges": float(np.abs(ratio[next_to_band] - 1).max()),
    }


def held_out_samples(
    gps_start: float, n_samples: int, sample_rate: float,
    excluded: list[tuple[float, float]], max_samples: int,
) -> tuple[int, int]:
    """The longest run ``[a, b)`` of a series' samples outside every excluded GPS span,
    cut to its first ``max_samples``; ``(0, 0)`` when none is left."""
    cuts = sorted(
        (max(0, math.ceil((s - gps_start) * sample_rate - 1e-6)),
         min(n_samples, math.ceil((e - gps_start) * sample_rate - 1e-6)))
        for s, e in excluded
    )
    best, position = (0, 0), 0
    for lo, hi in [*cuts, (n_samples, n_samples)]:
        if lo > position and lo - position > best[1] - best[0]:
            best = (position, lo)
        position = max(position, hi)
    return best[0], min(best[1], best[0] + max_samples)


def cluster_triggers(values: np.ndarray, x0: float, dx: float, cluster_seconds: float
                     ) -> tuple[np.ndarray, np.ndarray]:
    """GPS times and values of the statistic's maxima within ``+-cluster_seconds / 2``.

    A value is kept when it is the largest within ``+-half`` samples and larger than every
    value in the ``half`` samples before it (of equal maxima, the first). The rule looks no
    further than ``half`` samples either way (``cluster_reach_windows``), so a merge chunk
    that reads that much beyond its ends finds the same triggers as the whole stretch.
    """
    keep = cluster_indices(values, cluster_reach_windows(cluster_seconds, dx))
    return x0 + keep * dx, values[keep]


def cluster_indices(values: np.ndarray, half: int) -> np.ndarray:
    """Indices of the values ``cluster_triggers`` keeps, ``half`` samples either way."""
    if half == 0 or not len(values):
        return np.arange(len(values))
    from scipy.ndimage import maximum_filter1d

    peak = maximum_filter1d(values, size=2 * half + 1, mode="constant", cval=-np.inf)
    before = np.concatenate([[-np.inf], values[:-1]]).astype(values.dtype)
    # the largest of the `half` values before each one: a window of `half` ending one earlier
    left = maximum_filter1d(before, size=half, mode="constant", cval=-np.inf,
                            origin=(half - 1) // 2)
    return np.flatnonzero((values == peak) & (left < values))


def cluster_reach_windows(cluster_seconds: float, dx: float) -> int:
    """How far (samples of the statistic) ``cluster_triggers`` looks on either side."""
    return max(0, int(round(cluster_seconds / 2 / dx)))


WHITENING_LOW_HZ = 20.0
"""BBHnet's whitening passes nothing below this frequency (the gain tapers up to 1.5 x it)."""
WHITENING_HIGH_FRACTION = 0.8
"""... and nothing above this fraction of the Nyquist frequency (tapering from 0.9 x it)."""


def whitening_band(freqs_hz: np.ndarray, low_hz: float, high_hz: float) -> np.ndarray:
    """BBHnet's whitening band: 1 on ``[1.5 low, 0.9 high]``, 0 outside ``[low, high]``,
    raised cosine in between (the fixed FIR's shape, and the rolling whitening's)."""
    freqs_hz = np.asarray(freqs_hz, np.float64)
    out = np.zeros_like(freqs_hz)
    up = (freqs_hz >= low_hz) & (freqs_hz < 1.5 * low_hz)
    out[up] = 0.5 - 0.5 * np.cos(np.pi * (freqs_hz[up] - low_hz) / (0.5 * low_hz))
    out[(freqs_hz >= 1.5 * low_hz) & (freqs_hz <= 0.9 * high_hz)] = 1.0
    down = (freqs_hz > 0.9 * high_hz) & (freqs_hz <= high_hz)
    out[down] = 0.5 + 0.5 * np.cos(np.pi * (freqs_hz[down] - 0.9 * high_hz) / (0.1 * high_hz))
    return out


SECONDS_PER_YEAR = 365.25 * 86400.0
"""Julian year (s): IFARs are in years."""


def false_alarm_rates(statistic: np.ndarray, background: np.ndarray, livetime_seconds: float
                      ) -> tuple[np.ndarray, np.ndarray]:
    """``(far in Hz, ifar in years)`` of each zero-lag trigger's ``statistic`` against the
    ``background`` triggers of ``livetime_seconds`` of time slides (module docstring).
    Without livetime (no slide formed outside the cuts: every stretch shorter than the
    smallest slide) no rate is measured: FAR ``inf``, IFAR 0."""
    if livetime_seconds < 0:
        raise ValueError(f"background livetime must not be negative, got {livetime_seconds}")
    if livetime_seconds == 0:
        return np.full(len(statistic), np.inf), np.zeros(len(statistic))
    ordered = np.sort(np.asarray(background, np.float64))
    louder = len(ordered) - np.searchsorted(ordered, np.asarray(statistic, np.float64), "left")
    far = np.maximum(louder, 1) / livetime_seconds
    return far, 1.0 / far / SECONDS_PER_YEAR


@dataclass(frozen=True)
class Injection:
    """One injection as the merge counts it (``data/injection_file.read_injection_list``)."""

    gps_time: float
    """Geocentre coalescence time (GPS)."""
    network_snr: float
    """Optimal network SNR against the noise the data have."""
    chirp_mass: float = math.nan
    """Source-frame chirp mass (Msun); NaN where the list does not say."""
    distance_mpc: float = math.nan
    """Luminosity distance (Mpc); NaN where the list does not say."""

    def row(self) -> dict[str, float]:
        """What a found/missed row records of it (the parameters only when known)."""
        known = {"chirp_mass": self.chirp_mass, "distance_mpc": self.distance_mpc}
        return {"gps_time": self.gps_time, "network_snr": self.network_snr,
                **{k: v for k, v in known.items() if math.isfinite(v)}}


def background_cuts(injections: list[Injection], config: CampaignConfig,
                    training: tuple[float, float] | None) -> list[tuple[float, float]]:
    """GPS spans no background trigger may come from: ``exclusion_seconds`` around every
    injection, and the network's training span."""
    b = config.bbhnet
    cuts = [(i.gps_time - b.exclusion_seconds, i.gps_time + b.exclusion_seconds)
            for i in injections]
    return cuts + ([(float(training[0]), float(training[1]))] if training is not None else [])


def slide_livetime(analysed: tuple[float, float], cuts: list[tuple[float, float]],
                   lag_seconds: float) -> float:
    """Seconds of a stretch's ``analysed`` span (first detector's time) where the slide of
    ``lag_seconds`` is formed and neither detector's data is cut: ``t`` and ``t -
    lag_seconds`` both in ``analysed`` (the slide's windows, times the stride) and both
    outside ``cuts``."""
    formed = (analysed[0] + lag_seconds, analysed[1])
    if formed[1] <= formed[0]:
        return 0.0
    moved = [(a + lag_seconds, b + lag_seconds) for a, b in cuts]
    return float(sum(b - a for a, b in subtract_spans([formed], cuts + moved)))


def outside_cuts(times: np.ndarray, cuts: list[tuple[float, float]]) -> np.ndarray:
    """Which ``times`` lie in none of the half-open ``cuts`` ``[start, end)``."""
    keep = np.ones(len(times), bool)
    for start, end in cuts:
        keep &= ~((times >= start) & (times < end))
    return keep


def best_near(times: np.ndarray, key: np.ndarray, gps: float, seconds: float) -> int | None:
    """Index of the trigger within ``seconds`` of ``gps`` with the largest ``key``, or None."""
    near = np.flatnonzero(np.abs(np.asarray(times) - gps) <= seconds)
    return int(near[np.argmax(np.asarray(key)[near])]) if len(near) else None


def found_missed_at_ifar(
    times: np.ndarray, ifar_years: np.ndarray, values: np.ndarray,
    injections: list[Injection], config: CampaignConfig,
    analysed: list[tuple[float, float]],
) -> dict[str, Any]:
    """Found/missed of the injections inside the analysed stretches at the config's IFAR
    threshold: found when a trigger within ``found_seconds`` has ``ifar >= threshold``."""
    b = config.bbhnet
    rows = []
    for injection in injections:
        if not any(s <= injection.gps_time < e for s, e in analysed):
            continue
        best = best_near(times, ifar_years, injection.gps_time, b.found_seconds)
        ifar = float(ifar_years[best]) if best is not None else 0.0
        rows.append({**injection.row(),
                     "statistic": float(values[best]) if best is not None else float("-inf"),
                     "ifar_years": ifar, "found": bool(ifar >= b.ifar_threshold_years)})
    return {"found": sum(r["found"] for r in rows), "missed": sum(not r["found"] for r in rows),
            "ifar_threshold_years": b.ifar_threshold_years, "injections": rows}


def subtract_spans(
    spans: list[tuple[float, float]], cuts: list[tuple[float, float]]
) -> list[tuple[float, float]]:
    """``spans`` without any part of ``cuts`` (all ``(start, end)`` in seconds)."""
    out = []
    for start, end in spans:
        pieces = [(start, end)]
        for cut_start, cut_end in cuts:
            pieces = [
                part
                for a, b in pieces
                for part in ((a, min(b, cut_start)), (max(a, cut_end), b))
                if part[1] > part[0]
            ]
        out.extend(pieces)
    return out


def found_missed(
    times: np.ndarray, values: np.ndarray, injections: list[Injection],
    config: CampaignConfig, analysed: list[tuple[float, float]],
    training: tuple[float, float] | None = None,
) -> dict[str, Any]:
    """Found/missed of the injections inside the analysed stretches (module docstring).

    The background leaves out ``exclusion_seconds`` around every injection and the network's
    ``training`` span (GPS), if known.
    """
    b = config.bbhnet
    cuts = [(i.gps_time - b.exclusion_seconds, i.gps_time + b.exclusion_seconds)
            for i in injections]
    if training is not None:
        cuts.append((float(training[0]), float(training[1])))
    background_spans = subtract_spans(analysed, cuts)
    in_background = np.zeros(len(times), bool)
    for start, end in background_spans:
        in_background |= (times > start) & (times < end)
    background = values[in_background]
    threshold = float(background.max()) if len(background) else float("inf")
    rows = []
    for injection in injections:
        if not any(s <= injection.gps_time < e for s, e in analysed):
            continue
        near = best_near(times, values, injection.gps_time, b.found_seconds)
        best = float(values[near]) if near is not None else float("-inf")
        rows.append({**injection.row(), "statistic": best, "found": bool(best > threshold)})
    return {
        "found": sum(r["found"] for r in rows),
        "missed": sum(not r["found"] for r in rows),
        "threshold": threshold,
        "background_seconds": float(sum(e - s for s, e in background_spans)),
        "training_gps": None if training is None else [float(x) for x in training],
        "injections": rows,
    }


# ---- applied to a campaign file being written ------------------------------------------------


# ---- sensitive time-volume against IFAR ----------------------------------------------------


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
    trigger_ifar_years = np.asarray(trigger_ifar_years, np.float64)
    out = np.zeros(len(injection_gps))
    for i, t in enumerate(injection_gps):
        best = best_near(trigger_gps, trigger_ifar_years, t, found_seconds)
        if best is not None:
            out[i] = float(trigger_ifar_years[best])
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


NAMED_IFARS_YEARS: dict[str, float] = {"1 month": 1.0 / 12.0, "1 year": 1.0}
"""The IFAR thresholds a sensitivity summary always states."""
CURVE_IFARS_YEARS = (1.0 / (365.25 * 24), 10.0)
"""The VT curve reaches from one hour (or a hundredth of the background's livetime, when
that is shorter) to ten years."""


def sensitivity_summary(rows: list[dict[str, Any]], volume_gpc3: float | None,
                        analysed_seconds: float, background_livetime_seconds: float
                        ) -> dict[str, Any]:
    """VT against IFAR from found/missed rows (each with its ``ifar_years``,
    ``found_missed_at_ifar``): the curve over ``CURVE_IFARS_YEARS``, the points of
    ``NAMED_IFARS_YEARS`` and the loudest IFAR the background can measure, with a note for
    each named point it cannot. Without the population's volume only the found fractions.
    """
    analysed_years = analysed_seconds / SECONDS_PER_YEAR
    reach = max_measurable_ifar_years(background_livetime_seconds)
    found: dict[str, Any] = {"injections": len(rows), "analysed_years": analysed_years,
                             "background_years": reach, "volume_gpc3": volume_gpc3}
    if not rows:
        found["note"] = "no injection fell in the analysed time: no VT"
        return found
    lowest, highest = CURVE_IFARS_YEARS
    grid = [*ifar_thresholds(min(lowest, reach / 100), highest), *NAMED_IFARS_YEARS.values(),
            reach]
    points = sensitive_volume([r["ifar_years"] for r in rows], volume_gpc3 or 1.0,
                              analysed_years, sorted(set(grid)), background_livetime_seconds)

    def as_dict(point: SensitivePoint) -> dict[str, Any]:
        keep = dataclasses.asdict(point)
        if volume_gpc3 is None:  # a fraction only: no volume to scale it
            for key in ("vt_gpc3_years", "vt_error_gpc3_years", "sensitive_distance_mpc"):
                keep.pop(key)
        return keep

    found["curve"] = [as_dict(p) for p in points]
    by_threshold = {p.ifar_threshold_years: p for p in points}
    found["at"] = {name: as_dict(by_threshold[t]) for name, t in NAMED_IFARS_YEARS.items()}
    found["at_reach"] = as_dict(by_threshold[reach])
    found["notes"] = [background_note(t, background_livetime_seconds)
                      for t in NAMED_IFARS_YEARS.values() if t > reach]
    if volume_gpc3 is None:
        found["notes"].append("the injection list names no population volume "
                              "(time_volume_gpc3): found fractions only, no VT")
    return found
