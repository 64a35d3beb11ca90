"""BBHnet's products (``BuiltInParts.postprocess`` and ``summarize``), written and read here:
each merge clusters its owned statistic into triggers (and its slides into background); the
campaign's triggers (``triggers``) get their FAR from the background (``background``), and
found/missed is counted against the injection list; the report reads the tables back
(``read_triggers``, ``read_background``), and the merge's log says the summary's section
(``search_lines``). The arithmetic (clustering, FAR, found/missed) is ``physics.py``'s and
``injections.py``'s; this module reads and writes the files around it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from offline_iaas.config import CampaignConfig
from offline_iaas.config_sections import SearchConfig
from offline_iaas.gps import gps_span_text
from offline_iaas.merge.foreground import foreground_columns
from offline_iaas.merge.postprocess import ShardProducts
from offline_iaas.mode_packages import SummaryRequest
from offline_iaas.modes import RAW, Outputs
from offline_iaas.physics import (
    SECONDS_PER_YEAR,
    background_cuts,
    cluster_indices,
    cluster_reach_windows,
    false_alarm_rates,
    outside_cuts,
    refuse_non_finite,
    slide_livetime,
)
from offline_iaas.science.bbhnet.injections import (
    campaign_injections,
    injection_lines,
    injection_results,
)
from offline_iaas.science.bbhnet.summary import WITHOUT_CLEANING
from offline_iaas.search.held_out import search_training_spans
from offline_iaas.stretches import Stretch, first_formed_window, output_x0, statistic_spans

logger = logging.getLogger(__name__)


def triggers_and_background(writer: Any, _frames: list | None, _frames_dir: Path | None,
                     products: ShardProducts) -> None:
    """The owned triggers and background of each search (``Outputs.searches``), as
    ``products.arrays`` ``triggers<search>`` and ``background<search>``."""
    for suffix in writer.config.outputs.searches:
        _cluster_search(writer, products, suffix)


def _cluster_search(writer: Any, products: ShardProducts, suffix: str) -> None:
    """The owned triggers of the ``statistic<suffix>`` search, and with time slides its owned
    background less the cuts; DataError naming the stretch and the GPS time of a value that
    is not finite (``physics.refuse_non_finite``: the slides' windows before each is formed,
    NaN by design, are not read)."""
    config = writer.config
    dx = config.stride_seconds
    half = cluster_reach_windows(config.search.cluster_seconds, dx)
    slides = f"background{suffix}" in writer.outputs
    left_out = search_training_spans(config.mode, config.ifos, writer.training)
    cuts = _background_cuts(config.search, left_out) if slides else []
    times, values, rows = [], [], []
    for e in writer.extents:
        a, b = e.statistic_rows
        if b <= a:
            continue
        x0 = output_x0(config.geometry, e.stretch, "statistic")
        statistic = writer.stage[writer.names[(f"statistic{suffix}", e.stretch.index)][0]][()]
        where = (f"BBHnet's statistic{suffix} over the stretch GPS "
                 f"{gps_span_text(e.stretch.gps_start, e.stretch.gps_end)}")
        keep = _owned_maxima(statistic, half, e, where,
                             lambda i, e=e, x0=x0: x0 + (e.rows[0] + i) * dx)
        times.append(x0 + keep * dx)
        values.append(statistic[keep - e.rows[0]])
        if not slides:
            continue
        staged = writer.stage[writer.names[(f"background{suffix}", e.stretch.index)][0]][()]
        for k in range(staged.shape[1]):
            lag = (k + 1) * config.search.slide_seconds
            # a slide's series starts at its first formed window (NaN before it)
            start = max(0, first_formed_window(config.geometry, k + 1) - e.rows[0])
            keep = _owned_maxima(staged[start:, k], half, e,
                                 f"{where}, time slide {k + 1} ({lag:g} s)",
                                 lambda i, e=e, x0=x0, s=start: x0 + (e.rows[0] + s + i) * dx,
                                 start)
            t = x0 + keep * dx
            keep = keep[outside_cuts(t, cuts) & outside_cuts(t - lag, cuts)]
            rows.append((np.full(len(keep), lag), x0 + keep * dx, staged[keep - e.rows[0], k]))
    table = np.zeros(sum(len(t) for t in times), dtype=TRIGGER_COLUMNS)
    if times:
        table["time"], table["statistic"] = np.concatenate(times), np.concatenate(values)
    products.arrays[f"triggers{suffix}"] = table
    if slides:
        background = np.zeros(sum(len(t) for _, t, _ in rows), dtype=BACKGROUND_COLUMNS)
        if rows:
            for column, parts in zip(("shift", "time", "statistic"), zip(*rows, strict=True),
                                     strict=True):
                background[column] = np.concatenate(parts)
        products.arrays[f"background{suffix}"] = background


def _owned_maxima(staged: np.ndarray, half: int, extent: Any, what: str,
                  gps_of: Callable[[int], float], offset: int = 0) -> np.ndarray:
    """The kept-window indices of the clustered maxima of a staged series (from staged row
    ``offset``) that the extent owns (the staged rows reach ``half`` beyond them, so none is
    cut short); DataError naming ``what`` and ``gps_of(index)`` for a value not finite."""
    keep = cluster_indices(staged, half, what, gps_of) + extent.rows[0] + offset
    a, b = extent.statistic_rows
    return keep[(keep >= a) & (keep < b)]


TRIGGER_COLUMNS = [("time", "f8"), ("statistic", "f4")]
SLID_TRIGGER_COLUMNS = [("far", "f8"), ("ifar", "f8"), ("outside_cuts", "?")]
"""With time slides: each trigger's FAR (Hz) and IFAR (years), and whether it lies outside the
background's cuts (``physics.outside_cuts``: the zero-lag triggers the report's cumulative rate
counts, over ``zero_lag_livetime_seconds``)."""
BACKGROUND_COLUMNS = [("shift", "f8"), ("time", "f8"), ("statistic", "f4")]


def _background_cuts(search: SearchConfig, training: dict[str, tuple[float, float]]
                     ) -> list[tuple[float, float]]:
    """The background's cuts (``physics.background_cuts``) with an injection list: around
    its injections, and the ``training`` spans left out (``search_training_spans``)."""
    listed = campaign_injections(search)
    return (background_cuts(list(listed.injections), search, list(training.values()))
            if listed else [])


def search_summary(request: SummaryRequest) -> dict[str, Any]:
    """BBHnet's section of the campaign summary (``bbhnet``) from every merge's products, in
    time order: the triggers with their FAR and the background table (into the file),
    found/missed; in e2e with the raw strain searched too, the same under
    ``bbhnet.without_cleaning``."""
    file, config, stretches = request.file, request.config, request.stretches
    # every served network's span: in e2e DeepClean's too (its cleaned strain is over-fit)
    training = search_training_spans(config.mode, config.ifos, request.training)
    products = request.products
    fg = _foreground(file, config.search, config.outputs, products)
    search = _triggers(file, config, stretches, training, products, fg)
    if config.outputs.searches_raw_strain:  # the same search on the raw strain: cleaning's gain
        search[WITHOUT_CLEANING] = _triggers(file, config, stretches, training, products, fg,
                                             RAW)
    return {"bbhnet": search}


def _triggers(file: Any, config: CampaignConfig, stretches: list[Stretch],
              training: dict[str, tuple[float, float]], products: list[ShardProducts],
              fg: np.ndarray | None, suffix: str = "") -> dict[str, Any]:
    """One search's triggers (with their FAR), background and found/missed, into ``file``
    as ``triggers<suffix>`` and ``background<suffix>``; ``fg`` the foreground table, whose
    ``statistic<suffix>`` column found/missed reads; ``training`` the spans left out of the
    background, its livetime and the held-out injections (``search_training_spans``)."""
    found = [p.arrays[f"triggers{suffix}"] for p in products if f"triggers{suffix}" in p.arrays]
    triggers = np.concatenate(found) if found else np.zeros(0, TRIGGER_COLUMNS)
    t, v = triggers["time"], triggers["statistic"]
    analysed = statistic_spans(config.geometry, stretches)
    listed = campaign_injections(config.search)
    slides = config.has_slides
    columns = TRIGGER_COLUMNS + (SLID_TRIGGER_COLUMNS if slides else [])
    table = np.zeros(len(t), dtype=columns)
    table["time"], table["statistic"] = t, v
    result: dict[str, Any] = {"triggers": int(len(t)),
                              "cluster_seconds": config.search.cluster_seconds}
    if slides:
        parts = [p.arrays[f"background{suffix}"] for p in products
                 if f"background{suffix}" in p.arrays]
        background = np.concatenate(parts) if parts else np.zeros(0, BACKGROUND_COLUMNS)
        background = background[np.lexsort((background["time"], background["shift"]))]
        cuts = _background_cuts(config.search, training)
        livetime = sum(slide_livetime(span, cuts, (k + 1) * config.search.slide_seconds)
                       for span in analysed for k in range(config.search.slides))
        table["far"], table["ifar"] = false_alarm_rates(v, background["statistic"], livetime)
        # the zero lag is slide 0: its triggers and time cut as the slides' are, so that its
        # rate (the report's cumulative-rate figure) compares with the background's
        table["outside_cuts"] = outside_cuts(t, cuts)
        zero_lag_seconds = float(sum(slide_livetime(span, cuts, 0.0) for span in analysed))
        if livetime == 0:
            logger.warning(
                "BBHnet: no time slide is formed outside the cuts (each stretch is shorter than "
                f"its warm-up and {config.search.slide_seconds:g} s, or the injections' "
                "neighbourhoods take the rest): no background, every trigger's IFAR is 0")
        file.create_dataset(f"background{suffix}", data=background)
        result.update({"time_shifts": config.search.slides,
                       "shift_seconds": config.search.slide_seconds,
                       "analysed_seconds": float(sum(b - a for a, b in analysed)),
                       "background_triggers": int(len(background)),
                       "background_livetime_seconds": livetime,
                       "zero_lag_livetime_seconds": zero_lag_seconds,
                       "loudest_ifar_years": float(table["ifar"].max(initial=0.0))})
    file.create_dataset(f"triggers{suffix}", data=table)
    column = f"statistic{suffix}"
    if fg is not None and slides:  # found/missed from the foreground, FAR from the background
        fg_ifar = false_alarm_rates(fg[column], background["statistic"], livetime)[1]
    if listed is not None:
        ifar = (table["ifar"] if fg is None else fg_ifar) if slides else None
        result.update(injection_results(
            config.search, listed, t, v, ifar,
            analysed, training, result.get("background_livetime_seconds"),
            None if fg is None else (fg["time"], fg[column])))
    return result


def _foreground(file: Any, search: SearchConfig, outputs: Outputs,
                products: list[ShardProducts]) -> np.ndarray | None:
    """The foreground of every merge's products, in time order, into ``file``; None unless
    ``search.inject``. DataError naming the GPS time of a statistic that is not finite
    (``physics.refuse_non_finite``: the foreground has no gaps)."""
    if not search.inject:
        return None
    found = [p.foreground for p in products if p.foreground is not None]
    table = np.concatenate(found) if found else np.zeros(0, foreground_columns(outputs))
    table = table[np.argsort(table["time"], kind="stable")]
    for name in outputs.statistics:
        refuse_non_finite(table[name], f"BBHnet's {name} with the injections added on the fly "
                          "(the foreground)", lambda i: float(table["time"][i]))
    file.create_dataset("foreground", data=table)
    return table


def read_triggers(path: Path, max_count: int | None = 5000) -> np.ndarray | None:
    """The ``triggers`` dataset (fields ``time``, ``statistic``): the ``max_count`` loudest
    (None: all).

    Returns None when the file has no triggers.
    """
    with h5py.File(path, "r") as f:
        data = f.get("triggers")
        if not isinstance(data, h5py.Dataset):
            return None
        triggers = data[()]
    return triggers if max_count is None else loudest_triggers(triggers, max_count)


def loudest_triggers(triggers: np.ndarray, max_count: int) -> np.ndarray:
    """The ``max_count`` loudest of ``triggers``, in time order."""
    if len(triggers) <= max_count:
        return triggers
    loudest = np.argpartition(triggers["statistic"], len(triggers) - max_count)
    return np.sort(triggers[loudest[-max_count:]], order="time")


def read_background(path: Path) -> np.ndarray | None:
    """The time slides' clustered statistic (the ``background`` table's ``statistic``);
    None when the campaign has no time slides."""
    with h5py.File(path, "r") as f:
        data = f.get("background")
        if not isinstance(data, h5py.Dataset):
            return None
        return np.asarray(data["statistic"], np.float64)


def read_zero_lag_statistic(path: Path) -> np.ndarray | None:
    """The statistic of the triggers outside the background's cuts (the ``triggers`` table's
    ``outside_cuts``), as float64: the zero lag cut as the time slides are. None for an output
    written before the column (or without time slides)."""
    with h5py.File(path, "r") as f:
        table = f["triggers"]
        if "outside_cuts" not in (table.dtype.names or ()):
            return None
        triggers = table[()]
    return np.asarray(triggers["statistic"][triggers["outside_cuts"]], np.float64)


def search_lines(physics: Any) -> list[str]:
    """The lines of the summary's ``bbhnet`` section (``physics``: ``summary_physics.
    physics_type`` of a mode with it): triggers, background, found/missed and VT, and those
    of e2e's same search on the raw strain."""
    search = physics.bbhnet
    if search is None:
        return []
    lines = [f"BBHnet: {search.triggers} triggers (statistic clustered over "
             f"{search.cluster_seconds:g} s)"]
    livetime = search.background_livetime_seconds
    if search.slid and livetime is not None:
        lines.append(
            f"BBHnet: {search.background_triggers} background triggers from "
            f"{search.time_shifts} time slides of {search.shift_seconds:g} s "
            f"({livetime:.0f} s = {livetime / SECONDS_PER_YEAR:.2g} yr of livetime); loudest "
            f"trigger's IFAR {search.loudest_ifar_years:.2g} yr")
    lines += injection_lines(search)
    raw = search.without_cleaning  # e2e's same search on the raw strain
    return lines + ([] if raw is None else [
        line.replace("BBHnet:", "BBHnet without cleaning:", 1) for line in injection_lines(raw)])
