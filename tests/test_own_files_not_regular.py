"""Files the project writes itself and reads back, found to be a FIFO (put there by hand, or a
log a user streams through a named pipe): each reader waited for a writer for ever, hanging
the job (``Path.read_text`` opens it). Each now refuses it before it opens it, in one line
naming the file and its kind, as the error type the reader already raises
(``bounded_read.read_text_or``); serve's read-backs of tritonserver's log treat it as no log.

Each call runs in this process under ``within_seconds`` (SIGALRM): the old code's wait is cut
short, and fails the test, instead of hanging the suite."""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from offline_iaas.bench import regression
from offline_iaas.errors import ConfigError, RunError, exit_code
from offline_iaas.rendezvous import access, addresses
from offline_iaas.rundir import RunDir
from offline_iaas.serve import node, readiness
from tests.error_catalogue import documented

FIFO = "a FIFO (named pipe), not a regular file"


class StillWaiting(Exception):
    """Raised by ``within_seconds`` when its time is up: no ``OSError`` (as ``TimeoutError``
    is), which the code under test could swallow as a failed open."""


@contextlib.contextmanager
def within_seconds(seconds: float) -> Iterator[None]:
    """Fail (``StillWaiting``) where the block has not ended after ``seconds``: a FIFO's open
    that waits for a writer is interrupted by SIGALRM and raises."""
    def expired(*_: object) -> None:
        raise StillWaiting(f"still waiting after {seconds:g} s (a FIFO opened?)")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def refused(call: Callable[[], Any], error: type[Exception]) -> Exception:
    """What ``call`` raised (of type ``error``), within 5 s."""
    with within_seconds(5), pytest.raises(error) as caught:
        call()
    return caught.value


def fifo(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(path)
    return path


def test_a_fifo_as_the_runs_token_is_named_not_waited_on(tmp_path: Path) -> None:
    """``read_token`` (every client and server) and ``write_token`` (make-dag, an existing
    token kept). The control: a token file is read by both."""
    run = RunDir(tmp_path / "run")
    fifo(run.token)
    for call in (lambda: access.read_token(run), lambda: access.write_token(run)):
        err = refused(call, RunError)
        assert str(err) == f"{run.token}: cannot read: {FIFO}"
    documented("run-token-not-regular", str(err), {tmp_path: "<ws>"}, exit_code=exit_code(err))
    run.token.unlink()
    run.token.write_text("feedface\n")
    assert access.read_token(run) == access.write_token(run) == "feedface"


def test_a_fifo_as_a_servers_epoch_file_is_named_not_waited_on(tmp_path: Path) -> None:
    """``next_epoch`` (serve, at each start). The control: epoch 3 recorded, 4 claimed."""
    run = RunDir(tmp_path / "run")
    epoch = fifo(run.epoch("server0"))
    err = refused(lambda: addresses.next_epoch(run, "server0"), RunError)
    assert str(err) == f"{epoch}: cannot read: {FIFO}"
    documented("server-epoch-not-regular", str(err), {tmp_path: "<ws>"},
               exit_code=exit_code(err))
    epoch.unlink()
    epoch.write_text("3")
    assert addresses.next_epoch(run, "server0") == 4


def test_a_fifo_as_a_servers_refusal_is_named_not_waited_on(tmp_path: Path) -> None:
    """``read_refusal`` (a client waiting for its server, the PRE script). The control: a
    refusal's reason is read; none there is None."""
    run = RunDir(tmp_path / "run")
    refusal = fifo(run.refusal("server0"))
    err = refused(lambda: addresses.read_refusal(run, "server0"), RunError)
    assert str(err) == f"{refusal}: cannot read: {FIFO}"
    documented("server-refusal-not-regular", str(err), {tmp_path: "<ws>"},
               exit_code=exit_code(err))
    refusal.unlink()
    addresses.publish_refusal(run, "server0", "the repository does not fit")
    assert addresses.read_refusal(run, "server0") == "the repository does not fit"
    assert addresses.read_refusal(run, "server1") is None


def test_a_fifo_as_tritonservers_log_is_no_log_to_serves_read_backs(tmp_path: Path) -> None:
    """The tail of the log in serve's error, the endpoints' lines it waits for, the copy to
    stdout under a job-ad rendezvous: each read the FIFO (streamed by a user's reader, it
    waited until tritonserver exited). The control: a regular log is read by each."""
    log = fifo(tmp_path / "tritonserver.log")
    printed = io.StringIO()
    with within_seconds(5), contextlib.redirect_stdout(printed):
        assert node._log_tail(log) == ""
        assert readiness._logged_since(log, 0, "Started GRPCInferenceService") is False
        node._echo_log(log)
    assert printed.getvalue() == ""
    log.unlink()
    log.write_text("I0101 starting\nI0101 Started GRPCInferenceService at 0.0.0.0:8001\n")
    with contextlib.redirect_stdout(printed):
        assert node._log_tail(log, lines=1) == "I0101 Started GRPCInferenceService at 0.0.0.0:8001"
        assert readiness._logged_since(log, 5, "Started GRPCInferenceService") is True
        assert readiness._logged_since(log, log.stat().st_size, "Started") is False
        node._echo_log(log)
    assert printed.getvalue().startswith("---- tritonserver.log ----\nI0101 starting\n")


def test_a_fifo_as_the_recorded_regression_is_named_not_waited_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``bench.regression --check FILE`` read FILE before measuring. The control: a recorded
    file is read and checked (the measurement stood in for: it starts a server)."""
    recorded = fifo(tmp_path / "regression.json")
    err = refused(lambda: regression.main(["--check", str(recorded)]), ConfigError)
    assert str(err) == f"{recorded}: cannot read: {FIFO}"
    documented("regression-check-not-regular", str(err), {tmp_path: "<ws>"},
               exit_code=exit_code(err))
    recorded.unlink()
    ratios = regression.RegressionRatios(wall=0.5, cpu=0.4)
    recorded.write_text(json.dumps({**ratios.to_dict(), "command": "a test"}))
    monkeypatch.setattr(regression, "measure_regression_ratios", lambda work: ratios)
    assert regression.main(["--check", str(recorded)]) == 0


def test_a_damaged_epoch_file_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    """serve's epoch file holding no whole number (``int()``'s ValueError was a traceback at
    serve's start). The control: digits are the epoch."""
    run = RunDir(tmp_path / "run")
    epoch = run.epoch("server0")
    epoch.parent.mkdir(parents=True)
    for text in ("three", "", "+1", "-2"):
        epoch.write_text(text)
        err = refused(lambda: addresses.next_epoch(run, "server0"), RunError)
    documented("server-epoch-damaged", str(err), {tmp_path: "<ws>"}, exit_code=exit_code(err))
    epoch.write_text("7\n")
    assert addresses.next_epoch(run, "server0") == 8


@pytest.mark.parametrize("text", ["{not json", "[1, 2]", '{"command": "x"}',
                                  '{"service_over_limit_wall": "0.5", '
                                  '"service_over_limit_cpu": 0.4, "command": "x"}'])
def test_a_recorded_regression_that_is_no_record_is_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str) -> None:
    """``bench.regression --check FILE`` of a file --record did not write (a traceback: JSON's
    ValueError, a KeyError, a str halved). The control: a record is checked."""
    recorded = tmp_path / "regression.json"
    recorded.write_text(text)
    monkeypatch.setattr(regression, "measure_regression_ratios",
                        lambda work: pytest.fail("measured before the record was read"))
    err = refused(lambda: regression.main(["--check", str(recorded)]), ConfigError)
    assert str(err).startswith(f"{recorded}: not a record of --record ("), err
    if text == "[1, 2]":
        documented("regression-check-not-a-record", str(err), {tmp_path: "<ws>"},
                   exit_code=exit_code(err))
    ratios = regression.RegressionRatios(wall=0.5, cpu=0.4)
    recorded.write_text(json.dumps({**ratios.to_dict(), "command": "a test"}))
    monkeypatch.setattr(regression, "measure_regression_ratios", lambda work: ratios)
    assert regression.main(["--check", str(recorded)]) == 0
