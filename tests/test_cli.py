"""The command line: bad input gets one clear line on stderr and a non-zero exit."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from offline_iaas.config import load_config
from offline_iaas.data.synth import write_synthetic_dataset


def offline_iaas(*args: str | Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "offline_iaas.cli", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def assert_one_line_error(result: subprocess.CompletedProcess, *fragments: str) -> None:
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    for fragment in fragments:
        assert fragment in lines[0]


@pytest.fixture
def frames_config(small_config_file: Path) -> Path:
    write_synthetic_dataset(load_config(small_config_file))
    return small_config_file


def test_unknown_config_key(small_config_file: Path, tmp_path: Path) -> None:
    result = offline_iaas(
        "make-dag", small_config_file, "--set", "data.colour=red", "--out", tmp_path / "run"
    )
    assert_one_line_error(result, "unknown key 'data.colour'", str(small_config_file))
    assert result.returncode == 2
    assert not (tmp_path / "run").exists()


def test_zero_servers(small_config_file: Path, tmp_path: Path) -> None:
    result = offline_iaas(
        "make-dag", small_config_file, "--set", "layout.servers=0", "--out", tmp_path / "run"
    )
    assert_one_line_error(result, "'layout.servers' must be at least 1")
    assert result.returncode == 2


def test_frame_directory_without_frames(small_config_file: Path, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    result = offline_iaas(
        "make-dag", small_config_file, "--set", f'data.frames="{empty}"', "--out", tmp_path / "run"
    )
    assert_one_line_error(result, str(empty))
    assert result.returncode == 3
    assert not (tmp_path / "run").exists()


def test_channel_not_in_frames(frames_config: Path, tmp_path: Path) -> None:
    result = offline_iaas(
        "make-dag",
        frames_config,
        "--set",
        'data.channels=["H1:GDS-CALIB_STRAIN", "L1:NO-SUCH_CHANNEL"]',
        "--out",
        tmp_path / "run",
    )
    assert_one_line_error(result, "L1:NO-SUCH_CHANNEL")
    assert result.returncode == 3
    assert not (tmp_path / "run").exists()


def test_run_local_on_a_directory_that_is_not_a_run(tmp_path: Path) -> None:
    result = offline_iaas("run-local", tmp_path)
    assert_one_line_error(result, str(tmp_path))
