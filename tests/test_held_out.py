"""The merge's physics numbers leave the networks' training data out (pure logic)."""

from __future__ import annotations

import json

import h5py
import numpy as np
import pytest

from offline_iaas.config import config_from_dict
from offline_iaas.merge.postprocess import ShardProducts
from offline_iaas.mode_packages import SummaryRequest
from offline_iaas.physics import (
    Injection,
    found_missed,
    held_out_samples,
    outside_cuts,
    place_injections,
    samples_within,
    subtract_spans,
)
from offline_iaas.science.bbhnet.injections import held_out_seconds, injection_lines
from offline_iaas.science.bbhnet.products import (
    BACKGROUND_COLUMNS,
    TRIGGER_COLUMNS,
    search_summary,
)
from offline_iaas.science.bbhnet.summary import SearchNumbers
from offline_iaas.search.held_out import search_training_spans
from offline_iaas.stretches import make_stretches, statistic_spans
from offline_iaas.summary_physics import section

RATE = 16.0


@pytest.mark.parametrize("span", [(1001.0, 1002.5), (1001.03, 1002.47), (990.0, 1001.0),
                                  (1099.0, 1200.0), (1200.0, 1300.0), (1001.5, 1001.5)])
def test_samples_within_a_span_are_those_whose_times_lie_in_it(span) -> None:
    times = 1000.0 + np.arange(1600) / RATE  # exact: RATE is a power of two
    inside = np.flatnonzero((times >= span[0]) & (times < span[1]))
    expected = (int(inside[0]), int(inside[-1]) + 1) if len(inside) else None
    first, stop = samples_within(1000.0, 1600, RATE, *span)
    if expected is None:
        assert first == stop
    else:
        assert (first, stop) == expected
    # an off-grid end keeps the sample before it: the span ending a sample earlier drops it
    if span == (1001.03, 1002.47):
        assert samples_within(1000.0, 1600, RATE, 1001.03, 1002.47 - 1 / RATE)[1] == stop - 1


def test_held_out_run_is_the_longest_piece_after_the_training_span() -> None:
    # series of 100 s from GPS 1000, trained on 1000-1030: held out 1030-1100
    assert held_out_samples(1000.0, 1600, RATE, [(1000.0, 1030.0)], 10_000) == (480, 1600)


def test_held_out_run_picks_the_longer_side_and_is_capped() -> None:
    # trained in the middle, 1010-1070: the 30 s after it beat the 10 s before it
    assert held_out_samples(1000.0, 1600, RATE, [(1010.0, 1070.0)], 10_000) == (1120, 1600)
    assert held_out_samples(1000.0, 1600, RATE, [(1010.0, 1070.0)], 100) == (1120, 1220)


def test_no_training_span_keeps_everything_and_a_covered_series_keeps_nothing() -> None:
    assert held_out_samples(1000.0, 1600, RATE, [], 10_000) == (0, 1600)
    assert held_out_samples(1000.0, 1600, RATE, [(900.0, 1200.0)], 10_000) == (0, 0)


def test_subtract_spans_cuts_every_overlap() -> None:
    assert subtract_spans([(0.0, 10.0), (20.0, 30.0)], [(5.0, 22.0), (28.0, 40.0)]) == [
        (0.0, 5.0), (22.0, 28.0)]


def test_spans_and_cuts_are_half_open_at_their_ends() -> None:
    # overlapping cuts act as their union; touching spans stay two pieces
    assert subtract_spans([(0.0, 10.0), (10.0, 20.0)], [(2.0, 5.0), (4.0, 6.0)]) == [
        (0.0, 2.0), (6.0, 10.0), (10.0, 20.0)]
    assert subtract_spans([(0.0, 10.0)], [(10.0, 12.0), (-2.0, 0.0)]) == [(0.0, 10.0)]
    times = np.array([1.999, 2.0, 5.999, 6.0, 9.0, np.nan])
    # [2, 6) cut (two overlapping cuts): its start is in it, its end is not; NaN is in none
    assert outside_cuts(times, [(2.0, 5.0), (4.0, 6.0)]).tolist() == [
        True, False, False, True, True, True]
    assert outside_cuts(times, []).all()


@pytest.fixture
def config(tmp_path):
    raw = {
        "data": {"frames": "f", "channels": ["H1:X", "L1:X"], "start": 0, "duration": 100,
                 "sample_rate": 16},
        "model": {"repository": "r", "mode": "bbhnet", "inference_rate": 4},
        "search": {"exclusion_seconds": 2.0, "found_seconds": 1.0},
    }
    return config_from_dict(raw, tmp_path / "c.toml")


def test_background_excludes_the_training_span(config) -> None:
    times = np.array([10.0, 40.0, 70.0, 90.0])
    values = np.array([9.0, 2.0, 5.0, 3.0], np.float32)
    injections = [Injection(70.0, 20.0)]
    analysed = [(0.0, 100.0)]
    everything = found_missed(times, values, injections, config.search, analysed)
    assert everything["threshold"] == 9.0 and everything["found"] == 0  # 9 is in training
    assert everything["background_seconds"] == pytest.approx(96.0)
    held_out = found_missed(times, values, injections, config.search, analysed, [(0.0, 30.0)])
    assert held_out["threshold"] == 3.0 and held_out["found"] == 1
    assert held_out["background_seconds"] == pytest.approx(66.0)


def test_a_stretch_s_last_value_is_background_and_a_cut_s_start_is_not(config) -> None:
    """A value is stamped at its stride's end: an analysed span ``(start, end]`` holds its
    stamps, the last at ``end``. The cuts around an injection are ``[t - e, t + e)``, as for the
    time slides' background (``outside_cuts``)."""
    analysed = [(10.0, 20.0), (30.0, 40.0)]
    injections = [Injection(35.0, 20.0)]  # cut [33, 37)
    times = np.array([12.0, 20.0, 33.0, 35.0, 37.0])
    values = np.array([1.0, 8.0, 9.0, 7.0, 6.0], np.float32)
    result = found_missed(times, values, injections, config.search, analysed)
    assert result["threshold"] == 8.0 and result["found"] == 0  # the first stretch's last value
    # control: a value at the first span's start is no stamp of it (its stride lies before it)
    moved = np.array([12.0, 10.0, 33.0, 35.0, 37.0])
    result = found_missed(moved, values, injections, config.search, analysed)
    assert result["threshold"] == 6.0 and result["found"] == 1


# ---- which training spans the search leaves out (search/held_out.py) ------------------------

TRAINING = {"deepclean-H1": [0.0, 100.0], "deepclean-L1": [0.0, 120.0],
            "bbhnet": [500.0, 600.0], "deepclean-V1": [700.0, 800.0]}
"""e2e-like spans: DeepClean's (per interferometer) lie outside BBHnet's; V1 is served by no
campaign here (a weights directory trained for more detectors)."""


def search_config(tmp_path, mode: str, slides: int = 0):
    injections = tmp_path / "injections.json"
    injections.write_text(json.dumps([{"gps_time": 50.0, "network_snr": 10.0},
                                      {"gps_time": 300.0, "network_snr": 10.0}]))
    raw = {"data": {"frames": "f", "channels": ["H1:X", "L1:X"], "start": 0, "duration": 1000,
                    "sample_rate": 256},
           "model": {"repository": "r", "mode": mode, "inference_rate": 4},
           "search": {"injections": str(injections), "slides": slides}}
    if mode == "e2e":
        raw["data"]["witnesses"] = ["H1:W", "L1:W"]
    return config_from_dict(raw, tmp_path / "c.toml")


def test_e2e_leaves_out_deepcleans_training_spans_beside_bbhnets(tmp_path) -> None:
    config = search_config(tmp_path, "e2e")
    e2e = search_training_spans(config.mode, config.ifos, TRAINING)
    assert e2e == {"deepclean-H1": (0.0, 100.0), "deepclean-L1": (0.0, 120.0),
                   "bbhnet": (500.0, 600.0)}  # chain order; V1's is not served
    analysed = [(0.0, 1000.0)]
    assert held_out_seconds(analysed, list(e2e.values())) == 780.0  # less the union
    assert place_injections([50.0, 300.0, 550.0], analysed, list(e2e.values())) == [
        "in_training", "held_out", "in_training"]
    # control: BBHnet's span alone keeps DeepClean's over-fit time in the held-out time
    alone = [TRAINING["bbhnet"]]
    assert held_out_seconds(analysed, alone) == 900.0
    assert place_injections([50.0], analysed, alone) == ["held_out"]


def test_bbhnet_mode_leaves_out_bbhnets_training_span_only(tmp_path) -> None:
    config = search_config(tmp_path, "bbhnet")
    spans = search_training_spans(config.mode, config.ifos, TRAINING)
    assert spans == {"bbhnet": (500.0, 600.0)}
    assert search_training_spans(config.mode, config.ifos, {}) == {}  # none recorded


def merged_search(config, training: dict[str, list[float]]) -> dict:
    """The merge's ``bbhnet`` summary (``products.search_summary``) of one stretch with a loud
    trigger in DeepClean's training span and a quiet one on the held-out injection."""
    triggers = np.zeros(3, TRIGGER_COLUMNS)
    triggers["time"], triggers["statistic"] = [60.0, 300.0, 900.0], [9.0, 2.0, 1.0]
    background = np.zeros(3, BACKGROUND_COLUMNS)
    background["shift"] = 1.0
    background["time"], background["statistic"] = [60.0, 400.0, 900.0], [9.0, 1.5, 0.5]
    stretches = make_stretches(config.geometry, [(0.0, 1000.0)])
    with h5py.File("summary.h5", "w", driver="core", backing_store=False) as file:
        request = SummaryRequest(file, config, stretches, training, [ShardProducts(
            arrays={"triggers": triggers, "background": background})], None)
        return search_summary(request)["bbhnet"]


def test_the_merge_of_an_e2e_search_holds_out_time_outside_every_training_span(tmp_path
                                                                              ) -> None:
    config = search_config(tmp_path, "e2e", slides=2)
    [(start, end)] = statistic_spans(config.geometry,
                                     make_stretches(config.geometry, [(0.0, 1000.0)]))
    assert start < 50.0 and end > 600.0  # after the chain's warm-up: both spans analysed
    both = merged_search(config, TRAINING)
    assert both["analysed_seconds"] == pytest.approx(end - start)
    assert both["held_out_seconds"] == pytest.approx(end - 120.0 - 100.0)  # less the union
    assert both["injection_counts"]["in_training"] == 1  # the one at 50 s
    assert both["training_spans_gps"] == {"deepclean-H1": [0.0, 100.0],
                                          "deepclean-L1": [0.0, 120.0], "bbhnet": [500.0, 600.0]}
    assert both["training_gps"] == [500.0, 600.0]
    # control: BBHnet's span alone (the defect) counts DeepClean's time and its injection
    alone = merged_search(config, {"bbhnet": TRAINING["bbhnet"]})
    assert alone["held_out_seconds"] == pytest.approx(end - start - 100.0)
    assert alone["injection_counts"]["in_training"] == 0
    assert alone["background_livetime_seconds"] > both["background_livetime_seconds"]
    lines = injection_lines(section(SearchNumbers, {"triggers": 3, "cluster_seconds": 1.0,
                                                    **both}))
    assert ("1 in the training spans of deepclean-H1 (GPS 0-100), deepclean-L1 (GPS 0-120) "
            "and bbhnet (GPS 500-600)") in lines[1]
    lines = injection_lines(section(SearchNumbers, {"triggers": 3, "cluster_seconds": 1.0,
                                                    **alone}))
    assert "0 in BBHnet's training span (GPS 500-600)" in lines[1]
