"""What the merge (and the reference) compute from the stitched outputs, per stretch.

DeepClean (modes ``deepclean``, ``e2e``)
    The averaged prediction is band-passed (Butterworth, ``[deepclean]`` band and order,
    forward and backward: zero phase) over each stretch and subtracted from the strain read
    from the frames: ``clean = strain - noise``. To bound memory the filter runs block by block
    (``BLOCK_SECONDS``) with ``PAD_SECONDS`` of real data on both sides, on a grid fixed by the
    stretch's start, so the result depends on the data only (not on how the span was split).
    The report numbers: cleaned/raw ASD ratio (gwpy ``asd(method="median")``) at the
    strongest raw line in the band, and the worst deviation from 1 outside the band beyond a
    guard.
BBHnet (modes ``bbhnet``, ``e2e``)
    Triggers: every value of the statistic that is the largest within ``+-cluster_seconds/2``
    in its stretch. With an injection list: the background is every trigger farther than
    ``exclusion_seconds`` from all injections; an injection is *found* when a trigger within
    ``found_seconds`` of its time beats the background's largest.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
from scipy import signal

from offline_iaas.config import CampaignConfig
from offline_iaas.errors import ConfigError

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
    read: Callable[[int, int], np.ndarray], n_samples: int, sos: np.ndarray, sample_rate: float
) -> Iterator[tuple[int, np.ndarray]]:
    """Band-pass ``n_samples`` of a stretch block by block; yield ``(first sample, values)``.

    ``read(a, b)`` returns samples ``[a, b)`` of the stretch (float64).
    """
    block = int(round(BLOCK_SECONDS * sample_rate))
    pad = int(round(PAD_SECONDS * sample_rate))
    for a in range(0, n_samples, block):
        b = min(a + block, n_samples)
        lo, hi = max(0, a - pad), min(n_samples, b + pad)
        values = signal.sosfiltfilt(sos, read(lo, hi))
        yield a, values[a - lo : b - lo]


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
    """GPS times and values of the statistic's maxima within ``+-cluster_seconds / 2``."""
    if not len(values):
        return np.zeros(0), np.zeros(0, np.float32)
    half = max(0, int(round(cluster_seconds / 2 / dx)))
    from scipy.ndimage import maximum_filter1d

    peak = maximum_filter1d(values, size=2 * half + 1, mode="constant", cval=-np.inf)
    index = np.flatnonzero(values == peak)
    # a plateau gives several equal maxima: keep the first of each run within the window
    keep = [index[0]] if len(index) else []
    for i in index[1:]:
        if i - keep[-1] > half or values[i] != values[keep[-1]]:
            keep.append(i)
    keep = np.asarray(keep, dtype=int)
    return x0 + keep * dx, values[keep]


def read_injections(path: Path) -> list[tuple[float, float]]:
    """``(gps_time, network_snr)`` of each injection in a JSON file (module docstring)."""
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ConfigError(f"bbhnet.injections: {path}: file not found") from None
    except json.JSONDecodeError as err:
        raise ConfigError(f"bbhnet.injections: {path}: not JSON: {err}") from None
    rows = data.get("injections", []) if isinstance(data, dict) else data
    out = []
    for row in rows:
        try:
            if "network_snr" in row:
                snr = float(row["network_snr"])
            else:
                snr = float(np.sqrt(sum(v["snr"] ** 2 for v in row["ifos"].values())))
            out.append((float(row["gps_time"]), snr))
        except (KeyError, TypeError, ValueError):
            raise ConfigError(
                f"bbhnet.injections: {path}: an injection without gps_time and network_snr "
                f"(or per-ifo snr): {row!r}"
            ) from None
    return out


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
    times: np.ndarray, values: np.ndarray, injections: list[tuple[float, float]],
    config: CampaignConfig, analysed: list[tuple[float, float]],
    training: tuple[float, float] | None = None,
) -> dict[str, Any]:
    """Found/missed of the injections inside the analysed stretches (module docstring).

    The background leaves out ``exclusion_seconds`` around every injection and the network's
    ``training`` span (GPS), if known.
    """
    b = config.bbhnet
    cuts = [(t - b.exclusion_seconds, t + b.exclusion_seconds) for t, _ in injections]
    if training is not None:
        cuts.append((float(training[0]), float(training[1])))
    background_spans = subtract_spans(analysed, cuts)
    in_background = np.zeros(len(times), bool)
    for start, end in background_spans:
        in_background |= (times > start) & (times < end)
    background = values[in_background]
    threshold = float(background.max()) if len(background) else float("inf")
    rows = []
    for t, snr in injections:
        if not any(s <= t < e for s, e in analysed):
            continue
        near = np.abs(times - t) <= b.found_seconds
        best = float(values[near].max()) if near.any() else float("-inf")
        rows.append({"gps_time": t, "network_snr": snr, "statistic": best,
                     "found": bool(best > threshold)})
    return {
        "found": sum(r["found"] for r in rows),
        "missed": sum(not r["found"] for r in rows),
        "threshold": threshold,
        "background_seconds": float(sum(e - s for s, e in background_spans)),
        "training_gps": None if training is None else [float(x) for x in training],
        "injections": rows,
    }


# ---- applied to a campaign file being written ------------------------------------------------


def postprocess(writer: Any, frames: list | None, frames_dir: Path | None,
                log: Callable[[str], None]) -> dict[str, Any]:
    """Clean the strain and find triggers in ``writer``'s file (a ``CampaignWriter``)."""
    summary: dict[str, Any] = {}
    if writer.stage is not None:
        if frames is None:
            raise ValueError("the DeepClean post-processing needs the frame files")
        summary["deepclean"] = _clean_strain(writer, frames, frames_dir, log)
    if "statistic" in writer.outputs and writer.config.mode.triggers:
        summary["bbhnet"] = _triggers(writer, log)
    return summary


def _clean_strain(writer: Any, frames: list, frames_dir: Path | None,
                  log: Callable[[str], None]) -> dict[str, Any]:
    from offline_iaas.data.frames import read_span
    from offline_iaas.merge.output import _timeseries_attrs, gps_text, output_x0

    config = writer.config
    rate = config.data.sample_rate
    sos = bandpass_sos(config)
    gwf = _GwfWriter(frames_dir, config) if frames_dir is not None else None
    # per ifo, the longest held-out run of cleaned strain: (gps start, raw, cleaned)
    held_out: dict[str, tuple[float, np.ndarray, np.ndarray]] = {}
    for stretch in writer.stretches:
        x0 = output_x0(config, stretch, "noise")
        bounds = (stretch.gps_start, stretch.gps_end)
        for ifo, strain, stage_name in zip(config.ifos, config.data.channels,
                                           writer.names[("noise", stretch.index)], strict=True):
            prediction = writer.stage[stage_name]
            n = len(prediction)
            noise = writer.file.create_dataset(f"noise/{ifo}/{gps_text(x0)}", shape=(n,),
                                               dtype=np.float32)
            clean = writer.file.create_dataset(f"clean/{ifo}/{gps_text(x0)}", shape=(n,),
                                               dtype=np.float32)
            _timeseries_attrs(noise, f"{strain}_DEEPCLEAN_NOISE", "noise", x0, 1 / rate, "strain")
            _timeseries_attrs(clean, f"{strain}_CLEAN", "clean", x0, 1 / rate, "strain")
            training = writer.training.get(f"deepclean-{ifo}")
            ha, hb = held_out_samples(x0, n, rate, [tuple(training)] if training else [],
                                      int(ASD_MAX_SECONDS * rate))
            raw_kept, clean_kept = np.zeros(hb - ha), np.zeros(hb - ha)
            for a, band in zero_phase_blocks(
                lambda lo, hi, p=prediction: p[lo:hi].astype(np.float64), n, sos, rate
            ):
                b = a + len(band)
                raw = read_span(frames, [strain], x0 + a / rate, x0 + b / rate, rate,
                                bounds)[0].astype(np.float64)
                cleaned = raw - band
                noise[a:b] = band
                clean[a:b] = cleaned
                lo, hi = max(a, ha), min(b, hb)
                if lo < hi:
                    raw_kept[lo - ha : hi - ha] = raw[lo - a : hi - a]
                    clean_kept[lo - ha : hi - ha] = cleaned[lo - a : hi - a]
                if gwf is not None:
                    gwf.add(ifo, f"{strain}_CLEAN", x0 + a / rate, cleaned.astype(np.float32))
            if gwf is not None:
                gwf.flush(ifo)
            if hb - ha > len(held_out.get(ifo, (0, ()))[1]):
                held_out[ifo] = (x0 + ha / rate, raw_kept, clean_kept)
    d = config.deepclean
    result: dict[str, Any] = {}
    for ifo in config.ifos:
        training = writer.training.get(f"deepclean-{ifo}")
        start, raw, cleaned = held_out.get(ifo, (0.0, np.zeros(0), np.zeros(0)))
        if len(raw) < 2 * d.asd_fftlength * rate:
            log(f"merge: {ifo}: too little cleaned strain outside the training data for an ASD "
                f"({len(raw) / rate:.0f} s)")
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
        log(
            f"merge: {ifo} cleaned/raw ASD at the {numbers['line_hz']:.2f} Hz line: "
            f"{numbers['ratio_at_line']:.3f}; outside {d.band_low_hz - d.guard_hz:g}-"
            f"{d.band_high_hz + d.guard_hz:g} Hz within "
            f"{100 * numbers['max_deviation_outside_band']:.2f} % of 1 "
            f"({100 * numbers['max_deviation_at_band_edges']:.1f} % right outside the band "
            f"edges; {data}; {d.asd_fftlength:g} s FFTs)"
        )
    if gwf is not None:
        channels = ", ".join(f"{ch}_CLEAN" for ch in config.data.channels)
        log(f"merge: {gwf.count} GWF files of cleaned strain ({channels})")
    return result


class _GwfWriter:
    """Cuts each interferometer's cleaned strain into GWF files on a ``frame_seconds`` grid."""

    def __init__(self, out_dir: Path, config: CampaignConfig) -> None:
        self.out_dir = out_dir
        self.rate = config.data.sample_rate
        self.seconds = config.deepclean.frame_seconds
        self.pending: dict[str, list] = {}
        self.count = 0

    def add(self, ifo: str, channel: str, gps_start: float, values: np.ndarray) -> None:
        while len(values):
            chunks = self.pending.get(ifo, [])
            if chunks and abs(chunks[-1][1] + len(chunks[-1][2]) / self.rate - gps_start) > 1e-6:
                self.flush(ifo)  # a gap: the file ends here
            chunks = self.pending.setdefault(ifo, [])
            boundary = (np.floor(gps_start / self.seconds + 1e-9) + 1) * self.seconds
            take = min(len(values), int(round((boundary - gps_start) * self.rate)))
            chunks.append((channel, gps_start, values[:take]))
            gps_start, values = gps_start + take / self.rate, values[take:]
            if take and abs(gps_start - boundary) < 1e-6:
                self.flush(ifo)

    def flush(self, ifo: str) -> None:
        from gwpy.timeseries import TimeSeries

        chunks = self.pending.pop(ifo, [])
        if not chunks:
            return
        channel, start = chunks[0][0], chunks[0][1]
        values = np.concatenate([c[2] for c in chunks])
        end = start + len(values) / self.rate
        first, last = int(np.floor(start)), int(np.ceil(end))
        path = self.out_dir / ifo / f"{ifo[0]}-{ifo}_CLEAN-{first}-{last - first}.gwf"
        path.parent.mkdir(parents=True, exist_ok=True)
        series = TimeSeries(values, t0=start, sample_rate=self.rate, channel=channel,
                            name=channel, unit="strain")
        series.write(str(path), format="gwf")
        self.count += 1


def _triggers(writer: Any, log: Callable[[str], None]) -> dict[str, Any]:
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
    table = np.zeros(len(t), dtype=[("time", "f8"), ("statistic", "f4")])
    table["time"], table["statistic"] = t, v
    writer.file.create_dataset("triggers", data=table)
    result: dict[str, Any] = {"triggers": int(len(t)),
                              "cluster_seconds": config.bbhnet.cluster_seconds}
    log(f"merge: {len(t)} triggers (statistic clustered over {config.bbhnet.cluster_seconds:g} s)")
    if config.bbhnet.injections is not None:
        training = writer.training.get("bbhnet")
        result.update(found_missed(t, v, read_injections(config.bbhnet.injections), config,
                                   analysed, training))
        outside = (f"outside the network's training data (GPS {training[0]:.0f}-"
                   f"{training[1]:.0f})" if training else
                   "(the weights record no training span: it may include training data)")
        log(
            f"merge: injections found {result['found']}, missed {result['missed']} (threshold "
            f"{result['threshold']:.3f}: the largest trigger in {result['background_seconds']:.0f}"
            f" s of injection-free data {outside})"
        )
        for row in result["injections"]:
            log(f"merge:   GPS {row['gps_time']:.3f} network SNR {row['network_snr']:5.1f} "
                f"statistic {row['statistic']:8.3f} {'found' if row['found'] else 'MISSED'}")
    return result
