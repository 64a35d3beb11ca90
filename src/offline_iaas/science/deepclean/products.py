"""DeepClean's products (``BuiltInParts.postprocess`` and ``summarize``), written and read here:
the averaged prediction band-passed and subtracted from the strain read from the frames
(``clean = strain - noise``), written to the campaign file (``clean/<IFO>/<GPS>``,
``noise/<IFO>/<GPS>``) and, when asked, to GWF frames; the cleaned/raw ASD numbers on
held-out data; and their spectra read back for the report (``strain_spectra``: the raw strain
is clean + noise, so no frames are read; at most ``max_seconds`` per interferometer, a block at
a time, so memory does not grow with the campaign). The arithmetic (filter, ASD ratio) is
``physics.py``'s; this module reads and writes the files around it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import h5py
import numpy as np
from scipy.signal import welch

from offline_iaas.config import CampaignConfig
from offline_iaas.gps import gps_span_text, gps_text
from offline_iaas.merge.layout import series_attrs
from offline_iaas.merge.postprocess import ShardProducts
from offline_iaas.mode_packages import SummaryRequest
from offline_iaas.physics import (
    ASD_MAX_SECONDS,
    asd_ratio,
    held_out_samples,
    samples_within,
    zero_phase_blocks,
)
from offline_iaas.report.spectra import StrainSpectra
from offline_iaas.science.deepclean import DEEPCLEAN_NETWORK
from offline_iaas.science.deepclean.frames import CleanedFrames, publish_frames
from offline_iaas.science.deepclean.settings import (
    CANARY_SUFFIX,
    SERIES_PRODUCTS,
    bandpass_sos,
    deepclean_settings,
    output_channel,
)
from offline_iaas.stretches import Stretch, output_x0

logger = logging.getLogger(__name__)

BLOCK_SECONDS = 256.0
"""Data read and transformed at a time (``strain_spectra``)."""


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


CLEAN, CLEAN_CANARY = SERIES_PRODUCTS
PRODUCTION = _Variant("noise", "noise", CLEAN, "")
CANARY = _Variant("noise_canary", "noise_canary", CLEAN_CANARY, CANARY_SUFFIX)


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
        span = training.get(DEEPCLEAN_NETWORK.weight_stem(ifo))
        for stretch in stretches:
            n = stretch.kept_windows(config.geometry) * config.stride_samples
            a, b = held_out_samples(output_x0(config.geometry, stretch, "noise"), n, rate,
                                    [tuple(span)] if span else [], int(ASD_MAX_SECONDS * rate))
            best = choice.get(ifo)
            if b - a > (best[2] - best[1] if best else 0):
                choice[ifo] = (stretch.index, a, b)
    return choice


def clean_strain(writer: Any, frames: list | None, frames_dir: Path | None,
                 products: ShardProducts) -> None:
    """The owned cleaned strain (and the canary's) into the HDF5 file and (``frames_dir``) the
    gated GWF files; the owned part of the held-out run into ``products``."""
    from offline_iaas.data.frames import read_span

    if frames is None:
        raise ValueError("the DeepClean post-processing needs the frame files")

    config = writer.config
    rate = config.data.sample_rate
    s = config.stride_samples
    sos = bandpass_sos(deepclean_settings(config), config.data.sample_rate)
    variants = _variants(writer.outputs)
    gwf = (CleanedFrames(frames_dir, writer.frames_dir, config, writer.provenance)
           if frames_dir is not None else None)
    choice = held_out_choice(config, writer.stretches, writer.training)
    for e in writer.extents:
        first, last = e.samples
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
                    products.arrays.update(_held_out_arrays(f"{v.output}/{ifo}",
                                                            x0 + ha / rate, raw_kept, kept))
    if gwf is not None:
        products.frame_files, products.frame_spans = gwf.finish()


def cleaning_summary(request: SummaryRequest) -> dict[str, Any]:
    """DeepClean's sections of the campaign summary from every merge's products, in time
    order: the ASD numbers (``deepclean``, and ``deepclean_canary`` with a canary) and, with
    ``frames_dir``, the GWF files' cache and segment lists (``deepclean_gate``)."""
    config, products, frames_dir = request.config, request.products, request.frames_dir
    training, outputs = request.training, config.outputs.names
    summary: dict[str, Any] = {}
    held_out: dict[str, tuple[float, np.ndarray, np.ndarray]] = {}
    for part in products:
        for key, (gps, raw, clean) in _held_out_runs(part.arrays).items():
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
        gate = publish_frames(frames_dir, deepclean_settings(config), files, spans)
        if gate:
            summary["deepclean_gate"] = gate
        channels = ", ".join(output_channel(deepclean_settings(config), ch)
                             for ch in config.data.channels)
        logger.debug(f"{len(files)} GWF files of cleaned strain ({channels})")
    return summary


HELD_OUT = "held_out"
"""The products' arrays of the held-out strain: ``held_out/<output>/<IFO>/`` ``gps_start``,
``raw`` and ``clean`` (the owned part of the held-out run)."""


def _held_out_arrays(key: str, gps_start: float, raw: np.ndarray, clean: np.ndarray
                     ) -> dict[str, np.ndarray]:
    """One merge's held-out strain of ``key`` (``<output>/<IFO>``) as products' arrays."""
    return {f"{HELD_OUT}/{key}/gps_start": np.array(gps_start, dtype=np.float64),
            f"{HELD_OUT}/{key}/raw": raw, f"{HELD_OUT}/{key}/clean": clean}


def _held_out_runs(arrays: dict[str, np.ndarray]
                   ) -> dict[str, tuple[float, np.ndarray, np.ndarray]]:
    """``_held_out_arrays`` back: ``<output>/<IFO>`` → GPS start, raw and clean strain."""
    keys = [name[len(HELD_OUT) + 1 : -len("/gps_start")] for name in arrays
            if name.startswith(f"{HELD_OUT}/") and name.endswith("/gps_start")]
    return {key: (float(arrays[f"{HELD_OUT}/{key}/gps_start"]), arrays[f"{HELD_OUT}/{key}/raw"],
                  arrays[f"{HELD_OUT}/{key}/clean"]) for key in keys}


def _asd_numbers(config: CampaignConfig, training: dict[str, list[float]], variant: _Variant,
                 held_out: dict[str, tuple[float, np.ndarray, np.ndarray]]) -> dict[str, Any]:
    """The cleaned/raw ASD numbers of one variant per interferometer, on held-out data."""
    rate, d = config.data.sample_rate, deepclean_settings(config)
    result: dict[str, Any] = {}
    for ifo in config.ifos:
        span = training.get(DEEPCLEAN_NETWORK.weight_stem(ifo))
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
        data = (f"GPS {gps_span_text(start, end)}, after the network's training data (GPS "
                f"{gps_span_text(span[0], span[1])})" if span else
                f"GPS {gps_span_text(start, end)}; the weights record no training span, so it "
                "may include training data")
        logger.debug(
            f"{ifo}{variant.suffix.lower().replace('_', ' ')} cleaned/raw ASD at the "
            f"{numbers['line_hz']:.2f} Hz line: "
            f"{numbers['ratio_at_line']:.3f}; outside {d.band_low_hz - d.guard_hz:g}-"
            f"{d.band_high_hz + d.guard_hz:g} Hz within "
            f"{100 * numbers['max_deviation_outside_band']:.2f} % of 1 "
            f"({100 * numbers['max_deviation_at_band_edges']:.1f} % within the guard at the "
            f"band edges; {data}; {d.asd_fftlength:g} s FFTs)"
        )
    return result


def ifos_with_clean_strain(path: Path) -> list[str]:
    """Interferometers with a ``clean/<IFO>`` group in the campaign file."""
    with h5py.File(path, "r") as f:
        group = f.get("clean")
        return sorted(group) if isinstance(group, h5py.Group) else []


def strain_spectra(
    path: Path, ifo: str, fftlength: float, max_seconds: float = ASD_MAX_SECONDS,
    gps_range: tuple[float, float] | None = None,
) -> StrainSpectra | None:
    """PSDs of the cleaned and raw (cleaned + noise) strain of one interferometer.

    Parameters
    ----------
    path
        The campaign file.
    ifo
        Interferometer prefix (``H1``).
    fftlength
        FFT length in seconds (Hann window, half overlap, mean average).
    max_seconds
        At most this much data is read, from the first stretches on.
    gps_range
        Only data within this GPS range (the merge's held-out data); default all.

    Returns
    -------
    The spectra, or None when no stretch is at least ``fftlength`` long.
    """
    sums: dict[str, np.ndarray] = {}
    weight, used, frequencies = 0, 0.0, None
    with h5py.File(path, "r") as f:
        clean = f[f"clean/{ifo}"]
        noise = f.get(f"noise/{ifo}")
        have_noise = isinstance(noise, h5py.Group) and set(clean) <= set(noise)
        for name in sorted(clean, key=float):
            if used >= max_seconds:
                break
            data = clean[name]
            rate = 1.0 / float(data.attrs["dx"])
            nperseg = int(round(fftlength * rate))
            first, stop = 0, len(data)
            if gps_range is not None:
                x0 = float(data.attrs["x0"])
                first, stop = samples_within(x0, stop, rate, *gps_range)
            count = min(stop - first, int((max_seconds - used) * rate))
            if nperseg < 2 or count < nperseg:
                continue
            block = max(nperseg, int(BLOCK_SECONDS * rate) // nperseg * nperseg)
            for a in range(first, first + count, block):
                b = min(a + block, first + count)
                if b - a < nperseg:
                    break
                series = {"clean": np.asarray(data[a:b], dtype=np.float64)}
                if have_noise:
                    series["raw"] = series["clean"] + np.asarray(noise[name][a:b], np.float64)
                segments = 1 + (b - a - nperseg) // (nperseg - nperseg // 2)  # welch's count
                for key, values in series.items():
                    frequencies, psd = welch(values, fs=rate, nperseg=nperseg, window="hann")
                    sums[key] = sums.get(key, 0.0) + psd * segments
                weight += segments
                used += (b - a) / rate
    if weight == 0 or frequencies is None:
        return None
    raw = sums["raw"] / weight if "raw" in sums else None
    return StrainSpectra(frequencies, sums["clean"] / weight, raw, used)
