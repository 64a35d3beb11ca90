"""What training a network on the campaign's data shares, and ``offline-iaas train-demo``.

The demo's networks are trained by their packages (``science/deepclean/training.py``: DeepClean,
one per interferometer; ``science/bbhnet/training.py``: BBHnet), each named by its network
kind (``NetworkKind.train_demo``). ``train_demo`` runs them in a child process under the
pinned numerics and writes their state_dicts with one summary. What they share is here: the
training span read from the frames, with its report's clocks (``training_data``, a
``TrainingSpan``), deterministic torch threads (``deterministic``), the optimiser and its
learning-rate schedule (``OneCycle``), and a network run over a span's windows.

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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from offline_iaas.config import CampaignConfig
from offline_iaas.config_sections import DataConfig
from offline_iaas.data import synth
from offline_iaas.data.discovery import FrameFile, discover_frames
from offline_iaas.data.frames import read_span
from offline_iaas.errors import ConfigError, DataError
from offline_iaas.mode_packages import network_kinds
from offline_iaas.models.numerics import numerics_in_use, run_in_child
from offline_iaas.models.training_summary import TRAINING_SUMMARY

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class TrainingSpan:
    """The data a network trains on, with its GPS bounds and the clocks its report's times
    are measured from."""

    data: np.ndarray
    """``[channels, samples]`` at the model's rate."""
    gps_start: float
    gps_end: float
    read_seconds: float
    """Wall time the read took."""
    read_ended: float
    """``time.monotonic()`` when the read ended (training's wall time starts there)."""
    cpu_started: float
    """``time.process_time()`` when the read ended (training's CPU time starts there)."""

    def report(self, epochs: int, windows_per_epoch: int, losses: list[float],
               accuracy: list[float] | None = None) -> dict[str, Any]:
        """A training report's span, epochs, losses (and accuracy) and times (training's
        from the end of the read until now)."""
        return {"gps_start": self.gps_start, "gps_end": self.gps_end,
                "epochs": epochs, "windows_per_epoch": windows_per_epoch, "loss": losses,
                **({"accuracy": accuracy} if accuracy is not None else {}),
                "read_seconds": self.read_seconds,
                "train_seconds": time.monotonic() - self.read_ended,
                "train_cpu_seconds": time.process_time() - self.cpu_started,
                "threads": torch.get_num_threads()}


def training_data(
    config: CampaignConfig, frames: Sequence[FrameFile], channels: Sequence[str],
    seconds: float, offset_seconds: float,
) -> TrainingSpan:
    """``channels`` over the training span at the model's rate: ``seconds`` from
    ``data.start + offset_seconds``, whole samples, at least two kernels long."""
    started = time.monotonic()
    start = config.data.start + offset_seconds
    end = min(config.data.start + config.data.duration, start + seconds)
    rate = config.data.sample_rate
    end = start + math.floor((end - start) * rate + 1e-9) / rate
    if end - start < 2 * config.model.kernel_seconds:
        raise ConfigError(
            f"{config.source}: training needs at least {2 * config.model.kernel_seconds} s of "
            f"data from {start}, the span has {end - start} s"
        )
    data = read_span(frames, channels, start, end, rate)
    read_ended = time.monotonic()
    return TrainingSpan(data, start, end, read_ended - started, read_ended, time.process_time())


@contextlib.contextmanager
def deterministic(threads: int) -> Iterator[None]:
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


class OneCycle:
    """Adam under a one-cycle learning rate over ``epochs`` of ``windows_per_epoch`` windows in
    batches of ``batch_size`` (the last batch of an epoch may be short): what both trainers
    optimise with."""

    def __init__(self, parameters: Iterator[nn.Parameter], learning_rate: float, epochs: int,
                 windows_per_epoch: int, batch_size: int) -> None:
        self.optimizer = torch.optim.Adam(parameters, lr=learning_rate)
        steps = epochs * -(-windows_per_epoch // batch_size)
        self.scheduler = torch.optim.lr_scheduler.OneCycleLR(self.optimizer, learning_rate,
                                                             total_steps=steps)

    def step(self, loss: torch.Tensor) -> float:
        """One optimisation step on ``loss``; its value."""
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        self.scheduler.step()
        return float(loss.detach())


def run_windows(
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


# ---- demo -----------------------------------------------------------------------------------

SUMMARY = TRAINING_SUMMARY


def _dataset(config: CampaignConfig) -> dict[str, Any]:
    """The campaign's synthetic dataset's ``synth.json`` (written first where missing);
    DataError naming it where it is not synth's summary (the training uses its directory and
    its injections' times), before any network trains."""
    out_dir = synth.default_out_dir(config.data, config.source)
    if not (out_dir / synth.SYNTH_SUMMARY).exists():
        logger.info(f"train-demo: writing the synthetic dataset to {out_dir}")
        return synth.write_synthetic_dataset(config)
    return synth.read_synth_summary(out_dir)


def _check_training_frames(data: DataConfig, frames: Sequence[FrameFile]) -> None:
    """DataError listing every channel (strain or witness) missing from, or unusable in, the
    campaign's ``frames``, before any network trains (a missing witness would otherwise stop
    training after the networks before it)."""
    from offline_iaas.data.discovery import frame_source
    from offline_iaas.data.preflight import frame_problems, problem_report
    from offline_iaas.data.segments import gps_segments

    span = (data.start, data.start + data.duration)
    problems = frame_problems(frames, (*data.channels, *data.witnesses),
                              gps_segments([span]), data.sample_rate, report_holes=False)
    if problems:
        raise DataError(problem_report(problems, *span, frame_source(data)))


def train_demo(
    config: CampaignConfig,
    out_dir: Path,
    *,
    seed: int = 0,
    threads: int = 2,
    pinned: bool = True,
    environment: Mapping[str, str] | None = None,
    **overrides: Mapping[str, Any],
) -> dict[str, Path]:
    """Train the demo's networks on the campaign's synthetic dataset: each network kind's
    ``NetworkKind.train_demo`` (DeepClean per interferometer where the dataset has witnesses,
    BBHnet).

    Writes ``<name>.pt`` (state_dicts: ``deepclean-<IFO>.pt``, ``bbhnet.pt``) and
    ``demo-models.json`` (each network's configuration: channels, statistics, PSD, losses,
    timing, and the numerics it was trained with) to ``out_dir``; the dataset is written
    first if its ``synth.json`` is missing. ``overrides`` maps a kind's name to keyword
    arguments of its trainer (``deepclean={"epochs": 2}``); ``seed`` and ``threads`` go to
    all.

    Training runs in a child process (``models.numerics.run_in_child``): under the pinned
    numerics by default, so that a seed and a thread count give the same weights bit for bit
    on every x86-64 CPU with AVX2; ``pinned=False`` trains with the CPU's own code paths
    (and ``environment``, the tests' emulated CPUs).

    Returns
    -------
    dict
        ``{"deepclean-H1": path, ..., "bbhnet": path, "summary": path}``.
    """
    unknown = sorted(set(overrides) - set(network_kinds()))
    if unknown:
        raise ConfigError(f"train-demo: no network kind {', '.join(map(repr, unknown))} to "
                          f"override (known: {', '.join(network_kinds())})")
    dataset = _dataset(config)
    frames = discover_frames(config.data)
    _check_training_frames(config.data, frames)
    request = {"config": config, "out_dir": Path(out_dir),
               "overrides": {name: dict(values) for name, values in overrides.items()},
               "seed": seed, "threads": threads, "dataset": dataset, "frames": frames}
    return run_in_child(f"{__name__}:write_demo_networks", request, pinned=pinned,
                        environment=environment)


def write_demo_networks(
    config: CampaignConfig,
    out_dir: Path,
    overrides: Mapping[str, Mapping[str, Any]],
    seed: int,
    threads: int,
    dataset: Mapping[str, Any],
    frames: Sequence[FrameFile],
) -> dict[str, Path]:
    """``train_demo``'s work in this process (the child it starts): train, write, return the
    paths. ``dataset`` is the dataset's ``synth.json``; ``frames`` the campaign's frame files
    (discovered and checked by ``train_demo``)."""
    started = time.monotonic()
    out_dir.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Path] = {}
    reports: dict[str, Any] = {}
    for kind in network_kinds().values():
        if kind.train_demo is None:
            continue
        trained = kind.train_demo(config, frames, seed=seed, threads=threads, dataset=dataset,
                                  **overrides.get(kind.name, {}))
        for name, model in trained.items():
            paths[name] = out_dir / f"{name}.pt"
            torch.save(model.state_dict(), paths[name])
            reports[name] = model.training_report
            seconds = model.training_report["train_seconds"]
            logger.info(f"train-demo: {paths[name]} ({seconds:.1f} s)")
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
