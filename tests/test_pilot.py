"""``plan --from-run``: a finished pilot's timings, scaled to a longer campaign of the config."""

from __future__ import annotations

import datetime
import json
import subprocess
import sys
from pathlib import Path

import pytest

from offline_iaas.bench.capacity import plan_from_run
from offline_iaas.config import load_config, write_config
from offline_iaas.errors import ConfigError
from offline_iaas.workflow.pilot import read_pilot

T0 = 1_800_000_000.0


def iso(seconds: float) -> str:
    return datetime.datetime.fromtimestamp(T0 + seconds, datetime.UTC).isoformat()


def fake_pilot(root: Path, config_file: Path, finished: bool = True) -> Path:
    """A run directory as run-local leaves it: 2 servers x 1 client, 64 s of data; start-up
    4 s, streaming 8 s (from 4 to 12 s), merge node 12-15 s of which 1 s is work, end at 16 s."""
    run = root / "pilot"
    (run / "parts").mkdir(parents=True)
    (run / "output").mkdir()
    config = load_config(config_file, ["layout.servers=2", "layout.clients_per_server=1"])
    write_config(config, run / "campaign.toml")
    nodes = {
        "server0": (0.0, 16.0), "server1": (0.0, 16.0), "client0": (0.5, 11.0),
        "client1": (0.5, 12.2), "merge": (12.2, 15.0), "final": (15.0, 15.5),
    }
    state = {name: {"started": iso(a), "ended": iso(b) if finished or name != "merge" else None}
             for name, (a, b) in nodes.items()}
    (run / "local-state.json").write_text(json.dumps({"nodes": state}))
    for i, (first, last) in enumerate([(4.0, 10.5), (4.2, 12.0)]):
        (run / "parts" / f"client{i}.json").write_text(json.dumps(
            {"first_request_unix": T0 + first, "last_response_unix": T0 + last}))
    (run / "output" / "campaign.json").write_text(json.dumps({"wall_seconds": 1.0}))
    return run


def test_pilot_timings_come_from_the_run_directory(small_config_file: Path) -> None:
    pilot = read_pilot(fake_pilot(small_config_file.parent, small_config_file))
    assert pilot.data_seconds == 64 and pilot.servers == 2
    assert pilot.run_seconds == pytest.approx(16.0)
    assert pilot.start_seconds == pytest.approx(4.0)
    assert pilot.streaming_seconds == pytest.approx(8.0)
    assert pilot.merge_seconds == pytest.approx(1.0)
    assert pilot.other_seconds == pytest.approx(3.0)
    assert pilot.streaming_rate == pytest.approx(8.0)


def test_plan_from_run_scales_streaming_and_merge_with_the_data(small_config_file: Path) -> None:
    run = fake_pilot(small_config_file.parent, small_config_file)
    # 4096 s of data: 4 data-s/s per server; 1 h target needs 1.14 data-s/s -> 1 server
    config = load_config(small_config_file, ["data.duration=4096"])
    plan = plan_from_run(config, 1.0, run)
    assert plan.per_server_rate == pytest.approx(4.0)
    assert plan.servers == 1
    # start-up 4 + 4096 / 4 + merge 1 x 64 + rest 3
    assert plan.wall_seconds == pytest.approx(4 + 1024 + 64 + 3)
    assert plan.pilot_layout["wall_seconds"] == pytest.approx(4 + 512 + 64 + 3)
    # a deadline of 0.05 h = 180 s needs 22.8 data-s/s x 1.25 / 4 -> 8 servers
    assert plan_from_run(config, 0.05, run).servers == 8
    assert plan.to_dict()["expected_wall_seconds"] == pytest.approx(1095.0)


def test_plan_refuses_an_unfinished_pilot_or_one_of_another_stream(
    small_config_file: Path,
) -> None:
    run = fake_pilot(small_config_file.parent, small_config_file, finished=False)
    with pytest.raises(ConfigError, match="not a finished run .*merge"):
        read_pilot(run)
    other = fake_pilot(small_config_file.parent / "b", small_config_file)
    config = load_config(small_config_file, ["model.kernel_seconds=2"])
    with pytest.raises(ConfigError, match="run a pilot of this config"):
        plan_from_run(config, 1.0, other)


def test_plan_json_prints_the_expected_rate_and_wall_time(small_config_file: Path) -> None:
    run = fake_pilot(small_config_file.parent, small_config_file)
    result = subprocess.run(
        [sys.executable, "-m", "offline_iaas.cli", "plan", str(small_config_file),
         "--set", "data.duration=4096", "--target-hours", "1", "--from-run", str(run),
         "--json"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    assert plan["expected_data_seconds_per_second_per_server"] == pytest.approx(4.0)
    assert plan["expected_wall_seconds"] == pytest.approx(1095.0)
    assert plan["servers"] == 1 and plan["from"] == str(run)
