"""What the merge (and the reference) say of ``search.injections``: which injections count,
found/missed, VT against IFAR with the population beside it, and the lines that print them.

The arithmetic is ``physics.py``'s (which injections count, found/missed) and
``sensitivity.py``'s (VT, intervals, the volume bound); the list is read by
``search/injection_list.py``. Warnings: every listed injection outside the analysed span or in
the training span (nothing to count), held-out injections found near the population's
largest distance (VT bounded by the volume, not the search) or just above its SNR cut (VT
understated by the draws left out).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from offline_iaas.config_sections import SearchConfig
from offline_iaas.gps import gps_text
from offline_iaas.physics import (
    HELD_OUT,
    IN_TRAINING,
    OUTSIDE_ANALYSED,
    found_missed,
    found_missed_at_ifar,
    subtract_spans,
)
from offline_iaas.science.bbhnet.sensitivity import (
    SlidePlan,
    cut_bound,
    max_measurable_ifar_years,
    population_caption,
    sensitivity_summary,
    slides_line,
    time_caption,
    volume_bound,
)
from offline_iaas.science.bbhnet.summary import (
    SEARCH_NETWORK,
    Population,
    SearchNumbers,
    SensitivePoint,
    Sensitivity,
    SnrCutBound,
    VolumeBound,
    left_out_text,
)
from offline_iaas.search.injection_list import InjectionList, read_campaign_injections
from offline_iaas.summary_physics import section

logger = logging.getLogger(__name__)

LOUD_SNR = 12.0
"""The found line also counts the held-out injections of network SNR at least this."""


def campaign_injections(search: SearchConfig) -> InjectionList | None:
    """``search.injections`` read (``read_campaign_injections``), or None without one."""
    path = search.injections
    return read_campaign_injections(path) if path is not None else None


def injection_results(
    search: SearchConfig, listed: InjectionList, times: np.ndarray, values: np.ndarray,
    ifar_years: np.ndarray | None, analysed: list[tuple[float, float]],
    training: Mapping[str, tuple[float, float]], background_livetime_seconds: float | None,
    foreground: tuple[np.ndarray, np.ndarray] | None = None,
) -> dict[str, Any]:
    """Found/missed and (with a background: ``ifar_years`` and its livetime) VT against IFAR
    with its population, for the ``bbhnet`` summary; logs what was left out and the volume
    bound. ``training``: the spans left out, by network (``search/held_out.
    search_training_spans``). With ``foreground`` (times, statistic of the injections on the
    fly), found/missed come from it: ``ifar_years`` are then the foreground's."""
    injections = list(listed.injections)
    spans = list(training.values())
    if ifar_years is not None:
        at, seen = foreground if foreground is not None else (times, values)
        result = found_missed_at_ifar(at, ifar_years, seen, injections, search, analysed,
                                      spans)
    else:
        result = found_missed(times, values, injections, search, analysed, spans, foreground)
    own = training.get(SEARCH_NETWORK)
    result["training_gps"] = None if own is None else [float(x) for x in own]
    result["training_spans_gps"] = {name: [float(a), float(b)] for name, (a, b) in
                                    training.items()}
    result["analysed_seconds"] = float(sum(b - a for a, b in analysed))
    result["held_out_seconds"] = held_out_seconds(analysed, spans)
    counts = result["injection_counts"]
    held_out = [r for r in result["injections"] if not r["in_training"]]
    _warn_left_out(listed, counts, analysed, training)
    for row in result["injections"]:
        logger.debug(f"  GPS {gps_text(row['gps_time'])} network SNR {row['network_snr']:5.1f} "
                     f"statistic {row['statistic']:8.3f} "
                     f"{'found' if row['found'] else 'MISSED'}"
                     f"{' (training span)' if row['in_training'] else ''}")
    bound = volume_bound(held_out, listed.population)
    if bound is not None:
        result["volume_bound"] = bound
        if bound["found_near_edge"]:
            logger.warning(f"BBHnet: {volume_bound_line(section(VolumeBound, bound))}")
    near_cut = cut_bound(held_out, listed.population)
    if near_cut is not None:
        result["snr_cut_bound"] = near_cut
        if near_cut["found_near_cut"]:
            logger.warning(f"BBHnet: {cut_bound_line(section(SnrCutBound, near_cut))}")
    if ifar_years is None:
        result["sensitivity"] = {"note": "VT against IFAR needs a background: set "
                                 "search.slides (time slides formed on the servers)",
                                 "population": listed.population, "counts": counts}
        return result
    if not background_livetime_seconds:  # no slide formed outside the cuts
        result["sensitivity"] = {"note": "no time slide was formed outside the cuts: no "
                                 "background, no VT against IFAR",
                                 "population": listed.population, "counts": counts}
        return result
    plan = SlidePlan(search.slides, search.slide_seconds,
                     tuple(b - a for a, b in analysed))
    result["sensitivity"] = sensitivity_summary(
        held_out, listed.population, result["held_out_seconds"], background_livetime_seconds,
        counts, result["analysed_seconds"], plan)
    return result


def held_out_seconds(analysed: list[tuple[float, float]],
                     training: Sequence[Sequence[float]] = ()) -> float:
    """The analysed time outside every ``training`` span left out (s, the union's; spans
    ``[start, end)``): where the injections found/missed and VT count lie
    (``physics.place_injections``), so VT's ``T``."""
    cuts = [(float(a), float(b)) for a, b in training]
    return float(sum(b - a for a, b in subtract_spans(analysed, cuts)))


def _warn_left_out(listed: InjectionList, counts: dict[str, int],
                   analysed: list[tuple[float, float]],
                   training: Mapping[str, tuple[float, float]]) -> None:
    if not counts["listed"] or counts[HELD_OUT]:
        return
    span = (f"GPS {min(a for a, _ in analysed):.0f}-{max(b for _, b in analysed):.0f}"
            if analysed else "nothing analysed")
    where = f"{counts[OUTSIDE_ANALYSED]} outside the analysed span ({span})"
    if counts[IN_TRAINING] and training:
        where += f", {counts[IN_TRAINING]} in {left_out_text(training)}"
    logger.warning(f"BBHnet: none of the {counts['listed']} injections of search.injections "
                   f"({listed.path}) is held out in the analysed time: {where}; no found/"
                   "missed count, no VT")


def volume_bound_line(bound: VolumeBound) -> str:
    """The warning of ``sensitivity.volume_bound``."""
    return (f"{bound.found_near_edge} of {bound.near_edge} held-out injections beyond "
            f"{bound.distance_from_mpc:.0f} Mpc (the top 10 % of the drawn distances, z_max "
            f"{bound.redshift_max}) found: the drawn volume, not the search, bounds VT; "
            "draw to a larger synth.redshift_max")


def cut_bound_line(bound: SnrCutBound) -> str:
    """The warning of ``sensitivity.cut_bound``."""
    return (f"{bound.found_near_cut} held-out injections found with optimal network SNR "
            f"below {bound.snr_below:g} ({bound.quietest_found_snr:.2f} the quietest), "
            f"close to the population's cut at {bound.network_snr_min:g}: draws left out "
            "below it might have been found, so VT is understated; lower "
            "synth.network_snr_min")


def beyond_reach(search: SearchNumbers) -> str:
    """`` (not measurable: ...)`` when the campaign's IFAR threshold lies beyond what its
    background measures (then no trigger can reach it: none is found), else ``""``."""
    livetime, threshold = search.background_livetime_seconds, search.ifar_threshold_years
    if livetime is None or threshold is None or threshold <= max_measurable_ifar_years(
            livetime):
        return ""
    return (f" (not measurable: the background's {max_measurable_ifar_years(livetime):.3g} yr "
            "is the largest IFAR it gives, so none can be found at this threshold)")


def counts_line(search: SearchNumbers) -> str | None:
    """``injections: N listed; H held out; T in the training span ...; O outside ...``."""
    counts = search.injection_counts
    if counts is None:
        return None
    return (f"BBHnet: injections: {counts.listed} listed, {counts.held_out} held out; "
            f"left out of found/missed and VT: {counts.in_training} in "
            f"{left_out_text(search.left_out_spans)}, {counts.outside_analysed} outside the "
            "analysed span")


def found_line(search: SearchNumbers, criterion: str, threshold: str) -> str:
    """``BBHnet: F found, M missed of N held-out injections ...; network SNR >= 12: ...``."""
    held_out = [r for r in search.injections if not r.in_training]
    loud = [r for r in held_out if r.network_snr >= LOUD_SNR]
    return (f"BBHnet: {search.found} found, {search.missed} missed of "
            f"{len(held_out)} held-out injections{criterion}; network SNR >= {LOUD_SNR:g}: "
            f"{sum(r.found for r in loud)}/{len(loud)} found{threshold}")


def population_line(population: Population | None) -> str:
    """The population a VT was drawn from, on one line (``population_caption``)."""
    return f"BBHnet: population: {population_caption(population)}"


def _vt(p: SensitivePoint) -> str:
    if not p.measurable or p.found_fraction_interval is None:
        return p.reason or ""
    low, high = p.found_fraction_interval
    counted = f"{p.found}/{p.injections} held out found"
    if p.vt_gpc3_years is None or p.vt_interval_gpc3_years is None or (
            p.sensitive_distance_interval_mpc is None):
        return f"found fraction {p.found_fraction:.3g} [{low:.3g}, {high:.3g}] ({counted})"
    vt_low, vt_high = p.vt_interval_gpc3_years
    d_low, d_high = p.sensitive_distance_interval_mpc
    return (f"VT {p.vt_gpc3_years:.3g} [{vt_low:.3g}, {vt_high:.3g}] Gpc^3 yr (sensitive "
            f"distance {p.sensitive_distance_mpc:.0f} [{d_low:.0f}, {d_high:.0f}] Mpc; "
            f"{counted})")


def sensitivity_lines(sensitivity: Sensitivity | None,
                      left_out: str = "BBHnet's training span") -> list[str]:
    """VT at the loudest IFAR the background measures (the headline: a trigger louder than all
    of it), at IFAR 1 month and 1 year (or "not measurable (...)"), how many slides those
    need, ``T`` (the analysed time less ``left_out``), the interval, and the population
    beside them (``sensitivity.sensitivity_summary``)."""
    if sensitivity is None:
        return []
    reach, interval = sensitivity.at_reach, sensitivity.interval
    if reach is None or interval is None:
        return [f"BBHnet: {sensitivity.note}"] if sensitivity.note else []
    lines = [f"BBHnet: at IFAR >= {reach.ifar_threshold_years:.2g} yr (the most the "
             f"background measures: louder than all of it): {_vt(reach)}"]
    lines += [f"BBHnet: at IFAR >= {name}: {_vt(p)}" for name, p in sensitivity.at.items()]
    lines += [f"BBHnet: background: {slides_line(need)}"
              for need in sensitivity.slides_needed.values()]
    lines.append(f"BBHnet: VT's T: {time_caption(sensitivity, left_out)}")
    lines.append(f"BBHnet: intervals: {interval.method} at {100 * interval.confidence:.2f}"
                 " % of the found fraction, carried to VT and distance")
    if sensitivity.vt_null_reason:
        lines.append(f"BBHnet: no VT: {sensitivity.vt_null_reason}")
    lines.append(population_line(sensitivity.population))
    return lines


def injection_lines(search: SearchNumbers) -> list[str]:
    """The found/missed, counts, volume-bound and VT lines of a ``bbhnet`` summary."""
    lines, spans = [], search.left_out_spans
    if search.found is not None and search.ifar_threshold_years is not None:
        lines.append(found_line(
            search, f" at IFAR >= {search.ifar_threshold_years:.2g} yr"
            f"{beyond_reach(search)}", ""))
    elif search.found is not None:
        lines.append(found_line(
            search, "", f" (threshold {search.threshold:.2f} from "
            f"{search.background_seconds:.0f} s of injection-free data"
            + (f" outside the training span{'s' if len(spans) > 1 else ''})" if spans else
               "; training span unknown)")))
    counted = counts_line(search)
    if counted:
        lines.append(counted)
    bound = search.volume_bound
    if bound is not None and bound.found_near_edge:
        lines.append(f"BBHnet: {volume_bound_line(bound)}")
    near_cut = search.snr_cut_bound
    if near_cut is not None and near_cut.found_near_cut:
        lines.append(f"BBHnet: {cut_bound_line(near_cut)}")
    return lines + sensitivity_lines(search.sensitivity, left_out_text(spans, gps=False))
