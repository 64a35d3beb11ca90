"""Training of the demo networks on the synthetic dataset (``offline-iaas train-demo``).

DeepClean (one per interferometer)
    Input: the interferometer's witnesses ``<IFO>:PEM-SYNTH_WITNESS_<i>``; target: its strain
    band-passed to ``DEEPCLEAN_BAND_HZ`` (Butterworth, zero phase), which holds the
    witness-coupled 60 Hz line and its side bands plus the Gaussian noise of that band. The
    network cannot predict the noise, so minimising the mean squared error (in units of the
    target's standard deviation) teaches it the coupled part. At inference the averaged
    prediction is band-passed the same way and subtracted from the strain.
BBHnet
    Half of each batch is background (random windows of the strain), half the same windows
    with a fresh injection (``models/injections.py``): a binary of the dataset's ``[synth]``
    population (a bank generated once), projected onto each detector at a random sky
    position, at a network SNR uniform in ``BBHNET_SNR_RANGE`` (optimal, against the design
    ASD, as the dataset's injections), coalescing at a random place in the middle of the
    window. Binary cross-entropy on the statistic (a logit). The whitening filter comes from
    the median Welch PSD of the training strain.

Everything runs on the CPU with at most ``threads`` torch threads; the demo settings
(``train_demo``) finish in well under three minutes on two cores.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from scipy import signal
from torch import nn

from offline_iaas.config import CampaignConfig
from offline_iaas.config_sections import DataConfig
from offline_iaas.data import synth
from offline_iaas.data.discovery import FrameFile, discover_frames
from offline_iaas.data.frames import read_span
from offline_iaas.errors import ConfigError
from offline_iaas.models.bbhnet import BBHnet, whitening_filter
from offline_iaas.models.deepclean import DeepClean
from offline_iaas.models.injections import InjectionMaker
from offline_iaas.models.numerics import numerics_in_use, run_in_child
from offline_iaas.models.weights import TRAINING_SUMMARY
from offline_iaas.search.population import population_spec

logger = logging.getLogger(__name__)

DEEPCLEAN_BAND_HZ: tuple[float, float] = (55.0, 65.0)
"""Band of the coupled line (Hz): DeepClean's training target and the inference band-pass."""
BANDPASS_ORDER = 8
"""Butterworth order of the band-pass (applied forward and backward)."""
BBHNET_SNR_RANGE: tuple[float, float] = (8.0, 30.0)
"""Network SNR of the training injections."""
BBHNET_WHITENING_SECONDS = 0.25
"""Length of BBHnet's whitening FIR (taps = this x sample rate + 1)."""
PSD_SEGMENT_SECONDS = 2.0
"""Welch segment length (s) of the background PSD stored with BBHnet."""
INJECTION_EXCLUSION_SECONDS = 4.0
"""Training windows stay this far from the dataset's own injections."""


def bandpass(
    values: np.ndarray,
    sample_rate: float,
    band_hz: tuple[float, float] = DEEPCLEAN_BAND_HZ,
    order: int = BANDPASS_ORDER,
) -> np.ndarray:
    """Zero-phase Butterworth band-pass (``butter(..., output="sos")`` + ``sosfiltfilt``)."""
    sos = signal.butter(order, band_hz, btype="bandpass", fs=sample_rate, output="sos")
    return signal.sosfiltfilt(sos, np.asarray(values, dtype=np.float64), axis=-1)


def strain_channel(channels: Sequence[str], ifo: str, source: Path | None) -> str:
    """The first strain channel of ``ifo`` in ``channels`` (``data.channels`` of the config
    file ``source``)."""
    for channel in channels:
        if channel.split(":", 1)[0] == ifo:
            return channel
    raise ConfigError(f"{source}: no channel of {ifo} in data.channels")


def witness_channels(config: CampaignConfig, ifo: str) -> list[str]:
    """DeepClean's witnesses of ``ifo``: ``data.witnesses``, else the synthetic dataset's."""
    if config.data.witnesses:
        return list(config.witnesses_of(ifo))
    if config.synth.witnesses < 1:
        raise ConfigError(f"{config.source}: DeepClean needs witnesses (synth.witnesses >= 1)")
    return [f"{ifo}:PEM-SYNTH_WITNESS_{i}" for i in range(config.synth.witnesses)]


def _span(
    config: CampaignConfig, seconds: float, offset_seconds: float
) -> tuple[float, float]:
    start = config.data.start + offset_seconds
    end = min(config.data.start + config.data.duration, start + seconds)
    rate = config.data.sample_rate
    end = start + math.floor((end - start) * rate + 1e-9) / rate
    if end - start < 2 * config.model.kernel_seconds:
        raise ConfigError(
            f"{config.source}: training needs at least {2 * config.model.kernel_seconds} s of "
            f"data from {start}, the span has {end - start} s"
        )
    return start, end


@contextlib.contextmanager
def _deterministic(threads: int) -> Iterator[None]:
    """Exactly ``threads`` torch threads and deterministic algorithms while training.

    With the pinned numerics (``models.numerics``, the child ``train_demo`` starts) this makes
    a seed and a thread count train the same weights on every x86-64 CPU with AVX2. The thread
    count is not capped at the CPUs present: how the work is split between threads changes
    the rounding, so ``threads`` means the same on a one-core machine.
    """
    torch.set_num_threads(max(1, threads))
    before = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before)


# ---- DeepClean ------------------------------------------------------------------------------


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
    started = time.monotonic()
    with _deterministic(threads):
        rate = config.data.sample_rate
        kernel = config.kernel_samples
        start, end = _span(config, seconds, offset_seconds)
        witnesses = witness_channels(config, ifo)
        strain_name = strain_channel(config.data.channels, ifo, config.source)
        data = read_span(frames, [strain_name, *witnesses], start, end, rate).astype(np.float64)
        read_seconds = time.monotonic() - started
        cpu_started = time.process_time()
        target = bandpass(data[0], rate)
        wit = data[1:]
        witness_mean = wit.mean(axis=1)
        witness_std = wit.std(axis=1)
        witness_std[witness_std == 0] = 1.0
        strain_mean = 0.0  # a band-passed target has no mean
        strain_std = float(target.std()) or 1.0

        torch.manual_seed(seed)
        rng = np.random.default_rng(seed)
        model = DeepClean(len(witnesses), witness_mean, witness_std, strain_mean, strain_std)
        optimizer = torch.optim.Adam(model.parameters(), lr=learning_rate)
        steps = epochs * -(-windows_per_epoch // batch_size)
        scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, learning_rate, total_steps=steps)
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
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                scheduler.step()
                total += float(loss.detach()) * len(index)
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
            "band_hz": list(DEEPCLEAN_BAND_HZ),
            "bandpass_order": BANDPASS_ORDER,
            "gps_start": start,
            "gps_end": end,
            "witness_mean": witness_mean.tolist(),
            "witness_std": witness_std.tolist(),
            "strain_mean": strain_mean,
            "strain_std": strain_std,
            **_epochs_and_times(epochs, windows_per_epoch, losses, read_seconds, started,
                                cpu_started),
        }
        return model



def _epochs_and_times(epochs: int, windows_per_epoch: int, losses: list[float],
                      read_seconds: float, started: float, cpu_started: float,
                      accuracy: list[float] | None = None) -> dict[str, Any]:
    """A training report's epochs, losses (and accuracy) and times (``started``/
    ``cpu_started``: the ``time.monotonic``/``time.process_time`` its training began at,
    reading included)."""
    return {"epochs": epochs, "windows_per_epoch": windows_per_epoch, "loss": losses,
            **({"accuracy": accuracy} if accuracy is not None else {}),
            "read_seconds": read_seconds,
            "train_seconds": time.monotonic() - started - read_seconds,
            "train_cpu_seconds": time.process_time() - cpu_started,
            "threads": torch.get_num_threads()}

def predict_deepclean(
    model: nn.Module, witnesses: np.ndarray, kernel_samples: int, stride_samples: int,
    batch_size: int = 256,
) -> np.ndarray:
    """Run DeepClean over ``[witnesses, n]`` samples in windows ``stride`` apart.

    Returns the ``[n_windows, kernel]`` predictions of windows starting at ``j * stride``.
    """
    return _run_windows(
        model, witnesses, kernel_samples, stride_samples, batch_size, (kernel_samples,)
    )


def _run_windows(
    model: nn.Module, data: np.ndarray, kernel_samples: int, stride_samples: int,
    batch_size: int, row_shape: tuple[int, ...],
) -> np.ndarray:
    """``model`` over the windows ``[j * stride, j * stride + kernel)`` of ``[channels, n]`` data,
    ``batch_size`` windows at a time; ``row_shape`` is one window's output shape."""
    views = np.lib.stride_tricks.sliding_window_view(
        np.asarray(data, np.float32), kernel_samples, axis=1
    )[:, ::stride_samples]
    windows = np.ascontiguousarray(views.transpose(1, 0, 2))
    out = []
    with torch.no_grad():
        for b in range(0, len(windows), batch_size):
            out.append(model(torch.as_tensor(windows[b : b + batch_size])).numpy())
    return np.concatenate(out) if out else np.zeros((0, *row_shape), np.float32)


# ---- BBHnet ---------------------------------------------------------------------------------


def background_psd(
    strain: np.ndarray, sample_rate: float, segment_seconds: float = PSD_SEGMENT_SECONDS
) -> tuple[np.ndarray, np.ndarray]:
    """Median Welch PSD ``[ifos, freqs]`` (strain^2/Hz) of ``[ifos, n]`` strain, and its freqs."""
    nperseg = int(round(segment_seconds * sample_rate))
    freqs, psd = signal.welch(
        np.asarray(strain, np.float64), sample_rate, nperseg=nperseg, average="median", axis=-1
    )
    return freqs, psd


def bbhnet_whitening_taps(sample_rate: float) -> int:
    """Taps of the whitening FIR BBHnet is trained with: ``BBHNET_WHITENING_SECONDS``, odd."""
    return int(round(BBHNET_WHITENING_SECONDS * sample_rate)) // 2 * 2 + 1


def bbhnet_whitening(
    freqs_hz: np.ndarray, psd: np.ndarray, sample_rate: float, input_scale: float
) -> np.ndarray:
    """``[ifos, taps]`` whitening FIRs for the scaled input from a ``[ifos, freqs]`` PSD."""
    taps = bbhnet_whitening_taps(sample_rate)
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
    started = time.monotonic()
    with _deterministic(threads):
        rate = config.data.sample_rate
        kernel = config.kernel_samples
        channels = list(config.data.channels)
        start, end = _span(config, seconds, offset_seconds)
        strain = read_span(frames, channels, start, end, rate)
        read_seconds = time.monotonic() - started
        cpu_started = time.process_time()
        freqs, psd = background_psd(strain, rate)
        scale = config.model.input_scale
        model_taps = bbhnet_whitening(freqs, psd, rate, scale)
        if model_taps.shape[1] >= kernel:
            raise ConfigError(
                f"{config.source}: model.kernel_seconds must be longer than BBHnet's whitening "
                f"filter ({BBHNET_WHITENING_SECONDS} s)"
            )
        torch.manual_seed(seed)
        rng = np.random.default_rng(seed)
        # the trainable layers learn on windows whitened outside the network (the same FIR,
        # whiten_windows): its fixed 257-tap convolution through ATen's im2col at every step
        # was most of the pinned numerics' cost. The network written whitens inside.
        network = BBHnet(len(channels), None, 1.0, width=width, depth=depth)
        allowed = _allowed_starts(strain.shape[1], kernel, start, rate, exclude_gps)
        maker = InjectionMaker(rate, kernel, [ch.split(":", 1)[0] for ch in channels], rng,
                               population=population_spec(config.synth, config.source))
        optimizer = torch.optim.Adam(network.parameters(), lr=learning_rate)
        steps = epochs * -(-windows_per_epoch // batch_size)
        scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, learning_rate, total_steps=steps)
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
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                scheduler.step()
                total += float(loss.detach()) * batch_size
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
            "gps_start": start,
            "gps_end": end,
            "psd_frequencies_hz": freqs.tolist(),
            "psd": psd.tolist(),
            "snr_range": list(snr_range),
            **_epochs_and_times(epochs, windows_per_epoch, losses, read_seconds, started,
                                cpu_started, accuracy),
        }
        return model


def predict_bbhnet(
    model: nn.Module, strain: np.ndarray, kernel_samples: int, stride_samples: int,
    batch_size: int = 256,
) -> np.ndarray:
    """Statistics of the windows ``[j * stride, j * stride + kernel)`` of ``[ifos, n]`` strain."""
    return _run_windows(model, strain, kernel_samples, stride_samples, batch_size, ())


# ---- demo -----------------------------------------------------------------------------------

DEMO_DEEPCLEAN: dict[str, Any] = {"epochs": 16, "seconds": 256.0}
DEMO_BBHNET: dict[str, Any] = {"epochs": 20, "seconds": 768.0, "windows_per_epoch": 4096}
SUMMARY = TRAINING_SUMMARY


def _dataset(config: CampaignConfig) -> dict[str, Any]:
    out_dir = synth.default_out_dir(config.data, config.source)
    summary_path = out_dir / "synth.json"
    if summary_path.exists():
        return json.loads(summary_path.read_text())
    logger.info(f"train-demo: writing the synthetic dataset to {out_dir}")
    return synth.write_synthetic_dataset(config)


def train_demo(
    config: CampaignConfig,
    out_dir: Path,
    *,
    deepclean: Mapping[str, Any] | None = None,
    bbhnet: Mapping[str, Any] | None = None,
    seed: int = 0,
    threads: int = 2,
    pinned: bool = True,
    environment: Mapping[str, str] | None = None,
) -> dict[str, Path]:
    """Train DeepClean (per interferometer) and BBHnet on the campaign's synthetic dataset.

    Writes ``deepclean-<IFO>.pt`` and ``bbhnet.pt`` (state_dicts) and ``demo-models.json``
    (each network's configuration: channels, statistics, PSD, losses, timing, and the
    numerics it was trained with) to ``out_dir``; the dataset is written first if its
    ``synth.json`` is missing. ``deepclean`` and ``bbhnet`` override keyword arguments of
    ``train_deepclean`` / ``train_bbhnet`` (defaults ``DEMO_DEEPCLEAN``, ``DEMO_BBHNET``);
    ``seed`` and ``threads`` go to both.

    Training runs in a child process (``models.numerics.run_in_child``): under the pinned
    numerics by default, so that a seed and a thread count give the same weights bit for bit
    on every x86-64 CPU with AVX2; ``pinned=False`` trains with the CPU's own code paths
    (and ``environment``, the tests' emulated CPUs).

    Returns
    -------
    dict
        ``{"deepclean-H1": path, ..., "bbhnet": path, "summary": path}``.
    """
    dataset = _dataset(config)
    request = {"config": config, "out_dir": Path(out_dir), "deepclean": dict(deepclean or {}),
               "bbhnet": dict(bbhnet or {}), "seed": seed, "threads": threads,
               "dataset": dataset}
    return run_in_child(f"{__name__}:write_demo_networks", request, pinned=pinned,
                        environment=environment)


def write_demo_networks(
    config: CampaignConfig,
    out_dir: Path,
    deepclean: Mapping[str, Any],
    bbhnet: Mapping[str, Any],
    seed: int,
    threads: int,
    dataset: Mapping[str, Any],
) -> dict[str, Path]:
    """``train_demo``'s work in this process (the child it starts): train, write, return the
    paths. ``dataset`` is the dataset's ``synth.json``."""
    started = time.monotonic()
    frames = discover_frames(config.data)
    injections = [float(inj["gps_time"]) for inj in dataset.get("injections", [])]
    out_dir.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Path] = {}
    reports: dict[str, Any] = {}
    if config.synth.witnesses >= 1:
        for ifo in config.ifos:
            model = train_deepclean(
                config, frames, ifo,
                **{"seed": seed, "threads": threads, **DEMO_DEEPCLEAN, **deepclean},
            )
            name = f"deepclean-{ifo}"
            paths[name] = out_dir / f"{name}.pt"
            torch.save(model.state_dict(), paths[name])
            reports[name] = model.training_report
            seconds = model.training_report["train_seconds"]
            logger.info(f"train-demo: {paths[name]} ({seconds:.1f} s)")
    model = train_bbhnet(
        config, frames, exclude_gps=injections,
        **{"seed": seed, "threads": threads, **DEMO_BBHNET, **bbhnet},
    )
    paths["bbhnet"] = out_dir / "bbhnet.pt"
    torch.save(model.state_dict(), paths["bbhnet"])
    reports["bbhnet"] = model.training_report
    logger.info(f"train-demo: {paths['bbhnet']} ({model.training_report['train_seconds']:.1f} s)")
    summary = {
        "stream_hash": config.stream_hash(),
        "dataset": dataset.get("directory"),
        "numerics": numerics_in_use(),
        "networks": {
            name: {"weights": paths[name].name, **report} for name, report in reports.items()
        },
        "wall_seconds": time.monotonic() - started,
    }
    paths["summary"] = out_dir / SUMMARY
    paths["summary"].write_text(json.dumps(summary, indent=2) + "\n")
    return paths


def default_weights_dir(data: DataConfig, source: Path | None) -> Path:
    """``weights/`` beside the dataset's directory (``demo-data/weights`` for the demo)."""
    return synth.default_out_dir(data, source).parent / "weights"
