"""A server stopped as campaigns stop it dies by no signal and leaves no core; a server that
crashes is seen: its trace stays in ``logs/``, ``status`` and the report name it, and the
suite's check (``server_log_watch.ServerLogWatch``, run after every test) fails on it (issue #37).

run-local runs a small campaign (1 server x 2 clients) under ``tests/stop_probe.py``, which
turns core dumps on for every node and reaps, with their exit status, the processes the stop
orphans (a python-backend stub whose tritonserver exited first). Stopped two ways: run-local
sent SIGTERM while both clients hold their sequences open mid-stream (the server's live
sequence count is 2 at that moment), and the ordinary end of a campaign (run-local stops the
services once every node is done). Each time tritonserver was stopped by SIGTERM (Triton's
``Signal (15) received.``) and exited with an exit code (0 at the end; 1 with live sequences,
which Triton waits for until ``--exit-timeout-secs`` and then leaves), no line of its log
reports a fatal signal (``serve/crashes.py``; the stubs print ``Fatal Python error`` on one),
every orphaned stub exited with an exit code (0 with live sequences: it ends itself,
``backend/server_watch.py``), and no ``core`` file was left. Before the fused model released
its metric family in ``finalize``, every ordinary end left the stub's SIGSEGV and an 80 MB
core; before ``server_watch``, python_backend's own teardown of the orphaned stub now and then
died by SIGSEGV (CI, at d44e4cf).

A tritonserver killed by SIGSEGV mid-campaign (the negative control of the check every test
goes through, which a test passes only because it is marked ``server_crashes`` and
``server_exits``) is restarted by run-local and the output is complete, but the watch reports
Triton's ``Signal (11) received.`` with the backtrace after it and the node's exit, ``status``
lists the crash (node, process, signal, log line) and the restart, and so does the report.

The core check needs the kernel to write cores as files in the crashing process's directory
(``/proc/sys/kernel/core_pattern`` without ``|`` or ``/``, as here); where a handler takes
them, the test still checks everything else.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from offline_iaas.config import load_config
from offline_iaas.merge.output import compare_outputs
from offline_iaas.merge.reference import run_reference
from offline_iaas.rendezvous.addresses import read_address
from offline_iaas.report import write_report
from offline_iaas.rundir import RunDir
from offline_iaas.serve.crashes import fatal_lines
from offline_iaas.serve.stalled_stub import told_not_healthy
from offline_iaas.workflow.make_dag import make_dag
from offline_iaas.workflow.status import read_status, status_lines
from tests.error_catalogue import documented
from tests.faults.inject import HELD, release
from tests.faults.test_faults import (
    FAST_FAILURE,
    TOLERANCE,
    RunLocal,
    fault_fired,
    server_pids,
    signalled,
    while_held,
)
from tests.helpers import processes_mentioning, wait_for
from tests.server_log_watch import ServerLogWatch, client_output

pytestmark = pytest.mark.slow

PROBE = Path(__file__).parent / "stop_probe.py"


@pytest.fixture(scope="module")
def root(small_campaign_dir) -> Path:
    return small_campaign_dir()


def prepared_run(root: Path, name: str, faults: dict | None = None,
                 overrides: tuple[str, ...] = ()) -> Path:
    run_dir = root / name
    make_dag(load_config(root / "campaign.toml", list(overrides)), RunDir(run_dir))
    if faults is not None:
        (run_dir / "faults.json").write_text(json.dumps(faults))
    return run_dir


def probe(run_dir: Path, stop_file: Path | None = None) -> subprocess.Popen[str]:
    argv = [sys.executable, str(PROBE), str(run_dir)]
    return subprocess.Popen(argv + ([str(stop_file)] if stop_file else []), cwd=run_dir,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def probed(proc: subprocess.Popen[str]) -> dict:
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    return json.loads(out)


def cores_are_files() -> bool:
    pattern = Path("/proc/sys/kernel/core_pattern").read_text().strip()
    return not pattern.startswith("|") and "/" not in pattern


def live_sequences(run_dir: Path) -> int:
    address = read_address(RunDir(run_dir), "server0")
    assert address is not None
    text = requests.get(f"http://127.0.0.1:{address.metrics_port}/metrics", timeout=10).text
    return int(sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith("offline_iaas_live_sequences{")))


def is_stub(orphan: dict) -> bool:
    return orphan["name"].startswith("triton_python")  # comm: 15 characters of the name


def assert_stopped_cleanly(run_dir: Path, report: dict, tritonserver_exit_code: int) -> None:
    log = (run_dir / "logs" / "server0-tritonserver.log").read_text()
    assert "Signal (15) received." in log  # stopped by SIGTERM, which is not a crash
    assert fatal_lines(log) == [], log[-3000:]
    serve_out = (run_dir / "logs" / "server0.out").read_text()
    assert f"server0: tritonserver exited with exit code {tritonserver_exit_code}" in \
        serve_out, serve_out
    server = json.loads((run_dir / "local-state.json").read_text())["nodes"]["server0"]
    assert [a["status"] for a in server["history"]] == ["stopped"]
    assert server["exit_code"] == 0  # serve itself
    assert not report["orphans_left"]
    # stubs exit; a client's reader process orphaned by the stop dies by the stop's SIGTERM
    orphans = report["orphans"]
    assert all("exit_code" in o for o in orphans if is_stub(o)), orphans
    assert all(o.get("signal") in (None, "SIGTERM") for o in orphans), orphans
    if cores_are_files():
        assert [p for p in run_dir.rglob("core*") if p.is_file()] == []
    assert processes_mentioning(str(run_dir)) == []


def test_a_server_stopped_with_live_sequences_dies_by_no_signal_and_leaves_no_core(
        root: Path) -> None:
    pause = {"point": "mid-stream", "action": "pause", "seconds": 300}
    run_dir = prepared_run(root, "live", {"client0": [pause], "client1": [pause]})
    stop_file = run_dir / "stop-now"
    proc = probe(run_dir, stop_file)
    try:
        state = run_dir / "faults-state.json"
        deadline = time.monotonic() + 120
        while not (state.exists() and len(json.loads(state.read_text())) == 2):
            assert proc.poll() is None and time.monotonic() < deadline, "clients never paused"
            time.sleep(0.2)
        assert live_sequences(run_dir) == 2  # both clients' sequences open (START, no END)
    finally:
        stop_file.touch()
        report = probed(proc)
    assert report["run_local"] == 6, report["output"]  # RunError: stopped by SIGTERM
    assert "run-local stopped by SIGTERM" in report["output"]
    # Triton counts each open sequence as an inference in flight: it waits the exit timeout,
    # then exits with code 1 without unloading the model; the stub, orphaned, ends itself
    # (backend/server_watch.py) before python_backend's own teardown, which can die by
    # SIGSEGV, starts, and the probe reaps it
    assert_stopped_cleanly(run_dir, report, tritonserver_exit_code=1)
    log = (run_dir / "logs" / "server0-tritonserver.log").read_text()
    assert "has 2 in-flight inferences" in log and "Exit timeout expired" in log
    assert "exited without unloading it" in log and "Non-graceful termination" not in log, log
    stubs = [o for o in report["orphans"] if is_stub(o)]
    assert stubs and all(o.get("exit_code") == 0 for o in stubs), report["orphans"]


def test_a_server_stopped_at_the_end_of_a_campaign_dies_by_no_signal_and_leaves_no_core(
        root: Path) -> None:
    run_dir = prepared_run(root, "end")
    report = probed(probe(run_dir))
    assert report["run_local"] == 0, report["output"]
    assert (run_dir / "output" / "campaign.h5").is_file()
    assert_stopped_cleanly(run_dir, report, tritonserver_exit_code=0)


@pytest.mark.server_crashes
@pytest.mark.server_exits
def test_a_tritonserver_dead_by_sigsegv_is_restarted_and_shown_with_its_trace(
        root: Path) -> None:
    faults = {"client0": [HELD]}  # mid-stream until the server is dead (a pause may end first)
    run_dir = prepared_run(root, "segv", faults, tuple(FAST_FAILURE))
    output, tritonserver = while_held(
        run_dir, lambda: signalled(server_pids(run_dir)[1], signal.SIGSEGV))
    assert (run_dir / "output" / "campaign.h5").is_file()  # the restart hid it from the output
    assert "server0: restarted 1 time(s)" in output

    # the check every test goes through fails on it: the signal with Triton's backtrace, and
    # the server node's exit that run-local answered with a restart
    problems = ServerLogWatch(run_dir).problems(exits_expected=False, crashes_expected=False)
    assert len(problems) == 2, problems
    assert "tritonserver died by SIGSEGV" in problems[0] and "Signal (11) received." in \
        problems[0] and "tritonserver" in problems[0].splitlines()[2]  # a backtrace frame
    assert "server node server0 exited on its own (attempt 1, exit code 5)" in problems[1]

    log = run_dir / "logs" / "server0-tritonserver.log"
    (fatal,) = fatal_lines(log.read_text())
    assert (fatal.process, fatal.signal) == ("tritonserver", "SIGSEGV")
    assert log.read_text().splitlines()[fatal.line_number - 1] == "Signal (11) received."
    where = f"logs/server0-tritonserver.log line {fatal.line_number}"
    expected = [f"server0: tritonserver died by SIGSEGV (see {where})",
                "server0: server node exited with exit code 5 (see logs/server0.err, attempt 1)",
                "server0: restarted 1 time by run-local"]
    status = read_status(RunDir(run_dir))
    assert status.server_crashes == expected
    shown = status_lines(status)
    assert shown[shown.index("server crashes and restarts:") + 1:][:3] == [
        f"  {line}" for line in expected]
    report = write_report(RunDir(run_dir)).read_text()
    assert f"server0: tritonserver died by SIGSEGV (see {where})" in report
    assert "server0: tritonserver died by signal SIGSEGV while serving" in (
        run_dir / "logs" / "server0.out").read_text()
    # the log named, not its last lines (Triton's trace, or start-up lines after a SIGKILL)
    assert f"error: tritonserver ended with signal SIGSEGV while serving (see {log})\n" in (
        run_dir / "logs" / "server0.err").read_text()
    assert processes_mentioning(str(run_dir)) == []


def assert_recovered_once(root: Path, run_dir: Path, output: str) -> None:
    """The run's output equals its in-process reference, server0 restarted once on the way
    (``output``: run-local's)."""
    reference, _ = run_reference(load_config(run_dir / "campaign.toml"),
                                 root / f"{run_dir.name}-reference.h5")
    comparison = compare_outputs(run_dir / "output" / "campaign.h5", reference)
    assert comparison.passes(TOLERANCE), comparison.describe()
    assert "server0: restarted 1 time(s)" in output


def python_stubs(run_dir: Path, server: str = "server0") -> list[int]:
    """The python-backend stubs that ``server``'s tritonserver started (its children, from
    ``/proc``; the kernel's comm holds the name's first 15 characters)."""
    _, tritonserver = server_pids(run_dir, server)
    children = []
    for task in Path(f"/proc/{tritonserver}/task").iterdir():
        try:  # a thread may end meanwhile
            children += [int(pid) for pid in (task / "children").read_text().split()]
        except FileNotFoundError:
            continue
    return [pid for pid in children
            if Path(f"/proc/{pid}/comm").read_text().startswith("triton_python")]


@pytest.mark.server_crashes
@pytest.mark.server_exits
def test_a_python_stub_dead_by_sigsegv_mid_stream_restarts_its_server_and_the_run_finishes(
        root: Path) -> None:
    # Triton 2.51 alone keeps the dead model "ready" and fails every request to it
    # ("Stub process 'offline-iaas_0_0' is not healthy.", or on a stream a response without
    # outputs), and never starts the stub again: before serve watched the stubs, every client
    # attempt died by a TypeError and run-local exited 6
    faults = {"client0": [HELD]}  # mid-stream until the stub is dead (a pause may end first)
    run_dir = prepared_run(root, "stub-segv", faults, tuple(FAST_FAILURE))

    def kill_the_stub() -> int:
        (stub,) = python_stubs(run_dir)
        return signalled(stub, signal.SIGSEGV)

    output, stub = while_held(run_dir, kill_the_stub, 240)  # exit 0: the same run-local
    assert_recovered_once(root, run_dir, output)
    assert int((run_dir / "servers" / "server0.epoch").read_text()) == 2

    # client0, paused, met the dead model, said so in one line each time, and resumed (client1
    # may have finished before the stub died); no client wrote a traceback
    for client in ("client0", "client1"):
        assert "Traceback" not in (run_dir / "logs" / f"{client}.err").read_text()
    out = (run_dir / "logs" / "client0.out").read_text().splitlines()
    failed = [line for line in out if "reconnecting, resuming from the last checkpoint" in line]
    # each names the server: its answer (an error, or a response without outputs), or, where
    # serve had already stopped it while client0 was paused and client0's next step was a
    # send rather than a take, the broken stream (CI at 65bdb47)
    met = re.compile(r"client0: (stream to )?server0 at \S+ (answered|broke)")
    assert failed and all(met.match(line) for line in failed), out
    assert json.loads((run_dir / "parts" / "client0.json").read_text())["reconnects"] == \
        len(failed)

    # serve saw the stub die, said how, and ended as on a crash (exit 5, restarted)
    serve_err = (run_dir / "logs" / "server0.err").read_text().strip()
    message = serve_err.removeprefix("offline-iaas serve: error: ")
    documented("server-python-stub-died", message,
               {f"(pid {stub})": "(pid P)", str(run_dir): "RUN"}, exit_code=5)
    log = run_dir / "logs" / "server0-tritonserver.log"
    lines = log.read_text().splitlines()
    assert f"offline-iaas serve: python-backend stub offline-iaas_0_0 (pid {stub}) died by " \
        "signal SIGSEGV while serving" in lines
    (fatal,) = fatal_lines(log.read_text())  # the stub's own line and serve's: one crash
    assert (fatal.process, fatal.signal) == ("python-backend stub", "SIGSEGV")
    assert lines[fatal.line_number - 1] == "Fatal Python error: Segmentation fault"
    expected = [f"server0: python-backend stub died by SIGSEGV (see logs/server0-tritonserver"
                f".log line {fatal.line_number})",
                "server0: server node exited with exit code 5 (see logs/server0.err, attempt 1)",
                "server0: restarted 1 time by run-local"]
    assert read_status(RunDir(run_dir)).server_crashes == expected
    report = write_report(RunDir(run_dir)).read_text()
    assert all(line in report for line in expected)
    assert processes_mentioning(str(run_dir)) == []


@pytest.mark.server_crashes
@pytest.mark.server_exits
def test_a_stub_stalled_past_tritons_health_window_crashes_and_the_run_recovers(
        root: Path) -> None:
    # Triton 2.51's python backend declares a stub that gives no health beat for about 1 s
    # "not healthy" while it still executes, and their shared memory is corrupted from then
    # on (serve/stalled_stub.py): the machine stalling does it now and then, stopping the
    # stub while a request waits on it does it every time
    faults = {"client0": [HELD]}
    run_dir = prepared_run(root, "stub-stalled", faults, tuple(FAST_FAILURE))
    run = RunLocal(run_dir)
    try:
        wait_for(lambda: fault_fired(run_dir, "client0:0"), 60, "client0 to be held")
        (stub,) = python_stubs(run_dir)
        os.kill(stub, signal.SIGSTOP)
        try:
            release(run_dir)  # client0's next request waits on the stopped stub
            wait_for(lambda: told_not_healthy(client_output(run_dir), "server0"), 60,
                     "Triton to answer that the stub is not healthy")
        finally:
            os.kill(stub, signal.SIGCONT)
        output = run.finish(240)  # exit 0: the same run-local finished the campaign
    finally:
        run.kill()
    assert_recovered_once(root, run_dir, output)

    # what ended the epoch is told apart by the suite's watch (a warning), and nothing else
    # happened: the crash (the stub's or tritonserver's first), or, where the stub lived on,
    # serve on client0's report (check_not_called_unhealthy)
    watch = ServerLogWatch(run_dir)
    assert watch.problems(exits_expected=False, crashes_expected=False) == []
    assert watch.upstream and any(what in watch.upstream[0] for what in (
        "python-backend stub died by SIG", "tritonserver died by SIG",
        "serve ending epoch 1: client"))
    # a client told so (client0, or client1 where it still streamed) sent nothing more to
    # the epoch Triton had called not healthy (once, before it waited for the restart, one
    # took an answer from there that lacked its outputs)
    (address,) = told_not_healthy(client_output(run_dir), "server0")
    told_clients = 0
    for client in ("client0", "client1"):
        lines = (run_dir / "logs" / f"{client}.out").read_text().splitlines()
        told = [n for n, line in enumerate(lines) if "is not healthy" in line]
        if told:
            told_clients += 1
            assert not [line for line in lines[told[0] + 1:]
                        if f"server0 at {address} answered" in line], lines
    assert told_clients
    assert processes_mentioning(str(run_dir)) == []
