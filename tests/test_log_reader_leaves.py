"""A log that is a FIFO whose reader (an admin streaming it) leaves mid-run.

``start_server`` appends tritonserver's output to a FIFO that has a reader. ``Popen`` restored
SIGPIPE's default in tritonserver, which ignores it only once its gRPC endpoint starts (1.6 s
into a start here, measured in ``/proc/<pid>/status``; a GPU model's load takes far longer):
a reader leaving while the models load killed tritonserver by SIGPIPE at its next line, and
serve ended as on a crash. It is now started with SIGPIPE ignored: its lines to a FIFO with no
reader fail (EPIPE) and it serves on. Done for real: the reader leaves once tritonserver has
logged that it is loading the model, before the lines it logs as the model's instance starts.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from offline_iaas.bounded_read import NoReader, open_to_append
from offline_iaas.serve.monitor import ServerMonitor
from offline_iaas.serve.node import stop_process
from offline_iaas.serve.readiness import wait_until_ready
from offline_iaas.serve.tritonserver import (
    Ports,
    free_ports,
    locate_tritonserver,
    server_command,
    start_server,
)
from tests.helpers import small_campaign
from tests.test_own_files_not_regular import within_seconds

LEAVING_READER = """\
import os, sys, time
seen = b""
while b'"loading: ' not in seen:  # then leave, before the model's instance is started
    chunk = os.read(0, 65536)
    seen += chunk
    if not chunk:
        time.sleep(0.01)
sys.stdout.buffer.write(seen)
"""
"""A reader of the FIFO on its stdin that leaves once tritonserver says it loads a model."""


@pytest.mark.slow
def test_tritonserver_serves_on_and_stops_cleanly_after_its_logs_reader_leaves(
        tmp_path: Path) -> None:
    """The reader leaves while tritonserver loads its model: tritonserver still gets ready,
    answers, and exits 0 on its stop (it died by SIGPIPE before it was ready). The fault is
    checked to have happened: the reader read the loading line and the FIFO has no reader
    left."""
    import tritonclient.grpc as grpcclient

    (tmp_path / "campaign").mkdir()
    campaign = small_campaign(tmp_path / "campaign")
    log = tmp_path / "tritonserver.log"
    os.mkfifo(log)
    fd = os.open(log, os.O_RDONLY | os.O_NONBLOCK)
    os.set_blocking(fd, True)
    with within_seconds(150):
        reader = subprocess.Popen([sys.executable, "-c", LEAVING_READER], stdin=fd,
                                  stdout=subprocess.PIPE)
        os.close(fd)
        ports = Ports(*free_ports("127.0.0.1"))
        install = locate_tritonserver()
        proc = start_server(server_command(install, campaign.model.repository, ports,
                                           "127.0.0.1", 5), install, log)
        try:
            assert b'"loading: ' in reader.communicate()[0] and reader.returncode == 0
            with pytest.raises(NoReader):  # the reader has really gone
                open_to_append(log).close()
            url = f"127.0.0.1:{ports.grpc}"
            ready = wait_until_ready(proc, url, [campaign.model.name], 120,
                                     threading.Event(), log)
            assert ready, f"tritonserver ended with {proc.returncode} before it was ready"
            time.sleep(1)
            client = grpcclient.InferenceServerClient(url)
            try:
                assert client.is_server_ready()
                assert client.is_model_ready(campaign.model.name)
            finally:
                client.close()
        finally:
            stop_process(proc, 15)
            if reader.poll() is None:
                reader.kill()
                reader.wait()
    assert proc.returncode == 0, f"exit {proc.returncode} ({-proc.returncode == signal.SIGPIPE=})"


def test_the_monitor_stops_writing_to_a_fifo_whose_reader_left_saying_so_once(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A poll after the CSV's reader left fails with one warning naming the CSV, which is
    closed; later polls neither ask the server nor warn again, and ``stop`` (its last poll)
    raises nothing (it failed every poll silently, asking the server each time). The control:
    while the reader is there, a poll writes its row."""
    from tests.test_monitor import _FakeClient, _stats

    fifo = tmp_path / "server0.csv"
    os.mkfifo(fifo)
    answers = [{"model_stats": [_stats("net", "1", n, 10 * n)]} for n in (1, 2, 3, 4)]
    client = _FakeClient(answers)
    with within_seconds(20):
        fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        monitor = ServerMonitor({"k": "v"}, fifo, 60.0)
        assert monitor.poll_once(client) == 1
        assert os.read(fd, 65536).decode().splitlines()[1].split(",")[1:3] == ["net", "1"]
        os.close(fd)  # the reader leaves
        with caplog.at_level(logging.WARNING, logger="offline_iaas.serve.monitor"):
            assert [monitor.poll_once(client) for _ in range(2)] == [0, 0]
            monitor.stop()
    assert len(answers) == 2, "the server was asked again after the reader left"
    assert monitor.failures == 1 and monitor.polls == 1
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert warnings == [f"{fifo}: its reader left; the monitor writes no more rows to it"]
