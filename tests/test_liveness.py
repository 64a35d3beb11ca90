"""serve's liveness watch (``serve/liveness.py``) on an address where nothing answers: a
server is called hung only after probes in a row went unanswered, never by the time alone."""

from __future__ import annotations

import time

from offline_iaas.serve.liveness import FAILED_PROBES, LivenessWatch
from offline_iaas.serve.tritonserver import free_ports
from tests.helpers import wait_for


def test_a_server_is_hung_after_probes_in_a_row_unanswered_not_after_time_alone() -> None:
    (port,) = free_ports("127.0.0.1", 1)  # nothing listens there
    watch = LivenessWatch(f"127.0.0.1:{port}", probe_seconds=0.05)
    try:
        wait_for(lambda: watch.hung(0.0), 60, "the probes to go unanswered")
    finally:
        watch.close()
    assert watch.broken is None and watch.failed_probes >= FAILED_PROBES
    assert not watch.hung(watch.silent_seconds() + 60)  # not silent long enough yet
    # serve itself paused (a suspended job): long silent, but nothing probed meanwhile
    watch.answered, watch.failed_probes = time.monotonic() - 1000, FAILED_PROBES - 1
    assert not watch.hung(10.0)
    watch.failed_probes = FAILED_PROBES
    assert watch.hung(10.0)
    watch.broken = "RuntimeError: the watch failed"  # its own failure is no server's hang
    assert not watch.hung(10.0)
