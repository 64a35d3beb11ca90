"""BBHnet's training on the campaign's data (``offline-iaas train-demo``).

Half of each batch is background (random windows of the strain), half the same windows with a
fresh injection (``training_injections.py``): a binary of the dataset's ``[synth]``
population (a bank generated once), projected onto each detector at a random sky position, at
a network SNR uniform in ``BBHNET_SNR_RANGE`` (optimal, against the design ASD, as the
dataset's injections), coalescing at a random place in the middle of the window. Binary
cross-entropy on the statistic (a logit). The whitening filter comes from the median Welch
PSD of the training strain.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from scipy import signal
from torch import nn

from offline_iaas.config import CampaignConfig
from offline_iaas.config_sections import ifo_of
from offline_iaas.data.discovery import FrameFile
from offline_iaas.errors import ConfigError
from offline_iaas.models.training import OneCycle, deterministic, run_windows, training_data
from offline_iaas.science.bbhnet.network import (
    WHITENING_SECONDS,
    BBHnet,
    whitening_filter,
    whitening_taps,
)
from offline_iaas.science.bbhnet.training_injections import InjectionMaker
from offline_iaas.search.population import population_spec

logger = logging.getLogger(__name__)

BBHNET_SNR_RANGE: tuple[float, float] = (8.0, 30.0)
"""Network SNR of the training injections."""
PSD_SEGMENT_SECONDS = 2.0
"""Welch segment length (s) of the background PSD stored with BBHnet."""
INJECTION_EXCLUSION_SECONDS = 4.0
"""Training windows stay this far from the dataset's own injections."""
DEMO_BBHNET: dict[str, Any] = {"epochs": 20, "seconds": 768.0, "windows_per_epoch": 4096}
"""``train_bbhnet``'s settings for the demo (``train_demo_network``)."""


def background_psd(
    strain: np.ndarray, sample_rate: float, segment_seconds: float = PSD_SEGMENT_SECONDS
) -> tuple[np.ndarray, np.ndarray]:
    """Median Welch PSD ``[ifos, freqs]`` (strain^2/Hz) of ``[ifos, n]`` strain, and its freqs."""
    nperseg = int(round(segment_seconds * sample_rate))
    freqs, psd = signal.welch(
        np.asarray(strain, np.float64), sample_rate, nperseg=nperseg, average="median", axis=-1
    )
    return freqs, psd


def bbhnet_whitening(
    freqs_hz: np.ndarray, psd: np.ndarray, sample_rate: float, input_scale: float
) -> np.ndarray:
    """``[ifos, taps]`` whitening FIRs for the scaled input from a ``[ifos, freqs]`` PSD."""
    taps = whitening_taps(sample_rate)
    return np.stack(
        [whitening_filter(freqs_hz, np.sqrt(p) * input_scale, sample_rate, taps) for p in psd]
    )


def whiten_windows(windows: np.ndarray, taps: np.ndarray, input_scale: float) -> np.ndarray:
    """``[batch, ifos, K]`` strain windows whitened as ``BBHnet.whiten`` does them (``×
    input_scale``, then each ifo's ``[ifos, taps]`` FIR, "valid"), in float64 by FFT:
    ``[batch, ifos, K - taps + 1]`` float32."""
    scaled = np.asarray(windows, np.float64) * input_scale
    whitened = signal.fftconvolve(scaled, np.asarray(taps)[None], mode="valid", axes=-1)
    return whitened.astype(np.float32)


def _allowed_starts(
    n_samples: int, kernel: int, gps_start: float, rate: float, exclude_gps: Sequence[float]
) -> np.ndarray:
    starts = np.arange(n_samples - kernel + 1)
    t0 = gps_start + starts / rate
    ok = np.ones(len(starts), bool)
    for gps in exclude_gps:
        ok &= (t0 + kernel / rate < gps - INJECTION_EXCLUSION_SECONDS) | (
            t0 > gps + INJECTION_EXCLUSION_SECONDS
        )
    if not ok.any():
        raise ConfigError("no injection-free training data for BBHnet")
    return starts[ok]


def train_bbhnet(
    config: CampaignConfig,
    frames: Sequence[FrameFile],
    seconds: float,
    epochs: int,
    *,
    offset_seconds: float = 0.0,
    exclude_gps: Sequence[float] = (),
    width: int = 8,
    depth: int = 3,
    windows_per_epoch: int = 2048,
    batch_size: int = 64,
    learning_rate: float = 3e-3,
    snr_range: tuple[float, float] = BBHNET_SNR_RANGE,
    seed: int = 0,
    threads: int = 2,
) -> BBHnet:
    """Train BBHnet on the strain of ``data.channels`` with fresh injections.

    Parameters
    ----------
    config
        The campaign (span, channels, model rate, kernel, ``model.input_scale``).
    frames
        Frame files holding the strain (``discover_frames``).
    seconds
        Background data (s), from ``data.start + offset_seconds``.
    epochs
        Passes of ``windows_per_epoch`` windows (half with an injection).
    exclude_gps
        GPS times of injections already in the data: windows near them are not used.

    Returns
    -------
    BBHnet
        In eval mode; ``model.training_report`` holds the PSD, losses and timing.
    """
    with deterministic(threads):
        rate = config.data.sample_rate
        kernel = config.kernel_samples
        channels = list(config.data.channels)
        span = training_data(config, frames, channels, seconds, offset_seconds)
        strain, start = span.data, span.gps_start
        freqs, psd = background_psd(strain, rate)
        scale = config.model.input_scale
        model_taps = bbhnet_whitening(freqs, psd, rate, scale)
        if model_taps.shape[1] >= kernel:
            raise ConfigError(
                f"{config.source}: model.kernel_seconds must be longer than BBHnet's whitening "
                f"filter ({WHITENING_SECONDS} s)"
            )
        torch.manual_seed(seed)
        rng = np.random.default_rng(seed)
        # the trainable layers learn on windows whitened outside the network (the same FIR,
        # whiten_windows): its fixed 257-tap convolution through ATen's im2col at every step
        # was most of the pinned numerics' cost. The network written whitens inside.
        network = BBHnet(len(channels), None, 1.0, width=width, depth=depth)
        allowed = _allowed_starts(strain.shape[1], kernel, start, rate, exclude_gps)
        maker = InjectionMaker(rate, kernel, [ifo_of(ch) for ch in channels], rng,
                               population=population_spec(config.synth, config.source))
        schedule = OneCycle(network.parameters(), learning_rate, epochs, windows_per_epoch,
                            batch_size)
        offsets = np.arange(kernel)
        half = batch_size // 2
        labels = torch.cat([torch.zeros(batch_size - half), torch.ones(half)])
        losses: list[float] = []
        accuracy: list[float] = []
        network.train()
        for epoch in range(epochs):
            total, correct, seen = 0.0, 0, 0
            for _ in range(-(-windows_per_epoch // batch_size)):
                starts = rng.choice(allowed, size=batch_size)
                windows = strain[:, starts[:, None] + offsets].transpose(1, 0, 2)
                signals, _, _ = maker.waveforms(half, snr_range, (0.3, 0.7))
                windows[batch_size - half :] += signals.astype(windows.dtype)
                logits = network(torch.as_tensor(whiten_windows(windows, model_taps, scale)))
                loss = nn.functional.binary_cross_entropy_with_logits(logits, labels)
                total += schedule.step(loss) * batch_size
                correct += int(((logits > 0).float() == labels).sum())
                seen += batch_size
            losses.append(total / seen)
            accuracy.append(correct / seen)
            logger.info(
                f"bbhnet: epoch {epoch + 1}/{epochs} loss {losses[-1]:.4f} "
                f"accuracy {accuracy[-1]:.3f}"
            )
        model = BBHnet(len(channels), model_taps, scale, width=width, depth=depth)
        trained = network.state_dict()
        trained.update(whitening=model.whitening, input_scale=model.input_scale)
        model.load_state_dict(trained)
        model.eval()
        model.training_report = {
            "kind": "bbhnet",
            "channels": channels,
            "sample_rate": rate,
            "kernel_samples": kernel,
            "input_scale": scale,
            "width": width,
            "depth": depth,
            "whitening_taps": int(model_taps.shape[1]),
            "psd_frequencies_hz": freqs.tolist(),
            "psd": psd.tolist(),
            "snr_range": list(snr_range),
            **span.report(epochs, windows_per_epoch, losses, accuracy),
        }
        return model


def predict_bbhnet(
    model: nn.Module, strain: np.ndarray, kernel_samples: int, stride_samples: int,
    batch_size: int = 256,
) -> np.ndarray:
    """Statistics of the windows ``[j * stride, j * stride + kernel)`` of ``[ifos, n]`` strain."""
    return run_windows(model, strain, kernel_samples, stride_samples, batch_size, ())


def train_demo_network(
    config: CampaignConfig, frames: Sequence[FrameFile], *, seed: int, threads: int,
    dataset: Any, **overrides: Any,
) -> dict[str, BBHnet]:
    """The demo's BBHnet (``bbhnet``): ``train_bbhnet`` with ``DEMO_BBHNET`` and
    ``overrides``, away from the injections the dataset holds (``dataset``: its
    ``synth.json``). ``NetworkKind.train_demo``."""
    injections = [float(inj["gps_time"]) for inj in dataset.get("injections", [])]
    return {"bbhnet": train_bbhnet(
        config, frames, exclude_gps=injections,
        **{"seed": seed, "threads": threads, **DEMO_BBHNET, **overrides})}
