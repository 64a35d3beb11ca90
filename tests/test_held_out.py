"""The merge's physics numbers leave the networks' training data out (pure logic)."""

from __future__ import annotations

import numpy as np
import pytest

from offline_iaas.config import config_from_dict
from offline_iaas.physics import (
    Injection,
    found_missed,
    held_out_samples,
    outside_cuts,
    samples_within,
    subtract_spans,
)

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
    held_out = found_missed(times, values, injections, config.search, analysed, (0.0, 30.0))
    assert held_out["threshold"] == 3.0 and held_out["found"] == 1
    assert held_out["background_seconds"] == pytest.approx(66.0)
    assert held_out["training_gps"] == [0.0, 30.0]
