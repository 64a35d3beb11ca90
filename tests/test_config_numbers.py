"""Every number of a campaign config is checked, whatever its key: ``make-dag --set KEY=V``
with V = nan, inf or -1 for EVERY int and float field of the config's dataclasses (found from
them, not listed by hand) gets one line naming the key, exit code 2, no traceback, and no run
directory."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from offline_iaas import config_checks, config_numbers, config_section_rules
from offline_iaas.cli import main
from offline_iaas.config import CampaignConfig, load_config
from offline_iaas.config_numbers import ZERO_ALLOWED, must_be_positive, numeric_fields
from offline_iaas.errors import ConfigError
from offline_iaas.science.deepclean.settings import DeepCleanConfig
from tests.error_catalogue import cli_error, documented
from tests.helpers import WITNESSES, file_hashes

BAD_VALUES = ("nan", "inf", "-1")
FIELDS = sorted([*numeric_fields(CampaignConfig), *numeric_fields(DeepCleanConfig, "deepclean.")])
"""The core's numbers, and a mode package's section's (DeepClean's, in a mode that has it)."""
ALLOWED = frozenset(ZERO_ALLOWED) | {f"deepclean.{key}" for key in DeepCleanConfig.ZERO_ALLOWED}


def settings(key: str, value: str) -> list[str]:
    """``key=value``, in a campaign of a mode whose package has ``key``'s section."""
    mode = ['model.mode="e2e"', f"data.witnesses={WITNESSES}"] if key.startswith(
        "deepclean.") else []
    return [*mode, f"{key}={value}"]


def test_the_fields_are_found_from_the_dataclasses() -> None:
    keys = {key for key, _ in FIELDS}
    # a sample of each section's numbers, and no bool, str or path
    assert {"data.duration", "model.kernel_seconds", "merge.shard_seconds",
            "search.cluster_seconds", "client.read_seconds", "server.ready_timeout_seconds",
            "client.connect_timeout_seconds", "model.batch_size", "synth.seed",
            "deepclean.filter_order"} <= keys
    assert not keys & {"layout.rebalance", "deepclean.canary", "data.frames", "model.mode"}
    assert len(keys) > 60
    assert ALLOWED <= keys  # no rule names a key that is not there


def make_dag_refusal(config: Path, out: Path, given: list[str],
                     capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str]]:
    code = main(["make-dag", str(config), *(a for s in given for a in ("--set", s)),
                 "--out", str(out)])
    return code, capsys.readouterr().err.strip().splitlines()


def test_every_number_nan_inf_or_negative_is_one_line_naming_its_key_and_writes_nothing(
        small_config_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    accepted = []
    for key, _ in FIELDS:
        for bad in BAD_VALUES:
            code, lines = make_dag_refusal(small_config_file, out, settings(key, bad), capsys)
            if code != 2 or len(lines) != 1 or f"'{key}'" not in lines[0] or out.exists():
                accepted.append((key, bad, code, lines, out.exists()))
    assert accepted == []


def test_zero_is_refused_where_it_means_nothing(
        small_config_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    positive = [key for key, _ in FIELDS if must_be_positive(key, ALLOWED)]
    assert {"server.ready_timeout_seconds", "client.read_seconds", "data.duration"} <= set(
        positive)
    for key in positive:
        code, lines = make_dag_refusal(small_config_file, out, settings(key, "0"), capsys)
        assert (code, len(lines), f"'{key}'" in lines[0], out.exists()) == (2, 1, True, False)
    assert {"model.input_scale", "layout.servers", "model.batch_size"} <= set(positive)
    # the control: zero where it means something (one merge, no guard band) is a campaign
    load_config(small_config_file, ["merge.shard_seconds=0"])
    load_config(small_config_file, settings("deepclean.guard_hz", "0"))


@pytest.mark.parametrize(("setting", "message"), [
    ("client.failover_seconds=-1", "must not be negative (0: never fail over), got -1"),
    ("merge.shard_seconds=-4096", "must not be negative (0: one merge), got -4096"),
    ("server.ready_timeout_seconds=-1", "must not be negative, got -1"),
    ("layout.servers=0", "must be at least 1, got 0"),
    ("model.input_scale=0", "must be positive, got 0"),
])
def test_a_sign_refusal_says_what_zero_means_where_it_means_something(
        setting: str, message: str, small_config_file: Path) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(small_config_file, [setting])
    assert str(err.value).endswith(f"'{setting.split('=')[0]}' {message}")


def test_the_sign_rules_have_one_implementation() -> None:
    """``config_numbers.check_signs`` alone says a number is negative or zero: the rules of the
    sections and the search say more of a key, never its sign again."""
    def says_signs(module: object) -> bool:
        text = Path(module.__file__).read_text()  # type: ignore[attr-defined]
        return "must not be negative" in text or "must be positive, got" in text

    assert says_signs(config_numbers)  # the control: the check finds the rule where it is
    assert not says_signs(config_checks) and not says_signs(config_section_rules)


@pytest.mark.parametrize(("case", "setting"), [
    ("config-number-not-finite", "data.duration=nan"),
    ("config-number-negative", "server.ready_timeout_seconds=-1"),
    ("config-number-zero", "client.connect_timeout_seconds=0"),
])
def test_the_messages_through_the_command_line(
        case: str, setting: str, small_config_file: Path, tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "offline_iaas.cli", "make-dag", str(small_config_file),
         "--set", setting, "--out", str(tmp_path / "run")],
        capture_output=True, text=True, timeout=120)
    assert "Traceback" not in result.stderr and result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and not (tmp_path / "run").exists(), result.stderr
    prefix = "offline-iaas make-dag: error: "
    documented(case, lines[0].removeprefix(prefix), {small_config_file: "<ws>/campaign.toml"},
               exit_code=2)


def test_a_seed_beyond_64_bits_is_refused_before_synth_overwrites_the_frames(
        small_campaign_dir, capsys: pytest.CaptureFixture[str]) -> None:
    """synth.seed = 10**20 (synth wrote the frames, then HDF5 could not hold it) and
    model.seed = 2**63 (export: torch overflowed): exit 2, one line naming the key, the frames
    of the earlier synth and the repository as they were; 2**63 - 1 is a campaign."""
    ws = small_campaign_dir(export=False)
    config = str(ws / "campaign.toml")
    before = file_hashes(ws)
    for command, setting in (("synth", f"synth.seed={10**20}"), ("export", f"model.seed={2**63}")):
        code = main([command, config, "--set", setting])
        [line] = capsys.readouterr().err.strip().splitlines()
        key, value = setting.split("=")
        assert (code, f"'{key}'" in line) == (2, True), line
        assert file_hashes(ws) == before
        if command == "synth":
            documented("config-integer-beyond-64-bits", cli_error(line),
                       {config: "<ws>/campaign.toml"}, exit_code=code)
    assert load_config(ws / "campaign.toml", [f"synth.seed={2**63 - 1}"]).synth.seed == 2**63 - 1
