"""A python-backend stub that dies under a serving tritonserver: ``serve`` finds it dead
(``serve/stub_watch.py``, on real processes here), and a client that meets the dead model's
answers says so in one line and resumes (``client/transport.py``), never a traceback.

Triton 2.51 keeps such a model "ready", answers every request to it with ``Stub process
'<instance>' is not healthy.`` or, on a stream, with a response that carries no outputs (which
``client/node.py`` once indexed: ``TypeError: 'NoneType' object is not subscriptable``), and
does not reap the stub. The whole story, on a real server under run-local, is
``tests/test_server_crashes.py::test_a_python_stub_dead_by_sigsegv_mid_stream_restarts_its_\
server_and_the_run_finishes``.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from offline_iaas.client import node as client_node
from offline_iaas.client.part import PartWriter
from offline_iaas.config import load_config
from offline_iaas.data.discovery import discover_frames
from offline_iaas.data.synth import write_synthetic_dataset
from offline_iaas.errors import ServerError
from offline_iaas.job_specs import read_client_job
from offline_iaas.rendezvous.addresses import ServerAddress, UnhealthyReport, read_unhealthy
from offline_iaas.rundir import RunDir
from offline_iaas.serve.stub_watch import STUB_NAME, dead_stub, find_stubs
from offline_iaas.workflow.make_dag import make_dag
from tests.error_catalogue import documented
from tests.helpers import SMALL_CAMPAIGN, captured_log, wait_for


def _state(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def test_a_stub_dead_by_sigsegv_is_found_dead_with_its_signal(tmp_path: Path) -> None:
    stub_binary = tmp_path / STUB_NAME  # sleep, under the stub's name
    shutil.copy(shutil.which("sleep") or "/bin/sleep", stub_binary)
    # its parent, like Triton 2.51, does not reap it; a child of another name is no stub
    script = ("import subprocess, sys, time\n"
              "subprocess.Popen(['sleep', '60'])\n"
              f"print(subprocess.Popen([{str(stub_binary)!r}, '60']).pid, flush=True)\n"
              "time.sleep(60)\n")
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                              text=True, cwd=tmp_path)
    stub_pid = None
    try:
        stub_pid = int(parent.stdout.readline())
        # Popen returns once exec has begun; the kernel fills in /proc/<pid>/cmdline a moment
        # later (a loaded machine stretches that moment), and an empty one names no stub
        wait_for(lambda: len(find_stubs(parent.pid)) == 1, 10, "the stub to start")
        (stub,) = find_stubs(parent.pid)
        assert (stub.pid, stub.instance) == (stub_pid, f"pid {stub_pid}")
        assert dead_stub([stub]) is None  # the control: alive
        os.kill(stub_pid, signal.SIGSEGV)
        wait_for(lambda: _state(stub_pid) == "Z", 10, "the stub to be a zombie")
        death = dead_stub([stub])
        assert death is not None and death.words() == "signal SIGSEGV"
        assert death.log_line("while serving") == (
            f"offline-iaas serve: python-backend stub pid {stub_pid} (pid {stub_pid}) died by "
            "signal SIGSEGV while serving")
        assert find_stubs(parent.pid) == []  # a zombie is no live stub
    finally:
        for child in Path(f"/proc/{parent.pid}/task/{parent.pid}/children").read_text().split():
            os.kill(int(child), signal.SIGKILL)  # the other child (and a stub still alive)
        parent.kill()
        parent.wait()
    # its parent gone, the zombie is reaped: gone, how it ended unknown
    wait_for(lambda: _state(stub_pid) is None, 10, "the stub to be reaped")
    death = dead_stub([stub])
    assert death is not None and death.words() == "an unknown status"


class _Result:
    def __init__(self, request_id: str, outputs: dict[str, np.ndarray]) -> None:
        self.request_id, self.outputs = request_id, outputs

    def get_response(self):
        return self

    @property
    def id(self) -> str:
        return self.request_id

    def as_numpy(self, name: str):
        return self.outputs.get(name)


class _AnsweringClient:
    """Stands in for tritonclient's gRPC client: answers each streamed request at once, with
    the statistic (zeros), or (``dead_model``) as Triton 2.51 answers on a stream to a model
    whose python stub died: a response that carries no outputs."""

    def __init__(self, stride_samples: int, dead_model: bool, error: str | None = None
                 ) -> None:
        self.stride_samples = stride_samples
        self.dead_model = dead_model
        self.error = error
        """Triton's error answer to every request (while ``dead_model``), if any."""

    def start_stream(self, callback, headers=None) -> None:
        self.callback = callback

    def async_stream_infer(self, model, inputs, request_id, **_options) -> None:
        windows = inputs[0].shape()[2] // self.stride_samples
        if self.dead_model and self.error is not None:
            self.callback(None, self.error)
            return
        outputs = {} if self.dead_model else {"statistic": np.zeros((1, windows), np.float32)}
        self.callback(_Result(request_id, outputs), None)

    def stop_stream(self, cancel_requests: bool = False) -> None:
        pass

    def close(self) -> None:
        pass


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> RunDir:
    root = tmp_path_factory.mktemp("dead-model")
    (root / "campaign.toml").write_text(SMALL_CAMPAIGN)
    config = load_config(root / "campaign.toml", ["layout.rebalance=false",
                                                  "layout.clients_per_server=4"])
    write_synthetic_dataset(config)
    run = RunDir(root / "run")
    make_dag(config, run, check_files=False)
    return run


def _stream(run: RunDir, node: str, dead_answers: int, monkeypatch,
            overrides: tuple[str, ...] = (), error: str | None = None
            ) -> tuple[int, PartWriter]:
    """``stream_share`` of ``node`` against a server whose first ``dead_answers``
    connections answer as a dead model (or with ``error``); returns its reconnections and
    its part."""
    config = load_config(run.config, list(overrides))
    assert not config.layout.rebalance  # no server asked which is live
    share = read_client_job(run, node)
    connections = []

    def connect(*_args, **_kwargs):
        connections.append(_AnsweringClient(config.stride_samples,
                                            len(connections) < dead_answers, error))
        address = ServerAddress(node="server0", host="127.0.0.1", grpc_port=1, http_port=2,
                                metrics_port=3, epoch=1, pid=4)
        return connections[-1], address

    monkeypatch.setattr(client_node, "connect", connect)
    writer = PartWriter(run, share, config.outputs.names, config.stream_hash(),
                        {name: config.outputs.row_shape(name) for name in config.outputs.names})
    reconnects = client_node.stream_share(config, share, discover_frames(config.data), writer, run)
    return reconnects, writer


def test_a_client_meeting_a_dead_model_says_so_in_one_line_and_resumes(run, monkeypatch
                                                                        ) -> None:
    with captured_log() as lines:
        reconnects, writer = _stream(run, "client0", 1, monkeypatch)
    assert reconnects == 1
    assert [line for line in lines if "server0" in line] == [
        "client0: server0 at 127.0.0.1:1 answered request 0:0 without its output 'statistic': "
        "the server failed; reconnecting, resuming from the last checkpoint"]
    windows = sum(piece.windows for piece in read_client_job(run, "client0").pieces)
    assert sum(writer.progress()) == windows  # the second connection streamed it all


def test_a_client_told_its_stub_is_not_healthy_reports_the_epoch_for_serve_to_end(
        run, monkeypatch) -> None:
    # serve ends the epoch named (serve/node.py: check_not_called_unhealthy); Triton's answer
    # to a model whose stub stalled, or died
    assert read_unhealthy(run, "server0") is None
    with captured_log() as lines:
        reconnects, writer = _stream(run, "client2", 1, monkeypatch,
                                     error="Stub process 'offline-iaas_0_0' is not healthy.")
    assert reconnects == 1 and [line for line in lines if "not healthy" in line] == [
        "client2: server0 at 127.0.0.1:1 answered with an error: Stub process "
        "'offline-iaas_0_0' is not healthy.; reconnecting, resuming from the last checkpoint"]
    assert read_unhealthy(run, "server0") == UnhealthyReport(epoch=1, client="client2")
    # the control: another error is no report
    run.unhealthy("server0").unlink()
    reconnects, _ = _stream(run, "client3", 1, monkeypatch, error="Socket closed")
    assert reconnects == 1 and read_unhealthy(run, "server0") is None


def test_a_client_whose_reconnections_are_spent_on_a_dead_model_fails_in_one_line(
        run, monkeypatch) -> None:
    with captured_log() as lines, pytest.raises(ServerError) as failed:
        _stream(run, "client1", 2, monkeypatch, ("client.max_reconnects=1",))
    assert len([line for line in lines if "reconnecting" in line]) == 1
    documented("client-dead-model-answers", str(failed.value), exit_code=5)
