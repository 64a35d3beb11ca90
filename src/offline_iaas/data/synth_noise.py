"""The synthetic dataset's noise and witnesses, one interferometer's endless stream of
blocks (``ifo_blocks``): what ``synth.py`` writes into its frames, injections added.

Model (``tau = t - data.start`` in seconds)::

    strain = level(tau) n + kappa * s * (w0 + w0 * w1) + sum_j h_j(X, t)

Noise ``n``
    White Gaussian noise of variance ``fs / 2`` through a linear-phase FIR filter of ``2 fs``
    taps (frequency sampling of the ASD, periodic Hann window), whose gain is the aLIGO design
    ASD (``LIGO-T1800044-v5``, shipped in lalsuite; held constant outside its 5-5000 Hz table).
    Its one-sided PSD is then ~ ASD(f)^2. The filter runs overlap-save over fixed blocks of
    ``BLOCK_SAMPLES`` samples carrying the last ``taps - 1`` input samples, so the noise is one
    continuous stream with no seam at file boundaries. ``level(tau) = 1 + (noise_drift - 1)
    tau / duration`` (``noise_level``).
Witnesses
    ``w0 = a(tau) sin(2 pi f_line tau + phi)`` with a slowly wandering amplitude
    ``a = 1 + 0.3 sin(2 pi tau / P1 + psi1) + 0.2 sin(2 pi tau / P2 + psi2)``
    (``P1`` in [30, 90] s, ``P2`` in [7, 20] s, phases random per interferometer);
    ``w1`` slow Gaussian noise of unit variance, gain ``1 / (1 + (f / 2 Hz)^4)``;
    ``w_i`` (i >= 2) unit white noise, not coupled. Without ``w1`` the bilinear term is absent;
    without witnesses there is no coupling.
Coupling
    ``kappa = synth.witness_coupling`` and ``s = LINE_PROMINENCE * ASD(f_line) * sqrt(1 Hz)``.
    A line of amplitude ``kappa * s`` shows in a PSD of resolution ``df`` at
    ``kappa * s / sqrt(2 df)`` over the ASD: ~35 x the noise for kappa = 0.5 and 1 s FFTs.
Injections
    ``h_j(X, t)``: added to the stream as ``synth.py`` plans them (``PlannedInjection``).
"""

from __future__ import annotations

import importlib.util
import math
import zlib
from collections.abc import Callable, Iterator
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from scipy import signal

from offline_iaas.config_sections import SynthConfig
from offline_iaas.errors import DataError

if TYPE_CHECKING:  # the type only: what every mode reads does not import the search
    from offline_iaas.search.synth_injections import PlannedInjection

ASD_FILE = "LIGO-T1800044-v5-aLIGO_DESIGN.txt"
BLOCK_SAMPLES = 2**16
"""Samples generated per step (fixed, so the output does not depend on the file length)."""
LINE_PROMINENCE = 100.0
"""``s / ASD(f_line)`` in ``sqrt(Hz)``: the coupled line's scale relative to the noise."""
WITNESS1_CORNER = 2.0
"""Corner frequency (Hz) of the slow witness ``w1``."""


# ---- noise model ----------------------------------------------------------------------------


def asd_path() -> Path:
    """Path of the aLIGO design ASD file shipped in the lalsuite wheel."""
    spec = importlib.util.find_spec("lalapps")
    dirs = list(spec.submodule_search_locations or []) if spec else []
    for d in dirs:
        path = Path(d) / "data" / ASD_FILE
        if path.is_file():
            return path
    raise DataError(f"design ASD {ASD_FILE} not found in the lalapps package ({dirs})")


@lru_cache(maxsize=1)
def _asd_table() -> tuple[np.ndarray, np.ndarray]:
    table = np.loadtxt(asd_path())
    return table[:, 0], table[:, 1]


def design_asd(frequencies: np.ndarray) -> np.ndarray:
    """aLIGO design ASD (1/sqrt(Hz)) at ``frequencies`` (Hz), log-log interpolated.

    Values outside the tabulated range are held at the nearest tabulated value.
    """
    freq, asd = _asd_table()
    f = np.clip(np.asarray(frequencies, dtype=float), freq[0], freq[-1])
    return np.exp(np.interp(np.log(f), np.log(freq), np.log(asd)))


def _fir_from_gain(
    gain: Callable[[np.ndarray], np.ndarray], n_taps: int, sample_rate: float
) -> np.ndarray:
    """Linear-phase FIR with magnitude response ~ ``gain(f)`` (frequency sampling, Hann)."""
    freqs = np.fft.rfftfreq(n_taps, 1.0 / sample_rate)
    taps = np.roll(np.fft.irfft(gain(freqs), n=n_taps), n_taps // 2)
    return taps * signal.get_window("hann", n_taps, fftbins=True)


class _FirNoise:
    """Gaussian noise: white noise through an FIR filter, block by block (overlap-save)."""

    def __init__(self, rng: np.random.Generator, taps: np.ndarray, scale: float) -> None:
        self._rng = rng
        self._taps = taps
        self._scale = scale
        self._tail = rng.standard_normal(len(taps) - 1) * scale

    def next(self, n_samples: int) -> np.ndarray:
        """The next ``n_samples`` samples of the stream."""
        white = self._rng.standard_normal(n_samples) * self._scale
        x = np.concatenate([self._tail, white])
        self._tail = x[n_samples:]
        return signal.fftconvolve(x, self._taps, mode="valid")


def _rng(seed: int, key: str) -> np.random.Generator:
    """An independent random stream for ``key`` (a channel name or a role)."""
    return np.random.default_rng([seed % 2**63, zlib.crc32(key.encode())])


def noise_level(synth: SynthConfig, duration_seconds: float, tau_seconds: Any) -> Any:
    """The noise's amplitude factor ``tau_seconds`` (scalar or array) after ``data.start``:
    ``1 + (noise_drift - 1) tau / duration``."""
    return 1.0 + (synth.noise_drift - 1.0) * tau_seconds / duration_seconds


# ---- per-interferometer stream --------------------------------------------------------------


def witness_name(ifo: str, index: int) -> str:
    """The channel name of ``ifo``'s witness ``index``."""
    return f"{ifo}:PEM-SYNTH_WITNESS_{index}"


def witness0_params(seed: int, ifo: str) -> dict[str, float]:
    """The line witness ``w0``'s phases and periods for ``ifo``, drawn from ``seed``."""
    rng = _rng(seed, f"{ifo}:witness-0-params")
    return {
        "phase": float(rng.uniform(0, 2 * np.pi)),
        "period_1": float(rng.uniform(30.0, 90.0)),
        "phase_1": float(rng.uniform(0, 2 * np.pi)),
        "period_2": float(rng.uniform(7.0, 20.0)),
        "phase_2": float(rng.uniform(0, 2 * np.pi)),
    }


def ifo_blocks(
    synth: SynthConfig,
    duration_seconds: float,
    ifo: str,
    strain_channels: list[str],
    sample_rate: float,
    line_scale: float,
    injections: list[PlannedInjection],
) -> Iterator[np.ndarray]:
    """Endless blocks ``[len(strain) + witnesses, BLOCK_SAMPLES]`` for one interferometer."""
    n_w = synth.witnesses
    noise_taps = _fir_from_gain(design_asd, int(round(2 * sample_rate)), sample_rate)
    noises = [
        _FirNoise(_rng(synth.seed, ch), noise_taps, math.sqrt(sample_rate / 2))
        for ch in strain_channels
    ]
    slow = None
    if n_w >= 2:
        slow_taps = _fir_from_gain(
            lambda f: 1.0 / (1.0 + (f / WITNESS1_CORNER) ** 4),
            int(round(2 * sample_rate)),
            sample_rate,
        )
        slow_taps /= np.sqrt(np.sum(slow_taps**2))
        slow = _FirNoise(_rng(synth.seed, witness_name(ifo, 1)), slow_taps, 1.0)
    white = [_rng(synth.seed, witness_name(ifo, i)) for i in range(2, n_w)]
    p = witness0_params(synth.seed, ifo)
    kappa = synth.witness_coupling
    f_line = synth.line_frequency
    offset = 0
    while True:
        tau = (offset + np.arange(BLOCK_SAMPLES)) / sample_rate
        witnesses = []
        if n_w >= 1:
            amp = (
                1.0
                + 0.3 * np.sin(2 * np.pi * tau / p["period_1"] + p["phase_1"])
                + 0.2 * np.sin(2 * np.pi * tau / p["period_2"] + p["phase_2"])
            )
            witnesses.append(amp * np.sin(2 * np.pi * f_line * tau + p["phase"]))
        if slow is not None:
            witnesses.append(slow.next(BLOCK_SAMPLES))
        witnesses += [g.standard_normal(BLOCK_SAMPLES) for g in white]
        coupled = np.zeros(BLOCK_SAMPLES)
        if n_w >= 2:
            coupled = kappa * line_scale * (witnesses[0] + witnesses[0] * witnesses[1])
        elif n_w == 1:
            coupled = kappa * line_scale * witnesses[0]
        signal_sum = np.zeros(BLOCK_SAMPLES)
        for inj in injections:
            first, samples = inj.strain[ifo]
            lo, hi = max(first, offset), min(first + len(samples), offset + BLOCK_SAMPLES)
            if lo < hi:
                signal_sum[lo - offset : hi - offset] += samples[lo - first : hi - first]
        # the noise's amplitude drifts linearly over the span (synth.noise_drift)
        level = noise_level(synth, duration_seconds, tau)
        strains = [level * nz.next(BLOCK_SAMPLES) + coupled + signal_sum for nz in noises]
        yield np.array(strains + witnesses)
        offset += BLOCK_SAMPLES
