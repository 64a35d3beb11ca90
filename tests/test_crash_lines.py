"""Reading crashes back from a run directory (``serve/crashes.py``), on log text as the real
processes wrote it (tritonserver 2.51 sent SIGSEGV, a stub sent SIGSEGV, a normal stop) and on
run-local's state; what ``status`` prints of them. The servers themselves crash in
``tests/test_server_crashes.py``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from offline_iaas.local_state import read_local_state
from offline_iaas.rundir import RunDir
from offline_iaas.serve.crashes import crash_lines, fatal_lines, service_restarts
from offline_iaas.workflow.status import read_status, status_lines
from tests.helpers import SMALL_CAMPAIGN, write_run_record
from tests.server_log_watch import ServerLogWatch

# the logs and states here tell of crashes on purpose: the suite's own watch must not fail them
pytestmark = [pytest.mark.server_crashes, pytest.mark.server_exits]

NORMAL_STOP = """\
I1125 23:32:54.113738 18264 http_server.cc:362] "Started Metrics Service at 127.0.0.1:41991"
Signal (15) received.
I1125 23:32:56.636802 18264 server.cc:305] "Waiting for in-flight requests to complete."
Signal (15) received.
I1125 23:32:57.984301 18264 model_lifecycle.cc:624] "successfully unloaded 'offline-iaas' version 1"
"""

TRITON_SIGSEGV = """\
I1125 23:50:01.000000 11850 grpc_server.cc:2558] "Started GRPCInferenceService at 127.0.0.1:4"
Signal (11) received.
 0# 0x0000555D4989A52D in /cache/tritonserver/bin/tritonserver
 1# 0x00007F4E8545A050 in /lib/x86_64-linux-gnu/libc.so.6
 2# pthread_cond_clockwait in /lib/x86_64-linux-gnu/libc.so.6
offline-iaas serve: tritonserver (pid 11850) died by signal SIGSEGV while serving
"""

STUB_SIGSEGV = """\
Fatal Python error: Segmentation fault

Thread 0x00007fa8dd3fe000 (most recent call first):
  File "/run/model-repository/offline-iaas/1/model.py", line 88 in _sweep
"""

KILLED = "offline-iaas serve: tritonserver (pid 7) died by signal SIGKILL while serving\n"

STUB_DIED = ("offline-iaas serve: python-backend stub offline-iaas_0_0 (pid 9) died by signal "
             "{} while serving\n")
"""``serve``'s line for a stub that died under a serving tritonserver (``serve/stub_watch``)."""


def test_a_normal_stop_is_no_crash_and_every_fatal_signal_is_one() -> None:
    assert fatal_lines(NORMAL_STOP) == []
    (triton,) = fatal_lines(TRITON_SIGSEGV)  # serve's line for the same death is not another
    assert (triton.process, triton.signal, triton.line_number) == ("tritonserver", "SIGSEGV", 2)
    (stub,) = fatal_lines(STUB_SIGSEGV, first_line=10)
    assert (stub.process, stub.signal, stub.line_number) == ("python-backend stub", "SIGSEGV",
                                                             10)
    (killed,) = fatal_lines(KILLED)  # nothing of Triton's before it: serve's line counts
    assert (killed.process, killed.signal) == ("tritonserver", "SIGKILL")
    # serve's line for a stub: one crash with the stub's own line before it, and alone (a
    # SIGKILL, which faulthandler cannot print) still one
    (stub,) = fatal_lines(STUB_SIGSEGV + STUB_DIED.format("SIGSEGV"))
    assert (stub.process, stub.signal, stub.line_number) == ("python-backend stub", "SIGSEGV", 1)
    (killed,) = fatal_lines(NORMAL_STOP + STUB_DIED.format("SIGKILL"))
    assert (killed.process, killed.signal, killed.line_number) == (
        "python-backend stub", "SIGKILL", 6)
    assert fatal_lines(STUB_DIED.replace("died by signal {}", "died by exit code 1")) == []
    # the same stop with any other signal number is a crash
    assert [f.signal for f in fatal_lines(NORMAL_STOP.replace("(15)", "(6)"))] == [
        "SIGABRT", "SIGABRT"]


FORCED_EXIT = STUB_DIED.format("SIGSEGV") + """\
Signal (15) received.
I1206 06:19:55.860621 31562 server.cc:325] "Model 'offline-iaas' (version 1) has 1 in-flight \
inferences"
E1206 06:19:55.860631 31562 main.cc:535] "failed to stop server: Internal - Exit timeout \
expired. Exiting immediately."
E1205 22:19:56.533573306 31736 alarm.cc:60] ASSERTION FAILED: grpc_cq_begin_op(cq_, this)
Signal (6) received.
I1206 06:19:58.747519 31992 model_lifecycle.cc:839] "successfully loaded 'offline-iaas'"
I1206 06:19:58.800000 31992 grpc_server.cc:2558] "Started GRPCInferenceService at 127.0.0.1:4"
"""
"""A stop with a sequence open (CI at ``b19b80e``): Triton's forced exit aborted in gRPC, then
run-local's restart served again."""


def test_an_abort_in_a_stops_forced_exit_is_no_crash_but_one_after_the_restart_is() -> None:
    (stub,) = fatal_lines(FORCED_EXIT)  # the stub's death only: the exit's abort is the stop's
    assert (stub.process, stub.signal, stub.line_number) == ("python-backend stub", "SIGSEGV", 1)
    # the control: the same abort once the restarted server serves is a crash
    (_, again) = fatal_lines(FORCED_EXIT + "Signal (6) received.\n")
    assert (again.process, again.signal, again.line_number) == ("tritonserver", "SIGABRT", 9)
    # and without the forced exit, the same abort during the stop is one too
    plain = FORCED_EXIT.replace("Exit timeout expired. Exiting immediately.", "exiting")
    assert [f.signal for f in fatal_lines(plain)] == ["SIGSEGV", "SIGABRT"]


ABORT_BEFORE_READY = ("offline-iaas serve: tritonserver (pid 5) died by signal SIGABRT before it "
                      "was ready\n")


def test_each_of_serves_lines_tells_of_one_death_only() -> None:
    # two starts that each aborted, told by serve alone (no Triton line between): two crashes
    aborts = fatal_lines(ABORT_BEFORE_READY * 2)
    assert [(f.signal, f.line_number) for f in aborts] == [("SIGABRT", 1), ("SIGABRT", 2)]
    # the control: Triton's own line before serve's is the same crash told twice
    assert len(fatal_lines("Signal (6) received.\n" + ABORT_BEFORE_READY)) == 1
    # two stubs' own lines, then serve's two lines for them: two crashes, not three or one
    two_stubs = STUB_SIGSEGV * 2 + STUB_DIED.format("SIGSEGV") * 2
    assert [f.process for f in fatal_lines(two_stubs)] == ["python-backend stub"] * 2
    # Triton's own line of a server that served again after it witnesses no later death
    restarted = TRITON_SIGSEGV.replace("offline-iaas serve", "(serve killed)") + (
        TRITON_SIGSEGV.splitlines()[0] + "\n" + KILLED.replace("SIGKILL", "SIGSEGV"))
    assert [f.line_number for f in fatal_lines(restarted)] == [2, 8]


def _run_dir(tmp_path: Path, server_log: str, history: list[dict]) -> RunDir:
    """A run directory with one server (its log and run-local's record) and one client."""
    run = RunDir(tmp_path / "run")
    run.logs.mkdir(parents=True)
    run.dag.write_text("SERVICE server0 server.sub\nJOB client0 client.sub\n")
    run.config.write_text(SMALL_CAMPAIGN)
    write_run_record(run, ("client0",))
    (run.logs / "server0-tritonserver.log").write_text(server_log)
    nodes = {"server0": {"kind": "SERVICE", "status": "stopped", "attempts": len(history),
                         "exit_code": 0, "history": history},
             "client0": {"kind": "JOB", "status": "done", "attempts": 1, "history": []}}
    run.local_state.write_text(json.dumps({"nodes": nodes}))
    return run


def test_status_shows_the_crash_the_exit_and_the_restart(tmp_path: Path) -> None:
    history = [{"attempt": 1, "status": "exited", "exit_code": 5},
               {"attempt": 2, "status": "stopped", "exit_code": 0}]
    run = _run_dir(tmp_path, NORMAL_STOP + TRITON_SIGSEGV + NORMAL_STOP, history)
    expected = [
        "server0: tritonserver died by SIGSEGV (see logs/server0-tritonserver.log line 7)",
        "server0: server node exited with exit code 5 (see logs/server0.err, attempt 1)",
        "server0: restarted 1 time by run-local",
    ]
    assert crash_lines(run, ["server0"], read_local_state(run)) == expected
    assert crash_lines(run, [], read_local_state(run)) == []  # only the servers asked about
    shown = status_lines(read_status(run))
    at = shown.index("server crashes and restarts:")
    assert shown[at + 1:at + 4] == [f"  {line}" for line in expected]


def test_a_clean_run_shows_no_crash(tmp_path: Path) -> None:
    run = _run_dir(tmp_path, NORMAL_STOP, [{"attempt": 1, "status": "stopped", "exit_code": 0}])
    assert crash_lines(run, ["server0"], read_local_state(run)) == []
    assert "server crashes and restarts:" not in status_lines(read_status(run))
    assert service_restarts(read_local_state(run)) == {}


def test_the_watch_reports_each_crash_once_and_a_line_only_once_complete(tmp_path: Path) -> None:
    run = _run_dir(tmp_path, NORMAL_STOP, [{"attempt": 1, "status": "stopped", "exit_code": 0}])
    watch = ServerLogWatch(tmp_path)
    assert watch.problems(exits_expected=False, crashes_expected=False) == []
    log = run.logs / "server0-tritonserver.log"
    with open(log, "a") as out:
        out.write("Signal (11) rec")  # still being written
    assert watch.problems(exits_expected=False, crashes_expected=False) == []
    with open(log, "a") as out:
        out.write("eived.\n 0# 0x0000555D4989A52D in tritonserver\n")
    (problem,) = watch.problems(exits_expected=False, crashes_expected=False)
    assert f"{log} line 6: tritonserver died by SIGSEGV" in problem
    assert "0x0000555D4989A52D" in problem  # the backtrace comes with it
    assert watch.problems(exits_expected=False, crashes_expected=False) == []  # read once
    history = [{"attempt": 1, "status": "exited", "exit_code": -11,
                "started": "2030-01-01T00:00:00+00:00"}]
    state = json.loads(run.local_state.read_text())
    state["nodes"]["server0"].update(attempts=2, history=history)
    run.local_state.write_text(json.dumps(state))
    assert watch.problems(exits_expected=True, crashes_expected=False) == []
    (problem,) = ServerLogWatch(tmp_path).problems(exits_expected=False, crashes_expected=True)
    assert "server node server0 exited on its own (attempt 1, exit code -11)" in problem
