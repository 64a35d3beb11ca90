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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from offline_iaas.merge.layout import gps_text, output_x0, timeseries_attrs
from offline_iaas.merge.products import CANARY_SUFFIX, CleanedFrames, output_channel
from offline_iaas.physics import (
    ASD_MAX_SECONDS,
    SECONDS_PER_YEAR,
    asd_ratio,
    background_cuts,
    bandpass_sos,
    cluster_triggers,
    false_alarm_rates,
    found_missed,
    found_missed_at_ifar,
    held_out_samples,
    outside_cuts,
    read_injections,
    slide_livetime,
    zero_phase_blocks,
)

logger = logging.getLogger(__name__)


def postprocess(writer: Any, frames: list | None, frames_dir: Path | None) -> dict[str, Any]:
    """Clean the strain and find triggers in ``writer``'s file (a ``CampaignWriter``).

    Returns the summary (``deepclean``: numbers per interferometer, ``bbhnet``: triggers and
    found/missed) that :func:`physics_lines` describes.
    """
    summary: dict[str, Any] = {}
    if writer.stage is not None:
        if frames is None:
            raise ValueError("the DeepClean post-processing needs the frame files")
        summary["deepclean"], canary, gate = _clean_strain(writer, frames, frames_dir)
        if canary:
            summary["deepclean_canary"] = canary
        if gate:
            summary["deepclean_gate"] = gate
    if "statistic" in writer.outputs and writer.config.mode.triggers:
        summary["bbhnet"] = _triggers(writer)
    return summary


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


def _clean_strain(
    writer: Any, frames: list, frames_dir: Path | None
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """The cleaned strain (and the canary's) into the HDF5 file and (``frames_dir``) the gated
    GWF files; return the ASD numbers per interferometer, the canary's, and the gate's."""
    from offline_iaas.data.frames import read_span

    config = writer.config
    rate = config.data.sample_rate
    sos = bandpass_sos(config)
    variants = [PRODUCTION] + ([CANARY] if "noise_canary" in writer.outputs else [])
    gwf = (CleanedFrames(frames_dir, writer.frames_dir, config, writer.provenance)
           if frames_dir is not None else None)
    # per (variant, ifo), the longest held-out run of cleaned strain: (gps start, raw, cleaned)
    held_out: dict[tuple[str, str], tuple[float, np.ndarray, np.ndarray]] = {}
    for stretch in writer.stretches:
        x0 = output_x0(config, stretch, "noise")
        bounds = (stretch.gps_start, stretch.gps_end)
        for index, (ifo, strain) in enumerate(zip(config.ifos, config.data.channels,
                                                  strict=True)):
            predictions = [writer.stage[writer.names[(v.output, stretch.index)][index]]
                           for v in variants]
            n = len(predictions[0])
            stored = []
            for v in variants:
                noise = writer.file.create_dataset(f"{v.noise}/{ifo}/{gps_text(x0)}", shape=(n,),
                                                   dtype=np.float32)
                clean = writer.file.create_dataset(f"{v.clean}/{ifo}/{gps_text(x0)}", shape=(n,),
                                                   dtype=np.float32)
                timeseries_attrs(noise, f"{strain}_DEEPCLEAN_NOISE{v.suffix}", v.noise, x0,
                                 1 / rate, "strain")
                timeseries_attrs(clean, output_channel(config, strain) + v.suffix, v.clean, x0,
                                 1 / rate, "strain")
                stored.append((noise, clean))
            training = writer.training.get(f"deepclean-{ifo}")
            ha, hb = held_out_samples(x0, n, rate, [tuple(training)] if training else [],
                                      int(ASD_MAX_SECONDS * rate))
            # the held-out raw strain once, each variant's cleaned strain beside it
            raw_kept = np.zeros(hb - ha)
            clean_kept = [np.zeros(hb - ha) for _ in variants]
            # the same block grid for every variant: the raw strain is read once per block
            blocks = zip(*(zero_phase_blocks(
                lambda lo, hi, p=p: p[lo:hi].astype(np.float64), n, sos, rate)
                for p in predictions), strict=True)
            for per_variant in blocks:
                a = per_variant[0][0]
                b = a + len(per_variant[0][1])
                raw = read_span(frames, [strain], x0 + a / rate, x0 + b / rate, rate,
                                bounds)[0].astype(np.float64)
                cleaned = [raw - band for _, band in per_variant]
                for (_, band), (noise, clean), values in zip(per_variant, stored, cleaned,
                                                             strict=True):
                    noise[a:b] = band
                    clean[a:b] = values
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
            for v, kept in zip(variants, clean_kept, strict=True):
                if hb - ha > len(held_out.get((v.output, ifo), (0, ()))[1]):
                    held_out[(v.output, ifo)] = (x0 + ha / rate, raw_kept, kept)
    results = [_asd_numbers(writer, v, held_out) for v in variants]
    gate = {} if gwf is None else gwf.close()
    if gwf is not None:
        channels = ", ".join(output_channel(config, ch) for ch in config.data.channels)
        logger.debug(f"{gwf.count} GWF files of cleaned strain ({channels})")
    return results[0], (results[1] if len(results) > 1 else {}), gate


def _asd_numbers(writer: Any, variant: _Variant,
                 held_out: dict[tuple[str, str], tuple[float, np.ndarray, np.ndarray]]
                 ) -> dict[str, Any]:
    """The cleaned/raw ASD numbers of one variant per interferometer, on held-out data."""
    config = writer.config
    rate, d = config.data.sample_rate, config.deepclean
    result: dict[str, Any] = {}
    for ifo in config.ifos:
        training = writer.training.get(f"deepclean-{ifo}")
        start, raw, cleaned = held_out.get((variant.output, ifo), (0.0, np.zeros(0), np.zeros(0)))
        if len(raw) < 2 * d.asd_fftlength * rate:
            logger.warning(f"{ifo}: too little cleaned strain outside the training data for an "
                           f"ASD ({len(raw) / rate:.0f} s)")
            continue
        band = (d.band_low_hz, d.band_high_hz)
        numbers = asd_ratio(raw, cleaned, rate, d.asd_fftlength, band, d.guard_hz)
        end = start + len(raw) / rate
        numbers["held_out_gps"] = [start, end]
        numbers["training_gps"] = training
        result[ifo] = numbers
        data = (f"GPS {start:.0f}-{end:.0f}, after the network's training data (GPS "
                f"{training[0]:.0f}-{training[1]:.0f})" if training else
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


def _triggers(writer: Any) -> dict[str, Any]:
    config = writer.config
    times, values, analysed = [], [], []
    for stretch in writer.stretches:
        dataset = writer.file[writer.names[("statistic", stretch.index)][0]]
        t, v = cluster_triggers(dataset[()], float(dataset.attrs["x0"]),
                                float(dataset.attrs["dx"]), config.bbhnet.cluster_seconds)
        times.append(t)
        values.append(v)
        if len(dataset):
            x0, dx = float(dataset.attrs["x0"]), float(dataset.attrs["dx"])
            analysed.append((x0 - dx, x0 + (len(dataset) - 1) * dx))
    t = np.concatenate(times) if times else np.zeros(0)
    v = np.concatenate(values).astype(np.float32) if values else np.zeros(0, np.float32)
    injections = (read_injections(config.bbhnet.injections)
                  if config.bbhnet.injections is not None else None)
    slides = _background(writer, injections or []) if "background" in writer.outputs else None
    columns = [("time", "f8"), ("statistic", "f4")]
    if slides is not None:
        columns += [("far", "f8"), ("ifar", "f8")]
    table = np.zeros(len(t), dtype=columns)
    table["time"], table["statistic"] = t, v
    result: dict[str, Any] = {"triggers": int(len(t)),
                              "cluster_seconds": config.bbhnet.cluster_seconds}
    if slides is not None:
        background, livetime = slides
        table["far"], table["ifar"] = false_alarm_rates(v, background["statistic"], livetime)
        writer.file.create_dataset("background", data=background)
        result.update({"time_shifts": config.bbhnet.time_shifts,
                       "shift_seconds": config.bbhnet.shift_seconds,
                       "analysed_seconds": float(sum(b - a for a, b in analysed)),
                       "background_triggers": int(len(background)),
                       "background_livetime_seconds": livetime,
                       "loudest_ifar_years": float(table["ifar"].max(initial=0.0))})
    writer.file.create_dataset("triggers", data=table)
    if slides is not None and injections is not None:
        result.update(found_missed_at_ifar(t, table["ifar"], v, injections, config, analysed))
    elif injections is not None:
        training = writer.training.get("bbhnet")
        result.update(found_missed(t, v, injections, config, analysed, training))
        outside = (f"outside the network's training data (GPS {training[0]:.0f}-"
                   f"{training[1]:.0f})" if training else
                   "(the weights record no training span: it may include training data)")
        logger.debug(
            f"injections found {result['found']}, missed {result['missed']} (threshold "
            f"{result['threshold']:.3f}: the largest trigger in {result['background_seconds']:.0f}"
            f" s of injection-free data {outside})"
        )
        for row in result["injections"]:
            logger.debug(f"  GPS {row['gps_time']:.3f} network SNR {row['network_snr']:5.1f} "
                f"statistic {row['statistic']:8.3f} {'found' if row['found'] else 'MISSED'}")
    return result


def _background(writer: Any, injections: list[tuple[float, float]]
                ) -> tuple[np.ndarray, float]:
    """Every time slide's clustered statistic as a table (``shift`` in seconds, ``time`` of
    the first detector, ``statistic``), and the background livetime (s), both without the
    ``injections`` and the training span (``physics.background_cuts``)."""
    config = writer.config
    shift_seconds = config.bbhnet.shift_seconds
    cuts = (background_cuts(injections, config, writer.training.get("bbhnet"))
            if injections else [])
    rows, livetime = [], 0.0
    for stretch in writer.stretches:
        dataset = writer.file[writer.names[("background", stretch.index)][0]]
        x0, dx = float(dataset.attrs["x0"]), float(dataset.attrs["dx"])
        values = dataset[()]
        analysed = (x0 - dx, x0 + (len(values) - 1) * dx)
        for k in range(values.shape[1]):
            lag = (k + 1) * shift_seconds
            t, v = cluster_triggers(values[:, k], x0, dx, config.bbhnet.cluster_seconds)
            keep = outside_cuts(t, cuts) & outside_cuts(t - lag, cuts)
            rows.append((np.full(int(keep.sum()), lag), t[keep], v[keep]))
            livetime += slide_livetime(analysed, cuts, lag)
    table = np.zeros(sum(len(t) for _, t, _ in rows),
                     dtype=[("shift", "f8"), ("time", "f8"), ("statistic", "f4")])
    if rows:
        for column, values in zip(("shift", "time", "statistic"), zip(*rows, strict=True),
                                  strict=True):
            table[column] = np.concatenate(values)
    return table, livetime


def _found_line(bbhnet: dict[str, Any], criterion: str, threshold: str) -> str:
    loud = [r for r in bbhnet["injections"] if r["network_snr"] >= 12]
    return (f"BBHnet: {bbhnet['found']} found, {bbhnet['missed']} missed of "
            f"{len(bbhnet['injections'])} injections{criterion}; network SNR >= 12: "
            f"{sum(r['found'] for r in loud)}/{len(loud)} found{threshold}")


def physics_lines(summary: dict[str, Any]) -> list[str]:
    """One line per DeepClean interferometer and one for BBHnet, from :func:`postprocess`'s
    summary (or ``output/campaign.json``, which holds it)."""
    lines = []
    for ifo, numbers in summary.get("deepclean", {}).items():
        start, end = numbers["held_out_gps"]
        training = numbers.get("training_gps")
        data = (f"held-out GPS {start:.0f}-{end:.0f}, after training on GPS {training[0]:.0f}-"
                f"{training[1]:.0f}" if training else f"GPS {start:.0f}-{end:.0f}, training "
                "span unknown")
        lines.append(
            f"DeepClean {ifo}: cleaned/raw ASD {numbers['ratio_at_line']:.3f} at the "
            f"{numbers['line_hz']:.2f} Hz line, within "
            f"{100 * numbers['max_deviation_outside_band']:.2f} % of 1 outside the band "
            f"(+- {numbers['guard_hz']:g} Hz guard; {data})"
        )
    bbhnet = summary.get("bbhnet", {})
    if "triggers" in bbhnet:
        lines.append(f"BBHnet: {bbhnet['triggers']} triggers (statistic clustered over "
                     f"{bbhnet['cluster_seconds']:g} s)")
    if "time_shifts" in bbhnet:
        livetime = bbhnet["background_livetime_seconds"]
        lines.append(
            f"BBHnet: {bbhnet['background_triggers']} background triggers from "
            f"{bbhnet['time_shifts']} time slides of {bbhnet['shift_seconds']:g} s "
            f"({livetime:.0f} s = {livetime / SECONDS_PER_YEAR:.2g} yr of livetime); loudest "
            f"trigger's IFAR {bbhnet['loudest_ifar_years']:.2g} yr")
    if "ifar_threshold_years" in bbhnet:
        lines.append(_found_line(bbhnet, f" at IFAR >= {bbhnet['ifar_threshold_years']:.2g} yr",
                                 ""))
    elif "found" in bbhnet:
        lines.append(_found_line(
            bbhnet, "", f" (threshold {bbhnet['threshold']:.2f} from "
            f"{bbhnet['background_seconds']:.0f} s of injection-free data"
            + (" outside the training span)" if bbhnet.get("training_gps") else
               "; training span unknown)")))
    return lines
