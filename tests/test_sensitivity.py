"""Tests of the sensitive time-volume against IFAR (offline_iaas.physics) and of the injection
list the merge counts (data.injection_file.read_injection_list)."""

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


def rows(ifars: list[float]) -> list[dict]:
    return [{"gps_time": 100.0 + i, "network_snr": 10.0, "ifar_years": v}
            for i, v in enumerate(ifars)]


def test_the_summary_states_vt_at_1_month_and_1_year_or_why_not() -> None:
    from offline_iaas.physics import sensitivity_summary

    # 0.5 yr analysed, 2 yr of background: 1 month measurable, 1 year too
    found = sensitivity_summary(rows([0.0, 0.05, 0.5, 1.5]), 2.0, 0.5 * SECONDS_PER_YEAR,
                                2.0 * SECONDS_PER_YEAR)
    month, year = found["at"]["1 month"], found["at"]["1 year"]
    assert (month["found"], year["found"]) == (2, 1)  # IFAR >= 1/12 yr: 0.5 and 1.5
    assert month["vt_gpc3_years"] == pytest.approx(2.0 * 0.5 * 2 / 4)
    assert month["measurable"] and year["measurable"] and found["notes"] == []
    assert found["at_reach"]["ifar_threshold_years"] == pytest.approx(2.0)
    curve = [p["ifar_threshold_years"] for p in found["curve"]]
    assert curve == sorted(curve) and curve[0] == pytest.approx(1 / (365.25 * 24))
    assert short_curve_starts_lower(0.01)
    # a short background: neither is measurable, and the summary says so
    short = sensitivity_summary(rows([0.0, 0.05, 0.5, 1.5]), 2.0, 0.5 * SECONDS_PER_YEAR,
                                0.01 * SECONDS_PER_YEAR)
    assert not short["at"]["1 month"]["measurable"]
    assert short["notes"] == [
        "VT at IFAR 0.0833333 yr needs 0.0833333 yr of background, have 0.01 yr",
        "VT at IFAR 1 yr needs 1 yr of background, have 0.01 yr"]
    # without the population's volume: found fractions only, and a note
    fractions = sensitivity_summary(rows([0.0, 0.5]), None, SECONDS_PER_YEAR, SECONDS_PER_YEAR)
    assert "vt_gpc3_years" not in fractions["at"]["1 month"]
    assert fractions["at"]["1 month"]["found_fraction"] == 0.5
    assert "names no population volume" in fractions["notes"][-1]
    assert sensitivity_summary([], 2.0, 1.0, 1.0)["note"].startswith("no injection")


def test_the_injection_list_reads_synth_json_and_an_injection_set(tmp_path) -> None:
    import json

    from offline_iaas.data.injection_file import read_injection_list
    from offline_iaas.errors import ConfigError

    synth = {"population": {"time_volume_gpc3": 13.3},
             "injections": [{"gps_time": 5.0, "network_snr": 9.0,
                             "parameters": {"chirp_mass": 25.0, "luminosity_distance": 800.0}},
                            {"gps_time": 7.0, "ifos": {"H1": {"snr": 3.0}, "L1": {"snr": 4.0}}}]}
    (tmp_path / "synth.json").write_text(json.dumps(synth))
    found, volume = read_injection_list(tmp_path / "synth.json")
    assert volume == 13.3
    assert (found[0].chirp_mass, found[0].distance_mpc) == (25.0, 800.0)
    assert found[1].network_snr == 5.0 and math.isnan(found[1].chirp_mass)
    assert found[1].row() == {"gps_time": 7.0, "network_snr": 5.0}  # unknown: left out
    (tmp_path / "list.json").write_text(json.dumps([{"gps_time": 1.0, "network_snr": 2.0}]))
    assert read_injection_list(tmp_path / "list.json")[1] is None  # no volume: no VT
    (tmp_path / "bad.json").write_text(json.dumps([{"time": 1.0}]))
    with pytest.raises(ConfigError, match="bbhnet.injections: .*bad.json: an injection without"):
        read_injection_list(tmp_path / "bad.json")


def short_curve_starts_lower(reach_years: float) -> bool:
    """With less background than a hundred hours, the curve starts at a hundredth of it."""
    from offline_iaas.physics import sensitivity_summary

    found = sensitivity_summary(rows([0.0, 1e-5]), 1.0, SECONDS_PER_YEAR,
                                reach_years * SECONDS_PER_YEAR)
    return found["curve"][0]["ifar_threshold_years"] == pytest.approx(reach_years / 100)
