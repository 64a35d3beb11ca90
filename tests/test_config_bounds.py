"""Absurd numbers (a typo's exponent) are refused when the config loads, naming the key:
each once gave a traceback (ZeroDivisionError, OverflowError) or crashed the interpreter
(SIGSEGV in lalsimulation or the cosmology) in the command the audit ran. A value at each
bound is a campaign.

A length of time (``config_numbers.TIME_SUFFIXES``) is at most ``MAX_SECONDS``: 1e308 crashed
in ``round`` (``check``, ``make-dag``, ``export``), 1e14 s passed ``check`` and then Triton's
config refused its microseconds at ``export``. Any other number is at most the largest float32:
``model.input_scale = 1e308`` exported a graph whose every output was NaN. A count a scheduler
or Triton takes is at most its bound (``config_numbers.COUNT_BOUNDS``): ``server.instances =
2**31`` crashed ``export`` (Triton's int32 count, a traceback), and ``check`` and ``make-dag``
passed ``workflow.max_parallel_clients = 10**12`` (DAGMan reads ``MAXJOBS`` as a C int, so it
wraps), ``server.gpus``, ``server.cpus`` and ``server.gpu_memory_mb`` of 10**12 (a job no slot
matches)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from offline_iaas.cli import main
from offline_iaas.config import load_config
from offline_iaas.config_numbers import COUNT_BOUNDS, MAX_SECONDS, off_grid
from offline_iaas.errors import ConfigError
from offline_iaas.repository.gpu_flavor import snapshotter_config
from tests.error_catalogue import cli_error, documented

CASES = [
    # (row id, command, setting)
    ("stride-under-one-sample", "check", "model.inference_rate=1e12"),
    ("sample-rate-out-of-range", "check", "data.sample_rate=1e-300"),
    ("shard-under-one-second", "make-dag", "merge.shard_seconds=1e-300"),
    ("synth-file-under-one-second", "synth", "synth.file_duration=1e-300"),
    ("synth-f-lower-below-floor", "synth", "synth.f_lower_hz=1e-300"),
    ("synth-redshift-out-of-range", "synth", "synth.redshift_max=1e300"),
    (None, "synth", "synth.redshift_max=1e-300"),
    ("synth-frame-rate-out-of-range", "synth", "synth.frame_sample_rate=1e300"),
    (None, "synth", "synth.frame_sample_rate=1e-300"),
    (None, "check", "model.kernel_seconds=1e-300"),
    ("config-seconds-beyond-bound", "export", "server.sequence_idle_seconds=1e14"),
    (None, "export", "server.sequence_idle_seconds=1e308"),
    (None, "check", "data.duration=1e308"),
    (None, "check", "model.kernel_seconds=1e308"),
    (None, "make-dag", "merge.shard_seconds=1e308"),
    (None, "check", "client.read_seconds=1000000001"),
    ("config-number-beyond-float32", "export", "model.input_scale=1e308"),
    (None, "check", "search.ifar_threshold_years=1e39"),
    ("synth-witnesses-beyond-bound", "synth", "synth.witnesses=100000"),
    ("synth-line-above-nyquist", "synth", "synth.line_frequency=100000"),
    ("config-count-beyond-bound", "export", f"server.instances={2**31}"),
    (None, "make-dag", f"workflow.max_parallel_clients={10**12}"),
    (None, "make-dag", f"server.gpus={10**12}"),
]


@pytest.mark.parametrize(("row", "command", "setting"), CASES,
                         ids=[setting for _, _, setting in CASES])
def test_an_absurd_number_is_one_line_naming_its_key_and_writes_nothing(
        row: str | None, command: str, setting: str, small_config_file: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    line = refused_naming_key(command, [setting], setting.split("=")[0], row,
                              small_config_file, capsys)
    assert "Traceback" not in line


def refused_naming_key(command: str, settings: list[str], key: str, row: str | None,
                       config_file: Path, capsys: pytest.CaptureFixture[str]) -> str:
    """``command`` of ``config_file`` with ``settings`` (``--set``): exit 2, one line naming
    ``key``, nothing written; the line (documented as ``row`` where one is given)."""
    before = sorted(config_file.parent.rglob("*"))
    out = ["--out", str(config_file.parent / "run")] if command == "make-dag" else []
    code = main([command, str(config_file), *(a for s in settings for a in ("--set", s)), *out])
    lines = capsys.readouterr().err.strip().splitlines()
    assert (code, len(lines)) == (2, 1), lines
    assert f"'{key}'" in lines[0], lines[0]
    assert sorted(config_file.parent.rglob("*")) == before
    if row is not None:
        documented(row, cli_error(lines[0]), {config_file: "<ws>/campaign.toml"},
                   exit_code=code)
    return lines[0]


@pytest.mark.parametrize("setting", [
    "model.inference_rate=256", "data.sample_rate=16384", "merge.shard_seconds=1",
    "merge.shard_seconds=0", "synth.file_duration=1", "synth.f_lower_hz=1",
    "synth.redshift_max=20", "synth.redshift_max=0.001",
    "synth.frame_sample_rate=65536", "model.kernel_seconds=1",
    "server.sequence_idle_seconds=1000000000", "data.duration=1000000000",
    "model.kernel_seconds=1000000000", "merge.shard_seconds=1000000000",
    "client.read_seconds=1000000000", "model.input_scale=3.4e38", "synth.witnesses=1000",
])
def test_a_value_at_a_bound_is_a_campaign(setting: str, small_config_file: Path) -> None:
    key, value = setting.split("=")
    section, name = key.split(".")
    config = load_config(small_config_file, [setting])
    assert getattr(getattr(config, section), name) == float(value)


@pytest.mark.parametrize("key", sorted(COUNT_BOUNDS))
def test_a_count_above_its_bound_is_refused_naming_the_key_and_the_bound(
        key: str, small_config_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bound = COUNT_BOUNDS[key][0]
    line = refused_naming_key("check", [f"{key}={bound + 1}"], key, None, small_config_file,
                              capsys)
    assert f"'{key}' must be at most {bound} (" in line and line.endswith(f"got {bound + 1}")


@pytest.mark.parametrize("key", sorted(COUNT_BOUNDS))
def test_a_count_at_its_bound_is_a_campaign(key: str, small_config_file: Path) -> None:
    bound = COUNT_BOUNDS[key][0]
    section, name = key.split(".")
    config = load_config(small_config_file, [f"{key}={bound}"])
    assert getattr(getattr(config, section), name) == bound


def test_the_slowest_frames_are_a_campaign_with_their_line_below_nyquist(
        small_config_file: Path) -> None:
    slowest = ["synth.frame_sample_rate=16", "synth.witness_sample_rate=0"]
    config = load_config(small_config_file, [*slowest, "synth.line_frequency=7.9"])
    assert (config.synth.frame_sample_rate, config.synth.line_frequency) == (16, 7.9)
    with pytest.raises(ConfigError, match="'synth.line_frequency' must be below the "
                       r"witnesses' Nyquist frequency \(8 Hz\), got 8$"):
        load_config(small_config_file, [*slowest, "synth.line_frequency=8"])


def test_every_length_of_time_at_the_bound_fits_what_it_becomes() -> None:
    """10**9 s in microseconds is a ``max_sequence_idle_microseconds`` Triton's config takes
    (1e14 s is not: the export's ValueError), in whole seconds an int32
    (``--exit-timeout-secs``), at 65536 Hz a 64-bit count of samples, and a wait Python
    takes."""
    config = snapshotter_config("snapshotter", 2, 256, 4, MAX_SECONDS)
    assert config.sequence_batching.max_sequence_idle_microseconds == 10**15
    with pytest.raises(ValueError):
        snapshotter_config("snapshotter", 2, 256, 4, 1e14)
    assert MAX_SECONDS < 2**31 and MAX_SECONDS * 65536 < 2**63
    assert MAX_SECONDS <= threading.TIMEOUT_MAX


@pytest.mark.parametrize("rate", [16, 256, 4096, 65536])
def test_a_gps_time_on_the_sample_grid_is_on_it_to_its_float_resolution(rate: int) -> None:
    """A GPS time written as a decimal on the grid (k / rate after a whole second, to 7
    decimals, near 1.26e9 where a float holds 2.4e-7 s) is on it; a third of a sample off is
    not."""
    for k in (0, 1, rate // 3, rate - 1):
        on = 1262304000 + k / rate
        assert not off_grid(float(f"{on:.7f}"), rate), (k, on)
        assert off_grid(on + 1 / (3 * rate), rate), (k, on)
    assert not off_grid(0.0, rate) and off_grid(0.3 / rate, rate)
