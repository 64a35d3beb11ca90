"""Load (issue #19): one server, 16 and then 32 concurrent clients (run-local, this machine's
two cores). No request fails (no reconnection), every stream's output equals the reference,
and the server's count of sequences it holds (the fused model's ``offline_iaas_live_sequences``
metric) reaches the number of clients and is back to zero once they are done. Neither depends
on when a sample lands: every client waits half-way through its stream (its sequence open)
until the test has seen the server count all of them, and the merge, which starts once every
client is done, waits until the test has seen it count none; each wait ends after
``LIVE_DEADLINE`` seconds, and the test then fails saying which it did not see.
Throughput and the per-client spread are printed (``-s``) and recorded in
``docs/architecture.md``; timing is not asserted. A run in which Triton crashed on its own
(``serve/core_crash.py``, ``serve/stalled_stub.py``) must still equal the reference, and is
run again once: the claims above hold of a run without such a crash.
"""

from __future__ import annotations

import json
import threading
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
import requests

from offline_iaas.config import CampaignConfig, load_config
from offline_iaas.data.synth import write_synthetic_dataset
from offline_iaas.job_specs import read_client_job
from offline_iaas.merge.output import compare_outputs
from offline_iaas.merge.reference import run_reference
from offline_iaas.records import read_run_info
from offline_iaas.rendezvous.addresses import read_address
from offline_iaas.repository.export import export_repository
from offline_iaas.rundir import RunDir
from offline_iaas.workflow.local import run_local
from offline_iaas.workflow.make_dag import make_dag
from tests.faults.inject import release
from tests.helpers import SMALL_CAMPAIGN, processes_mentioning
from tests.server_log_watch import client_output, upstream_crashes

pytestmark = pytest.mark.slow

SECONDS = 1024
SMALL_REQUESTS = ["model.batch_size=1", "client.in_flight=1"]
"""One window per request, one request in flight: many small requests, so that the clients
stream long enough to overlap while the others start (32 client processes on 2 cores)."""
LIVE_DEADLINE = 60.0
"""How long the server's count may take to show every client held mid-stream, and then none
once all are done (each is so as soon as the sampler looks: the deadline is for a loaded
machine, not a wait that is expected)."""


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("load")
    (root / "campaign.toml").write_text(SMALL_CAMPAIGN)
    config = load_config(root / "campaign.toml", [f"data.duration={SECONDS}",
                                                  "synth.injections=0"])
    write_synthetic_dataset(config)
    export_repository(config)
    reference, _ = run_reference(config, root / "reference.h5")
    return root, reference


class LiveSequences(threading.Thread):
    """Samples server0's ``offline_iaas_live_sequences`` every 0.2 s while the run lasts, and
    releases the run's two barriers once it has seen what the test checks: the clients held
    mid-stream once it has seen ``clients`` sequences live (``saw_all``), the merge held at
    ``mid-write`` once it has seen none (``saw_none``). Either is released anyway
    ``LIVE_DEADLINE`` seconds after all its nodes arrived, the flag then left False."""

    def __init__(self, run_dir: Path, clients: int) -> None:
        super().__init__(daemon=True)
        self.run_dir, self.clients, self.samples = run_dir, clients, []
        self.stop = threading.Event()
        self.saw_all = self.saw_none = False

    def run(self) -> None:
        waits = [("mid-stream", self.clients, lambda live: live >= self.clients, "saw_all"),
                 ("mid-write", 1, lambda live: live == 0, "saw_none")]
        held_since = None
        while waits and not self.stop.wait(0.2):
            live = self._live()
            if live is not None:
                self.samples.append((time.time(), live))
            point, count, seen, flag = waits[0]
            arrived = self.run_dir / "barrier" / point
            if held_since is None and arrived.is_dir() and len(list(arrived.iterdir())) >= count:
                held_since = time.monotonic()  # all there: the barrier is the sampler's to open
            if held_since is None:
                continue
            if live is not None and seen(live):
                setattr(self, flag, True)
            elif time.monotonic() < held_since + LIVE_DEADLINE:
                continue
            release(self.run_dir, point)
            waits.pop(0)
            held_since = None

    def _live(self) -> int | None:
        address = read_address(RunDir(self.run_dir), "server0")
        if address is None:
            return None
        try:
            text = requests.get(f"http://127.0.0.1:{address.metrics_port}/metrics",
                                timeout=2).text
        except requests.RequestException:
            return None
        values = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                  if line.startswith("offline_iaas_live_sequences{")]
        return int(sum(values)) if values else None


def _config(root: Path, clients: int) -> CampaignConfig:
    """One server with ``clients`` clients, each sending one window per request, and one
    merge; its repository exported with a sequence slot per client (make-dag's layout)."""
    config = load_config(root / "campaign.toml", [
        f"data.duration={SECONDS}", "synth.injections=0",
        f'model.repository="{root / f"repository-{clients}"}"', "layout.servers=1",
        f"layout.clients_per_server={clients}", "server.instances=2", *SMALL_REQUESTS,
        "server.sequence_idle_seconds=600",  # the first may wait long for the last
        "merge.shard_seconds=0",  # one merge node, which stitches (``mid-write``) after all
    ])
    export_repository(config)
    return config


def _campaign(config: CampaignConfig, reference: Path, run_dir: Path
              ) -> tuple[list[dict], LiveSequences, dict[int, tuple[int, str]]]:
    """Run the campaign with every client waiting half-way through its stream, and the merge
    before it writes, until the sampler has seen what the test checks, and check its output
    against the reference: the clients' sidecars, the sampler, and the crashes Triton brought
    about itself in the server's log."""
    clients = config.layout.clients_per_server
    # every client waits half-way through its stream until all are there and the sampler has
    # seen them (its arrival is the last): each holds its sequence open (START sent, not END),
    # so the server holds one per client at once. The merge starts once every client is done,
    # the server still up: it waits until the sampler has seen the server hold none
    wait = 600 + LIVE_DEADLINE
    barrier = {"point": "mid-stream", "action": "barrier", "count": clients + 1,
               "seconds": wait}
    merge = {"point": "mid-write", "action": "barrier", "count": 2, "seconds": wait}
    make_dag(config, RunDir(run_dir))  # into a new directory: then the faults it runs with
    (run_dir / "faults.json").write_text(json.dumps(
        {"merge": [merge]} | {f"client{i}": [barrier] for i in range(clients)}))
    sampler = LiveSequences(run_dir, clients)
    sampler.start()
    try:
        run_local(RunDir(run_dir))
    finally:
        sampler.stop.set()
        sampler.join()
        assert processes_mentioning(str(run_dir)) == []
    # equal to the reference, also where the server crashed and the clients resumed
    comparison = compare_outputs(run_dir / "output" / "campaign.h5", reference)
    assert comparison.passes(1e-5), comparison.describe()
    run = RunDir(run_dir)
    sidecars = [json.loads(run.part(node)[1].read_text())
                for node in read_run_info(run).clients]
    crashes = upstream_crashes(run.logs / "server0-tritonserver.log", client_output(run_dir))
    return sidecars, sampler, crashes


@pytest.mark.parametrize("clients", [16, 32])
def test_one_server_many_clients(dataset: tuple[Path, Path], clients: int) -> None:
    root, reference = dataset
    # tritonserver 2.51 crashed once in CI under 32 clients, in its own sequence batcher
    # (serve/core_crash.py): the run recovered, equal to the reference, but its clients
    # reconnected. Such a run is run again once; what it claims must hold in a run without one.
    config = _config(root, clients)
    for attempt in (1, 2):
        run_dir = root / f"run-{clients}" / f"attempt-{attempt}"
        sidecars, sampler, crashes = _campaign(config, reference, run_dir)
        if not crashes:
            break
        causes = sorted({cause for _, cause in crashes.values()})
        warnings.warn(f"attempt {attempt}: {'; '.join(causes)}; running again", stacklevel=1)
    assert not crashes, "Triton crashed on its own in both runs"
    run = RunDir(run_dir)
    assert len(sidecars) == clients and all(s["reconnects"] == 0 for s in sidecars)
    last_done = max(s["last_response_unix"] for s in sidecars)
    # the server held every client's sequence at once (never more), and none once all
    # clients are done (seen while the merge waited, the server still up)
    samples = sampler.samples
    assert sampler.saw_all, (f"server0 did not count {clients} live sequences within "
                             f"{LIVE_DEADLINE} s of all clients held mid-stream: {samples[-10:]}")
    assert max(v for _, v in samples) == clients, samples
    assert sampler.saw_none, (f"server0 still counted live sequences {LIVE_DEADLINE} s after "
                              f"all clients were done: {samples[-10:]}")

    first = min(s["first_request_unix"] for s in sidecars)
    data_seconds = config.total_windows * config.stride_seconds
    per_client = np.array([
        read_client_job(run, node).streamed_seconds
        / (s["last_response_unix"] - s["first_request_unix"])
        for node, s in zip(read_run_info(run).clients, sidecars, strict=True)
    ])
    print(f"\n{clients} clients: {data_seconds / (last_done - first):.1f} data-s/s in all; "
          f"per client {per_client.min():.1f}-{per_client.max():.1f} data-s/s (median "
          f"{np.median(per_client):.1f}, max/min {per_client.max() / per_client.min():.2f}); "
          f"live sequences at most {max(v for _, v in samples)}")
