"""run-local's life, done for real on small DAGs of python scripts (``NODE_SCRIPT``): killed
(SIGKILL), hung up (SIGHUP, its terminal closed) or interrupted (Ctrl-C), it leaves no node
behind, nor a node's own child; ``status`` after a kill shows no node running; a run directory
moved while run-local runs stops it and is not recreated at its old path (issue #44). The same
on real tritonservers: ``tests/test_run_local_lifetime_servers.py``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from offline_iaas.lifetime import start_ticks
from offline_iaas.rundir import RunDir
from offline_iaas.workflow.status import read_status, status_lines
from tests.error_catalogue import documented
from tests.helpers import campaign_records, processes_mentioning, sighup_as, wait_for
from tests.scripted_runs import Run, alive, make_run  # noqa: F401
from tests.test_status import run as status_run  # noqa: F401

DAG = (
    'SERVICE server0 node.sub\nVARS server0 node="server0" mode="service"\n'
    'JOB a node.sub\nVARS a node="a" mode="needs-server" sleep="{sleep}"\n'
    'JOB b node.sub\nVARS b node="b" mode="ok"\n'
    "PARENT a CHILD b\n"
)


def run_local_process(run_dir: Path, nohup: bool = False) -> subprocess.Popen[str]:
    """``offline-iaas run-local`` as a subprocess, as an operator starts it from a terminal
    (SIGHUP's default action, whatever this test run inherited: a suite started under
    ``nohup`` ignores it) or, with ``nohup``, with SIGHUP ignored, as ``nohup`` starts it."""
    return subprocess.Popen(
        [sys.executable, "-m", "offline_iaas.cli", "run-local", str(run_dir)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        preexec_fn=sighup_as(signal.SIG_IGN if nohup else signal.SIG_DFL),
    )


def started(run: Run) -> list[int]:
    """Once the service (and its child) and job ``a`` run: their PIDs, all alive."""
    wait_for(lambda: run.has("server0", "pids1") and run.has("a", "start"), 30, "a to start")
    wait_for(lambda: run.state()["a"]["status"] == "running", 10, "a's state")
    pids = run.pids()
    assert len(pids) >= 3 and all(alive(pid) for pid in pids)  # service, its child, a
    return pids


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGHUP, signal.SIGINT],
                         ids=["sigkill", "sighup", "ctrl-c"])
def test_run_local_killed_or_hung_up_leaves_no_node_behind(
        request: pytest.FixtureRequest, how: int) -> None:
    run = request.getfixturevalue("make_run")(DAG.format(sleep=30))
    campaign_records(run.dir, ())  # for status
    proc = run_local_process(run.dir)
    try:
        pids = started(run)
        assert [n.state for n in read_status(RunDir(run.dir)).nodes if n.name == "a"] == [
            "running"]  # the check below can tell a live node
        proc.send_signal(how)
        output, _ = proc.communicate(timeout=60)
        # the service's child, which nothing but the guardian stops, goes too
        wait_for(lambda: not [pid for pid in pids if alive(pid)], 30, "the nodes to go")
        assert processes_mentioning(str(run.dir)) == []
    finally:
        proc.kill()
        proc.communicate()
    assert run.has("server0", "sigterm")  # the service was stopped by SIGTERM, not killed
    if how == signal.SIGHUP:  # stopped as on SIGTERM: its nodes, then one line, exit code 6
        assert proc.returncode == 6, output
        message = output.strip().splitlines()[-1].removeprefix("offline-iaas run-local: error: ")
        documented("run-local-hangup", message, exit_code=6)
        assert run.state()["a"]["status"] == "stopped"
    elif how == signal.SIGINT:  # Ctrl-C: the same stop, the shell's code for it
        assert proc.returncode == 130, output
        assert output.strip().splitlines()[-1] == "offline-iaas run-local: interrupted"
        assert run.state()["a"]["status"] == "stopped"
    else:
        assert proc.returncode == -signal.SIGKILL
        states = {n.name: n for n in read_status(RunDir(run.dir)).nodes}
        assert (states["a"].state, states["server0"].state) == ("interrupted", "interrupted")
        assert "is gone: run-local did not stop it" in states["a"].detail
        lines = status_lines(read_status(RunDir(run.dir)))
        assert "ETA: none (run-local was interrupted; run it again: the finished parts are " \
               "kept)" in lines
    # the next run-local finishes the run
    (run.dir / "offline.dag").write_text(DAG.format(sleep=0))
    run()
    assert run.has("a", "end") and run.has("b", "end")
    assert (run.state()["a"]["status"], run.state()["b"]["status"]) == ("done", "done")


def test_a_run_directory_moved_while_run_local_runs_is_not_recreated(
        request: pytest.FixtureRequest) -> None:
    run = request.getfixturevalue("make_run")(DAG.format(sleep=30))
    proc = run_local_process(run.dir)
    moved = run.dir.parent / "moved"
    try:
        pids = started(run)
        run.dir.rename(moved)
        output, _ = proc.communicate(timeout=60)
        wait_for(lambda: not [pid for pid in pids if alive(pid)], 30, "the nodes to go")
    finally:
        proc.kill()
        proc.communicate()
    assert proc.returncode == 6, output
    lines = output.strip().splitlines()
    message = lines[-1].removeprefix("offline-iaas run-local: error: ")
    documented("run-dir-moved", message, {run.dir: "<ws>"}, exit_code=6)
    assert sum("moved" in line for line in lines) == 1
    time.sleep(1)  # nothing late either
    assert not run.dir.exists()
    assert not run.has("b", "start")  # nothing started after the move
    assert (moved / "logs" / "a.out").exists() and (moved / "local-state.json").exists()


def test_run_local_under_nohup_survives_its_terminal(request: pytest.FixtureRequest) -> None:
    run = request.getfixturevalue("make_run")(DAG.format(sleep=30))
    proc = run_local_process(run.dir, nohup=True)
    try:
        pids = started(run)
        proc.send_signal(signal.SIGHUP)
        time.sleep(1)
        assert proc.poll() is None and all(alive(pid) for pid in pids)
        proc.send_signal(signal.SIGTERM)  # stopped as ever
        output, _ = proc.communicate(timeout=60)
        assert proc.returncode == 6 and output.strip().endswith(
            "run-local stopped by SIGTERM; every node it started was stopped"), output
        wait_for(lambda: not [pid for pid in pids if alive(pid)], 30, "the nodes to go")
    finally:
        proc.kill()
        proc.communicate()


def test_status_tells_a_stale_running_record_by_pid_and_start_time(
        request: pytest.FixtureRequest) -> None:
    """A record of a run-local still running whose state file fell behind (a full disk), a PID
    reused by another process: neither is shown running; a live one is (the control)."""
    run_dir: Path = request.getfixturevalue("status_run")  # tests/test_status.py's run
    me, ticks = os.getpid(), start_ticks(os.getpid())
    assert ticks is not None
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    nodes = {
        "server0": {"kind": "SERVICE", "status": "running", "pid": me, "pid_start": ticks},
        "client0": {"kind": "JOB", "status": "running", "pid": me, "pid_start": ticks + 1},
        "client1": {"kind": "JOB", "status": "running", "pid": int(gone.stdout)},
    }
    (run_dir / "local-state.json").write_text(json.dumps(
        {"executor": {"pid": me, "pid_start": ticks}, "nodes": nodes}))
    states = {n.name: (n.state, n.detail) for n in read_status(RunDir(run_dir)).nodes}
    assert states["server0"] == ("running", "")
    why = f"run-local ({me}) could not record its end (a full disk?)"
    assert states["client0"] == ("interrupted", f"its process ({me}) is gone: {why}")
    assert states["client1"] == ("interrupted", f"its process ({gone.stdout.strip()}) is gone: "
                                                f"{why}")
