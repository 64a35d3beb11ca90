"""Every campaign mode checked sample by sample against the independent oracle (tests/oracle.py).

The campaigns run through the command line only (synth, export, make-dag, run-local: real
tritonservers, 2 servers x 2 clients, an odd batch size); the oracle recomputes every output
from the frames and the repository's ONNX graphs without the project's code. The negative
controls shift a campaign's output by one sample or one stride, drop its trailing stride or put
a NaN in it, and the oracle must refuse each.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.helpers import SMALL_CAMPAIGN, WITNESSES, processes_mentioning, untrained_weights
from tests.oracle import expected_outputs, read_series, read_triggers, run_problems

pytestmark = pytest.mark.slow

START = 1262304000
MODES = ("classifier", "bbhnet", "deepclean", "e2e")


def cli(*args: str) -> None:
    command = [str(Path(sys.executable).parent / "offline-iaas"), "-q", *args]
    result = subprocess.run(command, capture_output=True, text=True, env=os.environ.copy())
    assert result.returncode == 0, f"{' '.join(command)}\n{result.stdout}\n{result.stderr}"


def run_campaign(root: Path, mode: str, extra: list[str], layout: str = "fused") -> Path:
    """Export (the ``fused`` model or the ``ensemble`` layout), make-dag and run-local one mode
    of ``root/campaign.toml``; the run directory."""
    overrides = [
        f"model.mode={mode}",
        f"model.repository={root / mode / layout / 'repository'}",
        f"data.witnesses={WITNESSES}",
        "model.batch_size=5",
        "layout.servers=2",
        "layout.clients_per_server=2",
        *extra,
    ]
    sets = [arg for o in overrides for arg in ("--set", o)]
    config = str(root / "campaign.toml")
    weights = [] if mode == "classifier" else ["--weights", str(root / "weights")]
    cli("export", config, *sets, *weights, *(["--ensemble"] if layout == "ensemble" else []))
    run_dir = root / mode / layout / "run"
    cli("make-dag", config, *sets, "--out", str(run_dir))
    try:
        cli("run-local", str(run_dir))
    finally:
        assert processes_mentioning(str(run_dir)) == []
    return run_dir


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """32 s of H1/L1 frames (256 Hz, two witnesses each, one injection) and untrained weights."""
    root = tmp_path_factory.mktemp("oracle")
    (root / "campaign.toml").write_text(SMALL_CAMPAIGN.replace("duration = 64", "duration = 32"))
    cli("synth", str(root / "campaign.toml"))
    untrained_weights(root / "weights")
    return root


@pytest.fixture(scope="module")
def runs(dataset: Path) -> dict[str, Path]:
    return {mode: run_campaign(dataset, mode, []) for mode in MODES}


@pytest.mark.parametrize("mode", MODES)
def test_campaign_matches_the_oracle(runs: dict[str, Path], mode: str) -> None:
    expected, _ = expected_outputs(runs[mode])
    groups = {"classifier": {"statistic"}, "bbhnet": {"statistic"},
              "deepclean": {"noise/H1", "noise/L1", "clean/H1", "clean/L1"},
              "e2e": {"statistic", "noise/H1", "noise/L1", "clean/H1", "clean/L1"}}[mode]
    assert {e.group for e in expected} == groups
    assert run_problems(runs[mode]) == []


def test_ensemble_layout_campaign_matches_the_oracle(dataset: Path) -> None:
    """``export --ensemble`` (every stage its own model) gives the same, right output."""
    run_dir = run_campaign(dataset, "e2e", [], layout="ensemble")
    manifest = json.loads((dataset / "e2e" / "ensemble" / "repository" / "manifest.json")
                          .read_text())
    assert manifest["served"] == "ensemble" and "averager" in manifest["models"]
    assert run_problems(run_dir) == []


def test_campaign_with_gaps_and_science_segments_matches_the_oracle(tmp_path: Path) -> None:
    (tmp_path / "campaign.toml").write_text(
        SMALL_CAMPAIGN.replace("file_duration = 16", "file_duration = 8"))
    cli("synth", str(tmp_path / "campaign.toml"))
    untrained_weights(tmp_path / "weights")
    segments = tmp_path / "science.txt"
    segments.write_text(f"{START} {START + 30}\n{START + 34} {START + 52}\n"
                        f"{START + 54} {START + 64}\n")
    frames = tmp_path / "frames"
    (frames / f"H-H1_SYNTH-{START + 16}-8.gwf").unlink()
    (frames / f"L-L1_SYNTH-{START + 40}-8.gwf").unlink()
    (frames / "frames.lcf").unlink()
    run_dir = run_campaign(tmp_path, "e2e", [f"data.segments={segments}"])
    expected, _ = expected_outputs(run_dir)
    # five stretches, [0,16) [24,30) [34,40) [48,52) [54,64); e2e's statistic starts
    # (2 m - 1) S = 1.75 s into each
    starts = sorted({round(e.x0 - START - 1.75, 6) for e in expected if e.group == "statistic"})
    assert starts == [0, 24, 34, 48, 54]
    assert run_problems(run_dir) == []


# ---- negative controls: the oracle must refuse a wrong output -----------------------------------


def shifted(series: dict, group: str, how: str) -> dict:
    out = copy.deepcopy(series)
    x0, dx, values = out[group][0]
    if how == "sample":  # the values one sample late, the time axis unchanged
        values = np.concatenate([values[:1], values[:-1]])
    elif how == "stride":  # the time axis one stride late
        x0 += 0.25
    elif how == "drop":  # the trailing stride (or window) missing
        values = values[: -(64 if group != "statistic" else 1)]
    elif how == "nan":
        values = values.copy()
        values[len(values) // 2] = np.nan
    out[group][0] = (x0, dx, values)
    return out


@pytest.mark.parametrize("how", ["sample", "stride", "drop", "nan"])
@pytest.mark.parametrize("group", ["statistic", "noise/H1", "clean/L1"])
def test_oracle_refuses_a_shifted_or_damaged_output(runs: dict[str, Path], group: str,
                                                    how: str) -> None:
    run_dir = runs["e2e"]
    assert run_problems(run_dir) == []
    problems = run_problems(run_dir, series=shifted(read_series(
        run_dir / "output" / "campaign.h5"), group, how))
    assert problems and all(p.startswith(group) for p in problems), problems


def test_oracle_refuses_a_trigger_a_millisecond_late(runs: dict[str, Path]) -> None:
    run_dir = runs["bbhnet"]
    triggers = read_triggers(run_dir / "output" / "campaign.h5")
    assert len(triggers.time) > 0
    triggers.time[0] += 1e-3
    assert run_problems(run_dir, triggers=triggers) == [
        "triggers: times differ by up to 0.001 s"]


@pytest.mark.parametrize("mode", MODES)
def test_oracle_refuses_every_mode_one_sample_late(runs: dict[str, Path], mode: str) -> None:
    run_dir = runs[mode]
    series = read_series(run_dir / "output" / "campaign.h5")
    for group in series:
        problems = run_problems(run_dir, series=shifted(series, group, "sample"))
        assert problems and all(p.startswith(group) for p in problems), (group, problems)
