"""DeepClean's training on the campaign's data (``offline-iaas train-demo``).

One network per interferometer. Input: the interferometer's witnesses (``data.witnesses``,
else the synthetic dataset's ``<IFO>:PEM-SYNTH_WITNESS_<i>``); target: its strain band-passed
to the merge's band (``[deepclean]`` ``band_low_hz``-``band_high_hz``, Butterworth of
``filter_order``, zero phase), which holds the witness-coupled 60 Hz line
and its side bands plus the Gaussian noise of that band. The network cannot predict the
noise, so minimising the mean squared error (in units of the target's standard deviation)
teaches it the coupled part. At inference the averaged prediction is band-passed the same way
and subtracted from the strain.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
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
from offline_iaas.science.deepclean import DEEPCLEAN_NETWORK
from offline_iaas.science.deepclean.network import DeepClean
from offline_iaas.science.deepclean.settings import DeepCleanConfig, bandpass_sos

logger = logging.getLogger(__name__)

DEMO_DEEPCLEAN: dict[str, Any] = {"epochs": 16, "seconds": 256.0}
"""``train_deepclean``'s settings for the demo (``train_demo_networks``)."""


def bandpass(values: np.ndarray, sos: np.ndarray) -> np.ndarray:
    """``values`` through the merge's band-pass ``sos`` (``settings.bandpass_sos``: the
    ``[deepclean]`` band and order), forward and backward (zero phase)."""
    return signal.sosfiltfilt(sos, np.asarray(values, dtype=np.float64), axis=-1)


def strain_channel(channels: Sequence[str], ifo: str, source: Path | None) -> str:
    """The first strain channel of ``ifo`` in ``channels`` (``data.channels`` of the config
    file ``source``)."""
    for channel in channels:
        if ifo_of(channel) == ifo:
            return channel
    raise ConfigError(f"{source}: no channel of {ifo} in data.channels")


def witness_channels(config: CampaignConfig, ifo: str) -> list[str]:
    """DeepClean's witnesses of ``ifo``: ``data.witnesses``, else the synthetic dataset's."""
    if config.data.witnesses:
        return list(config.witnesses_of(ifo))
    if config.synth.witnesses < 1:
        raise ConfigError(f"{config.source}: DeepClean needs witnesses (synth.witnesses >= 1)")
    return [f"{ifo}:PEM-SYNTH_WITNESS_{i}" for i in range(config.synth.witnesses)]


def train_deepclean(
    config: CampaignConfig,
    frames: Sequence[FrameFile],
    ifo: str,
    epochs: int,
    seconds: float,
    *,
    offset_seconds: float = 0.0,
    windows_per_epoch: int = 2048,
    batch_size: int = 64,
    learning_rate: float = 1e-2,
    seed: int = 0,
    threads: int = 2,
) -> DeepClean:
    """Train DeepClean to predict ``ifo``'s witness-coupled strain noise.

    Parameters
    ----------
    config
        The campaign (span, model rate, kernel, strain channels, ``synth.witnesses``).
    frames
        Frame files holding the strain and the witnesses (``discover_frames``).
    ifo
        Interferometer prefix (``H1``).
    epochs
        Passes of ``windows_per_epoch`` random windows.
    seconds
        Training data (s), from ``data.start + offset_seconds``.

    Returns
    -------
    DeepClean
        In eval mode; ``model.training_report`` holds the statistics, losses and timing.
    """
    with deterministic(threads):
        rate = config.data.sample_rate
        kernel = config.kernel_samples
        section = config.mode_section  # train-demo trains DeepClean for any mode: defaults
        settings = section if isinstance(section, DeepCleanConfig) else DeepCleanConfig()
        witnesses = witness_channels(config, ifo)
        strain_name = strain_channel(config.data.channels, ifo, config.source)
        span = training_data(config, frames, [strain_name, *witnesses], seconds,
                             offset_seconds)
        data = span.data.astype(np.float64)
        target = bandpass(data[0], bandpass_sos(settings, rate))
        wit = data[1:]
        witness_mean = wit.mean(axis=1)
        witness_std = wit.std(axis=1)
        witness_std[witness_std == 0] = 1.0
        strain_mean = 0.0  # a band-passed target has no mean
        strain_std = float(target.std()) or 1.0

        torch.manual_seed(seed)
        rng = np.random.default_rng(seed)
        model = DeepClean(len(witnesses), witness_mean, witness_std, strain_mean, strain_std)
        schedule = OneCycle(model.parameters(), learning_rate, epochs, windows_per_epoch,
                            batch_size)
        wit_t = torch.as_tensor(wit, dtype=torch.float32)
        target_t = torch.as_tensor(target / strain_std, dtype=torch.float32)
        offsets = torch.arange(kernel)
        losses: list[float] = []
        model.train()
        for epoch in range(epochs):
            starts = rng.integers(0, wit.shape[1] - kernel + 1, size=windows_per_epoch)
            total = 0.0
            for b in range(0, windows_per_epoch, batch_size):
                index = torch.as_tensor(starts[b : b + batch_size])[:, None] + offsets
                x = wit_t[:, index].transpose(0, 1)  # [batch, witnesses, kernel]
                y = target_t[index]
                prediction = (model(x) - model.strain_mean) / model.strain_std
                loss = nn.functional.mse_loss(prediction, y)
                total += schedule.step(loss) * len(index)
            losses.append(total / windows_per_epoch)
            logger.info(f"deepclean {ifo}: epoch {epoch + 1}/{epochs} loss {losses[-1]:.4f}")
        model.eval()
        model.training_report = {
            "kind": "deepclean",
            "ifo": ifo,
            "strain_channel": strain_name,
            "witness_channels": witnesses,
            "sample_rate": rate,
            "kernel_samples": kernel,
            "band_hz": [settings.band_low_hz, settings.band_high_hz],
            "bandpass_order": settings.filter_order,
            "witness_mean": witness_mean.tolist(),
            "witness_std": witness_std.tolist(),
            "strain_mean": strain_mean,
            "strain_std": strain_std,
            **span.report(epochs, windows_per_epoch, losses),
        }
        return model


def predict_deepclean(
    model: nn.Module, witnesses: np.ndarray, kernel_samples: int, stride_samples: int,
    batch_size: int = 256,
) -> np.ndarray:
    """Run DeepClean over ``[witnesses, n]`` samples in windows ``stride`` apart.

    Returns the ``[n_windows, kernel]`` predictions of windows starting at ``j * stride``.
    """
    return run_windows(
        model, witnesses, kernel_samples, stride_samples, batch_size, (kernel_samples,)
    )


def train_demo_networks(
    config: CampaignConfig, frames: Sequence[FrameFile], *, seed: int, threads: int,
    dataset: Any, **overrides: Any,
) -> dict[str, DeepClean]:
    """The demo's DeepClean of each interferometer (``deepclean-<IFO>``): ``train_deepclean``
    with ``DEMO_DEEPCLEAN`` and ``overrides``; none without synthetic witnesses
    (``synth.witnesses`` < 1). ``NetworkKind.train_demo``."""
    if config.synth.witnesses < 1:
        return {}
    return {DEEPCLEAN_NETWORK.weight_stem(ifo): train_deepclean(
                config, frames, ifo,
                **{"seed": seed, "threads": threads, **DEMO_DEEPCLEAN, **overrides})
            for ifo in config.ifos}
