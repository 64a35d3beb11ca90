"""Tests of the sensitive time-volume against IFAR (offline_iaas.sensitivity)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from offline_iaas.physics import (
    SECONDS_PER_YEAR,
    background_note,
    best_ifars,
    ifar_thresholds,
    max_measurable_ifar_years,
    sensitive_distance_mpc,
    sensitive_volume,
)

# four injections: one near no trigger, the others' best IFARs 0.5, 2 and 10 years
IFARS = [None, 0.5, 2.0, 10.0]


def test_vt_of_a_hand_computed_case() -> None:
    one, five = sensitive_volume(IFARS, volume_gpc3=2.0, analysed_years=0.5,
                                 thresholds_years=[1.0, 5.0])
    # IFAR >= 1 yr: 2 of 4 found; V T = 1 Gpc^3 yr
    assert (one.found, one.injections) == (2, 4)
    assert one.found_fraction == 0.5
    assert one.found_fraction_error == pytest.approx(math.sqrt(0.5 * 0.5 / 4))  # 0.25
    assert one.vt_gpc3_years == pytest.approx(0.5)
    assert one.vt_error_gpc3_years == pytest.approx(0.25)
    # VT / T = 1 Gpc^3: a sphere of radius (3 / (4 pi))^(1/3) Gpc = 620.35 Mpc
    assert one.sensitive_distance_mpc == pytest.approx(620.35, abs=0.01)
    assert (five.found, five.vt_gpc3_years) == (1, pytest.approx(0.25))
    assert five.found_fraction_error == pytest.approx(math.sqrt(0.25 * 0.75 / 4))
    assert one.vt_gpc3_years != pytest.approx(0.25)  # control: the thresholds differ


def test_an_ifar_equal_to_the_threshold_is_found() -> None:
    [at] = sensitive_volume(IFARS, 1.0, 1.0, [2.0])
    [above] = sensitive_volume(IFARS, 1.0, 1.0, [2.0 * (1 + 1e-12)])
    assert (at.found, above.found) == (2, 1)


def test_everything_and_nothing_found() -> None:
    low, high = sensitive_volume([5.0, 6.0], 3.0, 2.0, [1.0, 100.0])
    assert low.vt_gpc3_years == pytest.approx(6.0) and low.found_fraction_error == 0.0
    assert high.vt_gpc3_years == 0.0 and high.sensitive_distance_mpc == 0.0


def test_thresholds_beyond_the_background_are_flagged() -> None:
    livetime = 2.0 * SECONDS_PER_YEAR
    assert max_measurable_ifar_years(livetime) == pytest.approx(2.0)
    one, five = sensitive_volume(IFARS, 1.0, 1.0, [1.0, 5.0], livetime)
    assert one.measurable and not five.measurable
    assert five.background_needed_years == 5.0
    assert all(p.measurable for p in sensitive_volume(IFARS, 1.0, 1.0, [1.0, 5.0]))
    assert background_note(5.0, livetime) == (
        "VT at IFAR 5 yr needs 5 yr of background, have 2 yr")
    assert background_note(1.0, livetime).startswith("VT at IFAR 1 yr has")


def test_ifar_grid_is_logarithmic() -> None:
    np.testing.assert_allclose(ifar_thresholds(0.1, 10.0, 2),
                               [0.1, 10**-0.5, 1.0, 10**0.5, 10.0])
    grid = ifar_thresholds(0.01, 5.0)
    assert grid[0] == 0.01 and grid[-1] >= 5.0 and grid[-2] < 5.0
    with pytest.raises(ValueError):
        ifar_thresholds(0.0, 1.0)


def test_best_ifar_is_the_loudest_trigger_near_each_injection() -> None:
    triggers = np.array([100.0, 100.8, 102.5, 200.0])
    ifars = np.array([0.3, 4.0, 9.0, 7.0])
    best = best_ifars([100.5, 150.0, 201.0], triggers, ifars, found_seconds=1.0)
    np.testing.assert_array_equal(best, [4.0, 0.0, 7.0])
    # control: a narrower window leaves the 100.8 s trigger out
    assert best_ifars([100.2], triggers, ifars, 1.0)[0] == 4.0
    assert best_ifars([100.2], triggers, ifars, 0.4)[0] == 0.3


def test_bad_inputs_raise() -> None:
    with pytest.raises(ValueError, match="no injections"):
        sensitive_volume([], 1.0, 1.0, [1.0])
    with pytest.raises(ValueError, match="NaN"):
        sensitive_volume([1.0, float("nan")], 1.0, 1.0, [1.0])
    with pytest.raises(ValueError, match="positive"):
        sensitive_volume([1.0], 0.0, 1.0, [1.0])


def test_sensitive_distance_of_a_known_volume() -> None:
    assert sensitive_distance_mpc(4.0 / 3.0 * math.pi) == pytest.approx(1000.0)
    assert sensitive_distance_mpc(4.0 / 3.0 * math.pi * 8) == pytest.approx(2000.0)
