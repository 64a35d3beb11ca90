"""BBHnet's physics check in-process (the demo networks' check: ``science/e2e/evaluation.py``).

Statistics of every window of an injection-free stretch (the background), and of a stretch of
the same length with fresh injections; an injection is *found* when a window ending within
``TRIGGER_SECONDS`` of its time has a statistic above the background's maximum.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from torch import nn

from offline_iaas.config import CampaignConfig
from offline_iaas.config_sections import ifo_of
from offline_iaas.data.discovery import FrameFile
from offline_iaas.data.frames import read_span
from offline_iaas.science.bbhnet.training import predict_bbhnet
from offline_iaas.science.bbhnet.training_injections import InjectionMaker
from offline_iaas.search.population import population_spec

TRIGGER_SECONDS = 1.0
"""An injection's trigger must end within this many seconds of its time."""


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
                           [ifo_of(ch) for ch in channels], rng,
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
