"""Tests of the sensitive time-volume against IFAR (offline_iaas.science.bbhnet.sensitivity):
held-out injections only, the Jeffreys interval, null where the background cannot measure, the
population beside every VT, and the volume bound."""

from __future__ import annotations

import math

import numpy as np
import pytest

from offline_iaas.config import config_from_dict
from offline_iaas.physics import (
    SECONDS_PER_YEAR,
    Injection,
    found_missed_at_ifar,
    injection_counts,
    place_injections,
)
from offline_iaas.science.bbhnet.sensitivity import (
    SlidePlan,
    background_note,
    best_ifars,
    found_fraction_interval,
    ifar_thresholds,
    max_measurable_ifar_years,
    sensitive_distance_mpc,
    sensitive_volume,
    sensitivity_summary,
    slides_needed,
    volume_bound,
)
from offline_iaas.science.bbhnet.summary import SearchNumbers, Sensitivity
from offline_iaas.summary_physics import section as section_of

# four injections: one near no trigger, the others' best IFARs 0.5, 2 and 10 years
IFARS = [None, 0.5, 2.0, 10.0]


# ---- an independent Jeffreys interval (numpy quadrature, no scipy.stats) ---------------------


def beta_cdf(x: float, a: float, b: float) -> float:
    """CDF of Beta(a, b) at ``x`` for ``a = k + 1/2``: with ``x = t^2`` the integrand
    ``2 t^(2a - 1) (1 - t^2)^(b - 1)`` is smooth on ``[0, sqrt(x)]`` (Simpson's rule)."""
    t = np.linspace(0.0, math.sqrt(x), 20001)
    f = 2.0 * t ** (2 * a - 1) * (1.0 - t * t) ** (b - 1)
    h = t[1] - t[0]
    integral = h / 3 * (f[0] + f[-1] + 4 * f[1:-1:2].sum() + 2 * f[2:-1:2].sum())
    log_beta = math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)
    return integral / math.exp(log_beta)


def quantile(p: float, a: float, b: float) -> float:
    low, high = 0.0, 1.0
    for _ in range(60):
        middle = (low + high) / 2
        low, high = (middle, high) if beta_cdf(middle, a, b) < p else (low, middle)
    return (low + high) / 2


ONE_SIGMA = 0.6827
"""The interval's documented probability content (module docstring: one sigma), written here."""


def jeffreys(k: int, n: float, confidence: float = ONE_SIGMA) -> tuple[float, float]:
    """The equal-tailed quantiles of Beta(k + 1/2, n - k + 1/2) (``quantile``: quadrature), the
    lower end 0 at ``k = 0`` and the upper 1 at ``k = n``, as the module docstring defines it."""
    tail = (1 - confidence) / 2
    a, b = k + 0.5, n - k + 0.5
    return (0.0 if k == 0 else quantile(tail, a, b),
            1.0 if k >= n else quantile(1 - tail, a, b))


def radius_mpc(vt_gpc3_years: float, years: float) -> float:
    """``(3 VT / (4 pi T))^(1/3)``, Gpc to Mpc."""
    return 1000.0 * (3 * vt_gpc3_years / (4 * math.pi * years)) ** (1 / 3)


def close(pair: tuple[float, float], expected: tuple[float, float], tol: float = 1e-6) -> bool:
    """Both ends within ``tol`` (absolute); NaN is never close."""
    return all(abs(x - y) <= tol for x, y in zip(pair, expected, strict=True))


def wilson(k: int, n: int, z: float = 1.0) -> tuple[float, float]:
    """The closed-form Wilson score interval (another method, for the control)."""
    f = k / n
    centre = (f + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(f * (1 - f) / n + z * z / (4 * n * n))
    return centre - half, centre + half


def test_the_interval_is_not_empty_when_nothing_or_everything_is_found() -> None:
    tail = (1 - ONE_SIGMA) / 2  # the documented level, not the module's constant
    low, high = found_fraction_interval(0, 10)
    assert low == 0.0 and high > 0.0
    assert high == pytest.approx(quantile(1 - tail, 0.5, 10.5), abs=1e-6)
    low, high = found_fraction_interval(10, 10)
    assert high == 1.0 and low < 1.0
    assert low == pytest.approx(quantile(tail, 10.5, 0.5), abs=1e-6)
    low, high = found_fraction_interval(3, 10)
    assert (low, high) == (pytest.approx(quantile(tail, 3.5, 7.5), abs=1e-6),
                           pytest.approx(quantile(1 - tail, 3.5, 7.5), abs=1e-6))
    # control: the oracle tells Jeffreys from Wilson, and the interval is not the normal
    # approximation's, which is empty (0, 0) at none found
    assert abs(found_fraction_interval(0, 10)[1] - wilson(0, 10)[1]) > 1e-3
    assert found_fraction_interval(0, 10)[1] > 0.05


def test_the_interval_takes_fractional_trials() -> None:
    tail = (1 - ONE_SIGMA) / 2  # the documented level, not the module's constant
    low, high = found_fraction_interval(2, 7.5)
    assert (low, high) == (pytest.approx(quantile(tail, 2.5, 6.0), abs=1e-6),
                           pytest.approx(quantile(1 - tail, 2.5, 6.0), abs=1e-6))
    with pytest.raises(ValueError):
        found_fraction_interval(3, 2)


def test_vt_of_a_hand_computed_case() -> None:
    one, five = sensitive_volume(IFARS, volume_gpc3=2.0, held_out_years=0.5,
                                 thresholds_years=[1.0, 5.0])
    # IFAR >= 1 yr: 2 of 4 found; V T = 1 Gpc^3 yr
    assert (one.found, one.injections, one.trials) == (2, 4, 4.0)
    assert one.found_fraction == 0.5 and one.vt_gpc3_years == pytest.approx(0.5)
    # V T = 2 x 0.5 = 1 Gpc^3 yr times the found fraction's interval, computed here
    low, high = jeffreys(2, 4)
    assert 0.1 < low < 0.5 < high < 0.9
    assert close(one.vt_interval_gpc3_years, (low, high))
    # controls: another confidence, one more or one fewer found, NaN
    assert not close(one.vt_interval_gpc3_years, jeffreys(2, 4, 0.9))
    assert not close(one.vt_interval_gpc3_years, jeffreys(3, 4))
    assert not close(one.vt_interval_gpc3_years, jeffreys(1, 4))
    assert not close((math.nan, high), (low, high))
    # VT / T = 1 Gpc^3: a sphere of radius (3 / (4 pi))^(1/3) Gpc = 620.35 Mpc
    assert one.sensitive_distance_mpc == pytest.approx(620.35, abs=0.01)
    distances = (radius_mpc(low, 0.5), radius_mpc(high, 0.5))
    assert close(one.sensitive_distance_interval_mpc, distances)
    assert not close(one.sensitive_distance_interval_mpc,  # control: T = 1 yr, not 0.5
                     (radius_mpc(low, 1.0), radius_mpc(high, 1.0)))
    assert (five.found, five.vt_gpc3_years) == (1, pytest.approx(0.25))
    assert one.vt_gpc3_years != pytest.approx(0.25)  # control: the thresholds differ


def test_draws_below_the_snr_cut_count_as_missed() -> None:
    [point] = sensitive_volume(IFARS, 2.0, 0.5, [1.0], drawn_per_injected=2.5)
    assert point.trials == 10.0 and point.found_fraction == pytest.approx(0.2)
    assert point.vt_gpc3_years == pytest.approx(0.2)
    # Beta(2.5, 8.5): the 6 draws left out below the cut are trials, all missed
    assert close(point.found_fraction_interval, jeffreys(2, 10.0))
    assert not close(point.found_fraction_interval, jeffreys(2, 4))  # control: cut ignored
    assert not close(point.found_fraction_interval, jeffreys(3, 10.0))  # control: k + 1


def test_an_ifar_equal_to_the_threshold_is_found() -> None:
    [at] = sensitive_volume(IFARS, 1.0, 1.0, [2.0])
    [above] = sensitive_volume(IFARS, 1.0, 1.0, [2.0 * (1 + 1e-12)])
    assert (at.found, above.found) == (2, 1)


def test_a_threshold_beyond_the_background_is_null_with_a_reason_not_zero() -> None:
    livetime = 2.0 * SECONDS_PER_YEAR
    assert max_measurable_ifar_years(livetime) == pytest.approx(2.0)
    one, five = sensitive_volume(IFARS, 1.0, 1.0, [1.0, 5.0], livetime)
    assert one.measurable and one.vt_gpc3_years == pytest.approx(0.5)
    assert not five.measurable and five.background_needed_years == 5.0
    assert (five.found, five.found_fraction, five.vt_gpc3_years, five.vt_interval_gpc3_years,
            five.sensitive_distance_mpc) == (None, None, None, None, None)
    assert five.reason == "not measurable (needs 5 yr of background, have 2 yr)"
    assert all(p.measurable for p in sensitive_volume(IFARS, 1.0, 1.0, [1.0, 5.0]))
    assert background_note(5.0, livetime) == (
        "VT at IFAR 5 yr needs 5 yr of background, have 2 yr")


def test_without_a_population_volume_vt_is_null_and_the_fraction_stays() -> None:
    [point] = sensitive_volume(IFARS, None, 1.0, [1.0])
    assert point.found_fraction == 0.5 and point.vt_gpc3_years is None
    assert point.sensitive_distance_mpc is None and "no population volume" in point.reason


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
    with pytest.raises(ValueError, match="no held-out injections"):
        sensitive_volume([], 1.0, 1.0, [1.0])
    with pytest.raises(ValueError, match="NaN"):
        sensitive_volume([1.0, float("nan")], 1.0, 1.0, [1.0])
    with pytest.raises(ValueError, match="positive"):
        sensitive_volume([1.0], 0.0, 1.0, [1.0])


def test_sensitive_distance_of_a_known_volume() -> None:
    assert sensitive_distance_mpc(4.0 / 3.0 * math.pi) == pytest.approx(1000.0)
    assert sensitive_distance_mpc(4.0 / 3.0 * math.pi * 8) == pytest.approx(2000.0)


# ---- held-out injections ---------------------------------------------------------------------


def test_injections_are_placed_outside_in_training_or_held_out() -> None:
    analysed = [(100.0, 200.0), (300.0, 400.0)]
    places = place_injections([99.9, 100.0, 149.9, 150.0, 200.0, 350.0], analysed,
                              [(100.0, 150.0)])
    assert places == ["outside_analysed", "in_training", "in_training", "held_out",
                      "outside_analysed", "held_out"]
    assert injection_counts(places) == {"listed": 6, "outside_analysed": 2, "in_training": 2,
                                        "held_out": 2}
    assert place_injections([120.0], analysed) == ["held_out"]
    # several spans left out (e2e: DeepClean's too): in any of them is in training
    assert place_injections([120.0, 320.0, 360.0], analysed, [(100.0, 130.0), (300.0, 350.0)]
                            ) == ["in_training", "in_training", "held_out"]


@pytest.fixture
def config(tmp_path):
    raw = {"data": {"frames": "f", "channels": ["H1:X", "L1:X"], "start": 0, "duration": 1000,
                    "sample_rate": 16},
           "model": {"repository": "r", "mode": "bbhnet", "inference_rate": 4},
           "search": {"found_seconds": 1.0, "ifar_threshold_years": 0.5}}
    return config_from_dict(raw, tmp_path / "c.toml")


def vt_held_out_by_hand(gps: list[float], ifars: list[float], training: tuple[float, float],
                        volume: float, years: float, threshold: float) -> float:
    kept = [i for t, i in zip(gps, ifars, strict=True) if not training[0] <= t < training[1]]
    return volume * years * sum(i >= threshold for i in kept) / len(kept)


def test_injections_in_the_training_span_do_not_count_in_vt(config) -> None:
    # five injections, each with a trigger on it; the two in the training span are loud
    gps = [100.0, 200.0, 500.0, 600.0, 700.0]
    ifars = [9.0, 9.0, 0.1, 9.0, 0.1]
    injections = [Injection(t, 10.0) for t in gps]
    training = (50.0, 250.0)
    counted = found_missed_at_ifar(np.array(gps), np.array(ifars), np.ones(5), injections,
                                   config.search, [(0.0, 1000.0)], [training])
    assert (counted["found"], counted["missed"]) == (1, 2)  # held out: 500, 600, 700
    assert counted["injection_counts"] == {"listed": 5, "outside_analysed": 0,
                                           "in_training": 2, "held_out": 3}
    assert [r["in_training"] for r in counted["injections"]] == [True, True, False, False, False]
    held_out = [r for r in counted["injections"] if not r["in_training"]]
    population = {"time_volume_gpc3": 4.0}
    found = sensitivity_summary(held_out, population, 0.5 * SECONDS_PER_YEAR,
                                10 * SECONDS_PER_YEAR, counted["injection_counts"])
    [point] = [p for p in found["curve"] if p["ifar_threshold_years"] == 1.0]
    expected = vt_held_out_by_hand(gps, ifars, training, 4.0, 0.5, 1.0)
    assert point["vt_gpc3_years"] == pytest.approx(expected)  # 4 x 0.5 x 1/3
    assert found["counts"]["in_training"] == 2 and found["population"] == population
    # control: counting the training span's injections gives another VT
    everything = sensitivity_summary(counted["injections"], population, 0.5 * SECONDS_PER_YEAR,
                                     10 * SECONDS_PER_YEAR)
    [wrong] = [p for p in everything["curve"] if p["ifar_threshold_years"] == 1.0]
    assert wrong["vt_gpc3_years"] != pytest.approx(expected)


def rows(ifars: list[float]) -> list[dict]:
    return [{"gps_time": 100.0 + i, "network_snr": 10.0, "ifar_years": v}
            for i, v in enumerate(ifars)]


def test_the_summary_states_vt_at_1_month_and_1_year_or_why_not() -> None:
    population = {"time_volume_gpc3": 2.0, "redshift_max": 3.0}
    # 0.5 yr analysed, 2 yr of background: 1 month measurable, 1 year too
    found = sensitivity_summary(rows([0.0, 0.05, 0.5, 1.5]), population,
                                0.5 * SECONDS_PER_YEAR, 2.0 * SECONDS_PER_YEAR)
    month, year = found["at"]["1 month"], found["at"]["1 year"]
    assert (month["found"], year["found"]) == (2, 1)  # IFAR >= 1/12 yr: 0.5 and 1.5
    assert month["vt_gpc3_years"] == pytest.approx(2.0 * 0.5 * 2 / 4)
    assert month["measurable"] and year["measurable"] and found["notes"] == []
    assert found["population"] == population
    assert found["interval"] == {"method": "jeffreys", "confidence": ONE_SIGMA}
    assert found["at_reach"]["ifar_threshold_years"] == pytest.approx(2.0)
    curve = [p["ifar_threshold_years"] for p in found["curve"]]
    assert curve == sorted(curve) and curve[0] == pytest.approx(1 / (365.25 * 24))
    # a short background: neither is measurable, and each is null with the reason
    short = sensitivity_summary(rows([0.0, 0.05, 0.5, 1.5]), population,
                                0.5 * SECONDS_PER_YEAR, 0.01 * SECONDS_PER_YEAR)
    month = short["at"]["1 month"]
    assert not month["measurable"] and month["vt_gpc3_years"] is None
    assert month["reason"] == "not measurable (needs 0.0833 yr of background, have 0.01 yr)"
    assert short["notes"] == [
        "VT at IFAR 0.0833333 yr needs 0.0833333 yr of background, have 0.01 yr",
        "VT at IFAR 1 yr needs 1 yr of background, have 0.01 yr"]
    assert short["curve"][0]["ifar_threshold_years"] == pytest.approx(0.01 / 100)
    # no population: found fractions only, VT null with the reason
    fractions = sensitivity_summary(rows([0.0, 0.5]), None, SECONDS_PER_YEAR, SECONDS_PER_YEAR)
    assert fractions["at"]["1 month"]["vt_gpc3_years"] is None
    assert fractions["at"]["1 month"]["found_fraction"] == 0.5
    assert "describes no population" in fractions["vt_null_reason"]
    assert sensitivity_summary([], population, 1.0, 1.0)["note"].startswith("no held-out")


def test_the_lines_say_not_measurable_and_never_zero_plus_minus_zero() -> None:
    from offline_iaas.science.bbhnet.injections import sensitivity_lines

    short = sensitivity_summary(rows([0.0, 0.05, 0.5, 1.5]), {"time_volume_gpc3": 2.0},
                                0.5 * SECONDS_PER_YEAR, 0.01 * SECONDS_PER_YEAR)
    lines = sensitivity_lines(section_of(Sensitivity, short))
    assert "BBHnet: at IFAR >= 1 year: not measurable (needs 1 yr of background, have 0.01 " \
           "yr)" in lines
    assert not any("0 +- 0" in line or "+-" in line for line in lines)
    reach = [line for line in lines if "the most the background measures" in line]
    assert reach and "VT " in reach[0] and "[" in reach[0]
    assert lines[0] == reach[0]  # the headline: the threshold the background measures
    assert any(line.startswith("BBHnet: intervals: jeffreys at 68.27 %") for line in lines)


def test_found_injections_near_the_largest_distance_flag_the_volume_bound() -> None:
    population = {"luminosity_distance_max_mpc": 1000.0, "redshift_max": 0.2}
    found_far = [{"distance_mpc": 950.0, "found": True}, {"distance_mpc": 100.0, "found": True}]
    bound = volume_bound(found_far, population)
    assert (bound["near_edge"], bound["found_near_edge"]) == (1, 1)
    assert bound["distance_from_mpc"] == pytest.approx(900.0)
    # controls: found just inside 90 % is not flagged; missed at the edge is not either
    assert volume_bound([{"distance_mpc": 899.0, "found": True}], population)[
        "found_near_edge"] == 0
    assert volume_bound([{"distance_mpc": 990.0, "found": False}], population)[
        "found_near_edge"] == 0
    assert volume_bound(found_far, None) is None
    assert volume_bound([{"found": True}], population) is None  # no distances known


def test_the_report_captions_the_sensitivity_figure_with_the_population() -> None:
    from offline_iaas.config_sections import SynthConfig
    from offline_iaas.report import page
    from offline_iaas.science.bbhnet.report import _sensitivity
    from offline_iaas.search.population import population_spec

    population = {**population_spec(SynthConfig()).attrs(), "network_snr_min": 6.0,
                  "drawn": 40, "injected": 8}
    counts = {"listed": 8, "held_out": 4, "in_training": 3, "outside_analysed": 1}
    summary = sensitivity_summary(
        [{**r, "found": r["ifar_years"] > 0, "in_training": False}
         for r in rows([0.0, 0.05, 0.5, 1.5])],
        population, 0.5 * SECONDS_PER_YEAR, 0.01 * SECONDS_PER_YEAR, counts)
    section = page.Section("search", "Search")
    _sensitivity(section, section_of(SearchNumbers, {
        "triggers": 0, "cluster_seconds": 1.0, "sensitivity": summary,
        "ifar_threshold_years": 0.001}))
    html = "".join(section.parts)
    caption = html.split("<figcaption>")[1].split("</figcaption>")[0]
    assert "Population: IMRPhenomD from 20 Hz; source-frame masses 20-50 Msun" in caption
    assert "z &lt;= 3 (d_L &lt;= 26" in caption and "Planck18" in caption
    assert "8 injected of 40 drawn (optimal network SNR &gt;= 6" in caption
    assert "3 injections in BBHnet&#x27;s training span and 1 outside the analysed span" in caption
    assert "jeffreys interval at 68.27 %" in caption
    assert "not measurable (needs 1 yr of background, have 0.01 yr)" in html
    assert "+-" not in html


# ---- VT's T: the held-out time -----------------------------------------------------------------


def test_vt_is_the_found_fraction_times_the_volume_times_the_held_out_time(tmp_path) -> None:
    """Through the merge (``injection_results``) on a case whose numbers are known by
    construction: 900 s analysed in two spans, BBHnet trained on 300 s of the first, so 600 s
    held out; six held-out injections, three with a trigger of IFAR >= 1 yr near them; the
    population's volume 4 Gpc^3 with two draws per injection (12 trials)."""
    from offline_iaas.science.bbhnet.injections import injection_results, sensitivity_lines
    from offline_iaas.search.injection_list import InjectionList

    raw = {"data": {"frames": "f", "channels": ["H1:X", "L1:X"], "start": 0, "duration": 1000,
                    "sample_rate": 16},
           "model": {"repository": "r", "mode": "bbhnet", "inference_rate": 4},
           "search": {"found_seconds": 1.0, "ifar_threshold_years": 1.0, "slides": 4,
                      "slide_seconds": 1.0}}
    config = config_from_dict(raw, tmp_path / "c.toml")
    analysed, training = [(0.0, 600.0), (700.0, 1000.0)], {"bbhnet": (100.0, 400.0)}
    held_out_gps = [50.0, 450.0, 550.0, 750.0, 850.0, 950.0]
    held_out_ifars = [2.0, 0.01, 5.0, None, 3.0, 0.2]  # None: no trigger near it
    training_gps, outside_gps = [150.0, 250.0], [650.0]
    population = {"time_volume_gpc3": 4.0, "drawn": 18, "injected": 9}
    listed = InjectionList(tmp_path / "list.json", tuple(
        Injection(t, 10.0) for t in held_out_gps + training_gps + outside_gps), population)
    triggers = [(t, i) for t, i in zip(held_out_gps, held_out_ifars, strict=True)
                if i is not None] + [(t, 9.0) for t in training_gps + outside_gps]
    times = np.array([t for t, _ in triggers])
    ifars = np.array([i for _, i in triggers])
    result = injection_results(config.search, listed, times, np.ones(len(times)), ifars, analysed,
                               training, 10 * SECONDS_PER_YEAR)
    assert (result["analysed_seconds"], result["held_out_seconds"]) == (900.0, 600.0)
    at_one_year = result["sensitivity"]["at"]["1 year"]
    assert (at_one_year["found"], at_one_year["trials"]) == (3, 12.0)
    expected = 4.0 * (600.0 / (365.25 * 86400)) * 3 / 12  # V x T_held_out x f
    assert at_one_year["vt_gpc3_years"] == pytest.approx(expected, rel=1e-12)
    # negative control: T with the training span in it (the whole 900 s) is another VT
    with_training = 4.0 * (900.0 / (365.25 * 86400)) * 3 / 12
    assert at_one_year["vt_gpc3_years"] != pytest.approx(with_training, rel=1e-3)
    assert "BBHnet: VT's T: T = 600 s held out (900 s analysed less BBHnet's training " \
           "span)" in sensitivity_lines(section_of(Sensitivity, result["sensitivity"]))


# ---- FAR at the loudest triggers and the slides a threshold needs ------------------------------


def test_the_reach_threshold_finds_only_injections_louder_than_the_whole_background(config
                                                                                     ) -> None:
    """FAR = (n + 1) / L: at the background's reach (IFAR L) an injection whose trigger beats
    every background trigger is found and one with a single background trigger at least as
    loud is not (IFAR L / 2)."""
    from offline_iaas.physics import false_alarm_rates

    livetime = 0.5 * SECONDS_PER_YEAR
    background = np.array([1.0, 2.0, 3.0])
    _, ifars = false_alarm_rates(np.array([3.5, 3.0]), background, livetime)
    np.testing.assert_allclose(ifars, [0.5, 0.25])  # no louder: L; one at least as loud: L / 2
    rows_ = [{"gps_time": 100.0, "network_snr": 10.0, "ifar_years": ifars[0]},
             {"gps_time": 200.0, "network_snr": 10.0, "ifar_years": ifars[1]}]
    summary = sensitivity_summary(rows_, {"time_volume_gpc3": 1.0}, SECONDS_PER_YEAR, livetime)
    assert summary["at_reach"]["ifar_threshold_years"] == pytest.approx(0.5)
    assert summary["at_reach"]["found"] == 1
    # the reach is met exactly by a trigger louder than all, for any livetime (1 / (1 / L)
    # falls one ulp short of L for the first two)
    for seconds in (6.18, 13.95, 9526.37):
        _, [loudest] = false_alarm_rates(np.array([9.0]), background, seconds)
        assert loudest >= max_measurable_ifar_years(seconds)
    # control: just beyond the reach nothing is measurable, not "0 found"
    [beyond] = sensitive_volume([ifars[0], ifars[1]], 1.0, 1.0, [0.5 * (1 + 1e-9)], livetime)
    assert not beyond.measurable and beyond.found is None


def test_slides_needed_for_a_month_and_a_year() -> None:
    """Two 4,000 s spans, slides of 1 s: slide k gives 2 (4,000 - k) s before cuts; a
    campaign of 100 slides that kept 400,000 s (of 789,900 s uncut) keeps the same share of
    every slide."""
    plan = SlidePlan(100, 1.0, (4_000.0, 4_000.0))
    uncut_100 = 2 * (100 * 4_000 - 100 * 101 / 2)
    assert uncut_100 == 789_900.0
    kept = 400_000.0 / uncut_100
    month = slides_needed(1 / 12, 400_000.0, plan)
    # the fewest n with kept x 2 (4,000 n - n (n + 1) / 2) >= 1 month, by brute force
    target = SECONDS_PER_YEAR / 12
    fewest = next(n for n in range(1, 4_000)
                  if kept * 2 * (4_000 * n - n * (n + 1) / 2) >= target)
    assert month["slides"] == fewest and month["have_slides"] == 100
    assert month["most_slides"] == 3_999
    # every slide the spans form: 2 x 3,999 x 4,000 / 2 s uncut, short of a year
    year = slides_needed(1.0, 400_000.0, plan)
    assert year["slides"] is None
    assert year["most_years"] == pytest.approx(kept * 3_999 * 4_000 / SECONDS_PER_YEAR)
    # control: stretches ten times longer reach a year
    assert slides_needed(1.0, 400_000.0, SlidePlan(100, 1.0, (40_000.0,) * 2))["slides"]


def test_the_summary_says_how_many_slides_1_month_and_1_year_need() -> None:
    from offline_iaas.science.bbhnet.injections import sensitivity_lines

    plan = SlidePlan(10, 1.0, (2000.0,))
    livetime = float(sum(2000 - k for k in range(1, 11)))  # no cuts
    summary = sensitivity_summary(rows([0.0, 1e-6]), {"time_volume_gpc3": 1.0}, 2000.0,
                                  livetime, slides=plan)
    month, year = summary["slides_needed"]["1 month"], summary["slides_needed"]["1 year"]
    assert month["slides"] is None and year["slides"] is None  # 2000 s stretches: ~0.063 yr
    assert month["most_years"] == pytest.approx(1999 * 2000 / 2 / SECONDS_PER_YEAR)
    lines = sensitivity_lines(section_of(Sensitivity, summary))
    assert ("BBHnet: background: IFAR >= 0.0833 yr is out of reach of slides of 1 s of these "
            "stretches: all 1999 they form give about 0.0633 yr (have 10: 0.000632 yr); "
            "analyse longer stretches") in lines
    longer = sensitivity_summary(rows([0.0, 1e-6]), {"time_volume_gpc3": 1.0}, 2000.0,
                                 livetime, slides=SlidePlan(10, 1.0, (20_000.0,)))
    assert longer["slides_needed"]["1 month"]["slides"] is not None
    assert any(line.startswith("BBHnet: background: IFAR >= 0.0833 yr needs about ")
               for line in sensitivity_lines(section_of(Sensitivity, longer)))


def test_the_found_line_says_a_threshold_beyond_the_background_is_not_measurable() -> None:
    from offline_iaas.science.bbhnet.injections import injection_lines

    bbhnet = {"triggers": 0, "cluster_seconds": 1.0, "found": 0, "missed": 2,
              "ifar_threshold_years": 1.0, "background_livetime_seconds": 0.01 * SECONDS_PER_YEAR,
              "injections": [{"gps_time": 1262304000.0, "network_snr": 10.0, "statistic": 0.0,
                              "found": False, "in_training": False}] * 2}
    [line] = injection_lines(section_of(SearchNumbers, bbhnet))
    assert line.startswith("BBHnet: 0 found, 2 missed of 2 held-out injections at IFAR >= 1 yr "
                           "(not measurable: the background's 0.01 yr is the largest IFAR it "
                           "gives, so none can be found at this threshold)")
    # control: a threshold within the background's reach is a plain count
    [line] = injection_lines(section_of(SearchNumbers, {**bbhnet, "ifar_threshold_years": 0.005}))
    assert "not measurable" not in line
