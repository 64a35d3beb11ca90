"""BBHnet's section of the report (``ModePackage.report_sections``): the search's statistic,
triggers, found/missed, false-alarm rate and sensitivity (and, in e2e with injections on
the fly, cleaning's gain)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from offline_iaas.physics import SECONDS_PER_YEAR
from offline_iaas.report import page, plots
from offline_iaas.report.run_view import ReportRun, absent, cell
from offline_iaas.report.search import statistic_traces
from offline_iaas.science.bbhnet import figures
from offline_iaas.science.bbhnet.products import (
    loudest_triggers,
    read_background,
    read_triggers,
    read_zero_lag_statistic,
)
from offline_iaas.science.bbhnet.sensitivity import population_caption, time_caption
from offline_iaas.science.bbhnet.summary import (
    SearchNumbers,
    SensitivePoint,
    Sensitivity,
    left_out_text,
)

LOUDEST_TRIGGERS = 200
"""Triggers read for the plot (the loudest); those above the threshold are marked."""


def draw_search(run: ReportRun, section: page.Section) -> None:
    """BBHnet's section: the statistic against time with the triggers marked, found/missed,
    and with time slides the false-alarm rate and the sensitivity."""
    traces = statistic_traces(run.output) if run.has_output else []
    if not traces:
        section.parts.append(absent("Statistic", run))
        return
    search = run.physics.bbhnet
    every_trigger = read_triggers(run.output, None)
    threshold = None if search is None else (
        search.threshold if search.threshold is not None else
        ifar_threshold_statistic(search, every_trigger))
    triggers = None if every_trigger is None else loudest_triggers(every_trigger,
                                                                   LOUDEST_TRIGGERS)
    shown = triggers
    if triggers is not None and threshold is not None:
        shown = triggers[triggers["statistic"] >= threshold]
    injections = search.injections if search is not None else ()
    t0 = run.config.data.start if run.config is not None else float(traces[0].time[0])
    png = plots.statistic_figure(traces, shown, [(i.gps_time, i.found) for i in injections],
                                 threshold, t0)
    section.parts.append(page.image(png, "statistic against time"))
    if triggers is None:
        section.parts.append(absent("Triggers", run))
    else:
        which = (f"at or above the threshold ({threshold:g})" if threshold is not None
                 else f"the {LOUDEST_TRIGGERS} loudest")
        section.parts.append(page.paragraph(f"Triggers marked: {which}."))
    if search is None:
        section.parts.append(absent("Found/missed injections", run))
        return
    if search.slid:
        _false_alarms(run, section, search, threshold)
        return
    if search.sensitivity is not None:
        section.parts.append(page.paragraph(f"Sensitivity: {search.sensitivity.note}.",
                                            "absent"))
    section.parts.append(page.table(
        ["found", "missed", "threshold", "background [s]"],
        [[cell(search.found), cell(search.missed), cell(search.threshold),
          cell(search.background_seconds)]],
    ))
    if injections:
        section.parts.append(page.table(
            ["GPS time", "network SNR", "statistic", "found"],
            [[i.gps_time, i.network_snr, cell(i.statistic), "yes" if i.found else "no"]
             for i in injections],
        ))


def ifar_threshold_statistic(search: SearchNumbers, triggers: np.ndarray | None
                             ) -> float | None:
    """The quietest trigger's statistic at or above the IFAR threshold (time slides), of
    ``triggers`` (every trigger: the loudest drawn would miss it where more pass)."""
    if search.ifar_threshold_years is None or triggers is None or "ifar" not in (
            triggers.dtype.names or ()):
        return None
    above = triggers["statistic"][triggers["ifar"] >= search.ifar_threshold_years]
    return float(above.min()) if len(above) else None


def _false_alarms(run: ReportRun, section: page.Section, search: SearchNumbers,
                  threshold: float | None) -> None:
    """The time slides' background: the cumulative-rate plot and found/missed at the IFAR
    threshold."""
    livetime = search.background_livetime_seconds or 0.0
    background, zero_lag = cumulative_rates(run.output, search)
    section.parts.append(page.heading("False-alarm rate"))
    section.parts.append(page.image(figures.cumulative_rate_figure(
        background, zero_lag, threshold), "cumulative rate of background and zero-lag triggers"))
    if zero_lag is None:
        section.parts.append(page.paragraph(
            "Zero lag not drawn: this output does not mark which triggers lie outside the "
            "background's cuts (written before the triggers' outside_cuts); merge again.",
            "absent"))
    section.parts.append(page.paragraph(
        f"{search.time_shifts} time slides of {search.shift_seconds:g} s formed on the "
        f"server from the one stream, each where both detectors' windows lie in a stretch; "
        f"{search.background_triggers} background triggers in {livetime:.0f} s "
        f"({livetime / SECONDS_PER_YEAR:.3g} yr: the windows each slide formed, times the "
        "stride, less any time cut around injections or in a training span; the zero lag "
        "counts its triggers outside the same cuts, in the analysed time less them). A "
        "trigger's FAR is (n + 1) / livetime with n the background triggers at least as "
        "loud (PyCBC's convention): one louder than all gets 1 / livetime, the largest IFAR "
        "the background gives, and one with a single background trigger at least as loud "
        "half that."))
    if search.found is None or search.ifar_threshold_years is None:
        return
    section.parts.append(page.table(
        ["found (held out)", "missed (held out)", "IFAR threshold [yr]",
         "background livetime [s]"],
        [[search.found, search.missed, search.ifar_threshold_years, round(livetime)]]))
    _sensitivity(section, search)
    if search.injections:
        section.parts.append(page.table(
            ["GPS time", "network SNR", "chirp mass [Msun]", "distance [Mpc]", "statistic",
             "IFAR [yr]", "found", "held out"],
            [[i.gps_time, i.network_snr, cell(i.chirp_mass), cell(i.distance_mpc),
              cell(i.statistic), f"{i.ifar_years or 0:.3g}", "yes" if i.found else "no",
              "no (training span)" if i.in_training else "yes"]
             for i in search.injections]))


def cumulative_rates(output: Path, search: SearchNumbers
                     ) -> tuple[figures.CumulativeRate, figures.CumulativeRate | None]:
    """What the cumulative-rate figure plots (``figures.cumulative_rate``): the background's
    triggers over its livetime, and the zero-lag triggers outside the background's cuts over
    the analysed time less them (``zero_lag_livetime_seconds``), the two cut alike (the
    merge's ``products._triggers``); the zero lag None in an output written before the cut
    was recorded."""
    background = read_background(output)
    background = np.zeros(0) if background is None else background
    rate = figures.cumulative_rate(background, search.background_livetime_seconds or 0.0)
    zero_lag = read_zero_lag_statistic(output)
    seconds = search.zero_lag_livetime_seconds
    if zero_lag is None or seconds is None:
        return rate, None
    return rate, figures.cumulative_rate(zero_lag, seconds)


def _cleaning_gain(section: page.Section, cleaned: Sensitivity, raw: Sensitivity | None
                   ) -> None:
    """e2e with injections on the fly: VT with and without cleaning at each named threshold
    (the same injections and slides; ``bbhnet.without_cleaning``) and their ratio, cleaning's
    gain."""
    if raw is None or raw.at_reach is None or cleaned.at_reach is None:
        return
    named = [("the background's reach", cleaned.at_reach, raw.at_reach),
             *((name, p, raw.at[name]) for name, p in cleaned.at.items() if name in raw.at)]
    rows = []
    for name, clean, plain in named:
        ratio = ""
        if clean.vt_gpc3_years is not None and plain.vt_gpc3_years:
            ratio = f"{clean.vt_gpc3_years / plain.vt_gpc3_years:.3g}"
        rows.append([f"{name} ({clean.ifar_threshold_years:.3g} yr; without cleaning "
                     f"{plain.ifar_threshold_years:.3g} yr)",
                     f"{clean.found}/{clean.injections}" if clean.measurable else "",
                     f"{plain.found}/{plain.injections}" if plain.measurable else "",
                     _vtcell(clean), _vtcell(plain), ratio])
    section.parts.append(page.heading("Cleaning's gain"))
    section.parts.append(page.paragraph(
        "The same BBHnet, injections and time slides on the strain before DeepClean's "
        "subtraction (statistic_raw, background_raw), each search's IFAR from its own "
        "background: VT with cleaning over VT without is cleaning's gain."))
    section.parts.append(page.table(
        ["IFAR threshold", "found (cleaned)", "found (raw)", "VT cleaned [Gpc^3 yr]",
         "VT raw [Gpc^3 yr]", "gain"], rows))


def _vtcell(p: SensitivePoint) -> str:
    """VT [low, high] at one threshold, or why there is none (``sensitivity.py``)."""
    if not p.measurable or p.found_fraction_interval is None:
        return p.reason or ""
    if p.vt_gpc3_years is None or p.vt_interval_gpc3_years is None:
        low, high = p.found_fraction_interval
        return f"found fraction {p.found_fraction:.3g} [{low:.3g}, {high:.3g}]; no volume"
    low, high = p.vt_interval_gpc3_years
    return f"{p.vt_gpc3_years:.3g} [{low:.3g}, {high:.3g}]"


def _distancecell(p: SensitivePoint) -> str:
    if p.sensitive_distance_mpc is None or p.sensitive_distance_interval_mpc is None:
        return ""
    low, high = p.sensitive_distance_interval_mpc
    return f"{p.sensitive_distance_mpc:.0f} [{low:.0f}, {high:.0f}]"


def _sensitivity(section: page.Section, search: SearchNumbers) -> None:
    """VT against the IFAR threshold with the population in the caption, its value at the
    named thresholds (or why not), and found/missed in chirp mass against distance
    (``sensitivity.sensitivity_summary``)."""
    found = search.sensitivity
    section.parts.append(page.heading("Sensitivity"))
    if found is None or found.at_reach is None or found.interval is None:
        note = found.note if found is not None and found.note else (
            "No sensitivity (no injection list).")
        section.parts.append(page.paragraph(note, "absent"))
        return
    counts, interval = found.counts, found.interval
    spans = left_out_text(search.left_out_spans, gps=False)
    left_out = (f"{counts.in_training} injections in {spans} and "
                f"{counts.outside_analysed} outside the analysed span left out of "
                f"{counts.listed}; " if counts is not None else "")
    caption = (f"VT = V x T x found fraction over {found.injections} held-out injections "
               f"({left_out}{time_caption(found, spans)}); "
               f"{interval.method} interval at {100 * interval.confidence:.2f} %. "
               f"Population: {population_caption(found.population)}.")
    section.parts.append(page.figure(figures.sensitivity_figure(
        found.curve, found.background_years or 0.0), "sensitive time-volume against IFAR",
        caption))
    named = [("the background's reach", found.at_reach), *found.at.items()]
    section.parts.append(page.table(
        ["IFAR threshold", "found", "VT [Gpc^3 yr] [interval]",
         "sensitive distance [Mpc] [interval]"],
        [[f"{name} ({p.ifar_threshold_years:.3g} yr)",
          f"{p.found}/{p.injections}" if p.measurable else "",
          _vtcell(p), _distancecell(p)] for name, p in named]))
    raw = search.without_cleaning
    _cleaning_gain(section, found, None if raw is None else raw.sensitivity)
    bound = search.volume_bound
    if bound is not None and bound.found_near_edge:
        section.parts.append(page.paragraph(
            f"{bound.found_near_edge} of {bound.near_edge} held-out injections beyond "
            f"{bound.distance_from_mpc:.0f} Mpc (the top 10 % of the drawn distances) were "
            "found: the drawn volume, not the search, bounds VT.", "problem"))
    near_cut = search.snr_cut_bound
    if near_cut is not None and near_cut.found_near_cut:
        section.parts.append(page.paragraph(
            f"{near_cut.found_near_cut} held-out injections were found with optimal network "
            f"SNR below {near_cut.snr_below:g}, close to the population's cut at "
            f"{near_cut.network_snr_min:g}: VT is understated.", "problem"))
    if found.notes:
        section.parts.append(page.paragraph(" ".join(f"{n}." for n in found.notes)))
    rows = [i for i in search.injections if i.chirp_mass is not None and not i.in_training]
    if rows and search.ifar_threshold_years is not None:
        section.parts.append(page.image(figures.found_missed_figure(
            rows, search.ifar_threshold_years), "found and missed injections"))
