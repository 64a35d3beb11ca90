"""DeepClean's physics check in-process (the demo networks' check: ``science/e2e/evaluation.py``).

Run over a stretch in windows one stride apart, predictions averaged where windows overlap
(``average_overlapping``), band-passed like the training target and subtracted from the
strain. Reported: cleaned/raw ASD ratio (gwpy ``TimeSeries.asd(fftlength, method="median")``)
at the line and its worst deviation from 1 outside the band.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from torch import nn

from offline_iaas import physics
from offline_iaas.config import CampaignConfig
from offline_iaas.data.discovery import FrameFile
from offline_iaas.data.frames import read_span
from offline_iaas.science.deepclean.network import average_overlapping
from offline_iaas.science.deepclean.settings import bandpass_sos, deepclean_settings
from offline_iaas.science.deepclean.training import (
    bandpass,
    predict_deepclean,
    strain_channel,
    witness_channels,
)


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
    sos = bandpass_sos(deepclean_settings(config), rate)
    return raw, raw - bandpass(averaged, sos)


def asd_ratio(
    raw: np.ndarray,
    cleaned: np.ndarray,
    sample_rate: float,
    fftlength: float,
    line_hz: float,
    band_hz: tuple[float, float],
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
    band_hz: tuple[float, float],
    fftlengths: Sequence[float] = (1.0, 2.0, 4.0),
    guards_hz: Sequence[float] = (0.0, 1.0, 2.0),
) -> list[dict[str, float]]:
    """``asd_ratio`` at ``line_hz`` of a stretch's raw and cleaned strain (``clean_stretch``)
    for each FFT length (s) and guard (Hz)."""
    return [
        asd_ratio(raw, cleaned, sample_rate, fftlength, line_hz, band_hz, guard_hz=guard)
        for fftlength in fftlengths
        for guard in guards_hz
    ]
