"""BBHnet: H1+L1 strain windows in, one detection statistic per window out.

::

    strain [batch, ifos, K]
      ─► × input_scale (strain is ~1e-21; baked in)
      ─► whitening: fixed depthwise FIR per ifo (linear phase, gain ~ 1 / ASD of a background
         PSD stored with the model, band-limited), "valid" convolution: K - taps + 1 samples
      ─► stem conv (k7, stride 2) → width channels + BatchNorm + ReLU
      ─► depth residual stages (Conv-BN-ReLU-Conv-BN + shortcut, ReLU), each halving the length
         and doubling the channels
      ─► global average pool ─► linear
    statistic [batch]

The whitening taps are a buffer (in the state_dict and the ONNX graph, not trained), so the
exported graph takes raw strain and its output depends on the stream only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from scipy import signal
from torch import nn

from offline_iaas.physics import WHITENING_HIGH_FRACTION, WHITENING_LOW_HZ, whitening_band

WHITENING_SECONDS = 0.25
"""Length of the whitening FIR BBHnet is trained with (taps = this x sample rate + 1)."""
WHITENING_BETA = 9.0
"""Kaiser window parameter of the whitening FIR (about 90 dB of stop-band attenuation)."""
_LOBE = 16
"""Grid points (of ``16 * (taps - 1)``) per bin ``sample_rate / (taps - 1)``."""


def whitening_taps(sample_rate: float) -> int:
    """Taps of the whitening FIR BBHnet is trained with: ``WHITENING_SECONDS``, odd."""
    return int(round(WHITENING_SECONDS * sample_rate)) // 2 * 2 + 1


def whitening_filter(
    asd_frequencies: np.ndarray,
    asd_values: np.ndarray,
    sample_rate: float,
    taps: int,
    low_hz: float = WHITENING_LOW_HZ,
    high_hz: float | None = None,
) -> np.ndarray:
    """Linear-phase FIR whose gain is ``1 / ASD`` in a band, normalised to unit output variance.

    Window method: the desired zero-phase response ``taper(f) / ASD(f)`` (ASD interpolated
    log-log, ``taper`` zero below ``low_hz`` and above ``high_hz``) is sampled on a fine grid,
    transformed to an impulse response, cut to ``taps`` samples around its centre and
    multiplied by a Kaiser window. The result is scaled so that Gaussian noise with this ASD
    comes out with unit variance. Its delay is ``(taps - 1) / 2`` samples.

    Parameters
    ----------
    asd_frequencies, asd_values
        The background amplitude spectral density (units of the input per sqrt(Hz)) and its
        frequencies (Hz, increasing).
    sample_rate
        Sample rate (Hz) of the data to whiten.
    taps
        Filter length (odd).
    low_hz, high_hz
        Band edges (Hz); ``high_hz`` defaults to ``0.8 *`` Nyquist.

    Returns
    -------
    numpy.ndarray
        float64 ``[taps]``.
    """
    if taps < 3 or taps % 2 == 0:
        raise ValueError(f"whitening filter length must be odd and >= 3, got {taps}")
    freqs = np.asarray(asd_frequencies, dtype=float)
    asd = np.asarray(asd_values, dtype=float)
    keep = (freqs > 0) & np.isfinite(asd) & (asd > 0)
    if keep.sum() < 2:
        raise ValueError("the ASD needs at least two positive values at positive frequencies")
    freqs, asd = freqs[keep], asd[keep]
    nyquist = sample_rate / 2
    high_hz = WHITENING_HIGH_FRACTION * nyquist if high_hz is None else high_hz
    if not 0 < low_hz < high_hz <= nyquist:
        raise ValueError(f"whitening band [{low_hz}, {high_hz}] Hz is not inside (0, {nyquist}]")
    n_fft = 16 * (taps - 1)
    grid = np.fft.rfftfreq(n_fft, 1.0 / sample_rate)
    log_f = np.log(np.clip(grid, freqs[0], freqs[-1]))
    asd_grid = np.exp(np.interp(log_f, np.log(freqs), np.log(asd)))
    # The FIR cannot resolve features narrower than its window's main lobe (a narrow line
    # would leak through a narrow notch): invert the PSD as seen at the filter's resolution,
    # i.e. smoothed by the window's power spectrum.
    window = signal.windows.kaiser(taps, WHITENING_BETA)
    kernel = np.abs(np.fft.fft(window, n=n_fft)) ** 2
    reach = 8 * _LOBE  # grid points either side: 8 bins, well past the main lobe
    kernel = np.fft.fftshift(kernel)[n_fft // 2 - reach : n_fft // 2 + reach + 1]
    # mirror at both ends (the PSD is even about 0 Hz and about Nyquist)
    padded = np.concatenate([asd_grid[reach:0:-1], asd_grid, asd_grid[-2 : -reach - 2 : -1]])
    smooth = np.sqrt(np.convolve(padded**2, kernel / kernel.sum(), mode="valid"))
    gain = whitening_band(grid, low_hz, high_hz) / smooth
    impulse = np.fft.irfft(gain, n=n_fft)
    half = taps // 2
    fir = np.concatenate([impulse[-half:], impulse[: half + 1]])
    fir *= window
    # output variance of noise with this ASD: integral of ASD^2 |H|^2 df (one-sided)
    response = np.abs(np.fft.rfft(fir, n=n_fft))
    variance = np.sum((asd_grid * response) ** 2) * (sample_rate / n_fft)
    return fir / np.sqrt(variance)


class _ResidualBlock(nn.Module):
    """Conv-BN-ReLU-Conv-BN plus a (strided 1x1 conv) shortcut, then ReLU."""

    def __init__(self, size_in: int, size_out: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv1d(size_in, size_out, 3, stride=stride, padding=1, bias=False)
        self.norm1 = nn.BatchNorm1d(size_out)
        self.conv2 = nn.Conv1d(size_out, size_out, 3, padding=1, bias=False)
        self.norm2 = nn.BatchNorm1d(size_out)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or size_in != size_out:
            self.shortcut = nn.Sequential(
                nn.Conv1d(size_in, size_out, 1, stride=stride, bias=False),
                nn.BatchNorm1d(size_out),
            )
        self.activation = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.activation(self.norm1(self.conv1(x)))
        y = self.norm2(self.conv2(y))
        return self.activation(y + self.shortcut(x))


class BBHnet(nn.Module):
    """Whitening + small 1-D ResNet: one statistic per multi-detector strain window.

    Parameters
    ----------
    ifos
        Input channels (one strain channel per interferometer).
    whitening
        ``[ifos, taps]`` FIR taps (``whitening_filter``) for the scaled input.
    input_scale
        Factor applied to the raw strain before whitening.
    width
        Channels of the stem convolution; doubled by each stage.
    depth
        Residual stages (each halves the length).
    """

    def __init__(
        self,
        ifos: int = 2,
        whitening: np.ndarray | None = None,
        input_scale: float = 1e21,
        width: int = 8,
        depth: int = 3,
    ) -> None:
        super().__init__()
        if whitening is None:
            whitening = np.zeros((ifos, 1))
            whitening[:, 0] = 1.0
        taps = np.asarray(whitening, dtype=np.float32)
        if taps.ndim != 2 or taps.shape[0] != ifos:
            raise ValueError(f"whitening must be [ifos={ifos}, taps], got {taps.shape}")
        if width < 1 or depth < 0:
            raise ValueError(f"width must be >= 1 and depth >= 0, got {width} and {depth}")
        self.ifos = ifos
        self.register_buffer("input_scale", torch.tensor(float(input_scale)))
        # depthwise Conv1d weight layout [ifos, 1, taps]; convolution = correlation, so flip
        self.register_buffer("whitening", torch.as_tensor(taps[:, None, ::-1].copy()))
        self.stem = nn.Sequential(
            nn.Conv1d(ifos, width, 7, stride=2, padding=3, bias=False),
            nn.BatchNorm1d(width),
            nn.ReLU(),
        )
        stages: list[nn.Module] = []
        size_in = width
        for i in range(depth):
            size_out = width * 2 ** (i + 1)
            stages.append(_ResidualBlock(size_in, size_out, stride=2))
            size_in = size_out
        self.stages = nn.Sequential(*stages)
        self.head = nn.Linear(size_in, 1)

    @property
    def whitening_taps(self) -> int:
        """Length of the whitening FIR (the whitened window is this minus one shorter)."""
        return int(self.whitening.shape[-1])

    def whiten(self, strain: torch.Tensor) -> torch.Tensor:
        """``[batch, ifos, K]`` raw strain → ``[batch, ifos, K - taps + 1]`` whitened."""
        x = strain * self.input_scale
        return nn.functional.conv1d(x, self.whitening, groups=self.ifos)

    def forward(self, strain: torch.Tensor) -> torch.Tensor:
        """``strain`` [batch, ifos, kernel_samples] → statistic [batch]."""
        if strain.dim() != 3 or strain.shape[1] != self.ifos:
            raise ValueError(
                f"BBHnet expects [batch, {self.ifos}, kernel_samples] windows, got "
                f"{tuple(strain.shape)}"
            )
        if strain.shape[-1] < self.whitening_taps:
            raise ValueError(
                f"BBHnet's window ({strain.shape[-1]} samples) is shorter than its whitening "
                f"filter ({self.whitening_taps} taps)"
            )
        x = self.stages(self.stem(self.whiten(strain)))
        return self.head(x.mean(dim=-1))[:, 0]


def fresh_network(expected: Mapping[str, Any], taps: int | None) -> BBHnet:
    """A new BBHnet of ``expected``'s detectors, width and depth, with a placeholder whitening
    FIR of ``taps`` taps, else ``expected["whitening_taps"]``, else as long as a trained one
    at ``expected["sample_rate_hz"]`` (``whitening_taps``), else 1 (``NetworkKind.fresh``)."""
    ifos = int(expected["ifos"])
    rate = expected.get("sample_rate_hz")
    taps = taps or int(expected.get("whitening_taps") or (whitening_taps(rate) if rate else 1))
    return BBHnet(ifos, np.ones((ifos, taps)), 1.0, width=int(expected.get("width", 8)),
                  depth=int(expected.get("depth", 3)))
