"""Faults mid-campaign, on real tritonservers through run-local: the output never changes.

Every test runs a small campaign (64 s at 256 Hz, 1 server × 2 clients) with one injected fault
(``RUN/faults.json``, see ``tests/faults/inject.py``) or an outside blow (a signal to the server),
and ends by comparing the merged output with the in-process reference.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from offline_iaas.config import CampaignConfig, load_config
from offline_iaas.data.synth import write_synthetic_dataset
from offline_iaas.errors import RunError
from offline_iaas.merge.output import compare_outputs
from offline_iaas.merge.reference import run_reference
from offline_iaas.repository.export import export_repository
from offline_iaas.rundir import RunDir
from offline_iaas.serve.tritonserver import free_ports
from offline_iaas.workflow.local import run_local
from offline_iaas.workflow.make_dag import make_dag
from offline_iaas.workflow.status import read_status
from tests.error_catalogue import documented
from tests.faults.inject import HELD, go_when_published, release, until_published
from tests.helpers import SMALL_CAMPAIGN, processes_mentioning, wait_for

pytestmark = pytest.mark.slow

TOLERANCE = 1e-5
FAST_FAILURE = [  # small deadlines, so a fault is noticed within seconds
    "client.request_timeout_seconds=4",
    "client.connect_timeout_seconds=1",
    "client.checkpoint_requests=2",
]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Frames and the reference output, shared by every test of the module."""
    root = tmp_path_factory.mktemp("faults")
    (root / "campaign.toml").write_text(SMALL_CAMPAIGN)
    config = load_config(root / "campaign.toml")
    write_synthetic_dataset(config)
    export_repository(config)
    reference, _ = run_reference(config, root / "reference.h5")
    return root, reference


def prepare(
    dataset: tuple[Path, Path], name: str, overrides: list[str], faults: dict | None
) -> tuple[CampaignConfig, Path]:
    root, _ = dataset
    repo = root / name / "model-repository"
    config = load_config(
        root / "campaign.toml", [f'model.repository="{repo}"', *FAST_FAILURE, *overrides]
    )
    export_repository(config)
    run_dir = root / name / "run"
    make_dag(config, RunDir(run_dir))
    if faults is not None:
        (run_dir / "faults.json").write_text(json.dumps(faults))
    return config, run_dir


def assert_equals_reference(dataset: tuple[Path, Path], run_dir: Path) -> None:
    comparison = compare_outputs(run_dir / "output" / "campaign.h5", dataset[1])
    assert comparison.passes(TOLERANCE), comparison.describe()
    assert processes_mentioning(str(run_dir)) == []


def fault_fired(run_dir: Path, key: str) -> bool:
    state = run_dir / "faults-state.json"
    return state.exists() and json.loads(state.read_text()).get(key, 0) > 0


def server_pids(run_dir: Path, server: str = "server0") -> tuple[int, int]:
    """(serve node pid, its tritonserver pid) of ``server``."""
    serve_pid = json.loads((run_dir / "servers" / f"{server}.json").read_text())["pid"]
    children = Path(f"/proc/{serve_pid}/task/{serve_pid}/children").read_text().split()
    for child in map(int, children):
        if "tritonserver" in Path(f"/proc/{child}/cmdline").read_text():
            return serve_pid, child
    raise AssertionError("no tritonserver under the serve node")


def run_with_stopped_server(run_dir: Path, server: str, client: str,
                            until: Callable[[], bool], what: str, seconds: float = 60,
                            resume: bool = True, published: list[str] | None = None) -> str:
    """run-local, with ``server``'s tritonserver SIGSTOPped (it hangs: listens, never answers)
    while ``client`` is held mid-stream (``HELD``), then released, until ``until()``; then it
    goes on to the end, the server running again (``resume``) or still stopped. ``published``:
    the clients wait at their start for these servers (``until_published``). Returns
    run-local's output."""
    run = RunLocal(run_dir)
    stopped = None
    try:
        if published is not None:
            go_when_published(run_dir, published)
        wait_for(lambda: fault_fired(run_dir, f"{client}:0"), 60, f"{client} to be held")
        _, stopped = server_pids(run_dir, server)
        os.kill(stopped, signal.SIGSTOP)
        release(run_dir)
        wait_for(until, seconds, what)
        if resume:
            os.kill(stopped, signal.SIGCONT)
            stopped = None
        return run.finish()
    finally:
        if stopped is not None and Path(f"/proc/{stopped}").exists():
            os.kill(stopped, signal.SIGCONT)
        run.kill()


def while_held(run_dir: Path, act: Callable[[], int], seconds: float = 120) -> tuple[str, int]:
    """run-local with client0 held mid-stream (``HELD``) while the test does ``act()`` (kill
    or stop a process: it returns the PID it signalled), then released; returns run-local's
    output and that PID."""
    run = RunLocal(run_dir)
    try:
        wait_for(lambda: fault_fired(run_dir, "client0:0"), 60, "client0 to be held")
        pid = act()
        release(run_dir)
        return run.finish(seconds), pid
    finally:
        run.kill()


def signalled(pid: int, signum: int) -> int:
    """Send ``signum`` to ``pid``; return ``pid``."""
    os.kill(pid, signum)
    return pid


class RunLocal:
    """``offline-iaas run-local`` as a subprocess (the test signals the servers meanwhile)."""

    def __init__(self, run_dir: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "offline_iaas.cli", "run-local", str(run_dir)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )

    def finish(self, seconds: float = 120) -> str:
        output, _ = self.proc.communicate(timeout=seconds)
        assert self.proc.returncode == 0, output
        return output

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.communicate(timeout=60)


def test_client_killed_mid_share_resumes_from_its_checkpoint(dataset) -> None:
    faults = {"client0": [{"point": "mid-stream", "action": "sigkill"}]}
    # two requests in flight: by mid-stream most responses are in, and checkpointed
    _, run_dir = prepare(dataset, "client-killed", ["client.in_flight=2"], faults)
    run_local(RunDir(run_dir))
    out = (run_dir / "logs" / "client0.out").read_text()
    assert "injected fault 'sigkill' at mid-stream" in out
    resumed = [line for line in out.splitlines() if "resuming after" in line]
    assert resumed and int(resumed[0].split("resuming after ")[1].split()[0]) > 0
    assert not (run_dir / "parts" / "client0.checkpoints").exists()  # assembled, then removed
    assert_equals_reference(dataset, run_dir)


@pytest.mark.server_exits  # the test kills server nodes
def test_server_killed_mid_campaign_is_replaced_and_clients_reprime(dataset) -> None:
    _, run_dir = prepare(dataset, "server-killed", [], {"client0": [HELD]})
    while_held(run_dir, lambda: signalled(server_pids(run_dir)[0], signal.SIGKILL))
    address_epochs = int((run_dir / "servers" / "server0.epoch").read_text())
    assert address_epochs == 2  # restarted once, as a new epoch
    sidecar = json.loads((run_dir / "parts" / "client0.json").read_text())
    assert sidecar["reconnects"] >= 1
    assert "reconnecting, resuming from the last checkpoint" in (
        run_dir / "logs" / "client0.out"
    ).read_text()
    assert_equals_reference(dataset, run_dir)


@pytest.mark.server_crashes  # serve's line: tritonserver ended as hung
@pytest.mark.server_exits  # and its node exits as on a crash
def test_a_hung_tritonserver_is_ended_and_restarted_and_its_clients_resume(dataset) -> None:
    """tritonserver SIGSTOPped mid-stream (process and port alive, nothing answered): serve's
    liveness watch ends the node after ``server.unresponsive_seconds``, run-local restarts
    it, the clients resume on the new epoch, and ``status`` lists it from the log as it lists
    crashes; without the watch the clients wait for an answer that never comes (measured:
    the test then fails after 5 min)."""
    _, run_dir = prepare(dataset, "hung", ["server.unresponsive_seconds=30"],
                         {"client0": [HELD]})
    output, hung = while_held(
        run_dir, lambda: signalled(server_pids(run_dir)[1], signal.SIGSTOP), 300)
    assert "server0: restarted 1 time(s)" in output
    assert int((run_dir / "servers" / "server0.epoch").read_text()) == 2
    assert not Path(f"/proc/{hung}").exists()  # the stopped process was ended
    err = (run_dir / "logs" / "server0.err").read_text().strip().splitlines()[-1]
    log = run_dir / "logs" / "server0-tritonserver.log"
    message = re.sub(r"for \d+ s", "for S s", err.removeprefix("offline-iaas serve: error: "))
    documented("server-unresponsive", message, {f"(pid {hung})": "(pid P)", str(log): "LOG"},
               exit_code=5)
    (line,) = [n for n, text in enumerate(log.read_text().splitlines(), 1)
               if "ended as hung" in text]
    assert f"server0: tritonserver hung (see logs/server0-tritonserver.log line {line})" in (
        read_status(RunDir(run_dir)).server_crashes)
    assert json.loads((run_dir / "parts" / "client0.json").read_text())["reconnects"] >= 1
    assert_equals_reference(dataset, run_dir)


def test_idle_evicted_sequence_is_reprimed(dataset) -> None:
    # Triton drops a sequence idle for 3 s; client0 pauses 10 s mid-stream (with 1 s, a
    # client's stall under load could evict it a second time)
    faults = {"client0": [{"point": "mid-stream", "action": "pause", "seconds": 10}]}
    _, run_dir = prepare(dataset, "evicted", ["server.sequence_idle_seconds=3"], faults)
    run_local(RunDir(run_dir))
    out = (run_dir / "logs" / "client0.out").read_text()
    assert "START" in out and "reconnecting" in out  # Triton refused the evicted sequence
    assert json.loads((run_dir / "parts" / "client0.json").read_text())["reconnects"] == 1
    assert_equals_reference(dataset, run_dir)


def test_stopped_server_fails_clients_clearly_then_retry_succeeds(dataset) -> None:
    faults = {"client0": [HELD]}
    _, run_dir = prepare(
        dataset,
        "stopped",
        # a server slow to start on a loaded machine must not fail the first attempt early
        ["client.max_reconnects=0", "client.server_wait_seconds=60", "workflow.retries=5",
         "server.unresponsive_seconds=0"],  # the clients' deadlines, not serve's watch
        faults,
    )
    err = run_dir / "logs" / "client0.err"
    run_with_stopped_server(run_dir, "server0", "client0",
                            lambda: err.exists() and "no response" in err.read_text(),
                            "client0 to fail")
    message = (run_dir / "logs" / "client0.err").read_text()
    assert "no response from server0" in message and "within 4 s" in message
    assert "Traceback" not in message
    state = json.loads((run_dir / "local-state.json").read_text())
    assert state["nodes"]["client0"]["attempts"] >= 2
    assert_equals_reference(dataset, run_dir)


def test_stale_address_file_is_ignored(dataset) -> None:
    # The server node is held at its start until client0 has met the address file left by a
    # dead server (a barrier: a timed pause could end first on a loaded machine).
    faults = {"server0": [{"point": "start", "action": "barrier", "count": 2, "seconds": 300}]}
    _, run_dir = prepare(dataset, "stale", [], faults)
    (port,) = free_ports("127.0.0.1", 1)
    stale = {"node": "server0", "host": "127.0.0.1", "grpc_port": port, "http_port": port,
             "metrics_port": port, "epoch": 7, "pid": 0}
    (run_dir / "servers" / "server0.json").write_text(json.dumps(stale))
    said = f"127.0.0.1:{port} (epoch 7) does not answer"
    log = run_dir / "logs" / "client0.out"
    run = RunLocal(run_dir)
    try:
        wait_for(lambda: log.exists() and said in log.read_text(), 120,
                 "client0 to find the stale address dead")
        release(run_dir, "start")
        run.finish()
    finally:
        run.kill()
    assert_equals_reference(dataset, run_dir)


def test_the_single_merge_killed_mid_write_is_retried_and_leaves_no_file(dataset) -> None:
    faults = {"merge": [{"point": "mid-write", "action": "sigkill"}]}
    # the single merge node (merge.shard_seconds = 0) retries like the shard merges
    _, run_dir = prepare(dataset, "merge-killed", ["merge.shard_seconds=0"], faults)
    run_local(RunDir(run_dir))
    history = json.loads((run_dir / "local-state.json").read_text())["nodes"]["merge"]
    assert [a["status"] for a in history["history"]] == ["failed", "done"]  # killed, retried
    assert not list((run_dir / "output").glob(".campaign.h5.*.tmp"))
    assert_equals_reference(dataset, run_dir)


def test_a_shard_merge_killed_mid_write_is_retried_and_the_output_is_unchanged(
        dataset) -> None:
    faults = {"shard0": [{"point": "mid-write", "action": "sigkill"}]}
    _, run_dir = prepare(dataset, "shard-killed", [], faults)
    run_local(RunDir(run_dir))
    history = json.loads((run_dir / "local-state.json").read_text())["nodes"]["shard0"]
    assert [a["status"] for a in history["history"]] == ["failed", "done"]  # killed, retried
    assert not list((run_dir / "output" / "shards").glob(".shard0.h5.*.tmp"))
    assert_equals_reference(dataset, run_dir)


def test_client_of_a_server_that_never_starts_fails_over_and_the_output_is_unchanged(
    dataset,
) -> None:
    # server1 never publishes (it waits in its start far longer than the campaign takes), as a
    # server job idle in the queue would; its client continues on server0 after 3 s.
    faults = {"server1": [{"point": "start", "action": "pause", "seconds": 600}]}
    _, run_dir = prepare(dataset, "failover", [
        "layout.servers=2", "layout.clients_per_server=1", "client.failover_seconds=3",
    ], faults)
    run_local(RunDir(run_dir))
    assert_equals_reference(dataset, run_dir)
    sidecar = json.loads((run_dir / "parts" / "client1.json").read_text())
    assert sidecar["servers"] == ["server0"]
    assert "continuing on server0" in (run_dir / "logs" / "client1.out").read_text()
    status = read_status(RunDir(run_dir))
    client1 = next(n for n in status.nodes if n.name == "client1")
    assert (client1.server, client1.detail) == ("server0", "on server0 (moved from server1)")
    client0 = next(n for n in status.nodes if n.name == "client0")
    assert (client0.server, client0.detail) == ("server0", "")
    report = (run_dir / "report" / "index.html").read_text()  # the merge's
    assert "failed over to it" in report and ">client1<" in report


def test_without_failover_the_client_of_a_dead_server_fails_clearly(dataset) -> None:
    faults = {"server1": [{"point": "start", "action": "pause", "seconds": 600}]}
    _, run_dir = prepare(dataset, "no-failover", [
        "layout.servers=2", "layout.clients_per_server=1", "client.failover_seconds=0",
        "client.server_wait_seconds=3", "workflow.retries=0",
    ], faults)
    with pytest.raises(RunError, match="client1"):
        run_local(RunDir(run_dir))
    message = (run_dir / "logs" / "client1.err").read_text()
    assert "no live server server1 within 3 s" in message and "never written" in message
    assert processes_mentioning(str(run_dir)) == []


TWO_SERVERS = ["layout.servers=2", "layout.clients_per_server=1", "client.failover_seconds=20",
               "layout.rebalance=false"]
"""Each client starts on its own server (with rebalancing, a CI run saw a client start on the
other server and the fault then hit nothing; the tests hold the clients until both servers are
up, ``until_published``); a failed-over client waits 20 s for its server before moving."""


def ended_on(run_dir: Path) -> dict[str, tuple[str, str]]:
    """Each client's server and status detail (what ``offline-iaas status`` shows)."""
    return {n.name: (n.server, n.detail) for n in read_status(RunDir(run_dir)).nodes
            if n.name.startswith("client")}


@pytest.mark.server_exits  # the test kills server nodes
def test_clients_of_a_killed_server_never_restarted_finish_on_the_other(dataset) -> None:
    faults = until_published(2)
    faults["client1"].insert(0, HELD)
    # workflow.retries = 0: the SERVICE node is not restarted (its max_retries exhausted)
    _, run_dir = prepare(dataset, "killed-for-good", [*TWO_SERVERS, "workflow.retries=0"],
                         faults)
    run = RunLocal(run_dir)
    try:
        go_when_published(run_dir, ["server0", "server1"])
        wait_for(lambda: fault_fired(run_dir, "client1:0"), 60, "client1 to be held")
        serve_pid, _ = server_pids(run_dir, "server1")
        os.kill(serve_pid, signal.SIGKILL)
        release(run_dir)
        output = run.finish()
    finally:
        run.kill()
    assert "server1: exited with" in output
    assert int((run_dir / "servers" / "server1.epoch").read_text()) == 1  # never restarted
    assert ended_on(run_dir) == {"client0": ("server0", ""),
                                 "client1": ("server0", "on server0 (moved from server1)")}
    sidecar = json.loads((run_dir / "parts" / "client1.json").read_text())
    assert sidecar["servers"] == ["server1", "server0"] and sidecar["reconnects"] >= 1
    assert_equals_reference(dataset, run_dir)


def test_clients_of_a_stopped_server_move_on_after_the_deadline(dataset) -> None:
    faults = until_published(2)
    faults["client1"].insert(0, HELD)
    # the clients' failover, not serve's watch on its hung tritonserver
    _, run_dir = prepare(dataset, "sigstopped", [*TWO_SERVERS, "server.unresponsive_seconds=0"],
                         faults)
    # server1's tritonserver stays stopped to the end: stopping it must not wait for the
    # SIGKILL (a stopped process acts on SIGTERM only once continued: SIGCONT follows)
    output = run_with_stopped_server(run_dir, "server1", "client1",
                                     lambda: (run_dir / "parts" / "client1.json").exists(),
                                     "client1 to finish elsewhere", seconds=120, resume=False,
                                     published=["server0", "server1"])
    assert "server1: stopping" in output and "killed (still running" not in output
    assert "killed" not in (run_dir / "logs" / "server1.out").read_text()
    out = (run_dir / "logs" / "client1.out").read_text()
    assert "no response from server1" in out and "continuing on server0" in out
    assert ended_on(run_dir)["client1"] == ("server0", "on server0 (moved from server1)")
    assert_equals_reference(dataset, run_dir)


def test_a_late_client_starts_on_the_idle_server(dataset) -> None:
    # Two clients at a time (MAXJOBS): client0 and client1, both of server0. client0 is held
    # mid-stream; client1 is held at its start until server1 is up, then sees server0 busy
    # and server1 idle, and starts on server1 (rebalancing is on by default). Barriers, not
    # timed pauses: on a loaded machine a server may take longer to start than any pause.
    faults = {"client0": [{**HELD, "seconds": 600}],  # the test waits up to 240 s first
              "client1": [{"point": "start", "action": "barrier", "count": 2, "seconds": 300}]}
    _, run_dir = prepare(dataset, "rebalance", [
        "layout.servers=2", "layout.clients_per_server=2", "workflow.max_parallel_clients=2",
    ], faults)
    log = run_dir / "logs" / "client1.out"
    run = RunLocal(run_dir)
    try:
        wait_for(lambda: fault_fired(run_dir, "client0:0") and fault_fired(run_dir, "client1:0")
                 and (run_dir / "servers" / "server1.json").exists(), 120,
                 "client0 held mid-stream, client1 at its start and server1 published")
        release(run_dir, "start")
        wait_for(lambda: log.exists() and "starting on server1" in log.read_text(), 120,
                 "client1 to choose its server")
        release(run_dir)
        run.finish()
    finally:
        run.kill()
    assert_equals_reference(dataset, run_dir)
    assert ended_on(run_dir)["client1"] == ("server1", "on server1 (moved from server0)")
    assert "starting on server1 (0 client(s) streaming) instead of server0 (1)" in (
        log.read_text())
    assert ended_on(run_dir)["client0"] == ("server0", "")


def test_the_clients_of_a_server_that_never_starts_split_evenly_over_the_others(dataset) -> None:
    # 3 servers x 4 clients; server1 never publishes: its 4 clients fail over, two to each
    # other server (each takes the next server after its place among its server's clients),
    # not all to one. A client fails over to the servers published by then: the clients wait
    # at their start until the healthy two are up (with a 3 s deadline and no wait, server0
    # was not up yet under the full suite, and every client went to server2)
    faults = {"server1": [{"point": "start", "action": "pause", "seconds": 600}],
              **until_published(12)}
    _, run_dir = prepare(dataset, "spread", [
        "layout.servers=3", "layout.clients_per_server=4", "client.failover_seconds=5",
        "layout.rebalance=false",
    ], faults)
    run = RunLocal(run_dir)
    try:
        go_when_published(run_dir, ["server0", "server2"])
        run.finish(300)
    finally:
        run.kill()
    assert_equals_reference(dataset, run_dir)
    ended = ended_on(run_dir)
    moved = [ended[f"client{i}"][0] for i in range(4, 8)]
    assert sorted(moved) == ["server0", "server0", "server2", "server2"], ended
    assert all(ended[f"client{i}"] == (f"server{i // 4}", "") for i in (0, 1, 2, 3, 8, 9, 10, 11))
