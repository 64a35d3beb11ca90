"""Tests of the compact-binary waveforms, their projection and SNR, and the population
(offline_iaas.search.waveforms, offline_iaas.search.population)."""

from __future__ import annotations

import dataclasses

import lal
import lalsimulation as ls
import numpy as np
import pytest
from scipy import integrate, signal, stats

from offline_iaas.data.synth import design_asd
from offline_iaas.errors import ConfigError, DataError
from offline_iaas.search import population, waveforms
from offline_iaas.search.population import PopulationSpec, draw_binaries
from offline_iaas.search.waveforms import BinaryParameters

RATE = 1024.0
GRID = 1262304000.0
F_LOWER = 20.0
SPEC = PopulationSpec("IMRPhenomD", F_LOWER, 20.0, 50.0, 0.5, 0.4)
BINARY = BinaryParameters(
    mass_1=35.0, mass_2=28.0, redshift=0.2, luminosity_distance=1000.0, inclination=0.7,
    polarization=1.1, ra=2.3, dec=-0.4, coalescence_phase=0.9, gps_time=GRID + 100.3217,
    spin_1z=0.3, spin_2z=-0.2,
)


def direct_polarizations(b: BinaryParameters, rate: float) -> tuple:
    """lalsimulation called here, with the detector-frame masses and SI units."""
    return ls.SimInspiralTD(
        b.mass_1 * (1 + b.redshift) * lal.MSUN_SI, b.mass_2 * (1 + b.redshift) * lal.MSUN_SI,
        0.0, 0.0, b.spin_1z, 0.0, 0.0, b.spin_2z, b.luminosity_distance * 1e6 * lal.PC_SI,
        b.inclination, b.coalescence_phase, 0.0, 0.0, 0.0, 1 / rate, F_LOWER, F_LOWER, None,
        ls.IMRPhenomD,
    )


def peak_time(values: np.ndarray, t0: float, rate: float) -> float:
    """GPS time of the peak of the Hilbert envelope, refined by a parabola through 3 samples."""
    env = np.abs(signal.hilbert(values))
    k = int(np.argmax(env))
    a, b, c = env[k - 1 : k + 2]
    return t0 + (k + 0.5 * (a - c) / (a - 2 * b + c)) / rate


def delay_by_hand(ifo: str, ra: float, dec: float, gps: float) -> float:
    """Geocentre-to-vertex delay: ``-r . n / c`` with ``n`` towards the source (Earth-fixed)."""
    gmst = lal.GreenwichMeanSiderealTime(lal.LIGOTimeGPS(gps))
    n = np.array([np.cos(dec) * np.cos(ra - gmst), np.cos(dec) * np.sin(ra - gmst), np.sin(dec)])
    vertex = np.array(lal.cached_detector_by_prefix[ifo].location)
    return float(-vertex @ n / lal.C_SI)


# ---- polarisations and projection --------------------------------------------------------------


def test_polarizations_are_lalsimulations_samples() -> None:
    waves = waveforms.polarizations(BINARY, "IMRPhenomD", RATE, F_LOWER)
    hp, hc = direct_polarizations(BINARY, RATE)
    np.testing.assert_array_equal(waves.plus, hp.data.data)
    np.testing.assert_array_equal(waves.cross, hc.data.data)
    assert waves.start_seconds == pytest.approx(float(hp.epoch), abs=1e-6)
    assert not np.array_equal(waves.plus[1:], hp.data.data[:-1])  # negative control: shifted


def test_detector_strain_is_lalsimulations_projection() -> None:
    waves = waveforms.polarizations(BINARY, "IMRPhenomD", RATE, F_LOWER)
    for ifo in ("H1", "L1"):
        first, samples = waveforms.detector_strain(BINARY, waves, ifo, GRID)
        hp, hc = direct_polarizations(BINARY, RATE)
        for h in (hp, hc):
            h.epoch = h.epoch + BINARY.gps_time
        h = ls.SimDetectorStrainREAL8TimeSeries(hp, hc, BINARY.ra, BINARY.dec,
                                                BINARY.polarization,
                                                lal.cached_detector_by_prefix[ifo])
        start = float(h.epoch - lal.LIGOTimeGPS(GRID)) * RATE
        assert abs(start - round(start)) < 1e-3  # on the grid: no sub-sample shift
        k = int(round(start)) - first
        assert np.all(samples[:k] == 0) and np.all(samples[k + h.data.length :] == 0)
        np.testing.assert_array_equal(samples[k : k + h.data.length], h.data.data)
        assert not np.array_equal(samples[k + 1 : k + 1 + h.data.length], h.data.data)


def test_detector_strain_is_the_antenna_weighted_polarizations_delayed() -> None:
    """F+ h+ + Fx hx (antenna patterns from lal) moved by the delay (frequency domain)."""
    waves = waveforms.polarizations(BINARY, "IMRPhenomD", RATE, F_LOWER)
    n = 1 << 15
    freqs = np.fft.rfftfreq(n, 1 / RATE)
    for ifo in ("H1", "L1"):
        first, samples = waveforms.detector_strain(BINARY, waves, ifo, GRID)
        fplus, fcross = lal.ComputeDetAMResponse(
            lal.cached_detector_by_prefix[ifo].response, BINARY.ra, BINARY.dec,
            BINARY.polarization, lal.GreenwichMeanSiderealTime(lal.LIGOTimeGPS(BINARY.gps_time)))
        geo = fplus * waves.plus + fcross * waves.cross
        start = BINARY.gps_time + waves.start_seconds
        shift = start + delay_by_hand(ifo, BINARY.ra, BINARY.dec, BINARY.gps_time) - (
            GRID + first / RATE)

        spectrum = np.fft.rfft(geo, n)
        moved = [np.fft.irfft(spectrum * np.exp(-2j * np.pi * freqs * s), n)[: len(samples)]
                 for s in (shift, shift + 1 / RATE)]
        peak = np.abs(samples).max()
        assert np.abs(moved[0] - samples).max() / peak < 0.01
        assert np.abs(moved[1] - samples).max() / peak > 0.1  # control: one sample later


def test_peak_arrives_at_coalescence_plus_light_travel_delay() -> None:
    """Within a quarter sample for 12 binaries; H1-L1 differences too."""
    binaries = draw_binaries(SPEC, 12, np.random.default_rng(11), GRID + 50.123)
    for b in binaries:
        waves = waveforms.polarizations(b, "IMRPhenomD", RATE, F_LOWER)
        # the geocentre peak of this approximant (t = 0 for IMRPhenomD), same estimator
        geocentre = peak_time(waves.plus, b.gps_time + waves.start_seconds, RATE)
        peaks, expected = {}, {}
        for ifo in ("H1", "L1"):
            first, samples = waveforms.detector_strain(b, waves, ifo, GRID)
            peaks[ifo] = peak_time(samples, GRID + first / RATE, RATE)
            expected[ifo] = geocentre + delay_by_hand(ifo, b.ra, b.dec, b.gps_time)
            assert abs(peaks[ifo] - expected[ifo]) * RATE < 0.25
            assert abs(peaks[ifo] + 1 / RATE - expected[ifo]) * RATE > 0.25  # control
            assert waveforms.arrival_time(b, ifo) == pytest.approx(
                b.gps_time + delay_by_hand(ifo, b.ra, b.dec, b.gps_time), abs=1e-6)
        difference = (peaks["H1"] - peaks["L1"]) - (expected["H1"] - expected["L1"])
        assert abs(difference) * RATE < 0.25
        assert abs(difference + 1 / RATE) * RATE > 0.25  # control


def test_light_travel_delays_agree_with_the_vertex_positions() -> None:
    for ifo in ("H1", "L1", "V1"):
        ours = waveforms.light_travel_delay(ifo, 1.0, 0.5, GRID)
        assert ours == pytest.approx(delay_by_hand(ifo, 1.0, 0.5, GRID), abs=1e-9)
        assert ours != pytest.approx(delay_by_hand(ifo, 1.0, -0.5, GRID), abs=1e-6)


def test_unknown_approximant_is_a_config_error_naming_the_key() -> None:
    assert waveforms.check_approximant("IMRPhenomXPHM") == ls.IMRPhenomXPHM
    with pytest.raises(ConfigError, match="'synth.approximant'.*'NotAWaveform'"):
        waveforms.check_approximant("NotAWaveform")
    with pytest.raises(ConfigError, match="'x.y'"):
        waveforms.check_approximant("NotAWaveform", "x.y")


def test_precessing_approximant_takes_in_plane_spins() -> None:
    tilted = dataclasses.replace(BINARY, spin_1x=0.4, spin_1z=0.1)
    plain = waveforms.polarizations(BINARY, "IMRPhenomXPHM", RATE, F_LOWER)
    precessing = waveforms.polarizations(tilted, "IMRPhenomXPHM", RATE, F_LOWER)
    assert np.all(np.isfinite(precessing.plus)) and len(precessing.plus) > RATE
    n = min(len(plain.plus), len(precessing.plus))
    assert np.abs(plain.plus[-n:] - precessing.plus[-n:]).max() > 0.1 * np.abs(plain.plus).max()


def test_reference_frequency_reaches_lalsimulation() -> None:
    """The default is f_lower; another reference frequency is what SimInspiralTD is given
    (a precessing binary's waveform depends on it)."""
    tilted = dataclasses.replace(BINARY, spin_1x=0.4, spin_1z=0.1)
    default = waveforms.polarizations(tilted, "IMRPhenomXPHM", RATE, F_LOWER)
    at_f_lower = waveforms.polarizations(tilted, "IMRPhenomXPHM", RATE, F_LOWER, F_LOWER)
    at_50 = waveforms.polarizations(tilted, "IMRPhenomXPHM", RATE, F_LOWER, 50.0)
    np.testing.assert_array_equal(default.plus, at_f_lower.plus)
    hp, _ = ls.SimInspiralTD(
        tilted.mass_1_detector * lal.MSUN_SI, tilted.mass_2_detector * lal.MSUN_SI, 0.4, 0.0,
        0.1, 0.0, 0.0, tilted.spin_2z, tilted.luminosity_distance * 1e6 * lal.PC_SI,
        tilted.inclination, tilted.coalescence_phase, 0.0, 0.0, 0.0, 1 / RATE, F_LOWER, 50.0,
        None, ls.IMRPhenomXPHM)
    np.testing.assert_array_equal(at_50.plus, hp.data.data)
    n = min(len(default.plus), len(at_50.plus))
    assert np.abs(default.plus[-n:] - at_50.plus[-n:]).max() > 0.01 * np.abs(hp.data.data).max()


def test_effective_distance_is_distance_over_the_response() -> None:
    """Face-on (i = 0) the effective distance is D / sqrt(F+^2 + Fx^2); edge-on (i = pi/2)
    D / (|F+| / 2); never below D (F+^2 + Fx^2 <= 1)."""
    for ifo in ("H1", "L1"):
        fp, fc = waveforms.antenna_response(ifo, BINARY.ra, BINARY.dec, BINARY.polarization,
                                            BINARY.gps_time)
        face_on = dataclasses.replace(BINARY, inclination=0.0)
        edge_on = dataclasses.replace(BINARY, inclination=np.pi / 2)
        assert waveforms.effective_distance(face_on, ifo) == pytest.approx(
            1000.0 / np.hypot(fp, fc), rel=1e-12)
        assert waveforms.effective_distance(edge_on, ifo) == pytest.approx(
            1000.0 / abs(fp / 2), rel=1e-12)
    assert waveforms.effective_distance(BINARY, "H1") >= 1000.0
    # at any inclination, with LAL's own antenna response (FINDCHIRP's definition:
    # D / sqrt(F+^2 (1 + cos^2 i)^2 / 4 + Fx^2 cos^2 i))
    detectors = {"H1": lal.LHO_4K_DETECTOR, "L1": lal.LLO_4K_DETECTOR}
    gmst = lal.GreenwichMeanSiderealTime(lal.LIGOTimeGPS(BINARY.gps_time))
    for ifo, index in detectors.items():
        fp, fc = lal.ComputeDetAMResponse(lal.CachedDetectors[index].response, BINARY.ra,
                                          BINARY.dec, BINARY.polarization, gmst)
        for inclination in (0.3, 1.1, 2.0, 2.9):
            c = np.cos(inclination)
            tilted = dataclasses.replace(BINARY, inclination=inclination)
            assert waveforms.effective_distance(tilted, ifo) == pytest.approx(
                1000.0 / np.sqrt(fp**2 * (1 + c**2) ** 2 / 4 + fc**2 * c**2), rel=1e-9)


def test_welch_asd_measures_white_noise_and_a_line() -> None:
    """White noise of variance s^2 at fs has one-sided PSD 2 s^2 / fs; a sinusoid stands
    out at its frequency; the median's bias is corrected."""
    rng = np.random.default_rng(3)
    fs, sigma = 512.0, 2e-21
    noise = rng.standard_normal(int(64 * fs)) * sigma
    asd = waveforms.welch_asd(noise, fs)
    band = np.linspace(20.0, 200.0, 200)
    ratio = asd(band) ** 2 / (2 * sigma**2 / fs)
    assert np.median(ratio) == pytest.approx(1.0, abs=0.05)
    assert np.median(waveforms.welch_asd(noise * 1.1, fs)(band) / asd(band)) == pytest.approx(
        1.1, rel=1e-12)  # control: 10 % more noise
    t = np.arange(len(noise)) / fs
    lined = waveforms.welch_asd(noise + 50 * sigma * np.sin(2 * np.pi * 60.0 * t), fs)
    assert lined(np.array([60.0]))[0] > 10 * asd(np.array([60.0]))[0]
    assert lined(np.array([100.0]))[0] == pytest.approx(asd(np.array([100.0]))[0], rel=0.05)
    with pytest.raises(DataError, match="3 s of strain leave no 4 s PSD segment"):
        waveforms.welch_asd(noise[: int(3 * fs)], fs)
    with pytest.raises(DataError, match="not finite"):
        waveforms.welch_asd(np.where(t < 1, np.nan, noise), fs)


def test_welch_asd_leaves_out_the_segments_of_a_signal() -> None:
    """A loud chirp over 20 of 64 s: the segments touching it are left out, so the PSD is the
    noise's (the same segments of the noise alone give it exactly); kept in, the median moves.
    """
    rng = np.random.default_rng(4)
    fs, sigma = 512.0, 2e-21
    noise = rng.standard_normal(int(64 * fs)) * sigma
    t = np.arange(len(noise)) / fs
    burst = np.where((t >= 10) & (t < 30), 3 * sigma * np.sin(2 * np.pi * (40 + 2 * t) * t), 0)
    signal_range = [(int(10 * fs), int(30 * fs))]
    assert waveforms.welch_segments(len(noise), fs, signal_range) == [
        j for j in range(31) if j * 2 + 4 <= 10 or j * 2 >= 30]
    band = np.linspace(20.0, 200.0, 400)
    left_out = waveforms.welch_asd(noise + burst, fs, exclude=signal_range)(band)
    np.testing.assert_allclose(
        left_out, waveforms.welch_asd(noise, fs, exclude=signal_range)(band), rtol=1e-12)
    kept = waveforms.welch_asd(noise + burst, fs)(band)
    assert np.max(kept / left_out) > 1.5  # control: with the chirp in, the PSD rises


def test_median_inverse_bias_is_the_mean_of_s_over_s_hat_of_iid_periodograms() -> None:
    """The exact E[S/S^] of the bias-scaled median equals a Monte Carlo of exponential
    periodograms (odd and even counts), and approaches 1 + 1/(K ln^2 2)."""
    rng = np.random.default_rng(5)
    for count in (15, 16, 31):
        draws = rng.exponential(size=(100_000, count))
        odd = count - (count + 1) % 2
        bias = sum((-1) ** (ell + 1) / ell for ell in range(1, odd + 1))
        assert waveforms.median_inverse_bias(count) == pytest.approx(
            np.mean(bias / np.median(draws, axis=1)), rel=2e-3)
    assert waveforms.median_inverse_bias(255) == pytest.approx(1 + 1 / (255 * np.log(2) ** 2),
                                                               rel=1e-4)
    with pytest.raises(ValueError, match="infinite"):
        waveforms.median_inverse_bias(1)


def test_welch_asd_inverse_unbiased_makes_the_mean_inverse_psd_true() -> None:
    """64 s of white Gaussian noise, 10 seeds: <S / S^> over 20-120 Hz is 1 within 1 % with
    the correction (measured over 100 seeds in groups of 10: 0.994-1.004) and 6-7 % high
    without it (1.063-1.074), the issue's 3-5 % SNR excess."""
    fs, band = 256.0, np.arange(20.0, 120.0, 0.25)
    corrected, plain = [], []
    for seed in range(10):
        noise = np.random.default_rng(seed).standard_normal(int(64 * fs))
        corrected.append(np.mean((2 / fs) / waveforms.welch_asd(
            noise, fs, inverse_unbiased=True)(band) ** 2))
        plain.append(np.mean((2 / fs) / waveforms.welch_asd(noise, fs)(band) ** 2))
    assert np.mean(corrected) == pytest.approx(1.0, abs=0.01)
    assert np.mean(plain) > 1.05  # control: the plain median's 1/S^ is high


# ---- SNR ------------------------------------------------------------------------------------


def snr_of(b: BinaryParameters, ifo: str = "H1", scale: float = 1.0) -> float:
    waves = waveforms.polarizations(b, "IMRPhenomD", RATE, F_LOWER)
    _, samples = waveforms.detector_strain(b, waves, ifo, GRID)
    return waveforms.optimal_snr(samples, RATE, design_asd, F_LOWER, scale)


def test_snr_matches_lalsimulations_measure_snr() -> None:
    waves = waveforms.polarizations(BINARY, "IMRPhenomD", RATE, F_LOWER)
    _, samples = waveforms.detector_strain(BINARY, waves, "H1", GRID)
    n = 1 << 13  # 8 s: the same zero padding as ours
    series = lal.CreateREAL8TimeSeries("h", lal.LIGOTimeGPS(0), 0, 1 / RATE, lal.StrainUnit, n)
    series.data.data[:] = 0
    series.data.data[: len(samples)] = samples
    freqs = np.arange(n // 2 + 1) * RATE / n
    psd = lal.CreateREAL8FrequencySeries("psd", lal.LIGOTimeGPS(0), 0, RATE / n,
                                         lal.StrainUnit**2 * lal.SecondUnit, len(freqs))
    psd.data.data[:] = design_asd(freqs) ** 2
    theirs = ls.MeasureSNR(series, psd, F_LOWER, RATE / 2 - RATE / n)
    ours = waveforms.optimal_snr(samples, RATE, design_asd, F_LOWER)
    assert ours == pytest.approx(theirs, rel=0.01)
    assert waveforms.optimal_snr(samples, RATE, design_asd, F_LOWER, 1.05) != pytest.approx(
        theirs, rel=0.01)  # control: 5 % more noise


def test_snr_scales_as_one_over_distance_and_noise_level() -> None:
    near = snr_of(BINARY)
    far = snr_of(dataclasses.replace(BINARY, luminosity_distance=2 * BINARY.luminosity_distance))
    assert np.isfinite(near) and near > 1
    assert near / far == pytest.approx(2.0, rel=1e-4)
    assert near / far != pytest.approx(2.0 ** 1.1, rel=1e-4)  # control: another power
    assert snr_of(BINARY, scale=1.5) == pytest.approx(near / 1.5, rel=1e-9)
    assert waveforms.network_snr([3.0, 4.0]) == 5.0


# ---- population -----------------------------------------------------------------------------

SEEDS = range(8)
KS_LIMIT = 0.028
"""Largest KS distance allowed for 10000 draws. Measured over ``SEEDS``: the honest
comparisons reach at most 0.016 (p ~ 0.01), the controls' wrong distributions at least 0.053;
0.028 (p ~ 2e-7 for an honest draw) lies between."""


def redshift_cdf(z: np.ndarray, z_max: float, time_dilation: bool = True) -> np.ndarray:
    """CDF of ``dVc/dz / (1 + z)`` by quadrature of astropy's Planck18 (independent of ours)."""
    from astropy.cosmology import Planck18

    def density(x: float) -> float:
        d = Planck18.differential_comoving_volume(x).value
        return d / (1 + x) if time_dilation else d

    total = integrate.quad(density, 0, z_max)[0]
    return np.array([integrate.quad(density, 0, x)[0] / total for x in np.atleast_1d(z)])


@pytest.fixture(scope="module")
def draws() -> dict[int, list[BinaryParameters]]:
    spec = dataclasses.replace(SPEC, redshift_max=1.0)
    return {seed: draw_binaries(spec, 10000, np.random.default_rng(seed)) for seed in SEEDS}


def ks(values: np.ndarray, cdf) -> float:
    return float(stats.kstest(values, cdf).statistic)


def test_angles_are_isotropic(draws: dict[int, list[BinaryParameters]]) -> None:
    uniform = stats.uniform(-1, 2).cdf
    for binaries in draws.values():
        cos_i = np.cos([b.inclination for b in binaries])
        sin_dec = np.sin([b.dec for b in binaries])
        assert ks(cos_i, uniform) < KS_LIMIT
        assert ks(sin_dec, uniform) < KS_LIMIT
        assert ks(np.array([b.ra for b in binaries]), stats.uniform(0, 2 * np.pi).cdf) < KS_LIMIT
        assert ks(np.array([b.polarization for b in binaries]), stats.uniform(0, np.pi).cdf) \
            < KS_LIMIT
        assert ks(np.array([b.inclination for b in binaries]) / np.pi, stats.uniform().cdf) \
            > KS_LIMIT  # control: uniform in the angle itself is not isotropic


def test_redshifts_are_uniform_in_comoving_volume_and_time(
    draws: dict[int, list[BinaryParameters]]
) -> None:
    grid = np.linspace(0, 1.0, 41)
    with_dilation = redshift_cdf(grid, 1.0)
    without = redshift_cdf(grid, 1.0, time_dilation=False)
    for binaries in draws.values():
        z = np.array([b.redshift for b in binaries])
        assert ks(z, lambda x: np.interp(x, grid, with_dilation)) < KS_LIMIT
        # control: without the 1 / (1 + z) the same draws fail
        assert ks(z, lambda x: np.interp(x, grid, without)) > KS_LIMIT
    distance = np.array([b.luminosity_distance for b in binaries[:500]])
    np.testing.assert_allclose(population.redshift_at_distance(distance), z[:500], rtol=1e-9)
    assert not np.allclose(population.redshift_at_distance(distance * 1.001), z[:500],
                           rtol=1e-4)  # control


def test_masses_and_spins_follow_the_spec(draws: dict[int, list[BinaryParameters]]) -> None:
    for binaries in draws.values():
        m1 = np.array([b.mass_1 for b in binaries])
        m2 = np.array([b.mass_2 for b in binaries])
        assert np.all(m1 >= m2) and m2.min() >= 20.0 and m1.max() <= 50.0
        # the larger of two uniforms: CDF u^2; the smaller: 1 - (1 - u)^2
        assert ks((m1 - 20) / 30, lambda u: np.clip(u, 0, 1) ** 2) < KS_LIMIT
        assert ks((m2 - 20) / 30, lambda u: 1 - (1 - np.clip(u, 0, 1)) ** 2) < KS_LIMIT
        assert ks((m1 - 20) / 30, stats.uniform().cdf) > KS_LIMIT  # control
        spins = np.array([b.spin_1z for b in binaries])
        assert ks(spins, stats.uniform(-0.5, 1.0).cdf) < KS_LIMIT
        b = binaries[0]
        assert b.chirp_mass == pytest.approx((m1[0] * m2[0]) ** 0.6 / (m1[0] + m2[0]) ** 0.2)
        assert b.mass_1_detector == pytest.approx(m1[0] * (1 + b.redshift))


def test_the_draw_is_deterministic_for_a_seed() -> None:
    a = draw_binaries(SPEC, 5, np.random.default_rng(3))
    assert a == draw_binaries(SPEC, 5, np.random.default_rng(3))
    assert a != draw_binaries(SPEC, 5, np.random.default_rng(4))


# Planck 2018 (Paper VI, Table 2, TT,TE,EE+lowE+lensing+BAO), written here, and a flat
# universe's expansion from its densities: nothing of astropy's cosmology or the project's.
PLANCK18_H0 = 67.66  # km/s/Mpc
PLANCK18_OMEGA_CB = 0.2607 + 0.04897  # cold dark matter + baryons
PLANCK18_T_CMB = 2.7255  # K
PLANCK18_N_EFF = 3.046
PLANCK18_M_NU_EV = 0.06  # one massive neutrino, non-relativistic at z < 1
VOLUME_TOLERANCE = 2e-5
"""Relative. The oracle counts the massive neutrino as matter (``Omega h^2 = m / 93.14 eV``)
where astropy integrates its phase space, and the massless ones as radiation with ``N_eff``;
that moves ``Omega_m`` by ~2e-5 of itself. Observed: 1.9e-6 at z = 0.4."""


def flat_lcdm_volumes_gpc3(z_max: float, h0: float = PLANCK18_H0) -> tuple[float, float]:
    """``(Vc, V_pop)`` (Gpc^3) of the whole sky to ``z_max``: ``Vc = 4/3 pi Dc^3`` with
    ``Dc(z) = c/H0 int_0^z dz' / E(z')``, ``V_pop = int_0^z_max 4 pi Dc^2 (c/H0) / E / (1+z) dz``,
    ``E^2 = Om (1+z)^3 + Or (1+z)^4 + OL``, ``OL = 1 - Om - Or``."""
    from scipy import constants

    mpc = constants.parsec * 1e6
    hubble_rate = h0 * 1e3 / mpc  # 1/s
    rho_crit = 3 * hubble_rate**2 / (8 * np.pi * constants.G)  # kg/m^3
    omega_photons = 4 * constants.sigma / constants.c**3 * PLANCK18_T_CMB**4 / rho_crit
    omega_massless_nu = PLANCK18_N_EFF * 2 / 3 * 7 / 8 * (4 / 11) ** (4 / 3) * omega_photons
    omega_m = PLANCK18_OMEGA_CB + PLANCK18_M_NU_EV / 93.14 / (h0 / 100) ** 2
    omega_r = omega_photons + omega_massless_nu
    omega_l = 1 - omega_m - omega_r
    hubble_gpc = constants.c / hubble_rate / (mpc * 1e3)

    def e(z: float) -> float:
        return float(np.sqrt(omega_m * (1 + z) ** 3 + omega_r * (1 + z) ** 4 + omega_l))

    def dc(z: float) -> float:
        return hubble_gpc * integrate.quad(lambda x: 1 / e(x), 0, z, epsrel=1e-12)[0]

    vc = 4 / 3 * np.pi * dc(z_max) ** 3
    v_pop = integrate.quad(lambda z: 4 * np.pi * dc(z) ** 2 * hubble_gpc / e(z) / (1 + z),
                           0, z_max, epsrel=1e-10)[0]
    return vc, v_pop


def agrees(value: float, expected: float, rel: float = VOLUME_TOLERANCE) -> bool:
    """``|value - expected| <= rel |expected|``; NaN never agrees."""
    return bool(abs(value - expected) <= rel * abs(expected))


def test_population_volumes_are_planck18_flat_lcdm_integrals() -> None:
    vc, vt = population.comoving_volume_gpc3(0.4), population.time_volume_gpc3(0.4)
    expected_vc, expected_vt = flat_lcdm_volumes_gpc3(0.4)
    assert agrees(vc, expected_vc), (vc, expected_vc)
    assert agrees(vt, expected_vt), (vt, expected_vt)
    assert vc / 1.4 < vt < vc  # the time dilation lowers it by less than 1 + z_max


def test_population_volume_check_fails_for_another_shell_distance_cosmology_or_nan() -> None:
    expected_vc, expected_vt = flat_lcdm_volumes_gpc3(0.4)
    # one thin shell more (z_max + 0.001) and a 0.1 % longer distance scale (H0 / 1.001)
    assert not agrees(population.comoving_volume_gpc3(0.401), expected_vc)
    assert not agrees(population.time_volume_gpc3(0.401), expected_vt)
    vc_scaled, vt_scaled = flat_lcdm_volumes_gpc3(0.4, h0=PLANCK18_H0 / 1.001)
    assert not agrees(population.comoving_volume_gpc3(0.4), vc_scaled)
    assert not agrees(population.time_volume_gpc3(0.4), vt_scaled)
    # Planck 2015's parameters, and V_pop without the 1 / (1 + z) of source-frame time (Vc)
    assert not agrees(population.comoving_volume_gpc3(0.4, "Planck15"), expected_vc)
    assert not agrees(population.time_volume_gpc3(0.4, "Planck15"), expected_vt)
    assert not agrees(population.comoving_volume_gpc3(0.4), expected_vt)
    assert not agrees(float("nan"), expected_vc)
