"""Pre-flight validation: every problem of the frames at once (``offline-iaas check``)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from offline_iaas.config import CampaignConfig, config_from_dict
from offline_iaas.data.preflight import preflight
from offline_iaas.data.synth import write_synthetic_dataset
from offline_iaas.errors import DataError

S = 1262304000
GOOD_CHANNELS = ["H1:GDS-CALIB_STRAIN", "L1:GDS-CALIB_STRAIN"]
TYPO = "L1:GDS-CALIB_STRAN"


def raw_config(**data: Any) -> dict[str, Any]:
    return {
        "data": {
            "frames": "frames",
            "channels": GOOD_CHANNELS,
            "start": S,
            "duration": 32,
            "sample_rate": 128,
            **data,
        },
        "model": {"repository": "repo", "kernel_seconds": 1.0, "inference_rate": 4},
        "synth": {"file_duration": 4, "frame_sample_rate": 256, "injections": 0, "seed": 11},
    }


def make_config(tmp: Path, **data: Any) -> CampaignConfig:
    return config_from_dict(raw_config(**data), tmp / "campaign.toml")


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("preflight")
    write_synthetic_dataset(make_config(tmp))
    (tmp / "frames" / "frames.lcf").unlink()
    return tmp / "frames"


@pytest.fixture
def broken(clean: Path, tmp_path: Path) -> Path:
    """The dataset with a truncated L file [S+8, S+12) and no H file [S+20, S+24)."""
    frames = tmp_path / "frames"
    shutil.copytree(clean, frames)
    truncated = frames / f"L-L1_SYNTH-{S + 8}-4.gwf"
    os.truncate(truncated, truncated.stat().st_size // 2)
    (frames / f"H-H1_SYNTH-{S + 20}-4.gwf").unlink()
    return frames


def expected_problems(frames: Path) -> list[str]:
    return [
        f"  - no frame data for observatory H (H1:GDS-CALIB_STRAIN) in [{S + 20}, {S + 24}) "
        f"(between H-H1_SYNTH-{S + 16}-4.gwf and H-H1_SYNTH-{S + 24}-4.gwf)",
        f"  - frame file {frames / f'L-L1_SYNTH-{S + 8}-4.gwf'} [{S + 8}, {S + 12}) is "
        "unreadable: ",
        f"  - channel {TYPO} not found in {frames / f'L-L1_SYNTH-{S}-4.gwf'} and 6 more "
        f"file(s) covering [{S}, {S + 32}) (channels there: L1:GDS-CALIB_STRAIN, "
        "L1:PEM-SYNTH_WITNESS_0, L1:PEM-SYNTH_WITNESS_1)",
    ]


def check_lines(message: str, frames: Path) -> None:
    lines = message.splitlines()
    assert lines[0] == (
        f"3 problems with the frame data for [{S}, {S + 32}) (frames: {frames}):"
    )
    assert len(lines) == 4
    for line, expected in zip(lines[1:], expected_problems(frames), strict=True):
        assert line.startswith(expected), (line, expected)


def test_clean_dataset_passes(clean: Path, tmp_path: Path) -> None:
    span = preflight(make_config(tmp_path, frames=str(clean)))
    assert span.stretches == [(S, S + 32)] and span.dropped == []
    assert span.total_seconds == span.analysable_seconds == 32


def test_three_problems_in_one_error(broken: Path, tmp_path: Path) -> None:
    config = make_config(tmp_path, frames=str(broken), channels=["H1:GDS-CALIB_STRAIN", TYPO])
    with pytest.raises(DataError) as info:
        preflight(config)
    check_lines(str(info.value), broken)


def test_rates_and_missing_files(clean: Path, tmp_path: Path) -> None:
    frames = tmp_path / "frames"
    shutil.copytree(clean, frames)
    cache = tmp_path / "frames.ffl"
    cache.write_text(
        "".join(f"{p} {p.name.split('-')[2]} 4 0 0\n" for p in sorted(frames.glob("*.gwf")))
    )
    gone = frames / f"H-H1_SYNTH-{S + 4}-4.gwf"
    gone.unlink()  # still listed in the cache
    garbage = frames / f"H-H1_SYNTH-{S + 8}-4.gwf"
    garbage.write_bytes(os.urandom(4000))
    # 100 Hz: 256 Hz is not a multiple of it
    with pytest.raises(DataError) as info:
        preflight(make_config(tmp_path, frames=str(cache), sample_rate=100))
    lines = str(info.value).splitlines()
    assert lines[0] == (
        f"4 problems with the frame data for [{S}, {S + 32}) (frames: {cache}):"
    )
    assert lines[1] == f"  - frame file {gone} [{S + 4}, {S + 8}) does not exist"
    assert lines[2].startswith(f"  - frame file {garbage} [{S + 8}, {S + 12}) is unreadable: ")
    assert lines[3] == (
        f"  - channel H1:GDS-CALIB_STRAIN in {frames / f'H-H1_SYNTH-{S}-4.gwf'} and 5 more "
        "file(s) has sample rate 256 Hz, not a whole multiple of the model sample rate 100 Hz"
    )
    assert lines[4].startswith(
        f"  - channel L1:GDS-CALIB_STRAIN in {frames / f'L-L1_SYNTH-{S}-4.gwf'} and 7 more"
    )


# ---- the command line ----------------------------------------------------------------------


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "offline_iaas.cli", *args],
        capture_output=True,
        text=True,
        timeout=300,
    )


def sets(**data: Any) -> list[str]:
    out = []
    for key, value in raw_config(**data)["data"].items():
        out += ["--set", f"data.{key}={json.dumps(value)}"]
    return out + ["--set", "model.repository=\"repo\""]


@pytest.mark.slow  # command-line processes reading frames: 7 s of CPU
def test_check_cli_lists_every_problem_and_writes_nothing(broken: Path, tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    config = work / "campaign.toml"
    config.write_text("[data]\n[model]\n")
    overrides = sets(frames=str(broken), channels=["H1:GDS-CALIB_STRAIN", TYPO])
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    done = run_cli("check", str(config), *overrides)
    assert done.returncode == 3, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.startswith("offline-iaas check: error: 3 problems")
    check_lines(done.stderr.split("error: ", 1)[1], broken)
    # make-dag runs the same check before writing anything
    run = work / "run"
    done = run_cli("make-dag", str(config), "--out", str(run), *overrides)
    assert done.returncode == 3, done.stderr
    assert "Traceback" not in done.stderr
    check_lines(done.stderr.split("error: ", 1)[1], broken)
    assert not run.exists()
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before


def test_check_cli_summary(clean: Path, tmp_path: Path) -> None:
    config = tmp_path / "campaign.toml"
    config.write_text("[data]\n[model]\n")
    science = tmp_path / "science.txt"
    science.write_text(f"{S + 1} {S + 20}\n{S + 22} {S + 22.5}\n")
    done = run_cli("check", str(config), *sets(frames=str(clean), segments=str(science)))
    assert done.returncode == 0, done.stderr
    out = done.stdout.splitlines()
    assert out[0] == f"check: 2 channel(s): {', '.join(GOOD_CHANNELS)}"
    assert out[1] == f"check: 16 frame file(s) (H: 8, L: 8) from {clean}"
    assert out[2] == "check: span: 32 s; analysable: 19 s in 1 stretch(es); dropped: 13 s"
    assert "check:   dropped 12.5 s: outside science segments" in out
    assert "check:   dropped 0.5 s: shorter than warm-up + one stride (1 s)" in out
    assert f"check:   stretch [{S + 1}, {S + 20}) 19 s" in out
    assert out[-1] == "check: OK"
