"""run-local's life on real tritonservers (1 server x 2 clients, issue #44): killed (SIGKILL,
as the out-of-memory killer does) or hung up (SIGHUP, its terminal closed) while client0 is
mid-stream, no process of the run (the serve node, tritonserver, its python-backend stub, the
clients) is left once run-local's stop timeout has passed (in practice they go within
seconds; the time is printed), the stub leaves cleanly though tritonserver
exits without unloading it (``backend/server_watch.py``), and the next run-local's output
equals the reference; the run directory moved mid-stream, run-local stops, the old path is not
recreated, and run-local where it is now finishes it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from offline_iaas.rundir import RunDir
from offline_iaas.workflow.local import STOP_TIMEOUT_SECONDS, run_local
from offline_iaas.workflow.status import read_status
from tests.faults.test_faults import (  # noqa: F401
    assert_equals_reference,
    dataset,
    fault_fired,
    prepare,
    server_pids,
)
from tests.helpers import sighup_as, wait_for

pytestmark = pytest.mark.slow

PAUSED = {"client0": [{"point": "mid-stream", "action": "barrier", "count": 2, "seconds": 240}]}
"""client0 holds its sequence open mid-stream until run-local's stop ends it (a barrier the
test never joins: a timed pause could end first on a loaded machine; 240 s, past the 120 s
``start_mid_stream`` may wait, bounds an orphan's life where the test fails; once: the rerun
does not pause)."""
GONE_SECONDS = STOP_TIMEOUT_SECONDS + 10.0
"""How long the run's processes may outlive run-local. By design they go in about 6 s (the
server's stop waits ``server.exit_timeout_seconds``, 5 s, for the sequences left open), but
that stop is scheduled like any process: a fresh-clone CI on 2 loaded cores once took over
15 s. The bound that holds on any machine is the guardian's: every group still there when
run-local's stop timeout ends is SIGKILLed (10 s for the kill to land). A process left behind
stays forever, so the check still fails on a leak; the time taken is printed."""


def run_processes(where: Path) -> list[str]:
    """Live processes (not zombies) whose command line or working directory names ``where``:
    the nodes (working directory: the run directory), tritonserver and its stubs (the model
    repository beside it)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            cwd = os.readlink(proc / "cwd")
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state != "Z" and (str(where) in cmdline or cwd.startswith(str(where))):
            found.append(f"{proc.name}: {cmdline.strip()}")
    return found


def start_mid_stream(run_dir: Path) -> tuple[subprocess.Popen[str], list[str]]:
    """run-local as a subprocess, once client0 is paused mid-stream and client1 has finished
    (with client1 still streaming when run-local was hung up, stop 49's fresh clone saw
    Triton's one in-flight inference end a second into its stop, so that the exit timeout the
    test checks never came); and
    the run's processes then (at least the serve node, tritonserver, a stub and client0)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "offline_iaas.cli", "run-local", str(run_dir)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        preexec_fn=sighup_as(signal.SIG_DFL),  # as from a terminal, whatever the suite inherited
    )
    wait_for(lambda: fault_fired(run_dir, "client0:0"), 120, "client0 to pause mid-stream")
    wait_for(lambda: (run_dir / "parts" / "client1.json").exists(), 120, "client1 to finish")
    serve_pid, triton_pid = server_pids(run_dir)
    before = run_processes(run_dir.parent)
    stubs = [line for line in before if "triton_python_backend_stub" in line]
    assert str(serve_pid) in " ".join(before) and str(triton_pid) in " ".join(before)
    assert stubs and len(before) >= 4, before  # the scan below sees what it looks for
    return proc, before


def gone_within(where: Path, seconds: float) -> float:
    """Seconds until no process of the run is left (fails after ``seconds``, naming the
    processes still there then)."""
    return wait_for(lambda: not run_processes(where), seconds,
                    lambda: f"the run's processes to go: {run_processes(where)}")


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGHUP], ids=["sigkill", "sighup"])
def test_run_local_killed_leaves_no_server_behind(request: pytest.FixtureRequest, how: int) -> None:
    data = request.getfixturevalue("dataset")  # tests/faults/test_faults.py's
    _, run_dir = prepare(data, f"killed-{how}", [], PAUSED)
    proc, _ = start_mid_stream(run_dir)
    try:
        proc.send_signal(how)
        output, _ = proc.communicate(timeout=60)
        seconds = gone_within(run_dir.parent, GONE_SECONDS)
    finally:
        proc.kill()
        proc.communicate()
    print(f"{signal.Signals(how).name}: the run's processes gone {seconds:.1f} s after "
          "run-local ended")
    # client0's open sequence kept tritonserver past its exit timeout: it exited without
    # unloading the model, and the stub left on its own, not by python_backend's teardown
    server_log = (run_dir / "logs" / "server0-tritonserver.log").read_text()
    assert "Exit timeout expired" in server_log, server_log
    assert "exited without unloading it" in server_log, server_log
    assert "Non-graceful termination detected" not in server_log, server_log
    if how == signal.SIGHUP:
        assert proc.returncode == 6, output
        assert output.strip().splitlines()[-1].endswith("run-local stopped by SIGHUP; every "
                                                        "node it started was stopped")
    else:
        assert proc.returncode == -signal.SIGKILL
        states = {n.name: n.state for n in read_status(RunDir(run_dir)).nodes}
        assert "running" not in states.values(), states
        assert states["server0"] == states["client0"] == "interrupted"
    run_local(RunDir(run_dir))
    assert_equals_reference(data, run_dir)


def test_run_directory_moved_mid_stream_is_not_recreated(request: pytest.FixtureRequest) -> None:
    data = request.getfixturevalue("dataset")
    _, run_dir = prepare(data, "moved", [], PAUSED)
    moved = run_dir.parent / "moved-run"
    proc, _ = start_mid_stream(run_dir)
    try:
        run_dir.rename(moved)
        output, _ = proc.communicate(timeout=60)
        gone_within(run_dir.parent, GONE_SECONDS)
    finally:
        proc.kill()
        proc.communicate()
    assert proc.returncode == 6, output
    lines = output.strip().splitlines()
    assert lines[-1].endswith(f"the run directory {run_dir} was moved or removed while "
                              "run-local ran: its nodes were stopped and nothing was written "
                              "there; run run-local on it where it is now")
    assert not [line for line in lines if "ABORT-DAG-ON" in line or "not found" in line]
    time.sleep(2)
    assert not run_dir.exists()
    run_local(RunDir(moved))
    assert_equals_reference(data, moved)
