"""tritonserver's crashes in Triton's own core library (``serve/core_crash.py``) are told apart
from the others by Triton's backtrace: the suite's watch shows them as warnings and still fails
on the same crash traced through the python backend, after a stub's, or with no trace. The log
below is cut from a real one (CI's ``test_load[32]``: SIGSEGV in the direct sequence batcher's
thread of the wheel's ``libtritonserver``, no client told anything, no stub dead first)."""

from __future__ import annotations

from pathlib import Path

import pytest

from offline_iaas.serve.core_crash import core_crashes, startup_aborts
from tests.server_log_watch import CORE_CRASH, STARTUP_ABORT, ServerLogWatch, crashed_run

LIBRARY = "/w/.venv/lib/python3.11/site-packages/nvidia_pytriton.libs/libtritonserver-717102f0.so"
STARTED = """\
I1202 10:53:26.489322 1618 server.cc:674] model READY
I1202 10:53:26.494256 1618 grpc_server.cc:2558] "Started GRPCInferenceService at 127.0.0.1:52389"
I1202 10:53:26.536402 1618 http_server.cc:362] "Started Metrics Service at 127.0.0.1:34619"
"""
CORE_SIGSEGV = f"""\
Signal (11) received.
 0# 0x000055A7FB8C052D in /root/.cache/offline-iaas/tritonserver/bin/tritonserver
 1# 0x00007F5367C5A050 in /lib/x86_64-linux-gnu/libc.so.6
 2# 0x00007F5368645F3F in {LIBRARY}
 3# 0x00007F5368640C4A in {LIBRARY}
 4# 0x00007F53686FB70E in {LIBRARY}
 5# 0x00007F5368705F5D in {LIBRARY}
 6# 0x00007F5367AD44A3 in /lib/x86_64-linux-gnu/libstdc++.so.6
 7# 0x00007F5367CA71F5 in /lib/x86_64-linux-gnu/libc.so.6

offline-iaas model offline-iaas: tritonserver (pid 1618) exited without unloading it (a \
sequence still open at its exit timeout, or it was killed); its python-backend stub (pid 1647) \
exits
offline-iaas serve: tritonserver (pid 1618) died by signal SIGSEGV while serving
"""
RESTARTED = STARTED.replace("52389", "38905")
CLIENTS = ("client0: server0 at 127.0.0.1:52389 answered with an error: "
           "[StatusCode.UNAVAILABLE] Stream removed (Socket closed); reconnecting, resuming "
           "from the last checkpoint\n")
STUB_FIRST = """\
Fatal Python error: Segmentation fault

Current thread 0x00007f7cc00be000 (most recent call first):
  File "/run/model-repository/offline-iaas/1/stateful.py", line 425 in <lambda>
"""
PYTHON_BACKEND = "/root/.cache/offline-iaas/tritonserver/backends/python/libtriton_python.so"


def test_a_crash_in_tritons_core_library_is_told_apart_by_its_backtrace() -> None:
    log = STARTED + CORE_SIGSEGV + RESTARTED
    assert core_crashes(log) == {4: 1}  # serve's line for the same death is not another
    # a second crash in the next epoch counts there
    assert core_crashes(log + CORE_SIGSEGV) == {4: 1, 19: 2}
    # the controls: traced through the python backend (its stalled-stub crashes are told
    # apart by what the clients were answered, serve/stalled_stub.py), a stub dead first,
    # no trace at all (serve's line alone), or before the server served
    through_backend = CORE_SIGSEGV.replace(f" 4# 0x00007F53686FB70E in {LIBRARY}",
                                           f" 4# 0x00007F53686FB70E in {PYTHON_BACKEND}")
    assert core_crashes(STARTED + through_backend) == {}
    assert core_crashes(STARTED + STUB_FIRST + CORE_SIGSEGV) == {}
    assert core_crashes(STARTED + CORE_SIGSEGV.replace(LIBRARY, "/lib/libgrpc.so")) == {}
    assert core_crashes(STARTED + CORE_SIGSEGV.split("\n\n")[1]) == {}
    assert core_crashes(CORE_SIGSEGV + STARTED) == {}


@pytest.mark.server_crashes  # the suite's own watch reads these runs too
@pytest.mark.server_exits
def test_the_watch_warns_of_a_core_crash_and_fails_on_the_same_crash_through_the_backend(
        tmp_path: Path) -> None:
    log = STARTED + CORE_SIGSEGV + RESTARTED
    watch = ServerLogWatch(crashed_run(tmp_path / "core", log, CLIENTS))
    assert watch.problems(exits_expected=False, crashes_expected=False) == []
    (warning,) = watch.upstream  # the crash named with its cause; the node's exit counted
    assert warning.startswith(CORE_CRASH) and "tritonserver died by SIGSEGV" in warning

    # the control: the same crash traced through the python backend, no client told
    # "not healthy": the crash and the node's exit fail the test
    through_backend = log.replace(f" 4# 0x00007F53686FB70E in {LIBRARY}",
                                  f" 4# 0x00007F53686FB70E in {PYTHON_BACKEND}")
    watch = ServerLogWatch(crashed_run(tmp_path / "backend", through_backend, CLIENTS))
    problems = watch.problems(exits_expected=False, crashes_expected=False)
    assert len(problems) == 2 and watch.upstream == []
    assert "server node server0 exited on its own (attempt 1, exit code 5)" in problems[-1]


LOADING = """\
I1206 09:42:10.796103 29103 model_lifecycle.cc:472] "loading: offline-iaas:1"
I1206 09:42:13.803953 29103 python_be.cc:2249] "TRITONBACKEND_ModelInstanceInitialize: \
offline-iaas_0_0 (CPU device 0)"
"""
ABORT = """\
terminate called after throwing an instance of 'boost::interprocess::lock_exception'
  what():  boost::interprocess::lock_exception
offline-iaas serve: tritonserver (pid 29103) died by signal SIGABRT before it was ready
I1206 09:42:16.819336 29160 pb_stub.cc:2145]  Non-graceful termination detected.
"""
"""Cut from CI's log (``test_load[32]`` at ``636f123``): the python backend threw as two
instances started; run-local restarted the node and the run finished equal to its reference."""


@pytest.mark.server_crashes
@pytest.mark.server_exits
def test_an_abort_on_an_uncaught_exception_before_ready_is_tritons_own(tmp_path: Path) -> None:
    log = LOADING + ABORT + LOADING + STARTED
    assert startup_aborts(log) == {5: -5}
    watch = ServerLogWatch(crashed_run(tmp_path / "abort", log, CLIENTS))
    assert watch.problems(exits_expected=False, crashes_expected=False) == []
    (warning,) = watch.upstream  # the node's exit counted with it
    assert warning.startswith(STARTUP_ABORT) and "SIGABRT before it was ready" in warning
    # the controls: no uncaught exception said (a SIGABRT of unknown cause), or the same
    # words after the server served: the crash and the node's exit fail the test
    unsaid = ABORT.replace("terminate called after", "something")
    assert startup_aborts(LOADING + unsaid) == {}
    served = STARTED + ABORT.replace("before it was ready", "while serving")
    assert startup_aborts(served) == {}
    watch = ServerLogWatch(crashed_run(tmp_path / "unsaid", LOADING + unsaid + STARTED, CLIENTS))
    problems = watch.problems(exits_expected=False, crashes_expected=False)
    assert len(problems) == 2 and watch.upstream == []
