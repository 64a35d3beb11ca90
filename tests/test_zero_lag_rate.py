"""The report's cumulative rate of zero-lag triggers is cut as the time slides' background is
(pure logic: the merge's summary and the report's numbers, no campaign)."""

from __future__ import annotations

import json
from pathlib import Path

import h5py
import numpy as np

from offline_iaas.config import config_from_dict
from offline_iaas.merge.postprocess import ShardProducts
from offline_iaas.mode_packages import SummaryRequest
from offline_iaas.science.bbhnet import figures
from offline_iaas.science.bbhnet.products import (
    BACKGROUND_COLUMNS,
    TRIGGER_COLUMNS,
    search_summary,
)
from offline_iaas.science.bbhnet.report import cumulative_rates
from offline_iaas.science.bbhnet.summary import SearchNumbers
from offline_iaas.stretches import make_stretches, statistic_spans
from offline_iaas.summary_physics import section

DAY = 86400.0
INJECTIONS = (50.0, 300.0)
EXCLUSION = 4.0  # search.exclusion_seconds' default
TRAINING = (500.0, 600.0)  # BBHnet's training span, left out
# the loudest three lie in the cuts: near each injection and in the training span
TRIGGERS = [(51.0, 8.0), (302.0, 7.5), (550.0, 9.0), (150.0, 5.0), (400.0, 3.0),
            (700.0, 4.0), (900.0, 3.0), (850.0, 2.0)]


def merged(tmp_path: Path) -> tuple[Path, dict, tuple[float, float]]:
    """The merge's output file and ``bbhnet`` summary of one stretch with 2 time slides, an
    injection list and BBHnet's training span; and the stretch's analysed span."""
    listed = tmp_path / "injections.json"
    listed.write_text(json.dumps([{"gps_time": t, "network_snr": 10.0} for t in INJECTIONS]))
    config = config_from_dict({
        "data": {"frames": "f", "channels": ["H1:X", "L1:X"], "start": 0, "duration": 1000,
                 "sample_rate": 256},
        "model": {"repository": "r", "mode": "bbhnet", "inference_rate": 4},
        "search": {"injections": str(listed), "slides": 2}}, tmp_path / "c.toml")
    stretches = make_stretches(config.geometry, [(0.0, 1000.0)])
    [span] = statistic_spans(config.geometry, stretches)  # the input: where triggers lie
    triggers = np.zeros(len(TRIGGERS), TRIGGER_COLUMNS)
    triggers["time"], triggers["statistic"] = np.array(TRIGGERS).T
    background = np.zeros(3, BACKGROUND_COLUMNS)
    background["shift"], background["time"] = [1.0, 2.0, 1.0], [120.0, 420.0, 800.0]
    background["statistic"] = [6.0, 2.5, 1.0]
    output = tmp_path / "campaign.h5"
    with h5py.File(output, "w") as file:
        summary = search_summary(SummaryRequest(file, config, stretches, {"bbhnet": TRAINING},
                                                [ShardProducts(arrays={
                                                    "triggers": triggers,
                                                    "background": background})], None))
    return output, summary["bbhnet"], span


def union_length(spans: list[tuple[float, float]], within: tuple[float, float]) -> float:
    """Seconds of ``within`` covered by the union of ``spans`` (plain interval arithmetic)."""
    clipped = sorted((max(a, within[0]), min(b, within[1])) for a, b in spans)
    total, reach = 0.0, within[0]
    for a, b in clipped:
        if b > max(a, reach):
            total += b - max(a, reach)
            reach = b
    return total


CUTS = [(t - EXCLUSION, t + EXCLUSION) for t in INJECTIONS] + [TRAINING]
"""The background's cuts, ``[start, end)``: within the exclusion of an injection, and the
training span."""


def rate_of(values: np.ndarray, seconds: float) -> tuple[np.ndarray, np.ndarray]:
    """``values`` loudest first and the count of those at least as loud per day of
    ``seconds``."""
    loud = np.sort(values)[::-1]
    return loud, np.array([(loud >= v).sum() for v in loud]) / seconds * DAY


def expected_rate(span: tuple[float, float]) -> tuple[np.ndarray, np.ndarray]:
    """From the definition: the zero-lag triggers outside the cuts over the analysed time
    outside them."""
    times, values = np.array(TRIGGERS).T
    outside = np.array([not any(a <= t < b for a, b in CUTS) for t in times])
    return rate_of(values[outside], (span[1] - span[0]) - union_length(CUTS, span))


def matches(plotted: tuple[np.ndarray, np.ndarray], span: tuple[float, float]) -> bool:
    (statistic, per_day), (kept, rate) = plotted, expected_rate(span)
    return (len(statistic) == len(kept) and np.array_equal(statistic, kept)
            and np.allclose(per_day, rate, rtol=1e-12, atol=0))


def test_zero_lag_rate_leaves_out_the_background_cuts(tmp_path: Path) -> None:
    output, summary, span = merged(tmp_path)
    assert all(span[0] < a and b < span[1] for a, b in CUTS)  # every cut inside: it matters
    background, zero_lag = cumulative_rates(output, section(SearchNumbers, summary))
    assert zero_lag is not None
    assert matches((zero_lag.statistic, zero_lag.per_day), span)
    assert zero_lag.seconds == (span[1] - span[0]) - union_length(CUTS, span)
    # the background beside it: its triggers over its livetime
    assert background.per_day.tolist() == [n / summary["background_livetime_seconds"] * DAY
                                           for n in (1, 2, 3)]
    # control: the old rate, every trigger over the whole analysed time (its own ranks)
    every = np.sort(np.array(TRIGGERS)[:, 1])[::-1]
    old = np.arange(1, len(every) + 1) / summary["analysed_seconds"] * DAY
    assert not matches((every, old), span)
    # controls: each half of the cut alone, the triggers' or the time's, fails too
    kept = expected_rate(span)[0]
    assert not matches(rate_of(kept, summary["analysed_seconds"]), span)
    assert not matches(rate_of(every, zero_lag.seconds), span)
    print(f"loudest zero-lag point: statistic {kept[0]:g} at {zero_lag.per_day[0]:.6g}/day "
          f"over {zero_lag.seconds:g} s outside the cuts; old: statistic {every[0]:g} at "
          f"{old[0]:.6g}/day over {summary['analysed_seconds']:g} s")
    png = figures.cumulative_rate_figure(background, zero_lag, None)
    assert png.startswith(b"\x89PNG")
