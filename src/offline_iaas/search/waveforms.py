"""Compact-binary waveforms with lalsimulation, projected onto a detector, and their SNR.

One binary is a ``BinaryParameters`` (source-frame masses and redshift; lalsimulation is
given the detector-frame masses ``m (1 + z)`` and the luminosity distance).

Polarisations
    ``lalsimulation.SimInspiralTD``, not ``SimInspiralChooseTDWaveform``: it conditions the
    waveform for injection (it starts a little below ``f_lower`` and tapers that extra part,
    and high-passes a frequency-domain approximant's inverse FFT), so the strain starts
    smoothly at zero instead of with a step, and it takes time- and frequency-domain
    approximants alike. The reference frequency (where the spins, inclination and phase are
    defined) is the injection set's, ``f_lower`` unless it says another. The polarisations'
    time 0 is the approximant's coalescence time (IMRPhenomD: the peak of the amplitude),
    which is put at ``gps_time``, the coalescence time at the geocentre.
Projection
    ``SimDetectorStrainREAL8TimeSeries`` (antenna patterns ``F+``, ``Fx`` and the light-travel
    delay from the geocentre, both following the Earth's rotation, of the detector
    ``lal.cached_detector_by_prefix[ifo]``), then ``SimAddInjectionREAL8TimeSeries`` onto a
    zero series on the data's sample grid (a sub-sample shift in the frequency domain where
    the grid is not aligned to whole seconds).
SNR
    ``rho^2 = 4 sum_{f_low <= f_k < fs/2} |H(f_k)|^2 / S(f_k) df`` with ``H`` the DFT of the
    sampled strain times ``1/fs`` (zero-padded to a power of two of at least 4 s), ``S`` the
    one-sided noise PSD, from ``f_low = f_lower``. ``synth`` records it against two PSDs: the
    design ASD it colours its noise with, and one measured from the frames around the
    injection (``welch_asd``: median Welch, each DFT bin taking its nearest PSD bin).
Unbiased SNR against a measured PSD
    A noisy estimate ``S^`` makes ``1/S^`` too large on average (Jensen): the median of
    ``K`` periodograms, scaled by scipy's median bias, has ``E[S/S^] = 1 + 1/(K ln^2 2)``
    roughly (1.069 for 64 s of 4 s half-overlapping segments, K = 31; 1.008 at K = 255). So
    ``welch_asd(..., inverse_unbiased=True)`` (what an SNR is computed against) divides
    ``1/S^`` by the exact ``E[S/S^]`` of that median for ``K`` independent exponential
    periodograms (``median_inverse_bias``); for a plain mean of ``K`` the same reasoning
    gives ``K/(K-1)``. Half-overlapping Hann segments are nearly independent: on Gaussian
    noise the corrected ``<S/S^>`` is 1.003 at K = 31, 1.000 at K = 63 and 127
    (``tests/test_waveforms.py``, ``benchmarks/injection_snr.py --stationary``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from offline_iaas.errors import ConfigError, DataError

MSUN_SI = 1.988409870698050731911960804878414216e30
"""Solar mass (kg), ``lal.MSUN_SI``."""
MPC_SI = 3.085677581491367278913937957796471611e22
"""Megaparsec (m), ``lal.PC_SI * 1e6``."""
SNR_MIN_FFT_SECONDS = 4.0
"""The SNR's DFT is at least this long (s) so that ``df`` resolves the low frequencies."""
PSD_FFT_SECONDS = 4.0
"""Length (s) of the Welch segments of a measured PSD (``welch_asd``): 0.25 Hz bins."""


@dataclass(frozen=True)
class BinaryParameters:
    """One compact binary.

    Masses are source-frame (Msun); the detector sees ``mass * (1 + redshift)``. Spins are
    dimensionless, in lalsimulation's frame at the reference frequency (aligned spins: only
    ``spin_1z``, ``spin_2z``). Angles in radians; ``gps_time`` is the coalescence time at the
    geocentre.
    """

    mass_1: float
    mass_2: float
    redshift: float
    luminosity_distance: float
    """Mpc."""
    inclination: float
    polarization: float
    """``psi``."""
    ra: float
    dec: float
    coalescence_phase: float
    gps_time: float
    spin_1x: float = 0.0
    spin_1y: float = 0.0
    spin_1z: float = 0.0
    spin_2x: float = 0.0
    spin_2y: float = 0.0
    spin_2z: float = 0.0

    @property
    def mass_1_detector(self) -> float:
        """Detector-frame primary mass (Msun)."""
        return self.mass_1 * (1.0 + self.redshift)

    @property
    def mass_2_detector(self) -> float:
        """Detector-frame secondary mass (Msun)."""
        return self.mass_2 * (1.0 + self.redshift)

    @property
    def chirp_mass(self) -> float:
        """Source-frame chirp mass ``(m1 m2)^(3/5) / (m1 + m2)^(1/5)`` (Msun)."""
        return chirp_mass(self.mass_1, self.mass_2)

    @property
    def chirp_mass_detector(self) -> float:
        """Detector-frame chirp mass (Msun)."""
        return self.chirp_mass * (1.0 + self.redshift)


def chirp_mass(mass_1: Any, mass_2: Any) -> Any:
    """``(m1 m2)^(3/5) / (m1 + m2)^(1/5)`` of scalars or arrays."""
    return (mass_1 * mass_2) ** 0.6 / (mass_1 + mass_2) ** 0.2


@dataclass(frozen=True)
class Polarizations:
    """``h+`` and ``hx`` sampled at ``sample_rate``; sample ``k`` is at
    ``start_seconds + k / sample_rate`` from the coalescence (``start_seconds < 0``)."""

    plus: np.ndarray
    cross: np.ndarray
    start_seconds: float
    sample_rate: float

    @property
    def seconds_before(self) -> float:
        """Length (s) of the waveform before the coalescence."""
        return -self.start_seconds

    @property
    def seconds_after(self) -> float:
        """Length (s) of the waveform after the coalescence (merger and ringdown)."""
        return self.start_seconds + len(self.plus) / self.sample_rate


@contextmanager
def _quiet_lal() -> Iterator[None]:
    """XLAL prints its errors on stderr; silence it where a failure is expected."""
    import lal

    level = lal.GetDebugLevel()
    lal.ClobberDebugLevel(0)
    try:
        yield
    finally:
        lal.ClobberDebugLevel(level)


def check_approximant(name: str, key: str = "synth.approximant", source: Any = None) -> int:
    """lalsimulation's number for the approximant ``name``; ConfigError naming ``key`` (and
    the config file ``source``) when lalsimulation has no such time- or frequency-domain
    approximant."""
    import lalsimulation as ls

    where = f"{source}: " if source is not None else ""
    try:
        with _quiet_lal():
            number = int(ls.GetApproximantFromString(name))
    except RuntimeError:
        raise ConfigError(
            f"{where}'{key}' is not a lalsimulation approximant: {name!r} (e.g. IMRPhenomD, "
            "IMRPhenomXPHM, SEOBNRv4_ROM)"
        ) from None
    if not (ls.SimInspiralImplementedTDApproximants(number)
            or ls.SimInspiralImplementedFDApproximants(number)):
        raise ConfigError(f"{where}'{key}': lalsimulation cannot generate {name!r}")
    return number


def polarizations(
    params: BinaryParameters, approximant: str, sample_rate: float, f_lower_hz: float,
    reference_frequency_hz: float | None = None,
) -> Polarizations:
    """``h+``, ``hx`` of ``params`` from ``lalsimulation.SimInspiralTD`` (module docstring),
    its spins, inclination and phase defined at ``reference_frequency_hz`` (default
    ``f_lower_hz``).

    Raises DataError naming the binary when lalsimulation refuses it (e.g. a spin out of the
    approximant's range).
    """
    import lalsimulation as ls

    number = check_approximant(approximant)
    try:
        with _quiet_lal():
            hp, hc = ls.SimInspiralTD(
                params.mass_1_detector * MSUN_SI, params.mass_2_detector * MSUN_SI,
                params.spin_1x, params.spin_1y, params.spin_1z,
                params.spin_2x, params.spin_2y, params.spin_2z,
                params.luminosity_distance * MPC_SI, params.inclination,
                params.coalescence_phase, 0.0, 0.0, 0.0,
                1.0 / sample_rate, f_lower_hz,
                f_lower_hz if reference_frequency_hz is None else reference_frequency_hz,
                None, number,
            )
    except RuntimeError as err:
        raise DataError(f"lalsimulation {approximant} cannot generate {params}: {err}") from None
    # the epoch is a whole number of samples before t = 0 (up to float rounding)
    start = round(float(hp.epoch) * sample_rate) / sample_rate
    return Polarizations(np.array(hp.data.data), np.array(hc.data.data), start, sample_rate)


def detector(ifo: str) -> Any:
    """``lal.LALDetector`` of the prefix ``ifo`` (``H1``, ``L1``, ``V1``, ``K1``, ...)."""
    import lal

    try:
        return lal.cached_detector_by_prefix[ifo]
    except KeyError:
        raise ConfigError(f"no detector {ifo!r} in lal's cached detectors") from None


def light_travel_delay(ifo: str, ra: float, dec: float, gps_time: float) -> float:
    """Seconds from the geocentre to detector ``ifo`` for a wave from ``(ra, dec)``."""
    import lal

    return float(lal.TimeDelayFromEarthCenter(detector(ifo).location, ra, dec,
                                              lal.LIGOTimeGPS(gps_time)))


def antenna_response(ifo: str, ra: float, dec: float, psi: float, gps_time: float
                     ) -> tuple[float, float]:
    """``(F+, Fx)`` of detector ``ifo`` at ``gps_time`` (long-wavelength limit)."""
    import lal

    gmst = lal.GreenwichMeanSiderealTime(lal.LIGOTimeGPS(gps_time))
    fplus, fcross = lal.ComputeDetAMResponse(detector(ifo).response, ra, dec, psi, gmst)
    return float(fplus), float(fcross)


def effective_distance(params: BinaryParameters, ifo: str) -> float:
    """Effective distance (Mpc) of ``params`` in detector ``ifo``: the distance of an optimally
    placed and oriented source of the same masses and SNR,
    ``D / sqrt(F+^2 ((1 + cos^2 i) / 2)^2 + Fx^2 cos^2 i)``."""
    fplus, fcross = antenna_response(ifo, params.ra, params.dec, params.polarization,
                                     params.gps_time)
    cos_i = math.cos(params.inclination)
    return params.luminosity_distance / math.sqrt(
        fplus**2 * ((1 + cos_i**2) / 2) ** 2 + fcross**2 * cos_i**2)


def _gps(seconds: float) -> Any:
    """``LIGOTimeGPS`` of ``seconds``, exact to the nanosecond for whole-ish GPS times."""
    import lal

    whole = math.floor(seconds)
    return lal.LIGOTimeGPS(int(whole), int(round((seconds - whole) * 1e9)))


def detector_strain(
    params: BinaryParameters,
    waves: Polarizations,
    ifo: str,
    grid_gps_start: float,
) -> tuple[int, np.ndarray]:
    """The strain of one injection in detector ``ifo`` on the grid
    ``grid_gps_start + k / waves.sample_rate``.

    Returns
    -------
    first, samples
        Index ``k`` of the first sample (may be negative) and the float64 samples from it.
    """
    import lal
    import lalsimulation as ls

    rate = waves.sample_rate
    epoch = _gps(params.gps_time)
    epoch += waves.start_seconds
    series = []
    for values in (waves.plus, waves.cross):
        ts = lal.CreateREAL8TimeSeries("h", epoch, 0.0, 1.0 / rate, lal.StrainUnit, len(values))
        ts.data.data[:] = values
        series.append(ts)
    h = ls.SimDetectorStrainREAL8TimeSeries(*series, params.ra, params.dec,
                                            params.polarization, detector(ifo))
    offset = float(h.epoch - _gps(grid_gps_start)) * rate
    # one spare sample each side for the sub-sample shift onto the grid
    first = math.floor(offset) - 1
    target = lal.CreateREAL8TimeSeries("target", _gps(grid_gps_start), 0.0, 1.0 / rate,
                                       lal.StrainUnit, h.data.length + 3)
    target.epoch += first / rate
    target.data.data[:] = 0.0
    ls.SimAddInjectionREAL8TimeSeries(target, h, None)
    return first, np.array(target.data.data, dtype=np.float64)


def arrival_time(params: BinaryParameters, ifo: str) -> float:
    """GPS time the coalescence reaches detector ``ifo``."""
    return params.gps_time + light_travel_delay(ifo, params.ra, params.dec, params.gps_time)


def optimal_snr(
    strain: np.ndarray,
    sample_rate: float,
    asd: Callable[[np.ndarray], np.ndarray],
    f_low_hz: float,
    asd_scale: float = 1.0,
) -> float:
    """Optimal SNR of sampled ``strain`` against the one-sided ``(asd_scale * asd(f))^2``
    from ``f_low_hz`` to the Nyquist frequency (module docstring)."""
    freqs, (spectrum,), n_fft = snr_spectra([strain], sample_rate, f_low_hz)
    power = np.abs(spectrum / sample_rate) ** 2 / (asd_scale * asd(freqs)) ** 2
    return float(np.sqrt(4.0 * np.sum(power) * sample_rate / n_fft))


def snr_spectra(series: Sequence[np.ndarray], sample_rate: float, f_low_hz: float
                ) -> tuple[np.ndarray, list[np.ndarray], int]:
    """The terms of the SNR's inner product ``4 Re sum A B* / S df`` (module docstring):
    the DFT frequencies from ``f_low_hz`` to below the Nyquist frequency, each of ``series``'
    DFTs there (not divided by ``sample_rate``) and the DFT length ``n_fft`` (the longest
    series zero-padded to a power of two of at least ``SNR_MIN_FFT_SECONDS``)."""
    series = [np.asarray(s, np.float64) for s in series]
    longest = max(len(s) for s in series)
    n_fft = 1 << int(np.ceil(np.log2(max(longest, int(SNR_MIN_FFT_SECONDS * sample_rate)))))
    freqs = np.fft.rfftfreq(n_fft, 1.0 / sample_rate)
    band = (freqs >= f_low_hz) & (freqs < sample_rate / 2)
    return freqs[band], [np.fft.rfft(s, n=n_fft)[band] for s in series], n_fft


def welch_asd(
    strain: np.ndarray, sample_rate: float, fft_seconds: float = PSD_FFT_SECONDS,
    exclude: Sequence[tuple[int, int]] = (), inverse_unbiased: bool = False,
) -> Callable[[np.ndarray], np.ndarray]:
    """The ASD of ``strain`` as a function of frequency: median-averaged Welch (Hann segments
    of ``fft_seconds``, half overlapping, mean removed; ``scipy.signal.spectrogram``'s
    one-sided densities), the segments that overlap a sample range ``[a, b)`` of ``exclude``
    (signals, not noise) left out, the median divided by its bias for that many segments
    (``sum_{l=1}^{m} (-1)^(l+1) / l``, ``m`` the segments rounded down to odd, as scipy's
    median Welch). A frequency takes its nearest bin's value: an SNR's sum over a finer DFT
    then weighs each bin's signal energy by that bin's PSD, whatever the zero padding, where
    linear interpolation next to a narrow line would not. With ``inverse_unbiased`` the PSD
    is also multiplied by ``median_inverse_bias`` of the segments used, so that ``1/PSD``
    (what an SNR sums) is unbiased (module docstring).

    Raises DataError when ``strain`` is not finite or leaves no segment.
    """
    from scipy import signal

    strain = np.asarray(strain, np.float64)  # a float32 PSD of ~1e-21 strain underflows
    n = int(round(fft_seconds * sample_rate))
    if not np.all(np.isfinite(strain)):
        raise DataError("the strain a PSD is measured from is not finite")
    keep = welch_segments(len(strain), sample_rate, exclude, fft_seconds)
    if not keep:
        raise DataError(f"{len(strain) / sample_rate:g} s of strain leave no {fft_seconds:g} s "
                        "PSD segment clear of the signals")
    freqs, _, segments = signal.spectrogram(strain, fs=sample_rate, window="hann", nperseg=n,
                                            noverlap=n // 2, mode="psd")
    psd = np.median(segments[:, keep], axis=1) / _median_bias(len(keep))
    if inverse_unbiased:
        psd = psd * median_inverse_bias(len(keep))
    df = freqs[1] - freqs[0]
    return lambda f: np.sqrt(psd[np.clip(np.rint(np.asarray(f) / df).astype(int), 0,
                                         len(psd) - 1)])


@lru_cache(maxsize=256)
def median_inverse_bias(segments: int) -> float:
    """``E[S / S^]`` of ``S^`` the median of ``segments`` independent periodograms of
    true PSD ``S`` divided by scipy's median bias (as ``welch_asd``), exactly.

    A periodogram bin is ``S E`` with ``E`` exponential of mean 1, and the order statistic
    ``E_(j)`` of ``m`` is ``sum_{i<j} e_i / (m - i)`` (independent exponentials ``e_i``);
    the median is ``E_((m+1)/2)`` for odd ``m``, or the mean of the middle two,
    ``E_(m/2) + e / (2 (m - m/2))``, for even ``m``. For ``Y = sum c_i e_i``,
    ``E[1/Y] = int_0^inf prod_i 1 / (1 + s c_i) ds``. Raises ValueError below 2 segments
    (``E[1/S^]`` is infinite).
    """
    from scipy import integrate

    if segments < 2:
        raise ValueError(f"E[1/S^] is infinite for {segments} segment(s)")
    m = segments
    rates = [1.0 / (m - i) for i in range(m // 2 if m % 2 == 0 else (m + 1) // 2)]
    if m % 2 == 0:
        rates.append(0.5 / (m - m // 2))
    value, _ = integrate.quad(
        lambda s: math.exp(-sum(math.log1p(s * c) for c in rates)), 0.0, np.inf, limit=200)
    return float(_median_bias(m) * value)


def _median_bias(segments: int) -> float:
    """scipy's median bias of ``segments`` periodograms (as ``scipy.signal.welch``'s
    ``average="median"``, whose helper is private): ``sum_{l=1}^{m} (-1)^(l+1) / l``, ``m``
    the segments rounded down to odd."""
    odd = segments - (segments + 1) % 2
    return sum((-1) ** (ell + 1) / ell for ell in range(1, odd + 1))


def welch_segments(
    n_samples: int, sample_rate: float, exclude: Sequence[tuple[int, int]] = (),
    fft_seconds: float = PSD_FFT_SECONDS,
) -> list[int]:
    """The indices of ``welch_asd``'s segments of ``n_samples`` samples that overlap no
    sample range ``[a, b)`` of ``exclude`` (segment ``j`` covers ``[j n / 2, j n / 2 + n)``,
    ``n`` the segment's samples)."""
    n = int(round(fft_seconds * sample_rate))
    starts = range(0, n_samples - n + 1, n // 2)
    return [j for j, a in enumerate(starts)
            if not any(lo < a + n and a < hi for lo, hi in exclude)]


def network_snr(snrs: Sequence[float]) -> float:
    """``sqrt(sum rho_i^2)`` of the detectors' SNRs."""
    return float(math.sqrt(sum(float(s) ** 2 for s in snrs)))
