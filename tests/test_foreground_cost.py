"""What the foreground (``search.inject``) streams, in windows: the arithmetic
``plan`` and the bench use (``stretches.foreground_windows_per_second``) against counting the
pieces ``stretches.foreground_pieces`` actually makes for synthetic injection times."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from offline_iaas.config import CampaignConfig, load_config
from offline_iaas.sizing.plan import plan_from_bench
from offline_iaas.stretches import (
    Stretch,
    foreground_pieces,
    foreground_windows,
    foreground_windows_per_second,
)

SPAN_SECONDS = 400_000.0
"""Long enough for ~13,000 injections at one per 30 s: the count's scatter is ~0.1 %."""
TOLERANCE = 0.02
"""The expectation leaves out the stretch's ends and the found window's discreteness (whole
windows; touching windows merge): measured within 0.9 % at 1/30 to 2 injections per second."""


@pytest.fixture
def config(small_config_file: Path) -> CampaignConfig:
    return load_config(small_config_file, ['model.mode="bbhnet"', "search.slides=20"])


def counted_windows_per_second(config: CampaignConfig, times: np.ndarray) -> float:
    """Windows of the pieces ``foreground_pieces`` makes, counted piece by piece."""
    stretch = Stretch(0, config.data.start, config.data.start + SPAN_SECONDS)
    pieces = foreground_pieces(config.geometry, stretch, list(times), config.search.found_seconds)
    return sum(p.output_stop - p.first_window for p in pieces) / SPAN_SECONDS


def poisson_times(config: CampaignConfig, rate: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.sort(rng.uniform(config.data.start, config.data.start + SPAN_SECONDS,
                               rng.poisson(rate * SPAN_SECONDS)))


@pytest.mark.parametrize("rate", [1 / 30, 1 / 5, 2.0])
def test_the_foreground_s_expected_windows_match_the_pieces_it_streams(config, rate) -> None:
    counted = counted_windows_per_second(config, poisson_times(config, rate, 7))
    expected = foreground_windows_per_second(config.geometry, rate, config.search.found_seconds)
    assert abs(expected / counted - 1) <= TOLERANCE
    # the negative controls: no merging of nearby injections, or a window more of warm-up
    # per injection, miss the count
    alone = (2 * config.search.found_seconds / config.stride_seconds
             + config.stretch_warmup_windows)
    if rate >= 1 / 5:
        assert abs(rate * alone / counted - 1) > 5 * TOLERANCE
    else:
        assert abs(rate * (alone + 1) / counted - 1) > 2 * TOLERANCE


def test_evenly_spaced_injections_each_stream_their_warm_up_and_found_windows(config) -> None:
    interval = 30.0
    offset = 0.37 * config.stride_seconds  # off the window grid
    times = config.data.start + offset + np.arange(interval, SPAN_SECONDS - interval, interval)
    counted = counted_windows_per_second(config, times)
    expected = foreground_windows_per_second(config.geometry, 1 / interval,
                                             config.search.found_seconds, evenly_spaced=True)
    assert abs(expected / counted - 1) <= 0.001


def test_the_foreground_s_windows_are_counted_by_hand_over_two_stretches(config) -> None:
    """Three injections 100 s apart in each of two stretches, off the window grid: each
    streams its stretch's warm-up and the windows within the found reach on both sides,
    counted by hand; an injection in neither stretch adds nothing, and two within the reach
    of each other share their windows (the controls)."""
    start, reach = config.data.start, config.search.found_seconds
    per_injection = round(2 * reach / config.stride_seconds) + config.stretch_warmup_windows
    stretches = [Stretch(0, start, start + 400.0), Stretch(1, start + 400.0, start + 800.0)]
    times = [start + offset + 100.0 * k + 0.37 * config.stride_seconds
             for offset in (0.0, 400.0) for k in (1, 2, 3)]
    assert foreground_windows(config.geometry, stretches, times, reach) == 6 * per_injection
    outside = times + [start + 1000.0]
    assert foreground_windows(config.geometry, stretches, outside, reach) == 6 * per_injection
    near = times + [times[0] + config.stride_seconds]
    merged = foreground_windows(config.geometry, stretches, near, reach)
    assert merged == 6 * per_injection + 1


def test_a_foreground_piece_streams_no_slide_history(config) -> None:
    """The foreground keeps the zero lag only: its warm-up is the stretch's, however many
    slides the background forms (here 20 of 1 s: 80 windows of slide history)."""
    assert config.slide_history_windows == 80
    stretch = Stretch(0, config.data.start, config.data.start + 400.0)
    [piece] = foreground_pieces(config.geometry, stretch, [config.data.start + 200.1],
                                config.search.found_seconds)
    assert piece.output_start - piece.first_window == config.stretch_warmup_windows
    assert piece.windows == config.stretch_warmup_windows + 8  # +-1 s at 4 Hz, off the grid


def test_plan_counts_the_foreground_s_windows_from_the_set_s_times(
        small_config_file: Path, tmp_path: Path) -> None:
    """With ``search.inject`` a server's data seconds per second are divided by 1 + the
    foreground's windows over the background's, counted here by hand: 120 injections one per
    30 s, off the window grid, each 8 found windows (+-1 s at 4 Hz) after 3 of warm-up."""
    from tests.test_bench import _results

    start = 1262304000
    listed = tmp_path / "injections.json"
    listed.write_text(json.dumps([{"gps_time": start + 15.1 + 30 * j, "network_snr": 10.0}
                                  for j in range(120)]
                                 + [{"gps_time": start + 4000.1, "network_snr": 10.0}]))
    base = ['model.mode="bbhnet"', "data.duration=3600", f'search.injections="{listed}"']
    results = _results(tmp_path / "results.json", {(128, 2): 50.0}, "bbhnet")
    plain = plan_from_bench(load_config(small_config_file, base), 2.0, results)
    injected = plan_from_bench(load_config(small_config_file, [*base, "search.inject=true"]),
                               2.0, results)
    config = load_config(small_config_file, base)
    kept = 3600 * 4 - config.stretch_warmup_windows
    extra = 120 * (8 + config.stretch_warmup_windows) / kept  # the one at 4000 s is outside
    assert plain.per_server_rate / injected.per_server_rate == pytest.approx(1 + extra, 1e-9)
    assert any(line.startswith(f"foreground: +{extra:.1%} windows for 120 injections")
               for line in injected.explanation)
    assert not any(line.startswith("foreground") for line in plain.explanation)


@pytest.mark.slow
def test_the_bench_streams_each_share_from_frames_with_and_without_its_foreground(
        tmp_path: Path) -> None:
    """``bench.foreground`` on a short span of frames: without the foreground each client
    streams every window of its pieces; with it, exactly its share's foreground pieces more
    (counted by ``share_foreground``); the clients' CPU counts their frame readers."""
    from offline_iaas.bench.foreground import injection_set, markdown, measure_foreground
    from offline_iaas.bench.workloads import BBHNET
    from offline_iaas.search.foreground import share_foreground
    from offline_iaas.stretches import client_shares
    from tests.helpers import processes_mentioning

    config, measured = measure_foreground(tmp_path, BBHNET, data_seconds=240.0, clients=2,
                                          repeats=1)
    assert processes_mentioning(str(tmp_path)) == []
    times = [b.gps_time for b in injection_set(config, 30.0).binaries]
    shares = client_shares(config)
    [(background, both)] = measured
    assert background.windows == sum(p.windows for s in shares for p in s.pieces)
    assert both.windows - background.windows == sum(
        p.windows for s in shares
        for p in share_foreground(config.geometry, config.search, s, times)) > 0
    assert background.run.client_cpu_seconds > 0 and background.run.server_cpu_seconds > 0
    text = markdown(config, measured, BBHNET, 30.0)
    assert "over the background, CPU (clients, their frame readers and the server)" in text
