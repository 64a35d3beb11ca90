"""BBHnet's training injections: the synthetic dataset's population, projected at random sky
positions into strain windows.

Bank (built once)
    ``bank_size`` binaries drawn from the population (``search/population.py``: masses, spins,
    redshift, orientation, phase) and their polarisations from lalsimulation at the model
    rate (``search/waveforms.py``). For each, the noise-weighted products ``<h+, h+>``,
    ``<hx, hx>``, ``<h+, hx>`` of the whole waveform against the design ASD from ``f_lower``
    (so a projection's optimal SNR needs no FFT), and the spectra of the part a window can
    show: from ``kernel`` samples (plus a guard, tapered) before the coalescence to the end.
Each injection
    A bank entry, a sky position (``ra`` uniform, ``sin(dec)`` uniform) and polarisation angle
    ``psi``; per detector ``h = F+ h+ + Fx hx`` (``lal``'s antenna patterns, long-wavelength
    limit, at ``REFERENCE_GPS``: with ``ra`` uniform the sidereal time does not matter) moved
    so its coalescence reaches the detector at ``centre + delay`` (the light-travel delay from
    the geocentre; the sub-sample part in the frequency domain), rescaled so the network
    optimal SNR of the whole waveform is the one drawn. The window then holds the part of it
    that falls inside (as a window of real data would).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import scipy.fft

from offline_iaas.config_sections import SynthConfig
from offline_iaas.data.synth import design_asd
from offline_iaas.search.population import PopulationSpec, draw_binaries, population_spec
from offline_iaas.search.waveforms import (
    antenna_response,
    light_travel_delay,
    polarizations,
    snr_spectra,
)

BANK_SIZE = 256
"""Binaries in the bank (IMRPhenomD at 1024 Hz: ~1 s to generate)."""
REFERENCE_GPS = 1262304000.0
"""The time the antenna patterns and delays are taken at."""
DEFAULT_IFOS: tuple[str, ...] = ("H1", "L1", "V1", "K1")
"""Detectors of a maker given only their number."""
GUARD_SECONDS = 0.05
"""Kept (and tapered) beyond what a window can show: covers the light-travel delay."""


class InjectionMaker:
    """Fresh injections of the synthetic dataset's population into strain windows (module
    docstring).

    Parameters
    ----------
    sample_rate
        Model sample rate (Hz).
    kernel_samples
        Window length.
    ifos
        The detectors (prefixes, in window row order), or their number (``DEFAULT_IFOS``).
    rng
        Random generator (the bank, then every injection).
    population
        What the bank is drawn from; default: the ``[synth]`` defaults.
    bank_size
        Binaries in the bank.
    """

    def __init__(
        self,
        sample_rate: float,
        kernel_samples: int,
        ifos: int | Sequence[str],
        rng: np.random.Generator,
        *,
        population: PopulationSpec | None = None,
        bank_size: int = BANK_SIZE,
    ) -> None:
        self.sample_rate = sample_rate
        self.kernel_samples = kernel_samples
        self.ifo_names = tuple(DEFAULT_IFOS[:ifos] if isinstance(ifos, int) else ifos)
        self.ifos = len(self.ifo_names)
        self.rng = rng
        self.population = population or population_spec(SynthConfig())
        spec = self.population
        guard = int(np.ceil(GUARD_SECONDS * sample_rate))
        self.bank = draw_binaries(spec, bank_size, rng)
        """The bank's binaries (their distance, sky position and time are not used)."""
        waves = [polarizations(b, spec.approximant, sample_rate, spec.f_lower_hz)
                 for b in self.bank]
        # the longest part a window can show, with a guard either side of the cropped part
        before = min(max(round(w.seconds_before * sample_rate) for w in waves),
                     kernel_samples + guard)
        after = max(len(w.plus) - round(w.seconds_before * sample_rate) for w in waves)
        self._coalescence = before + guard  # index of t = 0 in a padded waveform
        self._n_fft = 1 << int(np.ceil(np.log2(before + after + 2 * guard)))
        padded = np.zeros((2, bank_size, self._n_fft))
        self._products = np.empty((bank_size, 3))  # <h+,h+>, <hx,hx>, <h+,hx>
        for i, w in enumerate(waves):
            zero = round(w.seconds_before * sample_rate)
            start = max(0, zero - before)
            for p, values in enumerate((w.plus, w.cross)):
                part = values[start:].copy()
                if start > 0:  # cropped: taper the cut over the guard, outside every window
                    part[:guard] *= np.sin(0.5 * np.pi * np.arange(guard) / guard) ** 2
                first = self._coalescence - (zero - start)
                padded[p, i, first : first + len(part)] = part
            self._products[i] = _products(w.plus, w.cross, sample_rate, spec.f_lower_hz)
        # single precision from here on: the windows go to torch as float32
        self._spectra = np.fft.rfft(padded, axis=-1).astype(np.complex64)
        self._freqs = np.fft.rfftfreq(self._n_fft, 1.0 / sample_rate).astype(np.float32)

    def waveforms(
        self, count: int, snr_range: tuple[float, float], centre_range: tuple[float, float]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``count`` injections ``[count, ifos, kernel]`` (float32 strain), their network SNRs
        and the coalescence times at the geocentre (s from the window's start).

        ``centre_range`` is the range of the coalescence time as a fraction of the window;
        the network SNR is uniform in ``snr_range``.
        """
        kernel, rng = self.kernel_samples, self.rng
        pick = rng.integers(0, len(self.bank), size=count)
        snr = rng.uniform(*snr_range, size=count)
        centre = rng.uniform(*centre_range, size=count) * kernel / self.sample_rate
        ra = rng.uniform(0.0, 2.0 * np.pi, size=count)
        dec = np.arcsin(rng.uniform(-1.0, 1.0, size=count))
        psi = rng.uniform(0.0, np.pi, size=count)
        return self.project(pick, ra, dec, psi, snr, centre), snr, centre

    def project(
        self, index: np.ndarray, ra: np.ndarray, dec: np.ndarray, psi: np.ndarray,
        snr: np.ndarray, centre_seconds: np.ndarray,
    ) -> np.ndarray:
        """Bank entries ``index`` from ``(ra, dec)`` with polarisation angle ``psi`` at network
        SNRs ``snr``, coalescing at the geocentre ``centre_seconds`` after the window's start:
        ``[count, ifos, kernel]`` float32 (module docstring)."""
        rate, kernel = self.sample_rate, self.kernel_samples
        sky = list(zip(ra, dec, psi, strict=True))
        response = np.array([[antenna_response(ifo, a, d, p, REFERENCE_GPS)
                              for ifo in self.ifo_names] for a, d, p in sky])
        delay = np.array([[light_travel_delay(ifo, a, d, REFERENCE_GPS)
                           for ifo in self.ifo_names] for a, d, _ in sky])
        fplus, fcross = response[..., 0], response[..., 1]  # [count, ifos]
        pp, cc, pc = (self._products[index, j][:, None] for j in range(3))
        network = np.sqrt(np.sum(fplus**2 * pp + 2 * fplus * fcross * pc + fcross**2 * cc,
                                 axis=1))
        arrival = (np.asarray(centre_seconds)[:, None] + delay) * rate  # samples into window
        whole = np.round(arrival).astype(int)
        # the sub-sample part of the arrival as a phase (cos and sin: a complex exp is ~10 x
        # slower), with F+, Fx and the SNR's scale
        angle = ((-2.0 * np.pi / rate) * (arrival - whole)).astype(np.float32)[..., None]
        angle = angle * self._freqs
        scale = (np.asarray(snr) / network).astype(np.float32)[:, None, None]
        shift = np.empty(angle.shape, np.complex64)
        shift.real, shift.imag = np.cos(angle) * scale, np.sin(angle) * scale
        spectra = (fplus[..., None].astype(np.float32) * self._spectra[0, index][:, None]
                   + fcross[..., None].astype(np.float32) * self._spectra[1, index][:, None])
        padded = scipy.fft.irfft(spectra * shift, n=self._n_fft, axis=-1)
        position = np.arange(kernel) - whole[..., None] + self._coalescence
        inside = (position >= 0) & (position < self._n_fft)
        out = np.take_along_axis(padded, np.clip(position, 0, self._n_fft - 1), axis=-1)
        return np.where(inside, out, np.float32(0.0))


def _products(plus: np.ndarray, cross: np.ndarray, sample_rate: float, f_low_hz: float
              ) -> tuple[float, float, float]:
    """``<h+,h+>``, ``<hx,hx>``, ``<h+,hx>``: ``4 Re sum A B* / ASD^2 df`` from ``f_low_hz``
    (``waveforms.optimal_snr``'s inner product, of ``waveforms.snr_spectra``, so
    ``F+^2 <h+,h+> + ...`` is its SNR^2)."""
    freqs, (hp, hc), n_fft = snr_spectra([plus, cross], sample_rate, f_low_hz)
    # its rounding, not optimal_snr's: the demo's trained networks depend on the last bit
    weight = 4.0 * sample_rate / n_fft / (design_asd(freqs) ** 2 * sample_rate**2)
    return (float(np.sum(np.abs(hp) ** 2 * weight)), float(np.sum(np.abs(hc) ** 2 * weight)),
            float(np.sum((hp * np.conj(hc)).real * weight)))
