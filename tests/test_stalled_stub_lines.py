"""Crashes that Triton's python backend causes itself after declaring a stalled stub "not
healthy" (``serve/stalled_stub.py``) are told apart from the others by what the clients were
answered and where the first crash happened; the suite's watch shows them as warnings and
still fails on every other crash. The logs below are cut from real ones (a CI run's e2e demo,
and a stub stopped for 3 s here); ``tests/test_server_crashes.py`` makes the stall for real."""

from __future__ import annotations

from pathlib import Path

import pytest

from offline_iaas.errors import ServerError
from offline_iaas.rendezvous.addresses import ServerAddress, report_unhealthy
from offline_iaas.rundir import RunDir
from offline_iaas.serve.node import check_not_called_unhealthy
from offline_iaas.serve.stalled_stub import (
    ended_epoch_line,
    says_not_healthy,
    stalled_stub_crashes,
    told_not_healthy,
)
from tests.error_catalogue import documented
from tests.server_log_watch import ServerLogWatch, crashed_run

STARTED = """\
I1127 18:24:58.538647 19895 server.cc:674] model READY
I1127 18:24:58.587541 1 grpc_server.cc:2558] "Started GRPCInferenceService at 127.0.0.1:56963"
I1127 18:24:58.639074 19895 http_server.cc:362] "Started Metrics Service at 127.0.0.1:59975"
"""
STUB_CRASH = """\
Fatal Python error: Segmentation fault

Thread 0x00007f7cabfff000 (most recent call first):
  File "/run/model-repository/offline-iaas/1/model.py", line 100 in _sweep

Current thread 0x00007f7cc00be000 (most recent call first):
{current}

Extension modules: numpy.core._multiarray_umath (total: 1)
offline-iaas serve: python-backend stub model_0_0 (pid 1) died by signal SIGSEGV while serving
"""
NATIVE = "  <no Python frame>"
IN_THE_MODEL = '  File "/run/model-repository/offline-iaas/1/stateful.py", line 425 in <lambda>'
AFTERMATH = """\
terminate called after throwing an instance of 'std::bad_alloc'
  what():  std::bad_alloc
Signal (6) received.
 0# 0x000055BC4ADD952D in /opt/tritonserver/bin/tritonserver
offline-iaas serve: tritonserver (pid 19895) died by signal SIGABRT while stopping
"""
TRITON_CRASH = """\
Signal (11) received.
 0# 0x000055BC4ADD952D in /opt/tritonserver/bin/tritonserver
 1# 0x00007F71AEA5A050 in /lib/x86_64-linux-gnu/libc.so.6
 2# 0x00007F71A9B50558 in /opt/tritonserver/backends/python/libtriton_python.so
"""
TOLD = ("client0: server0 at 127.0.0.1:56963 answered with an error: Stub process "
        "'offline-iaas_0_0' is not healthy.; reconnecting, resuming from the last checkpoint\n")


def _lines(text: str, start: str) -> list[int]:
    return [n for n, line in enumerate(text.splitlines(), start=1) if line.startswith(start)]


def test_the_stub_crash_after_triton_called_it_not_healthy_and_its_aftermath_are_told_apart(
        ) -> None:
    log = STARTED + STUB_CRASH.format(current=NATIVE) + AFTERMATH
    addresses = told_not_healthy(TOLD + "client1: server1 at 127.0.0.1:1 answered ...\n",
                                 "server0")
    assert addresses == {"127.0.0.1:56963"}
    assert says_not_healthy("Stub process 'offline-iaas_0_0' is not healthy.")
    assert not says_not_healthy("Stub process 'offline-iaas_0_0' is healthy.")
    # serve's line after each is the same death (``fatal_lines`` reads them as one)
    fatal = _lines(log, "Fatal Python error") + _lines(log, "Signal (6)")
    assert stalled_stub_crashes(log, addresses) == dict.fromkeys(fatal, 1)  # epoch 1
    # Triton's own crash in the python backend library, the first of its epoch
    assert stalled_stub_crashes(STARTED + TRITON_CRASH, addresses) == {
        _lines(STARTED + TRITON_CRASH, "Signal (11)")[0]: 1}


def test_a_crash_in_the_models_python_or_unannounced_or_of_another_epoch_is_not_told_apart(
        ) -> None:
    told = {"127.0.0.1:56963"}
    # the crashing thread was in the model's Python: the model's fault, whatever followed
    assert stalled_stub_crashes(STARTED + STUB_CRASH.format(current=IN_THE_MODEL) + AFTERMATH,
                                told) == {}
    # no client was told "not healthy" (a stub that died of itself, before any request)
    assert stalled_stub_crashes(STARTED + STUB_CRASH.format(current=NATIVE), set()) == {}
    # told at another epoch's address (the server restarted on a new port since)
    assert stalled_stub_crashes(STARTED + STUB_CRASH.format(current=NATIVE),
                                {"127.0.0.1:56964"}) == {}
    # tritonserver's crash outside the python backend library
    outside = TRITON_CRASH.replace("backends/python/libtriton_python.so", "lib/libgrpc.so")
    assert stalled_stub_crashes(STARTED + outside, told) == {}
    # a crash before the server listened belongs to no epoch
    assert stalled_stub_crashes(STUB_CRASH.format(current=NATIVE) + STARTED, told) == {}


# tritonserver and the stub dying at the same moment (a CI run's stalled-stub test):
# Triton's signal line, the stub's whole dump, then Triton's frames
TOGETHER = """\
Signal (6) received.
{stub} 0# 0x000055BC4ADD952D in /opt/tritonserver/bin/tritonserver
 1# 0x00007F71A9B50558 in {library}
"""
PYTHON_BACKEND = "/opt/tritonserver/backends/python/libtriton_python.so"


def test_tritonserver_and_the_stub_crashing_at_once_are_one_first_crash() -> None:
    told = {"127.0.0.1:56963"}

    def counted(current: str | None, library: str) -> dict[int, int]:
        stub = STUB_CRASH.format(current=current) if current is not None else \
            STUB_CRASH.replace("Current thread 0x00007f7cc00be000 (most recent call first):\n"
                               "{current}\n", "")  # no crashing thread named
        return stalled_stub_crashes(STARTED + TOGETHER.format(stub=stub, library=library),
                                    told)

    log = STARTED + TOGETHER.format(stub=STUB_CRASH.format(current=NATIVE),
                                    library=PYTHON_BACKEND)
    fatal = _lines(log, "Signal (6)") + _lines(log, "Fatal Python error")
    assert counted(NATIVE, PYTHON_BACKEND) == dict.fromkeys(fatal, 1)
    # either witness is enough: the stub in native code, or Triton in the python backend
    assert counted(NATIVE, "/lib/libgrpc.so") == dict.fromkeys(fatal, 1)
    assert counted(None, PYTHON_BACKEND) == dict.fromkeys(fatal, 1)
    # the controls: the stub in the model's Python, or neither witness points at the backend
    assert counted(IN_THE_MODEL, PYTHON_BACKEND) == {}
    assert counted(None, "/lib/libgrpc.so") == {}
    # serve's lines and a stop's signal between Triton's signal line and its frames (a run
    # here: serve ended the epoch on client0's report as tritonserver crashed)
    stopped = STARTED + TRITON_CRASH.replace(
        " 0#", ended_epoch_line("client0", 1) + "\nSignal (15) received.\n 0#")
    assert stalled_stub_crashes(stopped, told) == {4: 1, 5: 1}
    # the control: a crash elsewhere that came first is not told apart (serve's line is)
    assert stalled_stub_crashes(stopped.replace("libtriton_python.so", "libgrpc.so"),
                                told) == {5: 1}
    # a stub crash that begins after Triton's trace began is a later crash, not the first
    later = STARTED + TRITON_CRASH.replace("libtriton_python.so", "libgrpc.so") \
        + STUB_CRASH.format(current=NATIVE)
    assert stalled_stub_crashes(later, told) == {}


@pytest.mark.server_crashes  # serve's line ends an epoch in this log
def test_serve_ends_the_epoch_a_client_reported_not_healthy_and_no_other(tmp_path: Path
                                                                         ) -> None:
    run = RunDir(tmp_path / "run")
    log = tmp_path / "server0-tritonserver.log"
    log.write_text(STARTED)
    check_not_called_unhealthy(run, "server0", 1, log)  # no report: serves on
    report_unhealthy(run, ServerAddress(node="server0", host="127.0.0.1", grpc_port=1,
                                       http_port=2, metrics_port=3, epoch=1, pid=4),
                     "client0")
    check_not_called_unhealthy(run, "server0", 2, log)  # the control: a later epoch serves on
    assert log.read_text() == STARTED
    with pytest.raises(ServerError) as ended:
        check_not_called_unhealthy(run, "server0", 1, log)
    assert log.read_text() == STARTED + ended_epoch_line("client0", 1) + "\n"
    documented("server-epoch-called-unhealthy", str(ended.value), {str(log): "LOG"},
               exit_code=5)
    # the watch tells that line apart once the client's answer is in its log, and with it
    # what tritonserver did as it stopped
    counted = stalled_stub_crashes(log.read_text() + AFTERMATH.replace(
        "offline-iaas serve: tritonserver (pid 19895) died by signal SIGABRT while stopping\n",
        ""), {"127.0.0.1:56963"})
    assert counted == {4: 1, 7: 1}
    assert stalled_stub_crashes(log.read_text() + AFTERMATH, set()) == {}  # no client told


@pytest.mark.server_crashes  # the suite's own watch reads these runs too
@pytest.mark.server_exits
def test_the_watch_warns_of_the_stalled_stub_crash_and_fails_on_the_same_crash_unannounced(
        tmp_path: Path) -> None:
    log = STARTED + STUB_CRASH.format(current=NATIVE) + AFTERMATH
    crashed_run(tmp_path / "stalled", log, TOLD)
    watch = ServerLogWatch(tmp_path / "stalled")
    assert watch.problems(exits_expected=False, crashes_expected=False) == []
    assert len(watch.upstream) == 2  # the stub's crash, then tritonserver's abort
    assert "python-backend stub died by SIGSEGV" in watch.upstream[0]

    # the control: no client told "not healthy": the crashes and the node's exit fail
    crashed_run(tmp_path / "unannounced", log, TOLD.replace("not healthy", "unavailable"))
    watch = ServerLogWatch(tmp_path / "unannounced")
    problems = watch.problems(exits_expected=False, crashes_expected=False)
    assert len(problems) == 3 and watch.upstream == []
    assert "server node server0 exited on its own (attempt 1, exit code 5)" in problems[-1]


# tritonserver dead by SIGBUS in the epoch whose stub was called not healthy (a CI run's
# stalled-stub test): Triton traces SIGSEGV and SIGABRT only, so serve's line is all there is
BUS = "offline-iaas serve: tritonserver (pid 28313) died by signal SIGBUS while serving\n"
RESTARTED = STARTED.replace("56963", "40001")


@pytest.mark.server_crashes  # the suite's own watch reads these runs too
@pytest.mark.server_exits
def test_tritonserver_dead_by_sigbus_after_its_stub_was_called_not_healthy_is_told_apart(
        tmp_path: Path) -> None:
    told = {"127.0.0.1:56963"}
    log = STARTED + BUS + RESTARTED
    assert stalled_stub_crashes(log, told) == {4: 1}
    # the controls: no client told so, or another signal with no trace of where it struck
    # (SIGKILL: the kernel's out-of-memory killer)
    assert stalled_stub_crashes(log, set()) == {}
    assert stalled_stub_crashes(log.replace("SIGBUS", "SIGKILL"), told) == {}

    # the watch warns of it and counts the node's exit that followed
    crashed_run(tmp_path / "bus", log, TOLD)
    watch = ServerLogWatch(tmp_path / "bus")
    assert watch.problems(exits_expected=False, crashes_expected=False) == []
    assert len(watch.upstream) == 1 and "tritonserver died by SIGBUS" in watch.upstream[0]
    crashed_run(tmp_path / "killed", log.replace("SIGBUS", "SIGKILL"), TOLD)
    problems = ServerLogWatch(tmp_path / "killed").problems(exits_expected=False,
                                                           crashes_expected=False)
    assert len(problems) == 2 and "exited on its own" in problems[-1]


# tritonserver dead by SIGSEGV with no trace (its trace failed), then the stub aborting on the
# shared memory's lock the dead server held, from its thread that sends the model's metric: the
# order of a CI run's stalled-stub log (not kept), its lines as runs here print them
UNTRACED_THEN_LOCK = """\
Signal (11) received.
{ended}
Signal (15) received.
terminate called after throwing an instance of 'boost::interprocess::lock_exception'
  what():  boost::interprocess::lock_exception
Fatal Python error: Aborted

Current thread 0x00007f7cabfff000 (most recent call first):
  File "/run/model-repository/offline-iaas/1/model.py", line 118 in _count
  File "/run/model-repository/offline-iaas/1/model.py", line 110 in _sweep

Extension modules: numpy.core._multiarray_umath (total: 1)
"""


def test_tritonserver_dead_untraced_then_the_stub_aborted_on_the_shared_lock_is_told_apart(
        ) -> None:
    told = {"127.0.0.1:56963"}
    log = STARTED + UNTRACED_THEN_LOCK.format(ended=ended_epoch_line("client0", 1))
    crash, ended, abort = (_lines(log, start)[0] for start in (
        "Signal (11)", "offline-iaas serve: ending", "Fatal Python error"))
    assert stalled_stub_crashes(log, told) == dict.fromkeys((crash, ended, abort), 1)
    # the controls: no client told so; the stub aborted on another exception (the model's,
    # in its Python); Triton's trace outside the python backend: serve's line alone counts
    assert stalled_stub_crashes(log, set()) == {}
    elsewhere = log.replace("boost::interprocess::lock_exception", "std::runtime_error")
    assert stalled_stub_crashes(elsewhere, told) == {ended: 1}
    traced = log.replace("Signal (11) received.\n", "Signal (11) received.\n"
                         " 0# 0x000055BC4ADD952D in /opt/tritonserver/lib/libgrpc.so\n")
    assert stalled_stub_crashes(traced, told) == {ended + 1: 1}

    # the stub's abort on that lock as the epoch's first crash, Python frame and all
    first = STARTED + UNTRACED_THEN_LOCK.split("\n", 3)[3]
    assert stalled_stub_crashes(first, told) == {_lines(first, "Fatal Python error")[0]: 1}
    assert stalled_stub_crashes(first.replace("boost::interprocess::lock_exception",
                                              "std::runtime_error"), told) == {}
