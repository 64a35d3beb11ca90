"""The logs serve appends to (tritonserver's output, serve's own lines in it, the monitor
CSV), found to be a FIFO with no reader: ``open`` for writing waited for a reader for ever,
serve hanging at its start (SIGTERM retried through: measured, still there after 10 min).
A FIFO with a reader (an admin streaming the log) is written to; one with none, a
directory, a block device or a socket is refused at once in one line naming the file
(a character device, ``/dev/null``, is written to; ``bounded_read.open_to_append``).

A FIFO case runs under ``within_seconds`` (SIGALRM raising ``StillWaiting``, which is no
``OSError`` the code could swallow) or in a child with a timeout: the old code's wait fails
the test instead of hanging the suite."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from offline_iaas.bounded_read import NoReader, NotRegularFile, open_to_append
from offline_iaas.errors import ServerError
from offline_iaas.serve.crashes import append_serve_line
from offline_iaas.serve.monitor import ServerMonitor
from offline_iaas.serve.tritonserver import TritonInstall, start_server
from tests.bad_input_cases import run_dir
from tests.error_catalogue import documented
from tests.test_own_files_not_regular import within_seconds

NO_READER = "a FIFO (named pipe) with no reader (start its reader first, or remove it)"
NOTHING = TritonInstall(Path(), None, {})
"""No install: the command started is the test's own."""


@contextlib.contextmanager
def read_end(fifo: Path) -> Iterator[int]:
    """A blocking descriptor reading ``fifo`` (opened without waiting for a writer)."""
    fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    os.set_blocking(fd, True)
    try:
        yield fd
    finally:
        os.close(fd)


def read_all(fd: int) -> bytes:
    """What the writers of a FIFO sent until the last of them closed it."""
    chunks = []
    while chunk := os.read(fd, 65536):
        chunks.append(chunk)
    return b"".join(chunks)


@pytest.fixture(scope="module")
def base(small_campaign_dir) -> Path:
    return small_campaign_dir()


def serve(run: Path) -> subprocess.CompletedProcess[str]:
    """``offline-iaas serve`` of ``run``'s server0 in a child killed after 60 s."""
    return subprocess.run([sys.executable, "-m", "offline_iaas.cli", "serve", "--run-dir",
                           str(run), "--node", "server0"], capture_output=True, text=True,
                          timeout=60)


TRITONSERVER_LOG = "logs/server0-tritonserver.log"
MONITOR_CSV = "monitor/server0.csv"


@pytest.mark.parametrize(("kind", "where", "row"), [
    ("fifo", TRITONSERVER_LOG, "serve-log-fifo-no-reader"),
    ("directory", TRITONSERVER_LOG, "serve-log-not-regular"),
    ("fifo", MONITOR_CSV, None)])
def test_serve_refuses_a_log_that_is_a_fifo_with_no_reader_or_a_directory_at_once(
        base: Path, tmp_path: Path, kind: str, where: str, row: str | None) -> None:
    """The real command: one line naming the log, exit 5 (``ServerError``), no tritonserver
    started (conftest's stand-in fails the test if it is; the monitor's CSV is opened before
    it), the path left as it was."""
    ws = Path(shutil.copytree(base, tmp_path / "ws"))
    run = run_dir(ws)
    log = run / where
    log.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(log) if kind == "fifo" else log.mkdir()
    result = serve(run)
    errors = [line for line in result.stderr.splitlines() if "error:" in line]
    assert result.returncode == 5 and len(errors) == 1, result.stderr
    message = errors[0].removeprefix("offline-iaas serve: error: ")
    why = NO_READER if kind == "fifo" else "a directory, not a regular file"
    assert message == f"{log} is {why}"
    assert (log.is_fifo() if kind == "fifo" else log.is_dir())
    if where == MONITOR_CSV:  # refused before tritonserver was started, so no log of it
        assert not (run / TRITONSERVER_LOG).exists()
    if row is not None:
        documented(row, message, {ws: "<ws>"}, exit_code=result.returncode)


def test_tritonservers_log_is_a_fifo_with_a_reader_or_a_file(tmp_path: Path) -> None:
    """``start_server`` (serve's and the bench's): refused at once with no reader; the
    controls: a reader gets the output, a regular file has it appended."""
    command = [sys.executable, "-c", "print('hello from the server')"]
    fifo = tmp_path / "tritonserver.log"
    os.mkfifo(fifo)
    with within_seconds(5), pytest.raises(ServerError) as refused:
        start_server(command, NOTHING, fifo)
    assert str(refused.value) == f"{fifo} is {NO_READER}"
    with within_seconds(20), read_end(fifo) as reader:
        proc = start_server(command, NOTHING, fifo)
        assert read_all(reader) == b"hello from the server\n"
        assert proc.wait() == 0
    log = tmp_path / "file.log"
    log.write_text("earlier\n")
    with within_seconds(20):
        assert start_server(command, NOTHING, log).wait() == 0
    assert log.read_text() == "earlier\nhello from the server\n"


def test_serves_own_lines_and_the_monitor_csv_do_not_wait_on_a_fifo(tmp_path: Path) -> None:
    """``append_serve_line`` (a death, a hang, a stub's death) writes nothing to a FIFO with
    no reader; the monitor refuses it as its CSV in one line. The controls: a reader of the
    FIFO gets the line, a regular log has it appended."""
    fifo = tmp_path / "tritonserver.log"
    os.mkfifo(fifo)
    line = "offline-iaas serve: tritonserver (pid 7) died by signal SIGSEGV while serving"
    with within_seconds(5):
        assert append_serve_line(fifo, line) == "tritonserver (pid 7) died by signal SIGSEGV" \
            " while serving"
        with pytest.raises(ServerError) as refused:
            ServerMonitor({}, fifo, 60.0)
    assert str(refused.value) == f"{fifo} is {NO_READER}"
    with within_seconds(5), read_end(fifo) as reader:
        append_serve_line(fifo, line)
        assert read_all(reader) == (line + "\n").encode()
    log = tmp_path / "file.log"
    append_serve_line(log, line)
    assert log.read_text() == line + "\n"


def test_open_to_append_refuses_a_socket_and_a_directory_and_writes_to_dev_null(
        tmp_path: Path) -> None:
    """Each named by its kind, before it is opened; the controls: absent is created, and a
    character device (``/dev/null``, a submit file's ``output`` as often as not) is written
    to."""
    import socket

    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(tmp_path / "sock"))
        for path, kind in ((tmp_path / "sock", "a socket"), (tmp_path, "a directory")):
            with pytest.raises(NotRegularFile) as refused:
                open_to_append(path)
            assert not isinstance(refused.value, NoReader)
            assert str(refused.value) == f"{kind}, not a regular file"
    with open_to_append("/dev/null") as out:
        out.write(b"x")
    with open_to_append(tmp_path / "new.log") as out:
        out.write(b"x")
    assert (tmp_path / "new.log").read_bytes() == b"x"


def test_the_monitor_csv_is_one_stream_to_a_fifos_reader(tmp_path: Path) -> None:
    """The monitor keeps its CSV open from its making to ``stop``: a FIFO's reader reading to
    its end (``cat``) gets the header and every poll's rows (when it was opened per poll, the
    header's close ended the reader, and the next poll found no reader: the monitor's thread
    died of it); a reader gone is a failed poll, not an error."""
    from tests.test_monitor import _FakeClient, _stats

    fifo = tmp_path / "server0.csv"
    os.mkfifo(fifo)
    received: list[bytes] = []
    with within_seconds(20), read_end(fifo) as reader:
        monitor = ServerMonitor({"k": "v"}, fifo, 60.0)
        cat = threading.Thread(target=lambda: received.append(read_all(reader)))
        cat.start()
        client = _FakeClient([{"model_stats": [_stats("net", "1", n, 10 * n)]} for n in (1, 2)])
        assert [monitor.poll_once(client) for _ in range(2)] == [1, 1]
        monitor.stop()
        cat.join()
    lines = received[0].decode().splitlines()
    assert lines[0].startswith("unix_time,model,") and len(lines) == 3
    assert [line.split(",")[2] for line in lines[1:]] == ["1", "2"]
    with within_seconds(20):  # the reader gone (its end closed): a failed poll, no error
        with read_end(fifo):
            monitor = ServerMonitor({"k": "v"}, fifo, 60.0)
        assert monitor.poll_once(_FakeClient([{"model_stats": [_stats("net", "1", 3, 30)]}
                                              ])) == 0
        assert monitor.failures == 1
        monitor.stop()
