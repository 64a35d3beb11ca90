"""Sensitive time-volume against the inverse false-alarm rate, with the population it counts.

Pure arithmetic on the found/missed rows of the merge (``physics.found_missed_at_ifar``) and
the population's description (``search/injection_list.py``); the merge (``injections.py``)
and the reference call it.

Held-out injections
    Only the injections inside the analysed time and outside the training spans left out
    count (``physics.place_injections``; BBHnet's, and in e2e DeepClean's too:
    ``search/held_out.py``), as the background leaves those spans out: an injection in the
    training data is not a fair test of the networks. The excluded ones are
    counted, by reason, beside every VT (``counts``).
VT
    Given each held-out injection's largest IFAR of a trigger within ``found_seconds``
    (``best_ifars``; none: never found), an injection is found at a threshold when that IFAR
    is at least the threshold, and

        VT(threshold) = V x T x f,   f = found / N

    with ``T`` the held-out time in years (the analysed zero-lag time less the training spans
    left out: the time the counted injections were placed in, ``held_out_seconds``) and
    ``V`` the population's volume. For a
    population drawn uniform in comoving volume and source-frame time (``search/population.py``),
    ``V`` is ``time_volume_gpc3`` = ``int dVc/dz / (1 + z) dz``: then ``VT`` is in Gpc^3 years
    of source-frame time and a rate ``R`` (Gpc^-3 yr^-1) gives ``R VT`` detections. ``T``
    must be the time the counted injections came from: ``f`` counts held-out injections
    only, and multiplying it by the whole analysed time would credit the training span with
    the held-out time's efficiency.
Draws left out below an SNR cut
    A population drawn far beyond the horizon has mostly hopeless binaries; ``synth`` injects
    only those of optimal network SNR at least ``network_snr_min`` and records how many it
    drew (``drawn``) for the ``injected`` it kept. The ones left out count as missed: ``N`` is
    the held-out injections times ``drawn / injected`` (as if the draws left out had been
    spread over the span like the injected ones), so ``f`` is the fraction of the *drawn*
    population found. A file that does not say ``drawn`` had no cut (``drawn = injected``).
Interval
    The found fraction's **Jeffreys interval** (``INTERVAL_METHOD``) at ``CONFIDENCE`` (one
    sigma): the equal-tailed quantiles of Beta(found + 1/2, N - found + 1/2), with the lower
    end 0 when nothing is found and the upper end 1 when everything is (``scipy.stats.beta``;
    ``N`` need not be whole, see above). Unlike the normal approximation it is not empty at
    ``f = 0`` or ``1``. VT and the sensitive distance carry it as ``[low, high]``. It is the
    Monte-Carlo error of the injection campaign only, not of calibration or waveforms.
Sensitive distance
    The radius of a sphere of volume ``VT / T``: ``(3 VT / (4 pi T))^(1/3)``.
Background
    A trigger's FAR is ``(n + 1) / L`` (``physics.false_alarm_rates``): a background of
    livetime ``L`` (time slides) cannot assign an IFAR above ``L`` (years), which only a
    trigger louder than all of it gets. A threshold above ``L`` is not measurable: its found
    fraction, VT and distance are null with the reason, never 0; the summary says about how
    many slides would measure it (``slides_needed``). ``L`` itself is the largest measurable
    threshold (the background's *reach*).
Bounded by the volume, not the search
    The result is only a sensitive volume when ``z_max`` reaches beyond the search's
    horizon. ``volume_bound`` flags held-out injections found (at the campaign's threshold)
    in the top ``EDGE_FRACTION`` of the drawn luminosity-distance range: then louder
    binaries farther out would have been found too, and VT is bounded by ``V T``. Likewise
    ``cut_bound`` flags held-out injections found with an optimal network SNR below
    ``CUT_MARGIN`` times ``network_snr_min``: then some draws left out below the cut might
    have been found, and counting them as missed understates VT. The SNR compared is the one
    the cut was applied to (``cut_snr``): against the design PSD where the list records one
    (synth cuts on it, and only synth's lists record it), else the listed SNR
    (``draw-injections`` cuts on the measured PSD its list records, aframe on its own). The
    measured SNR of synth's injections scatters about the design one, below the cut too.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from offline_iaas.physics import SECONDS_PER_YEAR, best_near
from offline_iaas.science.bbhnet.summary import (
    Population,
    SensitivePoint,
    Sensitivity,
    SlidesNeeded,
)
from offline_iaas.summary_physics import section

INTERVAL_METHOD = "jeffreys"
"""The binomial interval of the found fraction (module docstring)."""
CONFIDENCE = 0.6827
"""Its probability content: one Gaussian sigma."""
EDGE_FRACTION = 0.1
"""``volume_bound`` looks at the top tenth of the drawn luminosity-distance range."""
CUT_MARGIN = 1.25
"""``cut_bound`` looks at found injections below this times the SNR cut."""


def found_fraction_interval(found: int, trials: float, confidence: float = CONFIDENCE
                            ) -> tuple[float, float]:
    """Jeffreys interval ``(low, high)`` of ``found`` successes in ``trials`` (module
    docstring); ``trials`` may be fractional (draws left out below an SNR cut)."""
    from scipy.stats import beta

    if not 0 <= found <= trials or trials <= 0:
        raise ValueError(f"need 0 <= found <= trials and trials > 0, got {found}, {trials}")
    tail = (1.0 - confidence) / 2.0
    a, b = found + 0.5, trials - found + 0.5
    low = 0.0 if found == 0 else float(beta.ppf(tail, a, b))
    high = 1.0 if found >= trials else float(beta.ppf(1.0 - tail, a, b))
    return low, high


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


def background_note(threshold_years: float, background_livetime_seconds: float) -> str:
    """``VT at IFAR 1 yr needs 1 yr of background, have 0.02 yr`` (or ``... has ...``)."""
    have = max_measurable_ifar_years(background_livetime_seconds)
    verdict = "has" if have >= threshold_years else "needs"
    return (f"VT at IFAR {threshold_years:g} yr {verdict} {threshold_years:g} yr of background, "
            f"have {have:.3g} yr")


def sensitive_volume(
    ifar_years: Sequence[float | None],
    volume_gpc3: float | None,
    held_out_years: float,
    thresholds_years: Sequence[float],
    background_livetime_seconds: float | None = None,
    drawn_per_injected: float = 1.0,
) -> list[SensitivePoint]:
    """VT at each IFAR threshold (module docstring).

    Parameters
    ----------
    ifar_years
        Per held-out injection, the largest IFAR of a trigger near it (``best_ifars``);
        ``None`` or 0: not near any trigger.
    volume_gpc3
        The population's volume (``population.time_volume_gpc3(z_max)``); None: found
        fractions only (VT null, with the reason).
    held_out_years
        ``T``: the analysed zero-lag time outside the training spans left out (years), where
        the counted injections lie.
    thresholds_years
        IFAR thresholds (``ifar_thresholds``).
    background_livetime_seconds
        Time-slide livetime: thresholds above it are not measurable (null).
    drawn_per_injected
        Population draws per injection (``drawn / injected``; above 1 with an SNR cut).
    """
    values = np.array([0.0 if v is None else float(v) for v in ifar_years])
    n = len(values)
    if n == 0:
        raise ValueError("no held-out injections in the analysed time: VT is undefined")
    if np.isnan(values).any():
        raise ValueError("an injection's IFAR is NaN")
    if not held_out_years > 0 or (volume_gpc3 is not None and not volume_gpc3 > 0):
        raise ValueError(f"volume and held-out time must be positive, got {volume_gpc3} "
                         f"Gpc^3, {held_out_years} yr")
    if not drawn_per_injected >= 1:
        raise ValueError(f"drawn per injected must be at least 1, got {drawn_per_injected}")
    ceiling = (math.inf if background_livetime_seconds is None
               else max_measurable_ifar_years(background_livetime_seconds))
    trials = n * drawn_per_injected
    points = []
    for threshold in thresholds_years:
        common = {"ifar_threshold_years": float(threshold),
                  "background_needed_years": float(threshold), "injections": n,
                  "trials": trials}
        if threshold > ceiling:
            points.append(SensitivePoint(
                **common, measurable=False,
                reason=f"not measurable (needs {threshold:.3g} yr of background, have "
                       f"{ceiling:.3g} yr)"))
            continue
        found = int(np.sum(values >= threshold))
        fraction = found / trials
        interval = found_fraction_interval(found, trials)
        point = SensitivePoint(**common, measurable=True, found=found, found_fraction=fraction,
                               found_fraction_interval=interval)
        if volume_gpc3 is None:
            point = point.model_copy(update={"reason": "no population volume: found "
                                                       "fractions only"})
        else:
            vt = volume_gpc3 * held_out_years
            point = SensitivePoint(**{
                **point.model_dump(), "vt_gpc3_years": vt * fraction,
                "vt_interval_gpc3_years": (vt * interval[0], vt * interval[1]),
                "sensitive_distance_mpc": sensitive_distance_mpc(volume_gpc3 * fraction),
                "sensitive_distance_interval_mpc": (
                    sensitive_distance_mpc(volume_gpc3 * interval[0]),
                    sensitive_distance_mpc(volume_gpc3 * interval[1]))})
        points.append(point)
    return points


NAMED_IFARS_YEARS: dict[str, float] = {"1 month": 1.0 / 12.0, "1 year": 1.0}
"""The IFAR thresholds a sensitivity summary always states."""
CURVE_IFARS_YEARS = (1.0 / (365.25 * 24), 10.0)
"""The VT curve reaches from one hour (or a hundredth of the background's livetime, when
that is shorter) to ten years."""


def _as_dict(point: SensitivePoint) -> dict[str, Any]:
    return point.model_dump(mode="json")


@dataclass(frozen=True)
class SlidePlan:
    """How a campaign forms its time slides: enough to say how many slides a threshold needs
    (``slides_needed``)."""

    slides: int
    """Slides the campaign formed (``search.slides``)."""
    slide_seconds: float
    """The step between slides (``search.slide_seconds``): slide ``k`` lags ``k`` times it."""
    span_seconds: tuple[float, ...]
    """Each analysed span's length: a slide is formed only within one
    (``physics.slide_livetime``)."""


def uncut_slide_seconds(plan: SlidePlan, slides: int) -> float:
    """Livetime of slides ``1..slides`` before any cut: ``sum over spans and k of
    max(0, S - k step)`` (slide ``k`` is formed where ``t`` and ``t - k step`` both lie in
    the span)."""
    total = 0.0
    for span in plan.span_seconds:
        formed = min(slides, most_slides(span, plan.slide_seconds))
        total += formed * span - plan.slide_seconds * formed * (formed + 1) / 2
    return total


def most_slides(span_seconds: float, slide_seconds: float) -> int:
    """How many slides of ``slide_seconds`` steps a span of ``span_seconds`` forms (``k step``
    shorter than the span)."""
    return max(0, math.ceil(span_seconds / slide_seconds - 1e-9) - 1)


def slides_needed(threshold_years: float, background_livetime_seconds: float,
                  plan: SlidePlan) -> dict[str, Any]:
    """About how many slides of the campaign's step give ``threshold_years`` of background.

    The livetime of ``n`` slides is estimated as ``uncut_slide_seconds(n)`` times the
    fraction the campaign's slides kept after the cuts (``background_livetime_seconds /
    uncut_slide_seconds(plan.slides)``): the training span and the injections' neighbourhoods
    cut about the same share of every slide. ``slides`` is None when even every slide the
    spans can form falls short (``most_years`` says how far they reach)."""
    target = threshold_years * SECONDS_PER_YEAR
    have = uncut_slide_seconds(plan, plan.slides)
    kept = min(1.0, background_livetime_seconds / have) if have > 0 else 1.0
    most = max((most_slides(s, plan.slide_seconds) for s in plan.span_seconds), default=0)
    out: dict[str, Any] = {
        "ifar_threshold_years": threshold_years, "slide_seconds": plan.slide_seconds,
        "have_slides": plan.slides, "have_years": background_livetime_seconds / SECONDS_PER_YEAR,
        "most_slides": most, "most_years": kept * uncut_slide_seconds(plan, most)
        / SECONDS_PER_YEAR, "slides": None}
    if kept * uncut_slide_seconds(plan, most) < target or kept <= 0:
        return out
    low, high = 0, most  # the livetime grows with the slides: the fewest that reach it
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if kept * uncut_slide_seconds(plan, middle) < target else (
            low, middle)
    out["slides"] = high
    return out


def slides_line(need: SlidesNeeded) -> str:
    """``IFAR >= 1 yr needs about N slides of 1 s (have M: 0.02 yr)`` or why no number of
    slides of these spans reaches it (``slides_needed``)."""
    have = f"have {need.have_slides}: {need.have_years:.3g} yr"
    threshold = f"IFAR >= {need.ifar_threshold_years:.3g} yr"
    if need.slides is None:
        return (f"{threshold} is out of reach of slides of {need.slide_seconds:g} s of these "
                f"stretches: all {need.most_slides} they form give about "
                f"{need.most_years:.3g} yr ({have}); analyse longer stretches")
    return (f"{threshold} needs about {need.slides} slides of {need.slide_seconds:g} s "
            f"of background ({have})")


def sensitivity_summary(rows: list[dict[str, Any]], population: Mapping[str, Any] | None,
                        held_out_seconds: float, background_livetime_seconds: float,
                        counts: Mapping[str, int] | None = None,
                        analysed_seconds: float | None = None,
                        slides: SlidePlan | None = None) -> dict[str, Any]:
    """VT against IFAR from the held-out found/missed rows (each with its ``ifar_years``,
    ``physics.found_missed_at_ifar``): the curve over ``CURVE_IFARS_YEARS``, the points of
    ``NAMED_IFARS_YEARS`` and the loudest IFAR the background can measure, the population
    beside them (``population``: ``search/injection_list.py``'s record, None when the list
    describes none: found fractions only) and the injections counted and left out
    (``counts``). ``held_out_seconds`` is ``T`` (module docstring), ``analysed_seconds``
    only recorded beside it; with ``slides`` the slides ``NAMED_IFARS_YEARS`` need
    (``slides_needed``)."""
    held_out_years = held_out_seconds / SECONDS_PER_YEAR
    reach = max_measurable_ifar_years(background_livetime_seconds)
    volume = None if population is None else population.get("time_volume_gpc3")
    drawn_per_injected = drawn_ratio(population)
    found: dict[str, Any] = {
        "population": None if population is None else dict(population),
        "counts": None if counts is None else dict(counts), "injections": len(rows),
        "trials": len(rows) * drawn_per_injected, "held_out_years": held_out_years,
        "analysed_years": None if analysed_seconds is None
        else analysed_seconds / SECONDS_PER_YEAR,
        "background_years": reach, "volume_gpc3": volume,
        "interval": {"method": INTERVAL_METHOD, "confidence": CONFIDENCE}}
    if slides is not None:
        found["slides_needed"] = {name: slides_needed(t, background_livetime_seconds, slides)
                                  for name, t in NAMED_IFARS_YEARS.items()}
    if volume is None:
        found["vt_null_reason"] = ("the injection list describes no population (no "
                                   "time_volume_gpc3): found fractions only, no VT")
    if not rows:
        found["note"] = "no held-out injection in the analysed time: no VT"
        return found
    lowest, highest = CURVE_IFARS_YEARS
    grid = [*ifar_thresholds(min(lowest, reach / 100), highest), *NAMED_IFARS_YEARS.values(),
            reach]
    points = sensitive_volume([r["ifar_years"] for r in rows], volume, held_out_years,
                              sorted(set(grid)), background_livetime_seconds,
                              drawn_per_injected)
    found["curve"] = [_as_dict(p) for p in points]
    by_threshold = {p.ifar_threshold_years: p for p in points}
    found["at"] = {name: _as_dict(by_threshold[t]) for name, t in NAMED_IFARS_YEARS.items()}
    found["at_reach"] = _as_dict(by_threshold[reach])
    found["notes"] = [background_note(t, background_livetime_seconds)
                      for t in NAMED_IFARS_YEARS.values() if t > reach]
    found["notes"] += [slides_line(section(SlidesNeeded, need))
                       for need in found.get("slides_needed", {}).values()]
    if volume is None:
        found["notes"].append(found["vt_null_reason"])
    return found


def drawn_ratio(population: Mapping[str, Any] | None) -> float:
    """Population draws per injection (``drawn / injected``; 1 when the list does not say)."""
    if not population or not population.get("injected") or not population.get("drawn"):
        return 1.0
    return float(population["drawn"]) / float(population["injected"])


def volume_bound(rows: list[dict[str, Any]], population: Mapping[str, Any] | None
                 ) -> dict[str, Any] | None:
    """Held-out injections found in the top ``EDGE_FRACTION`` of the drawn luminosity-distance
    range (module docstring), or None when the population's range or the rows' distances are
    not known."""
    if not population or not population.get("luminosity_distance_max_mpc"):
        return None
    known = [r for r in rows if "distance_mpc" in r]
    if not known:
        return None
    edge = (1.0 - EDGE_FRACTION) * float(population["luminosity_distance_max_mpc"])
    near = [r for r in known if r["distance_mpc"] >= edge]
    return {"rule": f"found at the campaign's threshold with luminosity distance >= "
                    f"{1 - EDGE_FRACTION:g} x the population's largest",
            "distance_from_mpc": edge, "near_edge": len(near),
            "found_near_edge": sum(bool(r["found"]) for r in near),
            "redshift_max": population.get("redshift_max")}


def cut_bound(rows: list[dict[str, Any]], population: Mapping[str, Any] | None
              ) -> dict[str, Any] | None:
    """Held-out injections found close above the population's SNR cut (module docstring), or
    None without a cut."""
    if not population or not population.get("network_snr_min"):
        return None
    cut = float(population["network_snr_min"])
    found = [cut_snr(r) for r in rows if r.get("found")]
    return {"rule": f"found at the campaign's threshold with optimal network SNR (the one "
                    f"the cut was on) < {CUT_MARGIN:g} x network_snr_min",
            "network_snr_min": cut, "snr_below": CUT_MARGIN * cut,
            "found_near_cut": sum(s < CUT_MARGIN * cut for s in found),
            "quietest_found_snr": min(found) if found else None}


def cut_snr(row: Mapping[str, Any]) -> float:
    """The optimal network SNR of a found/missed row that the population's cut was applied
    to (module docstring): ``network_snr_design`` where the row has it, else
    ``network_snr``."""
    design = row.get("network_snr_design")
    return float(row["network_snr"] if design is None else design)


def time_caption(sensitivity: Sensitivity, left_out: str = "BBHnet's training span") -> str:
    """VT's ``T`` in a summary (``sensitivity_summary``): ``T = 1277 s held out (2045 s
    analysed less BBHnet's training span)``; ``left_out`` names the training spans left out
    (``summary.left_out_text``: in e2e DeepClean's too)."""
    analysed = sensitivity.analysed_years
    if sensitivity.held_out_years is None:  # a summary written before T was held out
        return f"T = {(analysed or 0.0) * SECONDS_PER_YEAR:.0f} s analysed"
    held_out = sensitivity.held_out_years * SECONDS_PER_YEAR
    of = ("" if analysed is None else
          f" ({analysed * SECONDS_PER_YEAR:.0f} s analysed less {left_out})")
    return f"T = {held_out:.0f} s held out{of}"


def population_caption(population: Population | None) -> str:
    """The population beside a VT on one line: ``IMRPhenomD from 20 Hz; source-frame masses
    20-50 Msun ...`` (or that the list describes none)."""
    if population is None:
        return "the injection list describes none (no VT, found fractions only)"
    p = population

    def known(value: object, form: str = "{}") -> str:
        return "?" if value is None else form.format(value)

    drawn = ""
    if p.drawn is not None and p.network_snr_min:
        drawn = (f"; {p.injected} injected of {p.drawn} drawn (optimal network SNR >= "
                 f"{p.network_snr_min:g}; the rest count as missed)")
    elif p.drawn is not None and p.drawn != p.injected:
        drawn = (f"; {p.injected} injected of {p.drawn} drawn (the rest below the set's "
                 "SNR cut count as missed)")
    return (f"{known(p.approximant)} from {known(p.f_lower_hz, '{:g}')} Hz; source-frame masses "
            f"{known(p.mass_min_msun, '{:g}')}-{known(p.mass_max_msun, '{:g}')} Msun "
            f"({known(p.mass_distribution)}); spins |chi| <= {known(p.spin_max, '{:g}')} "
            f"({known(p.spin_distribution)}); z <= {known(p.redshift_max, '{:g}')} "
            f"(d_L <= {known(p.luminosity_distance_max_mpc, '{:.0f}')} Mpc; "
            f"{known(p.redshift_distribution)}); {known(p.cosmology)}; V_pop "
            f"{known(p.time_volume_gpc3, '{:.4g}')} Gpc^3 (time-volume), Vc "
            f"{known(p.comoving_volume_gpc3, '{:.4g}')} Gpc^3{drawn}")
