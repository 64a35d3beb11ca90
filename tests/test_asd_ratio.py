"""The cleaned/raw ASD numbers (``physics.asd_ratio``) on synthetic spectra: the deviation at
the band edges is read within the guard next to the band (a change far from the band is the
guarded number's), and the two together see every frequency outside the band."""

from __future__ import annotations

import numpy as np
import pytest

from offline_iaas.physics import asd_ratio

RATE_HZ = 512.0
DURATION_SECONDS = 256.0
FFT_SECONDS = 4.0
BAND_HZ = (55.0, 65.0)
GUARD_HZ = 2.0


def noise_and_time() -> tuple[np.ndarray, np.ndarray]:
    """White noise and its times (s)."""
    n = int(RATE_HZ * DURATION_SECONDS)
    return np.random.default_rng(7).normal(size=n), np.arange(n) / RATE_HZ


def sine(t: np.ndarray, frequency_hz: float, amplitude: float = 1.0) -> np.ndarray:
    return amplitude * np.sin(2 * np.pi * frequency_hz * t)


def numbers(raw: np.ndarray, cleaned: np.ndarray, guard_hz: float = GUARD_HZ
            ) -> dict[str, float]:
    return asd_ratio(raw, cleaned, RATE_HZ, FFT_SECONDS, BAND_HZ, guard_hz, line_hz=60.0)


def test_a_line_far_from_the_band_is_no_edge_deviation() -> None:
    noise, t = noise_and_time()
    added = numbers(noise, noise + sine(t, 300.0))  # cleaning added a 300 Hz line
    assert added["max_deviation_outside_band"] > 1.0  # seen: beyond the guard
    assert added["max_deviation_at_band_edges"] < 0.05
    same = numbers(noise, noise.copy())  # control: nothing changed, nothing seen
    assert same["max_deviation_outside_band"] == same["max_deviation_at_band_edges"] == 0.0


@pytest.mark.parametrize("edge_hz", [54.0, 66.5])
def test_a_dip_right_at_a_band_edge_is_the_edge_deviation(edge_hz: float) -> None:
    noise, t = noise_and_time()
    dipped = numbers(noise + sine(t, edge_hz, 2.0), noise)  # a line removed inside the guard
    assert dipped["max_deviation_at_band_edges"] > 0.5
    assert dipped["max_deviation_outside_band"] < 0.05  # beyond the guard: untouched


def test_without_a_guard_the_edge_deviation_is_the_bin_next_to_each_edge() -> None:
    noise, t = noise_and_time()
    next_bin_hz = BAND_HZ[0] - 1 / FFT_SECONDS
    dipped = numbers(noise + sine(t, next_bin_hz, 2.0), noise, guard_hz=0.0)
    assert dipped["max_deviation_at_band_edges"] > 0.5
    farther = numbers(noise + sine(t, 50.0, 2.0), noise, guard_hz=0.0)  # control: 5 Hz off
    assert farther["max_deviation_at_band_edges"] < 0.05
    assert farther["max_deviation_outside_band"] > 0.5
