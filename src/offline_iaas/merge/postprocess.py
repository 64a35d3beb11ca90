"""What the merge (and the reference) compute from the stitched outputs, per stretch.

DeepClean (modes ``deepclean``, ``e2e``): the averaged prediction is band-passed and
subtracted from the strain read from the frames (``clean = strain - noise``), written to the
output and, when asked, to GWF frames; the cleaned/raw ASD ratio is reported. BBHnet (modes
``bbhnet``, ``e2e``): triggers, and found/missed against an injection list. The arithmetic
(filter, ASD ratio, clustering, found/missed) is ``physics.py``'s; this module reads and
writes the files around it.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from offline_iaas.config import CampaignConfig
from offline_iaas.config_sections import BBHnetConfig
from offline_iaas.merge.foreground import foreground_columns
from offline_iaas.merge.injections import (
    campaign_injections,
    injection_lines,
    injection_results,
)
from offline_iaas.merge.layout import gps_text, series_attrs
from offline_iaas.merge.products import (
    CANARY_SUFFIX,
    CleanedFrames,
    output_channel,
    publish_frames,
)
from offline_iaas.mode_packages import mode_package
from offline_iaas.modes import RAW, Outputs
from offline_iaas.physics import (
    ASD_MAX_SECONDS,
    SECONDS_PER_YEAR,
    asd_ratio,
    background_cuts,
    bandpass_sos,
    cluster_indices,
    cluster_reach_windows,
    false_alarm_rates,
    held_out_samples,
    outside_cuts,
    slide_livetime,
    zero_phase_blocks,
)
from offline_iaas.records import WITHOUT_CLEANING
from offline_iaas.stretches import Stretch, first_formed_window, output_x0, statistic_spans
from offline_iaas.summary_physics import Physics, section

logger = logging.getLogger(__name__)


@dataclass
class ShardProducts:
    """What one merge's post-processing hands to :func:`summarize` (the single merge's whole
    campaign, or one shard's, read back by the index: ``merge/index.py``)."""

    triggers: np.ndarray | None = None
    """The owned clustered statistic: ``time``, ``statistic`` (modes with triggers)."""
    background: np.ndarray | None = None
    """The owned clustered slides, less the cuts: ``shift``, ``time``, ``statistic``."""
    held_out: dict[str, tuple[float, np.ndarray, np.ndarray]] = field(default_factory=dict)
    """Per ``<output>/<IFO>``, the owned part of the held-out run (``held_out_choice``): GPS
    of its first sample, the raw and the cleaned strain (float64)."""
    frame_files: list[tuple[str, Path, int, int]] = field(default_factory=list)
    """The GWF files written: interferometer, final path, GPS start, seconds."""
    frame_spans: dict[str, dict[str, list[tuple[float, float]]]] = field(default_factory=dict)
    """Per interferometer, the ``valid`` and ``flagged`` spans of those files."""
    foreground: np.ndarray | None = None
    """With ``bbhnet.inject``: the foreground's ``time``, ``statistic``
    (``merge/foreground.py``)."""
    raw: ShardProducts | None = None
    """e2e's search on the raw strain (``statistic_raw``): its ``triggers`` and
    ``background``, made as the cleaned strain's are."""


def postprocess(writer: Any, frames: list | None, frames_dir: Path | None) -> ShardProducts:
    """Write ``writer``'s owned values (a ``CampaignWriter``), with the cleaned strain and its
    GWF files (into ``frames_dir``), and cluster its triggers."""
    products = ShardProducts()
    config = writer.config
    if "statistic" in writer.outputs:
        _copy_owned(writer)
    if any(o.startswith("noise") for o in writer.outputs):
        if frames is None:
            raise ValueError("the DeepClean post-processing needs the frame files")
        _clean_strain(writer, frames, frames_dir, products)
    if "statistic" in writer.outputs and config.mode.triggers:
        _cluster(writer, products)
    return products


def _copy_owned(writer: Any) -> None:
    """The owned rows of the staged statistic (and slides) into the output."""
    config = writer.config
    for e in writer.extents:
        a, b = e.statistic_rows
        if b <= a and not writer.whole:
            continue
        x0 = output_x0(config.geometry, e.stretch, "statistic") + a * config.stride_seconds
        at = a - e.rows[0]
        staged = writer.stage[writer.names[("statistic", e.stretch.index)][0]]
        dataset = writer.file.create_dataset(f"statistic/{gps_text(x0)}",
                                             data=staged[at : at + b - a])
        series_attrs(dataset, config, "statistic", 0, x0)
        if "background" in writer.outputs:
            staged = writer.stage[writer.names[("background", e.stretch.index)][0]]
            dataset = writer.file.create_dataset(f"slides/{gps_text(x0)}",
                                                 data=staged[at : at + b - a])
            series_attrs(dataset, config, "slides", 0, x0)


@dataclass(frozen=True)
class _Variant:
    """One DeepClean's products: the production one, or the canary beside it."""

    output: str
    """The averaged prediction clients stored (``noise``, ``noise_canary``)."""
    noise: str
    clean: str
    """HDF5 groups of the band-passed prediction and the cleaned strain."""
    suffix: str
    """Appended to the cleaned strain's channel (``""``, ``_CANARY``)."""


PRODUCTION = _Variant("noise", "noise", "clean", "")
CANARY = _Variant("noise_canary", "noise_canary", "clean_canary", CANARY_SUFFIX)


def _variants(outputs: list[str] | tuple[str, ...]) -> list[_Variant]:
    return [PRODUCTION] + ([CANARY] if "noise_canary" in outputs else [])


def held_out_choice(config: CampaignConfig, stretches: list[Stretch],
                    training: dict[str, list[float]]) -> dict[str, tuple[int, int, int]]:
    """Per interferometer, the stretch and samples ``[a, b)`` of cleaned strain the ASD numbers
    use: the longest run outside the network's training data (the first of equal ones), at
    most ``ASD_MAX_SECONDS``."""
    rate = config.data.sample_rate
    choice: dict[str, tuple[int, int, int]] = {}
    for ifo in config.ifos:
        span = training.get(f"deepclean-{ifo}")
        for stretch in stretches:
            n = stretch.kept_windows(config.geometry) * config.stride_samples
            a, b = held_out_samples(output_x0(config.geometry, stretch, "noise"), n, rate,
                                    [tuple(span)] if span else [], int(ASD_MAX_SECONDS * rate))
            best = choice.get(ifo)
            if b - a > (best[2] - best[1] if best else 0):
                choice[ifo] = (stretch.index, a, b)
    return choice


def _clean_strain(writer: Any, frames: list, frames_dir: Path | None,
                  products: ShardProducts) -> None:
    """The owned cleaned strain (and the canary's) into the HDF5 file and (``frames_dir``) the
    gated GWF files; the owned part of the held-out run into ``products``."""
    from offline_iaas.data.frames import read_span

    config = writer.config
    rate = config.data.sample_rate
    s = config.stride_samples
    sos = bandpass_sos(config.deepclean, config.data.sample_rate)
    variants = _variants(writer.outputs)
    gwf = (CleanedFrames(frames_dir, writer.frames_dir, config, writer.provenance)
           if frames_dir is not None else None)
    choice = held_out_choice(config, writer.stretches, writer.training)
    for e in writer.extents:
        first, last = e.noise_samples
        if last <= first and not writer.whole:
            continue
        stretch = e.stretch
        x0 = output_x0(config.geometry, stretch, "noise")
        n = stretch.kept_windows(config.geometry) * s
        staged_from = e.rows[0] * s
        bounds = (stretch.gps_start, stretch.gps_end)
        for index, (ifo, strain) in enumerate(zip(config.ifos, config.data.channels,
                                                  strict=True)):
            predictions = [writer.stage[writer.names[(v.output, stretch.index)][index]]
                           for v in variants]
            stored = []
            for v in variants:
                gps = gps_text(x0 + first / rate)
                noise = writer.file.create_dataset(f"{v.noise}/{ifo}/{gps}",
                                                   shape=(last - first,), dtype=np.float32)
                clean = writer.file.create_dataset(f"{v.clean}/{ifo}/{gps}",
                                                   shape=(last - first,), dtype=np.float32)
                series_attrs(noise, config, v.noise, index, x0 + first / rate)
                series_attrs(clean, config, v.clean, index, x0 + first / rate)
                stored.append((noise, clean))
            chosen = choice.get(ifo, (-1, 0, 0))
            ha, hb = ((max(first, chosen[1]), min(last, chosen[2]))
                      if chosen[0] == stretch.index else (0, 0))
            raw_kept = np.zeros(max(0, hb - ha))
            clean_kept = [np.zeros(max(0, hb - ha)) for _ in variants]
            # the same block grid for every variant: the raw strain is read once per block
            blocks = zip(*(zero_phase_blocks(
                lambda lo, hi, p=p, at=staged_from: p[lo - at : hi - at].astype(np.float64),
                n, sos, rate, first, last) for p in predictions), strict=True)
            for per_variant in blocks:
                a = per_variant[0][0]
                b = a + len(per_variant[0][1])
                raw = read_span(frames, [strain], x0 + a / rate, x0 + b / rate, rate,
                                bounds)[0].astype(np.float64)
                cleaned = [raw - band for _, band in per_variant]
                for (_, band), (noise, clean), values in zip(per_variant, stored, cleaned,
                                                             strict=True):
                    noise[a - first : b - first] = band
                    clean[a - first : b - first] = values
                lo, hi = max(a, ha), min(b, hb)
                if lo < hi:
                    raw_kept[lo - ha : hi - ha] = raw[lo - a : hi - a]
                    for kept, values in zip(clean_kept, cleaned, strict=True):
                        kept[lo - ha : hi - ha] = values[lo - a : hi - a]
                if gwf is not None:
                    gwf.add(ifo, strain, x0 + a / rate, raw, cleaned[0],
                            cleaned[1] if len(cleaned) > 1 else None)
            if gwf is not None:
                gwf.flush(ifo)
            if hb > ha:
                for v, kept in zip(variants, clean_kept, strict=True):
                    products.held_out[f"{v.output}/{ifo}"] = (x0 + ha / rate, raw_kept, kept)
    if gwf is not None:
        products.frame_files, products.frame_spans = gwf.finish()


def _cluster(writer: Any, products: ShardProducts) -> None:
    """The owned triggers and background of each search (``Outputs.searches``)."""
    _cluster_search(writer, products, "")
    if writer.config.outputs.searches_raw_strain:
        products.raw = ShardProducts()
        _cluster_search(writer, products.raw, RAW)


def _cluster_search(writer: Any, products: ShardProducts, suffix: str) -> None:
    """The owned triggers of the ``statistic<suffix>`` search, and with time slides its owned
    background less the cuts."""
    config = writer.config
    dx = config.stride_seconds
    half = cluster_reach_windows(config.bbhnet.cluster_seconds, dx)
    slides = f"background{suffix}" in writer.outputs
    cuts = _background_cuts(config.bbhnet, writer.training) if slides else []
    times, values, rows = [], [], []
    for e in writer.extents:
        a, b = e.statistic_rows
        if b <= a:
            continue
        x0 = output_x0(config.geometry, e.stretch, "statistic")
        statistic = writer.stage[writer.names[(f"statistic{suffix}", e.stretch.index)][0]][()]
        keep = _owned_maxima(statistic, half, e)
        times.append(x0 + keep * dx)
        values.append(statistic[keep - e.rows[0]])
        if not slides:
            continue
        staged = writer.stage[writer.names[(f"background{suffix}", e.stretch.index)][0]][()]
        for k in range(staged.shape[1]):
            lag = (k + 1) * config.bbhnet.slide_seconds
            # a slide's series starts at its first formed window (NaN before it)
            start = max(0, first_formed_window(config.geometry, k + 1) - e.rows[0])
            keep = _owned_maxima(staged[start:, k], half, e, start)
            t = x0 + keep * dx
            keep = keep[outside_cuts(t, cuts) & outside_cuts(t - lag, cuts)]
            rows.append((np.full(len(keep), lag), x0 + keep * dx, staged[keep - e.rows[0], k]))
    table = np.zeros(sum(len(t) for t in times), dtype=TRIGGER_COLUMNS)
    if times:
        table["time"], table["statistic"] = np.concatenate(times), np.concatenate(values)
    products.triggers = table
    if slides:
        background = np.zeros(sum(len(t) for _, t, _ in rows), dtype=BACKGROUND_COLUMNS)
        if rows:
            for column, parts in zip(("shift", "time", "statistic"), zip(*rows, strict=True),
                                     strict=True):
                background[column] = np.concatenate(parts)
        products.background = background


def _owned_maxima(staged: np.ndarray, half: int, extent: Any, offset: int = 0) -> np.ndarray:
    """The kept-window indices of the clustered maxima of a staged series (from staged row
    ``offset``) that the extent owns (the staged rows reach ``half`` beyond them, so none is
    cut short)."""
    keep = cluster_indices(staged, half) + extent.rows[0] + offset
    a, b = extent.statistic_rows
    return keep[(keep >= a) & (keep < b)]


TRIGGER_COLUMNS = [("time", "f8"), ("statistic", "f4")]
BACKGROUND_COLUMNS = [("shift", "f8"), ("time", "f8"), ("statistic", "f4")]


def _background_cuts(bbhnet: BBHnetConfig, training: dict[str, list[float]]
                     ) -> list[tuple[float, float]]:
    listed = campaign_injections(bbhnet)
    return (background_cuts(list(listed.injections), bbhnet, training.get("bbhnet"))
            if listed else [])


def summarize(file: Any, config: CampaignConfig, stretches: list[Stretch],
              training: dict[str, list[float]], products: list[ShardProducts],
              frames_dir: Path | None) -> dict[str, Any]:
    """The campaign-wide numbers from every merge's products, in time order: the ASD
    numbers and the GWF files' cache and segment lists (into ``frames_dir``), the triggers with
    their FAR and the background table (into ``file``), found/missed.

    Returns the summary (``deepclean``: numbers per interferometer, ``bbhnet``: triggers and
    found/missed; a mode package's section, ``package_sections``) that :func:`physics_lines`
    describes.
    """
    outputs = config.outputs.names
    summary: dict[str, Any] = {}
    if "noise" in outputs:
        held_out: dict[str, tuple[float, np.ndarray, np.ndarray]] = {}
        for part in products:
            for key, (gps, raw, clean) in part.held_out.items():
                if key in held_out:
                    start, raws, cleans = held_out[key]
                    held_out[key] = (start, np.concatenate([raws, raw]),
                                     np.concatenate([cleans, clean]))
                else:
                    held_out[key] = (gps, raw, clean)
        numbers = [_asd_numbers(config, training, v, held_out) for v in _variants(outputs)]
        summary["deepclean"] = numbers[0]
        if len(numbers) > 1 and numbers[1]:
            summary["deepclean_canary"] = numbers[1]
        if frames_dir is not None:
            files = [f for part in products for f in part.frame_files]
            spans: dict[str, dict[str, list[tuple[float, float]]]] = {}
            for part in products:
                for ifo, kinds in part.frame_spans.items():
                    for kind, found in kinds.items():
                        spans.setdefault(ifo, {"valid": [], "flagged": []})[kind] += found
            gate = publish_frames(frames_dir, config.deepclean, files, spans)
            if gate:
                summary["deepclean_gate"] = gate
            channels = ", ".join(output_channel(config.deepclean, ch)
                                 for ch in config.data.channels)
            logger.debug(f"{len(files)} GWF files of cleaned strain ({channels})")
    if "statistic" in outputs and config.mode.triggers:
        fg = _foreground(file, config.bbhnet, config.outputs, products)
        summary["bbhnet"] = _triggers(file, config, stretches, training, products, fg)
        if config.outputs.searches_raw_strain:  # the same search on the raw strain: cleaning's gain
            summary["bbhnet"][WITHOUT_CLEANING] = _triggers(
                file, config, stretches, training,
                [p.raw for p in products if p.raw is not None], fg, RAW)
    package = mode_package(config.model.mode)
    if package is not None and package.summarize is not None:  # the mode package's product
        numbers = package.summarize(file, config, stretches)
        summary["package_sections"] = {config.model.mode: section(package.summary, numbers)
                                   .model_dump(mode="json")}
    return summary


def _asd_numbers(config: CampaignConfig, training: dict[str, list[float]], variant: _Variant,
                 held_out: dict[str, tuple[float, np.ndarray, np.ndarray]]) -> dict[str, Any]:
    """The cleaned/raw ASD numbers of one variant per interferometer, on held-out data."""
    rate, d = config.data.sample_rate, config.deepclean
    result: dict[str, Any] = {}
    for ifo in config.ifos:
        span = training.get(f"deepclean-{ifo}")
        start, raw, cleaned = held_out.get(f"{variant.output}/{ifo}",
                                           (0.0, np.zeros(0), np.zeros(0)))
        if len(raw) < 2 * d.asd_fftlength * rate:
            logger.warning(f"{ifo}: too little cleaned strain outside the training data for an "
                           f"ASD ({len(raw) / rate:.0f} s)")
            continue
        band = (d.band_low_hz, d.band_high_hz)
        numbers = asd_ratio(raw, cleaned, rate, d.asd_fftlength, band, d.guard_hz)
        end = start + len(raw) / rate
        numbers["held_out_gps"] = [start, end]
        numbers["training_gps"] = span
        result[ifo] = numbers
        data = (f"GPS {start:.0f}-{end:.0f}, after the network's training data (GPS "
                f"{span[0]:.0f}-{span[1]:.0f})" if span else
                f"GPS {start:.0f}-{end:.0f}; the weights record no training span, so it may "
                "include training data")
        logger.debug(
            f"{ifo}{variant.suffix.lower().replace('_', ' ')} cleaned/raw ASD at the "
            f"{numbers['line_hz']:.2f} Hz line: "
            f"{numbers['ratio_at_line']:.3f}; outside {d.band_low_hz - d.guard_hz:g}-"
            f"{d.band_high_hz + d.guard_hz:g} Hz within "
            f"{100 * numbers['max_deviation_outside_band']:.2f} % of 1 "
            f"({100 * numbers['max_deviation_at_band_edges']:.1f} % right outside the band "
            f"edges; {data}; {d.asd_fftlength:g} s FFTs)"
        )
    return result


def _triggers(file: Any, config: CampaignConfig, stretches: list[Stretch],
              training: dict[str, list[float]], products: list[ShardProducts],
              fg: np.ndarray | None, suffix: str = "") -> dict[str, Any]:
    """One search's triggers (with their FAR), background and found/missed, into ``file``
    as ``triggers<suffix>`` and ``background<suffix>``; ``fg`` the foreground table, whose
    ``statistic<suffix>`` column found/missed reads."""
    found = [p.triggers for p in products if p.triggers is not None]
    triggers = np.concatenate(found) if found else np.zeros(0, TRIGGER_COLUMNS)
    t, v = triggers["time"], triggers["statistic"]
    analysed = statistic_spans(config.geometry, stretches)
    listed = campaign_injections(config.bbhnet)
    slides = config.has_slides
    columns = TRIGGER_COLUMNS + ([("far", "f8"), ("ifar", "f8")] if slides else [])
    table = np.zeros(len(t), dtype=columns)
    table["time"], table["statistic"] = t, v
    result: dict[str, Any] = {"triggers": int(len(t)),
                              "cluster_seconds": config.bbhnet.cluster_seconds}
    if slides:
        parts = [p.background for p in products if p.background is not None]
        background = np.concatenate(parts) if parts else np.zeros(0, BACKGROUND_COLUMNS)
        background = background[np.lexsort((background["time"], background["shift"]))]
        cuts = _background_cuts(config.bbhnet, training)
        livetime = sum(slide_livetime(span, cuts, (k + 1) * config.bbhnet.slide_seconds)
                       for span in analysed for k in range(config.bbhnet.slides))
        table["far"], table["ifar"] = false_alarm_rates(v, background["statistic"], livetime)
        if livetime == 0:
            logger.warning(
                "BBHnet: no time slide is formed outside the cuts (each stretch is shorter than "
                f"its warm-up and {config.bbhnet.slide_seconds:g} s, or the injections' "
                "neighbourhoods take the rest): no background, every trigger's IFAR is 0")
        file.create_dataset(f"background{suffix}", data=background)
        result.update({"time_shifts": config.bbhnet.slides,
                       "shift_seconds": config.bbhnet.slide_seconds,
                       "analysed_seconds": float(sum(b - a for a, b in analysed)),
                       "background_triggers": int(len(background)),
                       "background_livetime_seconds": livetime,
                       "loudest_ifar_years": float(table["ifar"].max(initial=0.0))})
    file.create_dataset(f"triggers{suffix}", data=table)
    column = f"statistic{suffix}"
    if fg is not None and slides:  # found/missed from the foreground, FAR from the background
        fg_ifar = false_alarm_rates(fg[column], background["statistic"], livetime)[1]
    if listed is not None:
        ifar = (table["ifar"] if fg is None else fg_ifar) if slides else None
        result.update(injection_results(
            config.bbhnet, listed, t, v, ifar,
            analysed, training.get("bbhnet"), result.get("background_livetime_seconds"),
            None if fg is None else (fg["time"], fg[column])))
    return result


def _foreground(file: Any, bbhnet: BBHnetConfig, outputs: Outputs,
                products: list[ShardProducts]) -> np.ndarray | None:
    """The foreground of every merge's products, in time order, into ``file``; None unless
    ``bbhnet.inject``."""
    if not bbhnet.inject:
        return None
    found = [p.foreground for p in products if p.foreground is not None]
    table = np.concatenate(found) if found else np.zeros(0, foreground_columns(outputs))
    table = table[np.argsort(table["time"], kind="stable")]
    file.create_dataset("foreground", data=table)
    return table


def physics_lines(physics: Physics) -> list[str]:
    """One line per DeepClean interferometer and one for BBHnet, from :func:`postprocess`'s
    summary (``CampaignSummary.physics``, read from ``output/campaign.json``)."""
    lines = []
    for ifo, numbers in (physics.deepclean or {}).items():
        start, end = numbers.held_out_gps
        training = numbers.training_gps
        data = (f"held-out GPS {start:.0f}-{end:.0f}, after training on GPS {training[0]:.0f}-"
                f"{training[1]:.0f}" if training else f"GPS {start:.0f}-{end:.0f}, training "
                "span unknown")
        lines.append(
            f"DeepClean {ifo}: cleaned/raw ASD {numbers.ratio_at_line:.3f} at the "
            f"{numbers.line_hz:.2f} Hz line, within "
            f"{100 * numbers.max_deviation_outside_band:.2f} % of 1 outside the band "
            f"(+- {numbers.guard_hz:g} Hz guard; {data})"
        )
    search = physics.bbhnet
    if search is None:
        return lines
    lines.append(f"BBHnet: {search.triggers} triggers (statistic clustered over "
                 f"{search.cluster_seconds:g} s)")
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
