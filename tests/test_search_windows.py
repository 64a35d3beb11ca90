"""The search's windows have lower bounds, refused when the config is loaded (exit 2).

``search.slide_seconds`` at least ``model.kernel_seconds``: slides ``k`` and ``k + 1``, one
step apart in the first detector's time, pair the same window of the second detector with
first-detector windows ``slide_seconds`` apart, which overlap when it is shorter than a window;
such slides are not independent, yet each would add its full livetime. ``search.
exclusion_seconds`` at least ``search.found_seconds``: a trigger that finds an injection (within
``found_seconds`` of it) must not also stand in the background (``physics.background_cuts``).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from offline_iaas.config import load_config
from offline_iaas.errors import ConfigError
from tests.error_catalogue import documented
from tests.helpers import SMALL_CAMPAIGN

BBHNET = ['model.mode="bbhnet"', "search.slides=3"]
"""The small campaign (two detectors, 1 s windows, strides of 0.25 s) with time slides."""


def make_dag(config: Path, overrides: list[str]) -> subprocess.CompletedProcess[str]:
    """``offline-iaas make-dag`` of ``config`` with ``--set`` overrides, as a user runs it."""
    sets = [arg for o in overrides for arg in ("--set", o)]
    return subprocess.run([sys.executable, "-m", "offline_iaas.cli", "make-dag", str(config),
                           *sets, "--out", str(config.parent / "run")],
                          capture_output=True, text=True, timeout=120)


def refusal(result: subprocess.CompletedProcess[str]) -> str:
    """The one-line message of a make-dag that refused its config (exit 2, no traceback)."""
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    prefix = "offline-iaas make-dag: error: "
    assert len(lines) == 1 and lines[0].startswith(prefix), result.stderr
    return lines[0].removeprefix(prefix)


@pytest.fixture()
def config(tmp_path: Path) -> Path:
    (tmp_path / "campaign.toml").write_text(SMALL_CAMPAIGN)
    return tmp_path / "campaign.toml"


def test_slides_shorter_than_the_window_are_refused_and_a_slide_of_one_window_loads(
        config: Path) -> None:
    message = refusal(make_dag(config, [*BBHNET, "search.slide_seconds=0.75"]))
    documented("time-slides-shorter-than-window", message, {config: "C"}, exit_code=2)
    assert not (config.parent / "run").exists()
    at_bound = load_config(config, [*BBHNET, "search.slide_seconds=1"])  # control: one window
    assert at_bound.search.slide_seconds == at_bound.model.kernel_seconds == 1.0
    longer = load_config(config, [*BBHNET, "search.slide_seconds=2", "model.kernel_seconds=2"])
    assert longer.slide_windows == 8
    with pytest.raises(ConfigError, match="'search.slide_seconds' .1.5 s. must be at least "
                       r"model.kernel_seconds \(2 s\)"):  # the bound follows the window
        load_config(config, [*BBHNET, "search.slide_seconds=1.5", "model.kernel_seconds=2"])
    unslid = load_config(config, ['model.mode="bbhnet"', "search.slide_seconds=0.5"])
    assert unslid.search.slides == 0  # no slides: the step is not used, so not refused


def test_an_exclusion_shorter_than_the_found_window_is_refused_and_an_equal_one_loads(
        config: Path) -> None:
    message = refusal(make_dag(config, ["search.exclusion_seconds=1.5",
                                        "search.found_seconds=2"]))
    documented("exclusion-shorter-than-found", message, {config: "C"}, exit_code=2)
    at_bound = load_config(config, ["search.exclusion_seconds=2", "search.found_seconds=2"])
    assert at_bound.search.exclusion_seconds == at_bound.search.found_seconds == 2.0


def test_the_audited_windows_are_refused(config: Path) -> None:
    """Slides of a quarter window, an exclusion of 0.01 s and a found window of 10 s: the
    first bound checked names its keys and values."""
    message = refusal(make_dag(config, [*BBHNET, "model.kernel_seconds=1",
                                        "search.slide_seconds=0.25",
                                        "search.exclusion_seconds=0.01",
                                        "search.found_seconds=10"]))
    assert message.startswith(f"{config}: 'search.exclusion_seconds' (0.01 s) must be at "
                              "least search.found_seconds (10 s)")
    message = refusal(make_dag(config, [*BBHNET, "search.slide_seconds=0.25"]))
    assert message.startswith(f"{config}: 'search.slide_seconds' (0.25 s) must be at least "
                              "model.kernel_seconds (1 s)")
