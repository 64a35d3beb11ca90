"""``plan --from-run``: a finished pilot's timings, scaled to a longer campaign of the config."""

from __future__ import annotations

import datetime
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from offline_iaas import records
from offline_iaas.cli import main
from offline_iaas.config import load_config, write_config
from offline_iaas.errors import ConfigError, RunError, exit_code
from offline_iaas.local_state import unix_seconds
from offline_iaas.records import PartRecord, Piece, read_run_info
from offline_iaas.rundir import RunDir
from offline_iaas.sizing.pilot import read_pilot
from offline_iaas.sizing.plan import plan_from_run
from offline_iaas.summaries import CampaignSummary
from tests.error_catalogue import documented
from tests.helpers import SMALL_CAMPAIGN, file_hashes


def pilot_of(run: Path):
    return read_pilot(RunDir(run))

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
        # each client streamed 32 s: 64 s in 8 s on 2 servers, 4 data-s/s each
        piece = Piece(0, i + 1, 0, 0, 128, 32.0 * i, 32.0 * (i + 1), 0.0, 64.0)
        records.write(PartRecord(
            complete=True, index=i, node=f"client{i}", server=f"server{i}", pieces=(piece,),
            stream_hash=config.stream_hash(), outputs=("statistic",), sha256="0" * 64,
            bytes=1, wall_seconds=last - first, peak_rss_mb=1.0, reconnects=0,
            first_request_unix=T0 + first, last_response_unix=T0 + last,
            tensor_bytes_sent=0, servers=(f"server{i}",)), run / "parts" / f"client{i}.json")
    merge_summary(run, config, wall_seconds=1.0)
    return run


def refused_as_damaged(plan: list[str], capsys: pytest.CaptureFixture) -> tuple[int, str]:
    """``plan``'s exit code (6: a damaged run record) and its one line, without its prefix;
    nothing on stdout and no traceback."""
    code = main(plan)
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert code == exit_code(RunError) == 6 and captured.out == "", captured
    assert len(err) == 1 and "Traceback" not in captured.err, err
    return code, err[0].removeprefix("offline-iaas plan: error: ")


def merge_summary(run: Path, config, **fields: object) -> None:
    """The merge's summary (``output/campaign.json``) with ``fields`` of its own run."""
    records.write(records.build(CampaignSummary, {
        "complete": True, "wall_seconds": 1.0, "cpu_seconds": 1.0, "peak_rss_mb": 1.0,
        "sha256": "0" * 64, "bytes": 1, "stream_hash": config.stream_hash(),
        "merge_hash": config.merge_hash(), "mode": config.model.mode, **fields}),
        run / "output" / "campaign.json")


def test_pilot_timings_come_from_the_run_directory(small_config_file: Path) -> None:
    pilot = read_pilot(RunDir(fake_pilot(small_config_file.parent, small_config_file)))
    assert pilot.data_seconds == 64 and pilot.config.layout.servers == 2
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
    plan = plan_from_run(config, 1.0, pilot_of(run))
    assert plan.per_server_rate == pytest.approx(4.0)
    assert plan.servers == 1
    # the pilot merged 64 s in 1 s: 64 data-s/s per merge node. The largest shard merge that
    # takes at most 2 % of the 1024 s of streaming: 1024 s (16 s; 2048 s would take 32 s)
    assert plan.merge_shard_seconds == 1024
    assert "merge.shard_seconds=1024" in plan.overrides()
    # start-up 4 + 4096 / 4 + (last shard 1024 / 64 + index 0 + a job's start-up 2.8 - 1)
    # + rest 3
    tail = 1024 / 64 + 1.8
    assert plan.wall_seconds == pytest.approx(4 + 1024 + tail + 3)
    assert plan.pilot_layout["wall_seconds"] == pytest.approx(4 + 512 + tail + 3)
    assert plan.stages["merge_seconds"] == pytest.approx(tail)
    # a deadline of 0.05 h = 180 s needs 22.8 data-s/s x 1.25 / 4 -> 8 servers
    assert plan_from_run(config, 0.05, pilot_of(run)).servers == 8
    assert plan.to_dict()["expected_wall_seconds"] == pytest.approx(1048.8)


def test_plan_from_a_sharded_pilot_takes_the_shard_merges_throughput(
        small_config_file: Path) -> None:
    run = fake_pilot(small_config_file.parent, small_config_file)
    # two shard merges of 32 s each in 0.25 s: 128 data-s/s per node; the index 0.5 s
    merge_summary(run, load_config(run / "campaign.toml"), wall_seconds=0.5, shards=2,
                  shard_wall_seconds={"total": 0.5, "max": 0.25}, shard_data_seconds=64.0)
    pilot = read_pilot(RunDir(run))
    assert pilot.merge_rate == pytest.approx(128.0) and pilot.index_seconds == 0.5
    assert pilot.merge_seconds == pytest.approx(15.0 - 12.0)  # last response to the index's end
    config = load_config(small_config_file, ["data.duration=65536"])
    plan = plan_from_run(config, 10.0, pilot_of(run))
    # 65536 / 4 = 16384 s of streaming on one server: 2 % is 328 s; 32768 / 128 = 256 s fits
    assert plan.servers == 1 and plan.merge_shard_seconds == 32768
    assert plan.stages["merge_seconds"] == pytest.approx(256 + 0.5 + 2.3)


def test_plan_refuses_an_unfinished_pilot_or_one_of_another_stream(
    small_config_file: Path,
) -> None:
    run = fake_pilot(small_config_file.parent, small_config_file, finished=False)
    with pytest.raises(RunError, match="not a finished run .*merge"):
        read_pilot(RunDir(run))
    other = fake_pilot(small_config_file.parent / "b", small_config_file)
    config = load_config(small_config_file, ["model.kernel_seconds=2"])
    with pytest.raises(ConfigError, match="run a pilot of this config"):
        plan_from_run(config, 1.0, pilot_of(other))


def test_plan_from_a_run_that_run_local_has_not_run_is_a_run_error(
        small_config_file: Path, capsys: pytest.CaptureFixture) -> None:
    """A pilot without run-local's record (made by make-dag, never run): exit 6, one line
    naming the run and what to do, not the config exit code."""
    run = fake_pilot(small_config_file.parent, small_config_file)
    (run / "local-state.json").unlink()
    capsys.readouterr()
    code = main(["plan", str(small_config_file), "--target-hours", "1", "--from-run", str(run)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == exit_code(RunError) == 6
    assert err == [f"offline-iaas plan: error: {run}: not a finished run (no local-state.json: "
                   "run it with offline-iaas run-local first)"]
    documented("pilot-not-run", err[0].removeprefix("offline-iaas plan: error: "),
               {run: "<pilot>"}, exit_code=code)


def test_plan_refuses_a_pilot_whose_node_time_is_not_a_time_naming_the_file_and_field(
        small_config_file: Path, capsys: pytest.CaptureFixture) -> None:
    """A node's ``started`` in local-state.json that is not an ISO time: exit 6, one line
    naming the file and the field (before: a ValueError traceback from fromisoformat); the
    undamaged pilot plans (the control) and the file is left as it was."""
    run = fake_pilot(small_config_file.parent, small_config_file)
    plan = ["plan", str(small_config_file), "--target-hours", "1", "--from-run", str(run)]
    assert main(plan) == 0
    state = json.loads((run / "local-state.json").read_text())
    state["nodes"]["merge"]["started"] = "garbage"
    (run / "local-state.json").write_text(json.dumps(state))
    before = file_hashes(run)
    capsys.readouterr()
    code, message = refused_as_damaged(plan, capsys)
    assert message.startswith(f"{run / 'local-state.json'}: field nodes.merge.started: ")
    assert file_hashes(run) == before
    documented("local-state-bad-time", message, {run: "<pilot>"}, exit_code=code)


def test_a_pilot_time_without_its_utc_offset_is_refused_not_read_as_local_time(
        small_config_file: Path, capsys: pytest.CaptureFixture) -> None:
    """run-local writes every time with its UTC offset; one without it was read as this
    machine's local time (a node's duration hours off where the clocks' zones differ)."""
    run = fake_pilot(small_config_file.parent, small_config_file)
    plan = ["plan", str(small_config_file), "--target-hours", "1", "--from-run", str(run)]
    state = json.loads((run / "local-state.json").read_text())
    started = state["nodes"]["merge"]["started"]
    assert started[-6] in "+-" and main(plan) == 0  # the control: with its offset
    state["nodes"]["merge"]["started"] = started[:-6]
    (run / "local-state.json").write_text(json.dumps(state))
    capsys.readouterr()
    assert main(plan) == 6
    message = capsys.readouterr().err.strip().removeprefix("offline-iaas plan: error: ")
    assert message.startswith(f"{run / 'local-state.json'}: field nodes.merge.started: "), message
    assert "an ISO 8601 time without its UTC offset" in message


def test_local_state_times_are_unix_seconds_whatever_their_zone() -> None:
    """``local_state.unix_seconds``: the one conversion of status, the timeline and pilot."""
    assert unix_seconds("1970-01-01T01:00:10+01:00") == unix_seconds("1970-01-01T00:00:10Z") == 10
    assert unix_seconds(None) is None


@pytest.mark.parametrize(("option", "value", "message"), [
    ("--failure-rate", "2", "--failure-rate must be in [0, 1], not 2"),
    ("--failure-rate", "-0.5", "--failure-rate must be in [0, 1], not -0.5"),
    ("--failure-rate", "nan", "--failure-rate must be in [0, 1], not nan"),
    ("--replications", "0", "--replications must be at least 1, not 0"),
    ("--replications", "1000000000", "--replications must be at most 10,000 (each replays the "
     "whole DAG), not 1,000,000,000"),
])
def test_plan_simulate_refuses_an_option_out_of_range_naming_it(
        small_config_file: Path, capsys: pytest.CaptureFixture, option: str, value: str,
        message: str) -> None:
    """Exit 2 and one line naming the option (not a ValueError's traceback); nothing of the
    pilot changes."""
    run = fake_pilot(small_config_file.parent, small_config_file)
    before = file_hashes(run)
    capsys.readouterr()
    code = main(["plan", str(small_config_file), "--simulate", str(run), "--from-run",
                 str(run), option, value])
    captured = capsys.readouterr()
    assert code == exit_code(ConfigError) == 2 and "Traceback" not in captured.err
    assert captured.err.strip().splitlines() == [f"offline-iaas plan: error: {message}"]
    assert captured.out == "" and file_hashes(run) == before
    if value == "2":
        documented("plan-simulate-option-out-of-range", message, exit_code=code)
    if value == "1000000000":
        documented("plan-simulate-too-many-replications", message, exit_code=code)


def test_plan_simulate_takes_up_to_the_most_replications_and_its_help_says_so(
        small_config_file: Path, capsys: pytest.CaptureFixture, monkeypatch) -> None:
    """``--replications`` is bounded (before, 10^9 ran for ever): the most is taken (the
    control), one more is refused with exit 2, and ``plan --help`` names the bound."""
    from offline_iaas.sizing.replay import MAX_REPLICATIONS, FailureModel
    from offline_iaas.workflow.make_dag import make_dag
    from tests.helpers import skip_data_check

    pilot = fake_pilot(small_config_file.parent, small_config_file)
    skip_data_check(monkeypatch)
    target = small_config_file.parent / "target"
    make_dag(load_config(small_config_file, ["layout.servers=1", "merge.shard_seconds=0"]),
             RunDir(target))
    simulate = ["plan", str(small_config_file), "--simulate", str(target), "--from-run",
                str(pilot), "--json", "--replications"]
    assert main([*simulate, str(MAX_REPLICATIONS)]) == 0  # no failures: replayed once
    assert main([*simulate, str(MAX_REPLICATIONS + 1)]) == exit_code(ConfigError)
    with pytest.raises(ValueError, match=r"replications must be in \[1, 10000\]"):
        FailureModel(replications=MAX_REPLICATIONS + 1)
    capsys.readouterr()
    with pytest.raises(SystemExit):
        main(["plan", "--help"])
    assert f"(1 to {MAX_REPLICATIONS:,})" in " ".join(capsys.readouterr().out.split())


def test_plan_json_prints_the_expected_rate_and_wall_time(small_config_file: Path) -> None:
    run = fake_pilot(small_config_file.parent, small_config_file)
    result = subprocess.run(
        [sys.executable, "-m", "offline_iaas.cli", "plan", str(small_config_file),
         "--set", "data.duration=4096", "--target-hours", "1", "--from-run", str(run),
         "--json"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    assert plan["expected_data_seconds_per_second_per_server"] == pytest.approx(4.0)
    assert plan["expected_wall_seconds"] == pytest.approx(1048.8)
    assert plan["critical_path"]["merge_seconds"] == pytest.approx(17.8)
    assert plan["servers"] == 1 and plan["from"] == str(run)


def test_plan_simulate_replays_a_run_with_the_pilots_rates(small_config_file: Path,
                                                           monkeypatch) -> None:
    from offline_iaas.job_specs import read_client_job
    from offline_iaas.sizing.simulate import simulate_run
    from offline_iaas.workflow.make_dag import make_dag
    from tests.helpers import skip_data_check

    pilot = fake_pilot(small_config_file.parent, small_config_file)
    skip_data_check(monkeypatch)
    config = load_config(small_config_file, ["layout.servers=1", "merge.shard_seconds=0"])
    target = small_config_file.parent / "target"
    make_dag(config, RunDir(target))
    work = sum(read_client_job(RunDir(target), n).streamed_seconds
               for n in ("client0", "client1"))
    result = simulate_run(RunDir(target), pilot_of(pilot))
    # server ready at 4 s (the pilot's start-up); both clients share its 4 data-s/s; the
    # merge (64 s at the pilot's 64 data-s/s) and FINAL (0.5 s) each after a 1.8 s job start
    assert result.makespan_seconds == pytest.approx(4 + work / 4 + 1.8 + 1 + 1.8 + 0.5)
    assert result.makespan_seconds != pytest.approx(4 + work / 4 + 1.8 + 1 + 1.8 + 1.5)
    assert list(result.critical_path)[-2:] == ["merge", "final"]
    cli = subprocess.run(
        [sys.executable, "-m", "offline_iaas.cli", "plan", str(small_config_file),
         "--simulate", str(target), "--json"], capture_output=True, text=True)
    assert cli.returncode == 2 and "needs --from-run" in cli.stderr


def test_plan_never_recommends_a_sharding_make_dag_refuses(tmp_path: Path) -> None:
    """A month in one stretch and a slow merge: the fastest shard merges (1024 s) would put
    2,532 shards in the stretch, more than the index holds; plan recommends the least shard
    make-dag takes, and make-dag takes the whole recommendation."""
    from offline_iaas.merge.tree import MAX_SHARDS_PER_STRETCH
    from offline_iaas.sizing.feasible import refusal
    from offline_iaas.sizing.pilot import PilotRun

    start, month = 1_000_000_000, 30 * 86400
    cache = tmp_path / "frames.lcf"
    cache.write_text("".join(
        f"{o} {o}1_X {g} 4096 file://localhost/nowhere/{o}-{o}1_X-{g}-4096.gwf\n"
        for o in "HL" for g in range(start, start + month + 4096, 4096)))
    config_file = tmp_path / "month.toml"
    config_file.write_text(SMALL_CAMPAIGN.replace('frames = "frames"', f'frames = "{cache}"')
                           .replace("start = 1262304000", f"start = {start}"))
    config = load_config(config_file, [f"data.duration={month}"])
    pilot_config = load_config(config_file)  # 64 s, 1 server x 2 clients
    # streaming 16 data-s/s (the month in 162,000 s); the merge 0.5 data-s/s, so slow that no
    # shard make-dag takes merges within 2 % of the streaming (2048 s would take 4096 s)
    pilot = PilotRun(RunDir(tmp_path / "pilot"), pilot_config, run_seconds=200.0,
                     start_seconds=5.0, streaming_seconds=4.0, merge_seconds=128.0,
                     merge_rate=0.5, index_seconds=1.0, shards=1, job_start_seconds=1.0)
    refused = refusal(config, ["merge.shard_seconds=1024"])
    assert refused is not None and f"at most {MAX_SHARDS_PER_STRETCH} per stretch" in refused
    plan = plan_from_run(config, 100.0, pilot)
    assert plan.merge_shard_seconds == 2048  # the least power of two within 2000 shards
    assert refusal(config, plan.overrides()) is None
    run = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-m", "offline_iaas.cli", "make-dag", str(config_file), "--out",
         str(run), "--no-check", "-q", "--set", f"data.duration={month}",
         *(a for o in plan.overrides() for a in ("--set", o))],
        capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    shards = read_run_info(RunDir(run)).shards
    assert len(shards) == math.ceil(month / 2048) <= MAX_SHARDS_PER_STRETCH


@pytest.mark.parametrize("first, last", [(12.0, 4.0), (8.0, 8.0)], ids=["after", "equal"])
def test_plan_refuses_a_pilot_whose_client_answered_before_it_asked(
        small_config_file: Path, capsys: pytest.CaptureFixture, first: float,
        last: float) -> None:
    """A part sidecar whose ``last_response_unix`` is not after its ``first_request_unix``:
    exit 6, one line naming the sidecar and the field (before: every part so gave a negative
    streaming time, a wall time of -298 s and servers=1 with exit 0; equal times a
    ZeroDivisionError traceback); the undamaged pilot plans (the control)."""
    run = fake_pilot(small_config_file.parent, small_config_file)
    plan = ["plan", str(small_config_file), "--target-hours", "1", "--from-run", str(run)]
    assert main(plan) == 0
    for part in sorted((run / "parts").glob("*.json")):
        data = json.loads(part.read_text())
        data["first_request_unix"], data["last_response_unix"] = T0 + first, T0 + last
        part.write_text(json.dumps(data))
    before = file_hashes(run)
    capsys.readouterr()
    code, message = refused_as_damaged(plan, capsys)
    parts = run / "parts"
    assert message.startswith(f"{parts / 'client0.json'}, {parts / 'client1.json'}: field "
                              "last_response_unix is not after first_request_unix"), message
    assert file_hashes(run) == before
    if first > last:
        documented("pilot-response-before-request", message, {run: "<pilot>"}, exit_code=code)


def _node_times(run: Path, node: str, started: float, ended: float,
                history: list[float] | None = None) -> None:
    """Set ``node``'s start and end in the pilot's local state (``history``: the start of an
    earlier attempt, which ended at ``started``)."""
    path = run / "local-state.json"
    state = json.loads(path.read_text())
    state["nodes"][node].update(started=iso(started), ended=iso(ended))
    if history is not None:
        state["nodes"][node]["history"] = [
            {"attempt": 1, "status": "failed", "started": iso(t), "ended": iso(started)}
            for t in history]
    path.write_text(json.dumps(state))


@pytest.mark.parametrize("started, ended", [(0.5, 3.0), (11.0, 12.2), (0.5, 9.0)],
                         ids=["ended-before-its-first-request", "started-after-it",
                              "ended-before-its-last-response"])
def test_plan_refuses_a_pilot_whose_part_lies_outside_its_nodes_run(
        small_config_file: Path, capsys: pytest.CaptureFixture, started: float,
        ended: float) -> None:
    """local-state.json says client0 ran from ``started`` to ``ended`` while its sidecar's
    requests ran from 4.0 to 10.5 s: exit 6, one line naming the sidecar and the state (before:
    planned from it, exit 0); the pilot as run-local left it plans (the control)."""
    run = fake_pilot(small_config_file.parent, small_config_file)
    plan = ["plan", str(small_config_file), "--target-hours", "1", "--from-run", str(run)]
    assert main(plan) == 0
    _node_times(run, "client0", started, ended)
    capsys.readouterr()
    code, message = refused_as_damaged(plan, capsys)
    assert message.startswith(
        f"{run / 'parts' / 'client0.json'}: the part's requests (first_request_unix to "
        f"last_response_unix) are not within its node's run in {run / 'local-state.json'}"), \
        message
    if started == 0.5 and ended == 3.0:
        documented("pilot-part-outside-its-node", message, {run: "<pilot>"}, exit_code=code)


@pytest.mark.parametrize("started, ended, history", [
    (0.5, 10.0, None), (4.8, 11.0, None), (10.8, 11.0, [0.5])],
    ids=["end-0.5-s-early", "start-0.8-s-late", "a-retry-found-the-part-complete"])
def test_a_pilot_whose_part_is_within_its_nodes_run_and_the_tolerance_plans(
        small_config_file: Path, started: float, ended: float,
        history: list[float] | None) -> None:
    """The check allows ``pilot.CLOCK_TOLERANCE_SECONDS`` (1 s) either side, and takes a node's
    run from its first attempt: one attempt wrote the part and failed after, the next found it
    complete (its own start after the part's first request)."""
    run = fake_pilot(small_config_file.parent, small_config_file)
    _node_times(run, "client0", started, ended, history)
    assert read_pilot(RunDir(run)).streaming_seconds == pytest.approx(8.0)


@pytest.mark.parametrize("record, field, value", [
    ("parts/client0.json", "first_request_unix", "NaN"),
    ("parts/client1.json", "last_response_unix", "-Infinity"),
    ("output/campaign.json", "shard_data_seconds", "NaN"),
])
def test_plan_refuses_a_pilot_record_number_that_is_not_finite_naming_file_and_field(
        small_config_file: Path, capsys: pytest.CaptureFixture, record: str, field: str,
        value: str) -> None:
    """A time or amount of a pilot's records that is NaN or infinite: exit 6, one line naming
    the file and the field (before: a ValueError or ZeroDivisionError traceback, or a NaN
    wall time with exit 0 and ``--json`` printing NaN, which is no JSON); a finite value in
    the same place plans (the control)."""
    run = fake_pilot(small_config_file.parent, small_config_file)
    plan = ["plan", str(small_config_file), "--target-hours", "1", "--from-run", str(run),
            "--json"]
    path = run / record
    data = json.loads(path.read_text())
    data[field] = data.get(field) or 64.0  # control: a finite number there plans
    path.write_text(json.dumps(data))
    assert main(plan) == 0
    capsys.readouterr()
    path.write_text(json.dumps(data).replace(f'"{field}": {json.dumps(data[field])}',
                                             f'"{field}": {value}'))
    code, message = refused_as_damaged(plan, capsys)
    assert message.startswith(f"{path}: field {field}: Input should be a finite number"), message
    if value == "NaN" and record.startswith("parts"):
        documented("record-number-not-finite", message, {run: "<pilot>"}, exit_code=code)


@pytest.mark.parametrize("options", [["--failure-rate", "0.5", "--never-start", "server0"],
                                     ["--never-start", "server0"], ["--replications", "5"],
                                     ["--seed", "3"], ["--seed", "0"],
                                     ["--replications", "20"]])
def test_plan_refuses_a_simulate_option_without_simulate_naming_it(
        small_config_file: Path, capsys: pytest.CaptureFixture, options: list[str]) -> None:
    """``--failure-rate``, ``--never-start``, ``--replications`` or ``--seed`` without
    ``--simulate``: exit 2, one line naming the option (before: silently ignored, a plan
    without failures printed with exit 0); the plan without them is made (the control)."""
    run = fake_pilot(small_config_file.parent, small_config_file)
    plan = ["plan", str(small_config_file), "--target-hours", "1", "--from-run", str(run)]
    assert main(plan) == 0
    capsys.readouterr()
    code = main(plan + options)
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert code == exit_code(ConfigError) == 2 and captured.out == "", captured
    message = err[0].removeprefix("offline-iaas plan: error: ")
    assert len(err) == 1 and message.startswith(f"plan {options[0]} needs --simulate RUN"), err
    if len(options) == 4:
        documented("plan-simulate-option-without-simulate", message, exit_code=code)


def test_plan_refuses_a_deadline_that_needs_more_servers_than_it_recommends(
        small_config_file: Path, capsys: pytest.CaptureFixture) -> None:
    """``--target-hours 1e-300``: exit 2, one readable line (before: a 300-digit
    ``layout.servers`` in make-dag's refusal); the most servers ``plan`` recommends is still
    recommended (the control)."""
    from offline_iaas.sizing.plan import HEADROOM, MOST_SERVERS, servers_needed

    run = fake_pilot(small_config_file.parent, small_config_file)
    # 4 data-s/s per server: MOST_SERVERS of them are recommended, one more refused
    assert servers_needed(MOST_SERVERS * 4.0 / HEADROOM, 4.0, 1.0) == MOST_SERVERS
    with pytest.raises(ConfigError, match="more than 100,000"):
        servers_needed(MOST_SERVERS * 4.0 * 1.01 / HEADROOM, 4.0, 1.0)
    capsys.readouterr()
    code = main(["plan", str(small_config_file), "--target-hours", "1e-300", "--from-run",
                 str(run)])
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert code == exit_code(ConfigError) == 2 and captured.out == "", captured
    message = err[0].removeprefix("offline-iaas plan: error: ")
    assert len(err) == 1 and len(message) < 200, err
    documented("plan-servers-beyond-bound", message, exit_code=code)
