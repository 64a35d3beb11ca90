"""Physics checks of the demo networks, in-process (used by the slow test and the benchmark).

DeepClean
    Run over a stretch in windows one stride apart, predictions averaged where windows overlap
    (``average_overlapping``), band-passed like the training target and subtracted from the
    strain. Reported: cleaned/raw ASD ratio (gwpy ``TimeSeries.asd(fftlength,
    method="median")``) at the line and its worst deviation from 1 outside the band.
BBHnet
    Statistics of every window of an injection-free stretch (the background), and of a stretch
    of the same length with fresh injections; an injection is *found* when a window ending
    within ``TRIGGER_SECONDS`` of its time has a statistic above the background's maximum.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from torch import nn

from offline_iaas import physics
from offline_iaas.config import CampaignConfig
from offline_iaas.data.discovery import FrameFile
from offline_iaas.data.frames import read_span
from offline_iaas.models.deepclean import average_overlapping
from offline_iaas.models.injections import InjectionMaker
from offline_iaas.models.training import (
    DEEPCLEAN_BAND_HZ,
    bandpass,
    predict_bbhnet,
    predict_deepclean,
    strain_channel,
    witness_channels,
)
from offline_iaas.search.population import population_spec

TRIGGER_SECONDS = 1.0
"""An injection's trigger must end within this many seconds of its time."""


def clean_stretch(
    model: nn.Module,
    config: CampaignConfig,
    frames: Sequence[FrameFile],
    ifo: str,
    gps_start: float,
    gps_end: float,
) -> tuple[np.ndarray, np.ndarray]:
    """Raw and cleaned strain of ``ifo`` over the part of ``[gps_start, gps_end)`` windows cover.

    Windows start every stride from ``gps_start``; the returned samples are the first
    ``(n - 1) * stride + kernel`` of the stretch (float64, strain units).
    """
    rate = config.data.sample_rate
    channels = [strain_channel(config.data.channels, ifo, config.source),
                *witness_channels(config, ifo)]
    data = read_span(frames, channels, gps_start, gps_end, rate).astype(np.float64)
    predictions = predict_deepclean(model, data[1:], config.kernel_samples, config.stride_samples)
    averaged = average_overlapping(predictions, config.stride_samples)
    raw = data[0, : len(averaged)]
    return raw, raw - bandpass(averaged, rate)


def asd_ratio(
    raw: np.ndarray,
    cleaned: np.ndarray,
    sample_rate: float,
    fftlength: float,
    line_hz: float,
    band_hz: tuple[float, float] = DEEPCLEAN_BAND_HZ,
    trim_seconds: float = 8.0,
    guard_hz: float = 0.0,
) -> dict[str, float]:
    """The merge's ``asd_ratio`` at ``line_hz``, with ``trim_seconds`` dropped at both ends
    (edge windows, band-pass transients)."""
    trim = int(round(trim_seconds * sample_rate))
    return physics.asd_ratio(
        raw[trim : len(raw) - trim], cleaned[trim : len(cleaned) - trim], sample_rate,
        fftlength, band_hz, guard_hz, line_hz,
    )


def evaluate_deepclean(
    raw: np.ndarray,
    cleaned: np.ndarray,
    sample_rate: float,
    line_hz: float,
    fftlengths: Sequence[float] = (1.0, 2.0, 4.0),
    guards_hz: Sequence[float] = (0.0, 1.0, 2.0),
) -> list[dict[str, float]]:
    """``asd_ratio`` at ``line_hz`` of a stretch's raw and cleaned strain (``clean_stretch``)
    for each FFT length (s) and guard (Hz)."""
    return [
        asd_ratio(raw, cleaned, sample_rate, fftlength, line_hz, guard_hz=guard)
        for fftlength in fftlengths
        for guard in guards_hz
    ]


def window_end_times(gps_start: float, n_windows: int, config: CampaignConfig) -> np.ndarray:
    """GPS end times of the windows ``[j * stride, j * stride + kernel)`` from ``gps_start``."""
    rate = config.data.sample_rate
    ends = np.arange(n_windows) * config.stride_samples + config.kernel_samples
    return gps_start + ends / rate


def evaluate_bbhnet(
    model: nn.Module,
    config: CampaignConfig,
    frames: Sequence[FrameFile],
    background: tuple[float, float],
    foreground: tuple[float, float],
    snrs: Sequence[float],
    seed: int = 1,
    spacing_seconds: float = 8.0,
) -> dict[str, Any]:
    """Background maximum, and found/missed fresh injections at network SNRs ``snrs``.

    ``background`` and ``foreground`` are ``(gps_start, gps_end)`` stretches of equal length
    free of the dataset's own injections; ``snrs`` are injected in turn into the foreground,
    ``spacing_seconds`` apart (cycling through ``snrs``).
    """
    rate = config.data.sample_rate
    kernel, stride = config.kernel_samples, config.stride_samples
    channels = list(config.data.channels)
    noise = read_span(frames, channels, *background, rate)
    bg_stats = predict_bbhnet(model, noise, kernel, stride)
    data = read_span(frames, channels, *foreground, rate).astype(np.float64)
    rng = np.random.default_rng(seed)
    # a window of 2 x spacing with the coalescence in its middle holds a whole waveform
    # (the population's last at most ~5 s from 20 Hz), so none is cut off in the stream
    maker = InjectionMaker(rate, 2 * int(round(spacing_seconds * rate)),
                           [ch.split(":", 1)[0] for ch in channels], rng,
                           population=population_spec(config.synth, config.source))
    times = np.arange(foreground[0] + spacing_seconds, foreground[1] - spacing_seconds,
                      spacing_seconds)
    injected = []
    for i, t in enumerate(times):
        snr = float(snrs[i % len(snrs)])
        wave, _, _ = maker.waveforms(1, (snr, snr), (0.5, 0.5))
        centre = int(round((t - foreground[0]) * rate))
        half = wave.shape[-1] // 2
        data[:, centre - half : centre + half] += wave[0]
        injected.append((float(t), snr))
    fg_stats = predict_bbhnet(model, data.astype(np.float32), kernel, stride)
    ends = window_end_times(foreground[0], len(fg_stats), config)
    threshold = float(bg_stats.max())
    rows = []
    for t, snr in injected:
        near = np.abs(ends - t) <= TRIGGER_SECONDS
        best = float(fg_stats[near].max())
        rows.append({"gps_time": t, "network_snr": snr, "statistic": best,
                     "found": best > threshold})
    return {
        "background_seconds": background[1] - background[0],
        "background_windows": int(len(bg_stats)),
        "background_max": threshold,
        "background_p99": float(np.percentile(bg_stats, 99)),
        "injections": rows,
    }


# ---- the demo networks' physics check (the slow test and benchmarks/demo_networks.py) -------

PHYSICS_DATASET: tuple[str, ...] = ("synth.injections=4",)
"""Overrides of the packaged demo config for the physics check: four injections (coalescing
at GPS start + 259.8, 770.4, 1281.0, 1791.5 s, each waveform at most 5 s long), away from
the held-out stretches below."""
DEEPCLEAN_HELD_OUT: tuple[float, float] = (512.0, 1024.0)
"""DeepClean's held-out stretch (s after ``data.start``; it trains on the first 256 s)."""
BBHNET_BACKGROUND: tuple[float, float] = (1285.0, 1785.0)
BBHNET_FOREGROUND: tuple[float, float] = (775.0, 1275.0)
"""BBHnet's held-out stretches (s after ``data.start``; it trains on the first 768 s)."""
PHYSICS_SNRS: tuple[float, ...] = (8.0, 10.0, 12.0, 15.0, 20.0, 30.0)


def evaluate_demo_networks(
    config: CampaignConfig, frames: Sequence[FrameFile], paths: dict, summary: dict
) -> dict[str, Any]:
    """DeepClean (per detector) and BBHnet of ``train_demo`` on the held-out stretches.

    ``paths`` and ``summary`` are what ``train_demo`` returned and wrote. DeepClean rows for
    FFT lengths 1, 2, 4 s and guards 0, 2 Hz; BBHnet at ``PHYSICS_SNRS``.
    """
    from offline_iaas.models.weights import load_network

    t0, kernel = config.data.start, config.kernel_samples
    out: dict[str, Any] = {"deepclean": {}}
    for name, report in summary["networks"].items():
        if "witness_channels" not in report:  # DeepClean's rows: one per detector
            continue
        model = load_network("deepclean", paths[name], {
            "witnesses": len(report["witness_channels"]), "kernel_samples": kernel})
        start, end = (t0 + s for s in DEEPCLEAN_HELD_OUT)
        raw, cleaned = clean_stretch(model, config, frames, report["ifo"], start, end)
        out["deepclean"][report["ifo"]] = evaluate_deepclean(
            raw, cleaned, config.data.sample_rate, config.synth.line_frequency,
            fftlengths=(1.0, 2.0, 4.0), guards_hz=(0.0, 2.0))
    report = summary["networks"]["bbhnet"]
    model = load_network("bbhnet", paths["bbhnet"], {
        "ifos": len(report["channels"]), "kernel_samples": kernel, "width": report["width"],
        "depth": report["depth"]})
    out["bbhnet"] = evaluate_bbhnet(
        model, config, frames, tuple(t0 + s for s in BBHNET_BACKGROUND),
        tuple(t0 + s for s in BBHNET_FOREGROUND), PHYSICS_SNRS,
    )
    return out
