"""The campaign's physics on plain arrays: band-pass, ASD ratio, triggers, false-alarm rates,
which injections count and found/missed.

Used by the mode packages' products, reports and evaluation (``science/<mode>/``), the merge
tree's reach (``merge/tree.py``) and the search's injection checks (``search/``); it depends on
the config and the numerical libraries only, so all of them can import it.

DeepClean
    The averaged prediction is band-passed (Butterworth, ``[deepclean]`` band and order:
    ``science/deepclean/settings.bandpass_sos``,
    forward and backward: zero phase) block by block (``BLOCK_SECONDS``) with ``PAD_SECONDS`` of
    real data on both sides, on a grid fixed by the stretch's start. The cleaned/raw ASD ratio
    (gwpy ``asd(method="median")``) is read at the strongest raw line in the band, the worst
    deviation from 1 outside the band beyond a guard, and the worst deviation at the band
    edges: in the guard itself (at least the frequency bin next to each edge).
BBHnet
    Triggers: every value of the statistic that is the largest within ``+-cluster_seconds/2``
    in its stretch. With an injection list: the background is every trigger farther than
    ``exclusion_seconds`` from all injections; an injection is *found* when a trigger within
    ``found_seconds`` of its time beats the background's largest.
BBHnet with time slides (``search.slides = N``)
    Slide ``k`` is formed at a window only where both of its windows (the first detector's at
    ``t``, the second's at ``t - kΔ``) lie in the stretch's analysed time, so in each stretch
    it starts ``kΔ`` after the zero lag; its formed windows are clustered like the zero lag,
    and its livetime is the stride times the windows it formed (``slide_livetime``); the
    background livetime is the sum over the slides. A trigger's false-alarm rate is
    ``(n + 1) / L``: ``n`` the background triggers at least as loud, ``L`` the livetime
    (PyCBC's ``n_louder`` convention, Usman et al. 2016, arXiv:1508.02357 eq. 17-18; the +1
    counts the trigger itself as one more draw of the noise). So a trigger louder than the
    whole background gets ``1 / L`` and one with a single background trigger at least as
    loud ``2 / L``: the largest IFAR a background gives is ``L``, and only a trigger louder
    than all of it reaches it.
    An injection is found when a trigger within ``found_seconds`` has an inverse FAR of at
    least ``ifar_threshold_years``. With an injection list, as for the zero-lag background,
    a slide's trigger is left out when either detector's time (``t``, or ``t - kΔ`` for the
    second) lies within ``exclusion_seconds`` of an injection or inside a training span left
    out, and that time leaves the slide's livetime (``slide_livetime``): otherwise every
    injection would stand in the background once per slide, one detector's signal against
    the other's slid noise.
A statistic that is not a number
    NaN or Inf has no rank: counted, a NaN trigger would have no background at least as loud
    (FAR ``1 / L``, the best there is) and a NaN beside a maximum would hide it from the
    clustering. Every value that is ranked (clustered, given a FAR, compared with a threshold)
    must be finite, else ``refuse_non_finite``'s DataError. Nothing is NaN by design where
    that applies: gaps have no samples, and a slide's windows before it is formed (NaN) are
    never clustered.
Which injections count
    Only those inside the analysed stretches and outside the training spans left out
    (``place_injections``; which spans: every served network's, ``search/held_out.py``): the
    background leaves those spans out, and so does the found/missed count; the rows still list
    the ones in a training span (``in_training``) and the counts say how many were left out
    and why. VT against IFAR: ``science/bbhnet/sensitivity.py``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from igwn_segments import segment, segmentlist

from offline_iaas.config_sections import SearchConfig
from offline_iaas.errors import DataError
from offline_iaas.gps import gps_text

BLOCK_SECONDS = 64.0
"""Samples band-passed at a time (s)."""
PAD_SECONDS = 16.0
"""Real data on each side of a block that the filter also sees (its transients decay in it)."""
ASD_MAX_SECONDS = 4096.0
"""At most this much of each stretch enters the ASD ratio (memory)."""


def zero_phase_blocks(
    read: Callable[[int, int], np.ndarray], n_samples: int, sos: np.ndarray, sample_rate: float,
    first: int = 0, last: int | None = None,
) -> Iterator[tuple[int, np.ndarray]]:
    """Band-pass samples ``[first, last)`` of a stretch of ``n_samples`` block by block; yield
    ``(first sample, values)``.

    The blocks lie on a grid anchored at the stretch's first sample, each filtered with
    ``PAD_SECONDS`` of its neighbours, so a value depends only on the stretch and not on which
    part of it is asked for (a merge shard gets the same values as the whole stretch).
    ``read(a, b)`` returns samples ``[a, b)`` of the stretch (float64).
    """
    from scipy import signal  # here: half a second to import, which check and make-dag skip

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
    at the band edges (``max_deviation_at_band_edges``): over the guard, the frequencies
    outside the band within ``guard_hz`` of an edge (with no guard, the bin next to each).

    "Outside" starts ``guard_hz`` beyond the band edges because the coupling's side bands reach
    past the band and the band-pass rolls off over about a hertz: even subtracting the true
    coupled noise changes the ASD by a few per cent within ~1.5 Hz of the edges. The two
    deviations together cover every frequency outside the band, each once: a change far from
    the band (a line the cleaning added at 300 Hz) is the guarded number's, not the edges'.
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
    strip_hz = max(guard_hz, float(freqs[1] - freqs[0]))  # no guard: the bin next to each edge
    next_to_band = ((freqs > 0) & ~inside & (freqs >= band_hz[0] - strip_hz)
                    & (freqs <= band_hz[1] + strip_hz))
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


def samples_within(gps_start: float, n_samples: int, sample_rate: float, span_start: float,
                   span_end: float) -> tuple[int, int]:
    """The samples ``[first, stop)`` of a series (``n_samples`` from ``gps_start``) whose times
    lie in the GPS span ``[span_start, span_end)`` (a bound within a millionth of a sample
    after a sample's time counts as on it: rounding)."""
    first = min(n_samples, max(0, math.ceil((span_start - gps_start) * sample_rate - 1e-6)))
    stop = min(n_samples, max(0, math.ceil((span_end - gps_start) * sample_rate - 1e-6)))
    return first, max(first, stop)


def held_out_samples(
    gps_start: float, n_samples: int, sample_rate: float,
    excluded: list[tuple[float, float]], max_samples: int,
) -> tuple[int, int]:
    """The longest run ``[a, b)`` of a series' samples outside every excluded GPS span,
    cut to its first ``max_samples``; ``(0, 0)`` when none is left."""
    cuts = sorted(samples_within(gps_start, n_samples, sample_rate, s, e) for s, e in excluded)
    best, position = (0, 0), 0
    for lo, hi in [*cuts, (n_samples, n_samples)]:
        if lo > position and lo - position > best[1] - best[0]:
            best = (position, lo)
        position = max(position, hi)
    return best[0], min(best[1], best[0] + max_samples)


def refuse_non_finite(values: np.ndarray, what: str,
                      gps_of: Callable[[int], float] | None = None) -> None:
    """DataError when ``values`` hold NaN or Inf (module docstring): ``what`` names them, and
    the message says how many and where the first is (``gps_of(index)``: its GPS time; else
    its index)."""
    bad = ~np.isfinite(np.asarray(values))
    if not bad.any():
        return
    first = int(np.argmax(bad))
    where = f"GPS {gps_text(gps_of(first))}" if gps_of is not None else f"index {first}"
    raise DataError(
        f"{what}: {int(bad.sum())} of {len(bad)} values are not finite (NaN or Inf), the "
        f"first at {where}: a statistic that is not a number cannot be ranked (the network "
        "returned it for the data it was given there)")


def cluster_triggers(values: np.ndarray, x0: float, dx: float, cluster_seconds: float
                     ) -> tuple[np.ndarray, np.ndarray]:
    """GPS times and values of the statistic's maxima within ``+-cluster_seconds / 2``.

    A value is kept when it is the largest within ``+-half`` samples and larger than every
    value in the ``half`` samples before it (of equal maxima, the first). The rule looks no
    further than ``half`` samples either way (``cluster_reach_windows``), so a merge shard
    that reads that much beyond its ends finds the same triggers as the whole stretch.
    DataError for a value that is not finite (``refuse_non_finite``), naming its GPS time.
    """
    keep = cluster_indices(values, cluster_reach_windows(cluster_seconds, dx),
                           gps_of=lambda i: x0 + i * dx)
    return x0 + keep * dx, values[keep]


def cluster_indices(values: np.ndarray, half: int, what: str = "the statistic to cluster",
                    gps_of: Callable[[int], float] | None = None) -> np.ndarray:
    """Indices of the values ``cluster_triggers`` keeps, ``half`` samples either way;
    DataError for a value that is not finite (``refuse_non_finite``, naming the values
    ``what`` and the first one's GPS time ``gps_of(index)`` if given, else its index)."""
    refuse_non_finite(values, what, gps_of)
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
    ``background`` triggers of ``livetime_seconds`` of time slides: FAR ``(n + 1) / L`` with
    ``n`` the background triggers at least as loud (module docstring), so the IFAR is at most
    ``L`` (``sensitivity.max_measurable_ifar_years``). Without livetime (no slide formed
    outside the cuts: every stretch shorter than the smallest slide) no rate is measured: FAR
    ``inf``, IFAR 0. DataError for a statistic or background value that is not finite
    (``refuse_non_finite``)."""
    refuse_non_finite(statistic, "the statistic given a false-alarm rate")
    refuse_non_finite(background, "the background statistic (time slides)")
    if not livetime_seconds >= 0:  # NaN too
        raise ValueError(f"background livetime must be a number >= 0, got {livetime_seconds}")
    if livetime_seconds == 0:
        return np.full(len(statistic), np.inf), np.zeros(len(statistic))
    ordered = np.sort(np.asarray(background, np.float64))
    louder = len(ordered) - np.searchsorted(ordered, np.asarray(statistic, np.float64), "left")
    far = (louder + 1) / livetime_seconds
    # L / (n + 1) directly: louder than all gives exactly the reach, L in years
    return far, livetime_seconds / (louder + 1) / SECONDS_PER_YEAR


@dataclass(frozen=True)
class Injection:
    """One injection as the merge counts it (``search/injection_file.read_injection_list``)."""

    gps_time: float
    """Geocentre coalescence time (GPS)."""
    network_snr: float
    """Optimal network SNR against the noise the data have."""
    chirp_mass: float = math.nan
    """Source-frame chirp mass (Msun); NaN where the list does not say."""
    distance_mpc: float = math.nan
    """Luminosity distance (Mpc); NaN where the list does not say."""
    network_snr_design: float = math.nan
    """Optimal network SNR against the design PSD; NaN where the list does not record it
    (synth's population is cut on it: ``sensitivity.cut_bound``)."""

    def row(self) -> dict[str, float]:
        """What a found/missed row records of it (the parameters only when known)."""
        known = {"chirp_mass": self.chirp_mass, "distance_mpc": self.distance_mpc,
                 "network_snr_design": self.network_snr_design}
        return {"gps_time": self.gps_time, "network_snr": self.network_snr,
                **{k: v for k, v in known.items() if math.isfinite(v)}}


def background_cuts(injections: list[Injection], search: SearchConfig,
                    training: Sequence[Sequence[float]] = ()) -> list[tuple[float, float]]:
    """GPS spans no background trigger may come from: ``exclusion_seconds`` around every
    injection (none with ``search.inject``: the background stream holds none), and the
    ``training`` spans left out (``[start, end)``)."""
    exclusion = search.exclusion_seconds
    cuts = [(i.gps_time - exclusion, i.gps_time + exclusion)
            for i in injections if not search.inject]
    return cuts + [(float(a), float(b)) for a, b in training]


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
    """Which ``times`` lie in none of the half-open ``cuts`` ``[start, end)`` (NaN: in none)."""
    times = np.asarray(times, np.float64)
    union = _segments(cuts)
    if not union:
        return np.ones(len(times), bool)
    starts, ends = np.array(union, np.float64).T
    at = np.searchsorted(starts, times, "right") - 1  # the last cut starting at or before
    return ~((at >= 0) & (times < ends[np.maximum(at, 0)]))


def best_near(times: np.ndarray, key: np.ndarray, gps: float, seconds: float) -> int | None:
    """Index of the trigger within ``seconds`` of ``gps`` with the largest ``key``, or None."""
    near = np.flatnonzero(np.abs(np.asarray(times) - gps) <= seconds)
    return int(near[np.argmax(np.asarray(key)[near])]) if len(near) else None


OUTSIDE_ANALYSED, IN_TRAINING, HELD_OUT = "outside_analysed", "in_training", "held_out"
"""Where an injection lies (``place_injections``)."""


def place_injections(gps_times: Sequence[float], analysed: list[tuple[float, float]],
                     training: Sequence[Sequence[float]] = ()) -> list[str]:
    """Per injection time: ``OUTSIDE_ANALYSED`` (in no analysed span ``[start, end)``),
    ``IN_TRAINING`` (inside, and in one of the ``training`` spans ``[start, end)`` left out)
    or ``HELD_OUT`` (what found/missed and VT count)."""
    out = []
    for gps in gps_times:
        if not any(s <= gps < e for s, e in analysed):
            out.append(OUTSIDE_ANALYSED)
        elif any(float(a) <= gps < float(b) for a, b in training):
            out.append(IN_TRAINING)
        else:
            out.append(HELD_OUT)
    return out


def injection_counts(places: Sequence[str]) -> dict[str, int]:
    """``listed`` and how many of them lie where (``place_injections``)."""
    return {"listed": len(places),
            **{where: sum(p == where for p in places)
               for where in (OUTSIDE_ANALYSED, IN_TRAINING, HELD_OUT)}}


def _counted(injections: list[Injection], analysed: list[tuple[float, float]],
             training: Sequence[Sequence[float]]) -> tuple[list[tuple[Injection, bool]],
                                                           dict[str, int]]:
    """The injections in analysed time with whether each is in a training span, and the
    counts (``injection_counts``)."""
    places = place_injections([i.gps_time for i in injections], analysed, training)
    kept = [(i, p == IN_TRAINING) for i, p in zip(injections, places, strict=True)
            if p != OUTSIDE_ANALYSED]
    return kept, injection_counts(places)


def _tally(rows: list[dict[str, Any]], counts: dict[str, int]) -> dict[str, Any]:
    held_out = [r for r in rows if not r["in_training"]]
    return {"found": sum(r["found"] for r in held_out),
            "missed": sum(not r["found"] for r in held_out),
            "injection_counts": counts, "injections": rows}


def found_missed_at_ifar(
    times: np.ndarray, ifar_years: np.ndarray, values: np.ndarray,
    injections: list[Injection], search: SearchConfig,
    analysed: list[tuple[float, float]], training: Sequence[Sequence[float]] = (),
) -> dict[str, Any]:
    """Found/missed at the config's IFAR threshold: found when a trigger within
    ``found_seconds`` has ``ifar >= threshold``. Rows for every injection in the analysed
    stretches (``in_training`` marks those in a ``training`` span left out); ``found`` and
    ``missed`` count the held-out ones only, ``injection_counts`` says what was left out.
    DataError for a statistic or IFAR that is not finite (``refuse_non_finite``)."""
    refuse_non_finite(values, "the statistic near the injections", lambda i: float(times[i]))
    refuse_non_finite(ifar_years, "the IFARs near the injections", lambda i: float(times[i]))
    threshold = search.ifar_threshold_years
    kept, counts = _counted(injections, analysed, training)
    rows = []
    for injection, in_training in kept:
        best = best_near(times, ifar_years, injection.gps_time, search.found_seconds)
        ifar = float(ifar_years[best]) if best is not None else 0.0
        rows.append({**injection.row(),
                     "statistic": float(values[best]) if best is not None else float("-inf"),
                     "ifar_years": ifar, "found": bool(ifar >= threshold),
                     "in_training": in_training})
    return {**_tally(rows, counts), "ifar_threshold_years": threshold}


def subtract_spans(
    spans: list[tuple[float, float]], cuts: list[tuple[float, float]]
) -> list[tuple[float, float]]:
    """``spans`` without any part of ``cuts`` (all half-open ``[start, end)`` in seconds), span
    by span: the pieces of two spans that touch stay apart."""
    union = _segments(cuts)
    return [(a, b) for start, end in spans if end > start
            for a, b in segmentlist([segment(start, end)]) - union]


def _segments(spans: list[tuple[float, float]]) -> segmentlist:
    """The union of ``[start, end)`` spans (igwn-segments; exact, empty ones dropped)."""
    return segmentlist(segment(a, b) for a, b in spans if b > a).coalesce()


def found_missed(
    times: np.ndarray, values: np.ndarray, injections: list[Injection],
    search: SearchConfig, analysed: list[tuple[float, float]],
    training: Sequence[Sequence[float]] = (),
    foreground: tuple[np.ndarray, np.ndarray] | None = None,
) -> dict[str, Any]:
    """Found/missed of the injections inside the analysed stretches (module docstring), the
    held-out ones counted as in ``found_missed_at_ifar``.

    The background is the triggers of the ``analysed`` spans (a trigger is stamped at its
    stride's end: a span ``(start, end]`` holds its stamps) outside ``exclusion_seconds``
    around every injection and the ``training`` spans left out (GPS ``[start, end)``, if
    known: ``background_cuts``). With a ``foreground``
    (times, values: injections on the fly) an injection's statistic is the foreground's near
    it. DataError for a statistic that is not finite, either's (``refuse_non_finite``).
    """
    refuse_non_finite(values, "the statistic", lambda i: float(times[i]))
    if foreground is not None:
        refuse_non_finite(foreground[1], "the foreground's statistic (injections added)",
                          lambda i: float(foreground[0][i]))
    cuts = background_cuts(injections, search, training)
    background_spans = subtract_spans(analysed, cuts)
    # a value is stamped at the end of its stride, so a span (start, end] holds its stamps;
    # the cuts are half-open [start, end), as for the time slides' background
    times = np.asarray(times, np.float64)
    stamped = np.zeros(len(times), bool)
    for start, end in analysed:
        stamped |= (times > start) & (times <= end)
    background = values[stamped & outside_cuts(times, cuts)]
    threshold = float(background.max()) if len(background) else float("inf")
    kept, counts = _counted(injections, analysed, training)
    rows = []
    for injection, in_training in kept:
        at, seen = foreground if foreground is not None else (times, values)
        near = best_near(at, seen, injection.gps_time, search.found_seconds)
        best = float(seen[near]) if near is not None else float("-inf")
        rows.append({**injection.row(), "statistic": best, "found": bool(best > threshold),
                     "in_training": in_training})
    return {
        **_tally(rows, counts),
        "threshold": threshold,
        "background_seconds": float(sum(e - s for s, e in background_spans)),
    }
