"""``offline-iaas status``: a run not started, in progress (run-local's state or DAGMan's node
status file), finished; and the FINAL node's summary."""

from __future__ import annotations

import json
import os
import time
from datetime import datetime, timedelta
from pathlib import Path
from types import SimpleNamespace

import pytest

from offline_iaas.cli import main
from offline_iaas.config import config_from_dict
from offline_iaas.errors import RunError
from offline_iaas.rundir import RunDir
from offline_iaas.workflow.make_dag import make_dag
from offline_iaas.workflow.status import (
    final_summary,
    read_final_summary,
    read_status,
    status_lines,
)
from tests import helpers
from tests.helpers import skip_data_check

STRIDE = 0.25  # 256 Hz, 4 Hz inference rate


def planned_run(tmp_path: Path, servers: int) -> Path:
    """make-dag's run directory of 64 s on ``servers`` servers of two clients each, one merge
    node (shard merges: test_merge_tree.py)."""
    raw = {
        "data": {"frames": "f", "channels": ["H1:X", "L1:X"], "start": 1_000_000_000,
                 "duration": 64, "sample_rate": 256},
        "model": {"repository": "repo", "kernel_seconds": 1.0, "inference_rate": 4},
        "layout": {"servers": servers, "clients_per_server": 2},
        "merge": {"shard_seconds": 0},
    }
    run_dir = tmp_path / "run"
    make_dag(config_from_dict(raw, tmp_path / "c.toml"), RunDir(run_dir))
    return run_dir


@pytest.fixture
def run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    skip_data_check(monkeypatch)
    return planned_run(tmp_path, servers=1)


def kept_seconds(run: Path, node: str) -> float:
    spec = json.loads((run / "jobs" / f"{node}.json").read_text())
    streams = spec.get("pieces", [spec])
    return sum(p["output_stop"] - p["output_start"] for p in streams) * STRIDE


def complete_part(run: Path, node: str) -> None:
    helpers.complete_part(RunDir(run), node)


def ago(seconds: float, now: float | None = None) -> str:
    """The ISO time ``seconds`` before ``now`` (a Unix time; default: now)."""
    at = datetime.now() if now is None else datetime.fromtimestamp(now)
    return (at.astimezone() - timedelta(seconds=seconds)).isoformat()


def local_state(run: Path, nodes: dict[str, dict]) -> None:
    (run / "local-state.json").write_text(json.dumps({"nodes": nodes}))


def test_not_started(run: Path) -> None:
    status = read_status(RunDir(run))
    assert status.source == "files only (not started)"
    assert {n.name: n.state for n in status.nodes} == {
        "server0": "waiting", "client0": "waiting", "client1": "waiting", "merge": "waiting",
        "final": "waiting",
    }
    assert status.data_seconds_done == 0 and status.eta_seconds is None
    total = kept_seconds(run, "client0") + kept_seconds(run, "client1")
    assert status.data_seconds_total == total


def test_in_progress_from_run_local(run: Path, capsys: pytest.CaptureFixture[str],
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    now = time.time()  # status's clock stopped here: the elapsed time is exact however slow
    monkeypatch.setattr("offline_iaas.workflow.status.time", SimpleNamespace(time=lambda: now))
    complete_part(run, "client0")
    local_state(run, {
        "server0": {"kind": "SERVICE", "status": "running", "attempts": 1,
                    "started": ago(20, now)},
        "client0": {"kind": "JOB", "status": "done", "attempts": 1, "started": ago(20, now),
                    "ended": ago(10, now), "exit_code": 0},
        "client1": {"kind": "JOB", "status": "running", "attempts": 2, "started": ago(5, now)},
        "merge": {"kind": "JOB", "status": "pending", "attempts": 0},
        "final": {"kind": "FINAL", "status": "pending", "attempts": 0},
    })
    status = read_status(RunDir(run))
    states = {n.name: (n.state, n.retries) for n in status.nodes}
    assert states == {"server0": ("running", 0), "client0": ("done", 0),
                      "client1": ("running", 1), "merge": ("waiting", 0),
                      "final": ("waiting", 0)}
    done, left = kept_seconds(run, "client0"), kept_seconds(run, "client1")
    assert status.data_seconds_done == done
    assert status.elapsed_seconds == pytest.approx(20, abs=1e-3)
    assert status.eta_seconds == pytest.approx(left / (done / status.elapsed_seconds), rel=0.01)

    assert main(["status", str(run)]) == 0
    out = capsys.readouterr().out
    assert "node states from run-local (local-state.json)" in out
    assert f"data seconds done: {done:.1f} of {done + left:.1f}" in out
    assert "nodes: 4 (1 done, 1 running, 2 waiting)" in out
    assert "ETA: 0m" in out
    line = next(x for x in out.splitlines() if x.strip().startswith("client1"))
    assert line.split()[1:4] == ["JOB", "running", "1"]

    assert main(["status", str(run), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["data_seconds_done"] == done and data["nodes"][2]["state"] == "running"


NODE_STATUS = """
[
  Type = "DagStatus"; DagFiles = { "offline.dag" }; Timestamp = 1700000000; DagStatus = 0;
  NodesTotal = 4; NodesDone = 1;
]
[ Type = "NodeStatus"; Node = "client0"; NodeStatus = 5; StatusDetails = ""; RetryCount = 0; ]
[ Type = "NodeStatus"; Node = "client1"; NodeStatus = 3; StatusDetails = "idle"; RetryCount = 2; ]
[ Type = "NodeStatus"; Node = "merge"; NodeStatus = 0; StatusDetails = ""; RetryCount = 0; ]
[ Type = "NodeStatus"; Node = "final"; NodeStatus = 0; StatusDetails = ""; RetryCount = 0; ]
[ Type = "StatusEnd"; EndTime = 1700000000; NextUpdate = 1700000030; ]
"""


def test_in_progress_from_the_dagman_node_status_file(run: Path) -> None:
    local_state(run, {"client0": {"kind": "JOB", "status": "failed", "attempts": 3}})
    complete_part(run, "client0")
    (run / "offline.status").write_text(NODE_STATUS)
    later = time.time() + 5
    os.utime(run / "offline.status", (later, later))  # written after run-local's state
    status = read_status(RunDir(run))
    assert status.source == "DAGMan (offline.status)"
    states = {n.name: (n.state, n.retries, n.detail) for n in status.nodes}
    assert states["client0"] == ("done", 0, "")
    assert states["client1"] == ("waiting", 2, "idle")  # queued, not yet running
    assert states["merge"][0] == "waiting"
    text = "\n".join(status_lines(status))
    assert "client1  JOB      waiting         2  server0  idle" in text

    (run / "offline.status").write_text(NODE_STATUS.replace(
        'NodeStatus = 3; StatusDetails = "idle"', 'NodeStatus = 6; StatusDetails = "exit 3"'))
    os.utime(run / "offline.status", (later, later))
    status = read_status(RunDir(run))
    assert next(n for n in status.nodes if n.name == "client1").state == "failed"
    assert "ETA: none (nodes failed" in "\n".join(status_lines(status))


def finish(run: Path) -> None:
    for node in ("client0", "client1"):
        complete_part(run, node)
    helpers.complete_merge(RunDir(run))


def test_finished_run(run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    finish(run)
    nodes = {name: {"kind": "JOB", "status": "done", "attempts": 1, "started": ago(30),
                    "ended": ago(20)} for name in ("client0", "client1", "merge", "final")}
    nodes["final"]["kind"] = "FINAL"
    nodes["server0"] = {"kind": "SERVICE", "status": "stopped", "attempts": 1}
    local_state(run, nodes)
    status = read_status(RunDir(run))
    assert status.output_complete and status.eta_seconds == 0.0
    assert status.data_seconds_done == status.data_seconds_total > 0
    assert 9 < status.elapsed_seconds < 11  # from the first start to the last end
    assert main(["status", str(run)]) == 0
    out = capsys.readouterr().out
    assert "output: output/campaign.h5 (complete)" in out
    assert "nodes: 4 (4 done)" in out and "(100%)" in out


def test_final_summary(run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    complete_part(run, "client0")
    with pytest.raises(RunError, match="nodes failed \\(1 failed\\)"):
        final_summary(RunDir(run), dag_status=2, failed_count=1)
    lines = capsys.readouterr().out.splitlines()
    summary = read_final_summary(RunDir(run))
    assert (summary.dag_status, summary.failed_count) == (2, 1)
    assert summary.data_seconds_done == kept_seconds(run, "client0")
    assert not summary.output_complete
    assert any(line.startswith("data seconds done") for line in lines)
    flat = json.loads((run / "summary.json").read_text())  # one flat object, as before
    assert flat["dag_status"] == 2 and flat["nodes"][0]["name"] == summary.nodes[0].name

    finish(run)
    summary = final_summary(RunDir(run), dag_status=0, failed_count=0)
    assert summary.output_complete and read_final_summary(RunDir(run)) == summary
    del flat["schema_version"]  # a summary written before it was a record reads as it is
    (run / "summary.json").write_text(json.dumps(flat))
    assert read_final_summary(RunDir(run)).dag_status == 2
    (run / "summary.json").write_text(json.dumps({**flat, "dag_status": "2"}))
    with pytest.raises(RunError, match=r"summary\.json: field dag_status"):
        read_final_summary(RunDir(run))
    assert main(["status", str(run), "--final", "--dag-status", "3", "--failed-count", "0"]) == 6


def test_a_server_whose_clients_are_all_done_is_named_while_others_work(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    skip_data_check(monkeypatch)
    run = planned_run(tmp_path, servers=2)
    running = {"kind": "JOB", "status": "running", "attempts": 1, "started": ago(30)}
    done = {"kind": "JOB", "status": "done", "attempts": 1, "started": ago(30), "ended": ago(5)}
    service = {"kind": "SERVICE", "status": "running", "attempts": 1, "started": ago(40)}
    nodes = {"server0": service, "server1": service, "client0": done, "client1": done,
             "client2": done, "client3": running, "merge": {"kind": "JOB", "status": "pending"}}
    local_state(run, nodes)
    for node in ("client0", "client1", "client2"):
        complete_part(run, node)
    idle = "server0: all its clients done while 1 client(s) of other servers are not"
    assert idle in status_lines(read_status(RunDir(run)))
    # negative controls: a client of server0 still working, or every client done
    local_state(run, {**nodes, "client1": running})
    (run / "parts" / "client1.json").unlink()
    assert not [line for line in status_lines(read_status(RunDir(run))) if "all its" in line]
    complete_part(run, "client1")
    complete_part(run, "client3")
    local_state(run, {**nodes, "client3": done})
    assert not [line for line in status_lines(read_status(RunDir(run))) if "all its" in line]


def test_a_failed_node_shows_its_error_line(run: Path) -> None:
    failed = {"kind": "JOB", "status": "failed", "attempts": 3, "exit_code": 3,
              "started": ago(30), "ended": ago(5)}
    local_state(run, {"client0": failed})
    (run / "logs" / "client0.err").write_text(
        "a line of LAL\noffline-iaas client: error: frame file /data/H-H1-1-32.gwf: the frame "
        "library crashed (SIGSEGV) reading it (truncated or corrupt?)\n")
    client0 = next(n for n in read_status(RunDir(run)).nodes if n.name == "client0")
    assert client0.state == "failed"
    assert client0.detail == ("exit code 3: frame file /data/H-H1-1-32.gwf: the frame library "
                              "crashed (SIGSEGV) reading it (truncated or corrupt?)")


def test_a_damaged_run_local_state_is_one_line_naming_the_file_and_the_field(
        run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    local_state(run, {"client0": {"kind": "JOB", "status": "running", "attempts": "two"}})
    assert main(["status", str(run)]) == 6
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"offline-iaas status: error: {run}/local-state.json: field "
                   "nodes.client0.attempts: Input should be a valid integer (a run-local "
                   "state, schema version 1)"]
    local_state(run, {"client0": {"kind": "JOB", "status": "running", "attempts": 2}})
    assert main(["status", str(run)]) == 0  # the control: the same state, well typed


def test_a_damaged_or_missing_job_spec_is_named_in_its_clients_line(run: Path) -> None:
    (run / "jobs" / "client0.json").write_text('{"x":')
    (run / "jobs" / "client1.json").unlink()
    nodes = {n.name: n for n in read_status(RunDir(run)).nodes}
    assert f"{run / 'jobs' / 'client0.json'}: not a JSON document" in nodes["client0"].detail
    assert nodes["client0"].detail.endswith(  # make-dag writes it again
        f"restore it with 'offline-iaas make-dag {run / 'campaign.toml'} --out {run}' (the "
        "finished parts are kept)")
    assert f"{run / 'jobs' / 'client1.json'}: no job spec for node client1: restore it with" in (
        nodes["client1"].detail)
    assert "moved from" not in nodes["client0"].detail + nodes["client1"].detail
    # control: a readable spec adds nothing to its client's line
    intact = planned_run(run.parent / "other", servers=1)
    assert not {n.name: n for n in read_status(RunDir(intact)).nodes}["client0"].detail
