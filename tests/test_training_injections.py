"""Tests of BBHnet's training injections (offline_iaas.science.bbhnet.training_injections)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from scipy import signal

from offline_iaas.data.synth import design_asd
from offline_iaas.science.bbhnet.training_injections import REFERENCE_GPS, InjectionMaker
from offline_iaas.search.population import PopulationSpec
from offline_iaas.search.waveforms import (
    detector_strain,
    network_snr,
    optimal_snr,
    polarizations,
)
from tests.test_waveforms import delay_by_hand

RATE = 1024.0
"""Well above the population's ringdowns: at 256 Hz their spectra reach the Nyquist frequency,
where two sub-sample interpolations (lal's sinc kernel, ours in the frequency domain) differ by
a few per cent."""
SPEC = PopulationSpec("IMRPhenomD", 20.0, 20.0, 50.0, 0.5, 0.4)
LONG = int(8 * RATE)
"""A window of 8 s holds a whole waveform of the population (at most ~5 s from 20 Hz)."""


@pytest.fixture(scope="module")
def long_maker() -> InjectionMaker:
    return InjectionMaker(RATE, LONG, ["H1", "L1"], np.random.default_rng(4), population=SPEC,
                          bank_size=16)


def peak_time(values: np.ndarray) -> float:
    """Samples from the start to the peak of the Hilbert envelope (parabola through 3)."""
    env = np.abs(signal.hilbert(values))
    k = int(np.argmax(env))
    a, b, c = env[k - 1 : k + 2]
    return k + 0.5 * (a - c) / (a - 2 * b + c)


def test_network_snr_is_the_drawn_one(long_maker: InjectionMaker) -> None:
    windows, snr, centre = long_maker.waveforms(12, (8.0, 30.0), (0.85, 0.9))
    assert windows.shape == (12, 2, LONG)
    assert np.all((snr >= 8) & (snr <= 30)) and np.all(centre >= 0.85 * 8)
    for window, wanted in zip(windows, snr, strict=True):
        per_ifo = [optimal_snr(row, RATE, design_asd, 20.0) for row in window]
        assert network_snr(per_ifo) == pytest.approx(wanted, rel=0.01)
        assert per_ifo[0] != pytest.approx(wanted, rel=0.01)  # control: one detector's


def test_a_projection_is_the_data_modules_detector_strain(long_maker: InjectionMaker) -> None:
    """The same bank binary, sky and time through search/waveforms.py, rescaled to the SNR."""
    ra, dec, psi = np.array([1.2, 4.0]), np.array([0.3, -1.0]), np.array([0.5, 2.8])
    centre = np.array([6.5, 7.03])
    out = long_maker.project(np.array([3, 7]), ra, dec, psi, np.array([12.0, 20.0]), centre)
    for i, index in enumerate((3, 7)):
        binary = dataclasses.replace(long_maker.bank[index], ra=ra[i], dec=dec[i],
                                     polarization=psi[i], gps_time=REFERENCE_GPS + centre[i])
        waves = polarizations(binary, "IMRPhenomD", RATE, 20.0)
        rows = []
        for ifo in ("H1", "L1"):
            first, samples = detector_strain(binary, waves, ifo, REFERENCE_GPS)
            row = np.zeros(LONG)
            row[first : first + len(samples)] = samples
            rows.append(row)
        expected = np.array(rows)
        expected *= [12.0, 20.0][i] / network_snr(
            [optimal_snr(r, RATE, design_asd, 20.0) for r in rows])
        peak = np.abs(expected).max()
        assert np.abs(out[i] - expected).max() < 0.01 * peak
        assert np.abs(out[i] - np.roll(expected, 1, axis=-1)).max() > 0.1 * peak  # control


def test_each_detector_sees_the_coalescence_after_its_delay(long_maker: InjectionMaker) -> None:
    ra, dec, psi = np.array([0.3, 2.0, 5.0]), np.array([0.9, -0.2, -0.7]), np.zeros(3)
    centre = np.array([7.0, 7.0 + 0.37 / RATE, 6.9])
    out = long_maker.project(np.array([0, 1, 2]), ra, dec, psi, np.full(3, 15.0), centre)
    for i in range(3):
        # the geocentre peak of the bank's waveform (t = 0 for IMRPhenomD), same estimator
        waves = polarizations(long_maker.bank[i], "IMRPhenomD", RATE, 20.0)
        geocentre = peak_time(waves.plus) + waves.start_seconds * RATE
        for k, ifo in enumerate(("H1", "L1")):
            delay = delay_by_hand(ifo, ra[i], dec[i], REFERENCE_GPS)  # not the code checked
            expected = (centre[i] + delay) * RATE + geocentre
            assert abs(peak_time(out[i, k]) - expected) < 0.25
            assert abs(peak_time(out[i, k]) + 1 - expected) > 0.25  # control


def test_short_windows_hold_the_waveforms_end() -> None:
    """A 1 s window at 256 Hz: the bank is cropped; the coalescence still lands in place."""
    maker = InjectionMaker(256.0, 256, 2, np.random.default_rng(1), population=SPEC,
                           bank_size=8)
    assert maker.ifo_names == ("H1", "L1")
    windows, _, centre = maker.waveforms(6, (10.0, 10.0), (0.3, 0.7))
    assert windows.shape == (6, 2, 256) and np.all(np.isfinite(windows))
    assert np.all(np.abs(windows[:, :, 0]) > 0)  # the inspiral runs in from before the window
    peaks = np.array([[peak_time(w) for w in pair] for pair in windows])
    assert np.all(np.abs(peaks - centre[:, None] * 256) <= 0.0214 * 256 + 1)


def test_the_same_seed_makes_the_same_injections() -> None:
    def make(seed: int) -> np.ndarray:
        maker = InjectionMaker(256.0, 256, 2, np.random.default_rng(seed), population=SPEC,
                               bank_size=4)
        return maker.waveforms(3, (8.0, 30.0), (0.3, 0.7))[0]

    np.testing.assert_array_equal(make(5), make(5))
    assert not np.array_equal(make(5), make(6))
