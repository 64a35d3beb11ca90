"""A node's output or error log (its submit file's ``output``/``error``) found to be a FIFO
with no reader: run-local's ``open`` of it for writing waited for a reader for ever, every
node it had started left running. Now the node is refused in one line naming it and the
file, and everything started is stopped; a FIFO with a reader (an admin streaming a node's
output) is written to, and a directory is refused as well (``bounded_read.open_to_append``).
Each case runs under ``within_seconds``: the old code's wait fails the test, never hangs it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from offline_iaas.errors import RunError, exit_code
from tests import scripted_runs
from tests.error_catalogue import documented
from tests.test_logs_written_not_waited_on import read_end
from tests.test_own_files_not_regular import within_seconds

make_run = scripted_runs.make_run
"""Run directories with a hand-written DAG of python scripts (its fixture)."""
alive = scripted_runs.alive

DAG = ('SERVICE server0 node.sub\nVARS server0 node="server0" mode="service"\n'
       'JOB a node.sub\nVARS a node="a" mode="needs-server"\n')


def test_a_node_log_that_is_a_fifo_without_a_reader_stops_the_run_naming_it(make_run) -> None:
    run = make_run(DAG)
    (run.dir / "logs").mkdir()
    fifo = run.dir / "logs" / "a.out"
    os.mkfifo(fifo)
    with within_seconds(60), pytest.raises(RunError) as caught:
        run()
    assert str(caught.value) == (
        f"a: its log {fifo} is a FIFO (named pipe) with no reader (start its reader first, "
        "or remove it)")
    assert not run.has("a", "start")  # never started
    assert not [pid for pid in run.pids() if alive(pid)]
    assert run.state()["server0"]["status"] == "stopped"
    documented("run-local-node-log-fifo-no-reader", str(caught.value), {run.dir: "<ws>/run"},
               exit_code=exit_code(caught.value))


def test_a_node_log_that_is_a_directory_is_refused_naming_it(make_run) -> None:
    run = make_run(DAG)
    (run.dir / "logs" / "a.err").mkdir(parents=True)
    with within_seconds(60), pytest.raises(RunError, match=r"^a: its log .*a\.err is a "
                                                          r"directory, not a regular file$"):
        run()
    assert not [pid for pid in run.pids() if alive(pid)]


def test_a_node_log_that_is_a_fifo_with_a_reader_gets_the_output(make_run) -> None:
    """The control: the same FIFO, read, carries the node's output; the run ends well."""
    run = make_run(DAG)
    (run.dir / "logs").mkdir()
    fifo = run.dir / "logs" / "a.out"
    os.mkfifo(fifo)
    with read_end(fifo) as fd:  # held open: what the node wrote waits in the pipe
        with within_seconds(60):
            run()
        os.set_blocking(fd, False)
        assert os.read(fd, 65536) == b"a running\n"
    assert run.has("a", "end") and Path(fifo).exists()
