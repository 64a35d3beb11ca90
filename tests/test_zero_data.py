"""A campaign whose every frame file was bad (``data.on_bad_file = "gap"``) analysed nothing,
and says so: the merge fails with one line naming where the bad files are listed, its
``campaign.json`` is not complete, and ``status`` counts analysed seconds (none), not planned
ones. Parts are written by the clients' own writer (``client/part.py``) with every row in a
gap, as a client that met only bad files leaves them; no server is started (the campaign
through run-local: ``tests/test_bad_frames.py``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from offline_iaas.cli import main
from offline_iaas.client.part import PartWriter
from offline_iaas.config import config_from_dict, load_config
from offline_iaas.errors import DataError, exit_code
from offline_iaas.job_specs import read_client_job
from offline_iaas.merge.merge import merge
from offline_iaas.merge.shard_merge import merge_shard
from offline_iaas.records import BadFile, read_run_info
from offline_iaas.rundir import RunDir
from offline_iaas.workflow.make_dag import make_dag
from offline_iaas.workflow.status import read_status, status_lines
from tests.error_catalogue import documented
from tests.helpers import complete_part, node_complete, skip_data_check

START = 1_000_000_000
FILE_SECONDS = 16


def write_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shard_seconds: float) -> RunDir:
    skip_data_check(monkeypatch)
    raw = {
        "data": {"frames": "f", "channels": ["H1:X", "L1:X"], "start": START, "duration": 64,
                 "sample_rate": 256, "on_bad_file": "gap"},
        "model": {"repository": "repo", "kernel_seconds": 1.0, "inference_rate": 4},
        "layout": {"servers": 1, "clients_per_server": 2},
        "merge": {"shard_seconds": shard_seconds},
    }
    run = RunDir(tmp_path / "run")
    make_dag(config_from_dict(raw, tmp_path / "c.toml"), run)
    return run


def bad_file(gps_start: float) -> BadFile:
    return BadFile(path=f"/frames/H-H1_SYNTH-{gps_start:.0f}-{FILE_SECONDS}.gwf",
                   gps_start=gps_start, gps_end=gps_start + FILE_SECONDS,
                   error="the frame library crashed (SIGSEGV) reading it (truncated or corrupt?)")


def every_file_bad(run: RunDir) -> list[BadFile]:
    """Each client's part as a client leaves it when every file it met was bad: the files
    recorded, every row NaN."""
    config = load_config(run.config)
    bad = [bad_file(START + k * FILE_SECONDS) for k in range(4)]
    for node in read_run_info(run).clients:
        segment = read_client_job(run, node)
        writer = PartWriter(run, segment, config.outputs.names, config.stream_hash())
        for entry in bad:
            writer.add_bad_file(entry, {})
        writer.commit(holes=[[(0, piece.windows)] for piece in segment.pieces])
    return bad


def leftovers(run: RunDir) -> list[str]:
    return sorted(p.name for p in run.path.rglob("*") if p.name.endswith(".tmp"))


@pytest.mark.parametrize("shard_seconds", [0, 4096], ids=["single merge", "shards and index"])
def test_a_merge_over_no_analysed_data_fails_naming_the_list(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shard_seconds: float,
        capsys: pytest.CaptureFixture[str], log_lines: list[str]) -> None:
    run = write_run(tmp_path, monkeypatch, shard_seconds)
    bad = every_file_bad(run)
    if shard_seconds:  # a shard may own nothing but gaps: it succeeds and says so
        merge_shard(run, "shard0")
        assert any("merge-shard: shard0 (GPS" in line and "0 of its 63 s of data, the rest in "
                   "gaps of 4 bad frame file(s)" in line for line in log_lines), log_lines
        record = json.loads(run.shard_output("shard0")[1].read_text())
        assert record["analysed_seconds"] == 0 and record["data_seconds"] == 63.25
    with pytest.raises(DataError) as err:
        merge(run)
    message = str(err.value)
    documented("no-data-analysed", message, {run.path: "RUN"}, exit_code=exit_code(DataError))
    assert "\n" not in message
    assert message.startswith("no data analysed: every frame file of the span was bad (4 found bad")
    assert message.endswith(f"the list is in {run.output[1]} (bad_frame_files)")
    record = json.loads(run.output[1].read_text())
    assert record["complete"] is False and record["analysed_seconds"] == 0
    assert [e["path"] for e in record["bad_frame_files"]] == [e.path for e in bad]
    assert not run.output[0].exists() and leftovers(run) == []
    assert not node_complete(run, "merge")

    # the command: exit code 3 (DataError) and the one line
    capsys.readouterr()
    assert main(["merge", "--run-dir", str(run.path)]) == exit_code(DataError)
    (line,) = capsys.readouterr().err.splitlines()
    assert line == f"offline-iaas merge: error: {message}"

    # status: nothing analysed, all of it lost to the bad files; never 100 %
    status = read_status(run)
    assert (status.data_seconds_done, status.data_seconds_total) == (0, 0)
    assert status.data_seconds_lost == 63.25 and status.bad_frame_files == 4
    assert not status.output_complete
    assert "data seconds done: 0.0 of 0.0 (0%); 63.2 s lost to 4 bad frame file(s)" in (
        status_lines(status))


def test_status_counts_analysed_seconds_not_planned_ones(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = write_run(tmp_path, monkeypatch, 0)
    specs = {n: json.loads(run.job(n).read_text()) for n in ("client0", "client1")}
    stride = 0.25
    planned = {n: sum(p["output_stop"] - p["output_start"] for p in s["pieces"]) * stride
               for n, s in specs.items()}
    # client0 met one bad file [START + 16, START + 32): its part is complete around the gap
    complete_part(run, "client0", bad_files=(bad_file(START + 16),))
    status = read_status(run)
    # the gap costs its 16 s and a warm-up (0.75 s: 1 s kernel, 0.25 s stride) after it
    lost = 16 + 0.75
    assert status.data_seconds_lost == lost and status.bad_frame_files == 1
    assert status.data_seconds_total == sum(planned.values()) - lost
    # client0's windows end in [0.75, 0.75 + 31.5) s of the span: inside the gap and its
    # warm-up [16, 32.75) from 16 s on, so it analysed 16 - 0.75 s
    assert planned["client0"] == 31.5 and 0.75 + 31.5 < 32.75
    assert status.data_seconds_done == 16 - 0.75
    # the control: without the bad file, the planned seconds
    complete_part(run, "client0")
    status = read_status(run)
    assert status.data_seconds_done == planned["client0"] and status.data_seconds_lost == 0
