"""The bench's workloads: what is streamed (channels, rates, windows) and which network runs.

``toy``
    Two interferometers at 2048 Hz, 4 s windows at 4 Hz: a 5-layer 1-D CNN (k7, stride 2,
    no padding as in ``torch.nn.Conv1d``'s default, 2→8→32→64→128→256 channels), global
    average pool, linear 256→1024→1; one statistic per window. Unpadded, every window's
    features are the stream's (``backend/streaming_conv.py``), so the fused model computes
    each layer once per stream instead of once per window.
``deepclean``
    ``models.deepclean.DeepClean`` on 21 witnesses at 2048 Hz, 1 s windows at 32 Hz; one
    predicted strain window per window (``prediction [n, 1, K]``, one interferometer, as the
    campaign's deepclean graph gives it), averaged online over the overlapping windows into
    one noise sample per input sample (``noise [1, n S]``), as the deepclean mode serves it.
    Initial weights: the bench measures throughput only.
``tiny``
    The toy network on a short, low-rate stream, for the regression test.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from offline_iaas.errors import ConfigError

INPUT_NAME = "windows"
AVERAGED_NAME = "noise"
SAMPLE_BYTES = 4
"""float32 on the wire."""


@dataclass(frozen=True)
class Workload:
    """A stream and the network run over its windows.

    Parameters
    ----------
    name
        Workload name (``toy``, ``deepclean``, ``tiny``).
    network
        ``toy_cnn`` or ``deepclean``.
    channels
        Channels streamed (interferometers or witnesses).
    sample_rate_hz, kernel_seconds, inference_rate_hz
        Model rate, window length and windows per second of data.
    output_name
        Name of the network's output tensor.
    averaged
        The network's per-window outputs are averaged online (``stateful.OnlineAverage``)
        into ``AVERAGED_NAME``: what the service returns and every path computes.
    """

    name: str
    network: str
    channels: int
    sample_rate_hz: float
    kernel_seconds: float
    inference_rate_hz: float
    output_name: str
    averaged: bool = False

    @property
    def kernel_samples(self) -> int:
        return round(self.kernel_seconds * self.sample_rate_hz)

    @property
    def stride_samples(self) -> int:
        return round(self.sample_rate_hz / self.inference_rate_hz)

    @property
    def streaming(self) -> bool:
        """The fused model runs the network on the stream (``backend/streaming_conv.py``)."""
        return self.network == "toy_cnn"

    @property
    def output_dims(self) -> list[int]:
        """Dimensions of one window's output (empty: one value per window)."""
        return [1, self.kernel_samples] if self.network == "deepclean" else []

    @property
    def served_output(self) -> str:
        """The tensor the service returns: the averaged noise, or the network's output."""
        return AVERAGED_NAME if self.averaged else self.output_name

    @property
    def input_bytes_per_data_second(self) -> float:
        """The new samples one data second carries: ``channels x rate x 4`` bytes."""
        return self.channels * self.sample_rate_hz * SAMPLE_BYTES

    def window_seconds(self, windows: int) -> float:
        """Data seconds that ``windows`` consecutive windows advance the stream by."""
        return windows * self.stride_samples / self.sample_rate_hz


TOY = Workload("toy", "toy_cnn", 2, 2048.0, 4.0, 4.0, "statistic")
DEEPCLEAN = Workload("deepclean", "deepclean", 21, 2048.0, 1.0, 32.0, "prediction", True)
TINY = Workload("tiny", "toy_cnn", 2, 256.0, 1.0, 8.0, "statistic")
WORKLOADS: dict[str, Workload] = {w.name: w for w in (TOY, DEEPCLEAN, TINY)}

TOY_CHANNELS: tuple[int, ...] = (8, 32, 64, 128, 256)
TOY_HIDDEN = 1024
TOY_TAPS = 7
TOY_PADDING = 0


def workload(name: str) -> Workload:
    """The workload called ``name``; ConfigError naming the known ones otherwise."""
    try:
        return WORKLOADS[name]
    except KeyError:
        raise ConfigError(
            f"unknown bench workload {name!r} (known: {', '.join(WORKLOADS)})"
        ) from None


def build_network(load: Workload, seed: int = 0):
    """The workload's torch network in eval mode, with seeded initial weights."""
    import torch
    from torch import nn

    torch.manual_seed(seed)
    if load.network == "deepclean":
        from offline_iaas.models.deepclean import DeepClean

        class OneInterferometer(nn.Module):
            """DeepClean's [batch, K] prediction as [batch, 1, K] (interferometers axis)."""

            def __init__(self, witnesses: int) -> None:
                super().__init__()
                self.net = DeepClean(witnesses, [0.0] * witnesses, [1.0] * witnesses, 0.0, 1.0)

            def forward(self, windows: torch.Tensor) -> torch.Tensor:
                return self.net(windows)[:, None]

        return OneInterferometer(load.channels).eval()

    class ToyCNN(nn.Module):
        """5 strided convolutions, global average pool, two linear layers → [batch]."""

        def __init__(self, channels: int) -> None:
            super().__init__()
            layers: list[nn.Module] = []
            size_in = channels
            for size_out in TOY_CHANNELS:
                layers += [
                    nn.Conv1d(size_in, size_out, TOY_TAPS, stride=2, padding=TOY_PADDING),
                    nn.ReLU(),
                ]
                size_in = size_out
            self.features = nn.Sequential(*layers)
            self.head = nn.Sequential(
                nn.Linear(size_in, TOY_HIDDEN), nn.ReLU(), nn.Linear(TOY_HIDDEN, 1)
            )

        def forward(self, windows: torch.Tensor) -> torch.Tensor:
            return self.head(self.features(windows).mean(dim=-1))[:, 0]

    return ToyCNN(load.channels).eval()


def synthetic_samples(load: Workload, seconds: float, seed: int) -> np.ndarray:
    """White Gaussian noise ``[channels, samples]`` (float32), a whole number of strides.

    The content does not matter to throughput; the length does: ``seconds`` is rounded down
    to whole strides.
    """
    strides = int(seconds * load.sample_rate_hz) // load.stride_samples
    rng = np.random.default_rng(seed)
    shape = (load.channels, strides * load.stride_samples)
    return rng.standard_normal(shape, dtype=np.float32)


def split_strides(total_strides: int, parts: int) -> list[int]:
    """Strides of each of ``parts`` contiguous shares (differing by at most one)."""
    base, extra = divmod(total_strides, parts)
    return [base + (i < extra) for i in range(parts)]
