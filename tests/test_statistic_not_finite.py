"""A statistic that is not a number is refused, never ranked (physics.py, "A statistic that is
not a number"): ranked, NaN had no background at least as loud (FAR 1/L, the best there is,
so an injection beside it was found) and hid the real maxima beside it from the clustering.
Each refusal has a finite control that passes.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from offline_iaas.config import CampaignConfig, load_config
from offline_iaas.errors import DataError, exit_code
from offline_iaas.gps import gps_text
from offline_iaas.merge.output import CampaignWriter
from offline_iaas.physics import (
    Injection,
    cluster_indices,
    cluster_triggers,
    false_alarm_rates,
    found_missed,
    found_missed_at_ifar,
)
from offline_iaas.stretches import Stretch, first_formed_window, output_x0
from tests.error_catalogue import documented
from tests.helpers import SMALL_CAMPAIGN

BACKGROUND = np.array([1.0, 2.0, 3.0])
LIVETIME_SECONDS = 100.0


def test_a_nan_statistic_gets_no_false_alarm_rate() -> None:
    with pytest.raises(DataError, match=r"^the statistic given a false-alarm rate: 1 of 2 "
                       r"values are not finite \(NaN or Inf\), the first at index 1"):
        false_alarm_rates(np.array([2.5, math.nan]), BACKGROUND, LIVETIME_SECONDS)
    far, ifar = false_alarm_rates(np.array([2.5]), BACKGROUND, LIVETIME_SECONDS)  # control
    assert far[0] == 2 / LIVETIME_SECONDS and np.isfinite(ifar).all()


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_a_background_value_that_is_not_finite_is_refused(bad: float) -> None:
    with pytest.raises(DataError, match=r"^the background statistic \(time slides\): 1 of 3"):
        false_alarm_rates(np.array([2.5]), np.array([1.0, bad, 3.0]), LIVETIME_SECONDS)


def test_clustering_refuses_nan_rather_than_dropping_it_and_the_maxima_beside_it() -> None:
    values = np.array([1.0, 2.0, math.nan, 3.0, 1.0, 0.5, math.nan, 0.2])
    with pytest.raises(DataError, match=r"^the statistic to cluster: 2 of 8 .* index 2"):
        cluster_indices(values, 1)
    with pytest.raises(DataError, match=r"the first at GPS 1262304001\.5: "):
        cluster_triggers(values, 1262304001.0, 0.25, 0.5)
    finite = np.where(np.isnan(values), 0.0, values)  # control: the maxima beside them kept
    assert list(cluster_indices(finite, 1)) == [1, 3, 7]


def injection_search(tmp_path: Path) -> CampaignConfig:
    (tmp_path / "campaign.toml").write_text(SMALL_CAMPAIGN)
    return load_config(tmp_path / "campaign.toml", ['model.mode="bbhnet"'])


def test_a_nan_beside_an_injection_does_not_find_it(tmp_path: Path) -> None:
    search = injection_search(tmp_path).search
    injection = [Injection(gps_time=1262304030.0, network_snr=8.0)]
    analysed = [(1262304001.0, 1262304064.0)]
    times = np.array([1262304010.0, 1262304030.0])
    with pytest.raises(DataError, match=r"^the IFARs near the injections: .* GPS 1262304030"):
        found_missed_at_ifar(times, np.array([0.0, math.nan]), np.array([1.0, 2.0]),
                             injection, search, analysed)
    with pytest.raises(DataError, match=r"^the foreground's statistic .* GPS 1262304030: "):
        found_missed(times, np.array([1.0, 2.0]), injection, search, analysed,
                     foreground=(times, np.array([1.0, math.nan])))
    # control: finite, the quiet one is missed and a loud one found
    quiet = found_missed_at_ifar(times, np.array([0.0, 0.0]), np.array([1.0, 2.0]),
                                 injection, search, analysed)
    loud = found_missed_at_ifar(times, np.array([0.0, 1e9]), np.array([1.0, 2.0]),
                                injection, search, analysed)
    assert (quiet["found"], loud["found"]) == (0, 1)


def staged_writer(tmp_path: Path, overrides: list[str]) -> tuple[CampaignWriter, Stretch]:
    """A merge's writer over one stretch of the small campaign (BBHnet), every output
    staged with ones."""
    (tmp_path / "campaign.toml").write_text(SMALL_CAMPAIGN)
    config = load_config(tmp_path / "campaign.toml", ['model.mode="bbhnet"', *overrides])
    stretch = Stretch(0, config.data.start, config.data.start + config.data.duration)
    writer = CampaignWriter(tmp_path / "out.h5", config, [stretch])
    kept = stretch.kept_windows(config.geometry)
    writer.write("statistic", 0, 0, np.ones(kept, np.float32))
    if config.has_slides:
        slides = np.ones((kept, config.search.slides), np.float32)
        for k in range(config.search.slides):  # NaN where a slide is not formed, by design
            slides[: first_formed_window(config.geometry, k + 1), k] = math.nan
        writer.write("background", 0, 0, slides)
    return writer, stretch


def test_the_merge_refuses_a_nan_statistic_naming_its_stretch_and_gps_time(
        tmp_path: Path) -> None:
    writer, stretch = staged_writer(tmp_path, [])
    config = writer.config
    statistic = np.ones(stretch.kept_windows(config.geometry), np.float32)
    statistic[[40, 41]] = math.nan
    writer.write("statistic", 0, 0, statistic)
    with pytest.raises(DataError) as caught:
        writer.postprocess(None)
    writer.discard()
    at = output_x0(config.geometry, stretch, "statistic") + 40 * config.stride_seconds
    assert f"the first at GPS {gps_text(at)}: " in str(caught.value)
    assert exit_code(caught.value) == 3
    documented("statistic-not-finite", str(caught.value), exit_code=3)
    writer, _ = staged_writer(tmp_path, [])  # control: finite, clustered
    assert len(writer.postprocess(None).arrays["triggers"]) > 0
    writer.discard()


def test_unformed_slides_are_nan_by_design_and_a_nan_in_a_formed_one_is_refused(
        tmp_path: Path) -> None:
    slid = ["search.slides=2", "search.slide_seconds=1"]
    writer, _ = staged_writer(tmp_path, slid)  # control: NaN only where not formed
    assert len(writer.postprocess(None).arrays["background"]) > 0
    writer.discard()
    writer, stretch = staged_writer(tmp_path, slid)
    config = writer.config
    slides = np.ones((stretch.kept_windows(config.geometry), 2), np.float32)
    for k in range(2):
        slides[: first_formed_window(config.geometry, k + 1), k] = math.nan
    slides[100, 1] = math.nan  # formed there
    writer.write("background", 0, 0, slides)
    with pytest.raises(DataError, match=r", time slide 2 \(2 s\): 1 of .* the first at GPS "):
        writer.postprocess(None)
    writer.discard()
