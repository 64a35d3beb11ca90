"""Absurd numbers (a typo's exponent) are refused when the config loads, naming the key:
each once gave a traceback (ZeroDivisionError, OverflowError) or crashed the interpreter
(SIGSEGV in lalsimulation or the cosmology) in the command the audit ran. A value at each
bound is a campaign."""

from __future__ import annotations

from pathlib import Path

import pytest

from offline_iaas.cli import main
from offline_iaas.config import load_config
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
]


@pytest.mark.parametrize(("row", "command", "setting"), CASES,
                         ids=[setting for _, _, setting in CASES])
def test_an_absurd_number_is_one_line_naming_its_key_and_writes_nothing(
        row: str | None, command: str, setting: str, small_config_file: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    before = sorted(small_config_file.parent.rglob("*"))
    out = ["--out", str(small_config_file.parent / "run")] if command == "make-dag" else []
    code = main([command, str(small_config_file), "--set", setting, *out])
    lines = capsys.readouterr().err.strip().splitlines()
    key = setting.split("=")[0]
    assert (code, len(lines)) == (2, 1), lines
    assert f"'{key}'" in lines[0] and "Traceback" not in lines[0]
    assert sorted(small_config_file.parent.rglob("*")) == before
    if row is not None:
        documented(row, cli_error(lines[0]), {small_config_file: "<ws>/campaign.toml"},
                   exit_code=code)


@pytest.mark.parametrize("setting", [
    "model.inference_rate=256", "data.sample_rate=16384", "merge.shard_seconds=1",
    "merge.shard_seconds=0", "synth.file_duration=1", "synth.f_lower_hz=1",
    "synth.redshift_max=20", "synth.redshift_max=0.001", "synth.frame_sample_rate=16",
    "synth.frame_sample_rate=65536", "model.kernel_seconds=1",
])
def test_a_value_at_a_bound_is_a_campaign(setting: str, small_config_file: Path) -> None:
    key, value = setting.split("=")
    section, name = key.split(".")
    config = load_config(small_config_file, [setting])
    assert getattr(getattr(config, section), name) == float(value)
