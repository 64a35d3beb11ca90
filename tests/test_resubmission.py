"""Real campaigns through the production code paths, with real tritonservers:

* the server started through the container runtime (spython + an apptainer shim on PATH that
  runs the native tritonserver), with a client that fails once (an injected fault) and is
  retried; a second run-local that has nothing to do; a deleted part redone alone;
* the no-shared-filesystem path: file transfer into scratch directories, the server's address
  set through the job-ad interface, the clients' PRE scripts resolving it.

Every campaign must equal the in-process reference; nothing may stay running.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from offline_iaas.config import CampaignConfig, load_config
from offline_iaas.merge.output import compare_outputs
from offline_iaas.merge.reference import run_reference
from offline_iaas.rendezvous.job_ads import ADDRESS_ATTRIBUTE, FAKE_ENV
from offline_iaas.rendezvous.prescript import DEFER_EXIT, DEFER_SECONDS
from offline_iaas.rundir import RunDir
from offline_iaas.workflow.local import run_local
from offline_iaas.workflow.make_dag import make_dag
from offline_iaas.workflow.status import read_final_summary, read_status, status_lines
from tests.apptainer_shim import install_shim
from tests.helpers import TOLERANCE, captured_log, processes_mentioning

pytestmark = pytest.mark.slow


@dataclass
class Campaign:
    config: CampaignConfig
    run_dir: Path
    log: list[str]

    def run(self) -> list[str]:
        self.log = []
        try:
            with captured_log(self.log):
                run_local(RunDir(self.run_dir))
        finally:
            assert processes_mentioning(str(self.run_dir)) == []
            assert processes_mentioning(str(self.config.model.repository)) == []
        return self.log

    def started(self) -> list[str]:
        return [line.split(":")[0] for line in self.log if ": started" in line]


@pytest.fixture(scope="module")
def dataset(small_campaign_dir) -> Path:
    """Frames for 64 s of H1/L1 at 256 Hz and an exported repository, shared by the module."""
    return small_campaign_dir()


@pytest.fixture(scope="module")
def reference(dataset: Path) -> Path:
    path, _ = run_reference(load_config(dataset / "campaign.toml"), dataset / "reference.h5")
    return path


def difference(campaign: Campaign, reference: Path) -> float:
    output = campaign.run_dir / "output" / "campaign.h5"
    return compare_outputs(output, reference).worst


@pytest.fixture(scope="module")
def shim_campaign(dataset: Path) -> Iterator[Campaign]:
    """The server in 'apptainer' (the shim), client1 failing once at start; run once."""
    patch = pytest.MonkeyPatch()
    install_shim(dataset / "bin")
    patch.setenv("PATH", f"{dataset / 'bin'}:{os.environ['PATH']}")
    patch.setenv("APPTAINER_SHIM_DIR", str(dataset / "shim"))
    patch.setenv("_CONDOR_AssignedGPUs", "CUDA0")  # as HTCondor sets it in a GPU slot
    image = dataset / "tritonserver.sif"
    image.write_bytes(b"not really an image: the shim runs the native tritonserver")
    config = load_config(
        dataset / "campaign.toml",
        ['server.runtime="apptainer"', f'server.image="{image}"', "server.gpus=1"],
    )
    run_dir = dataset / "shim-run"
    make_dag(config, RunDir(run_dir))
    fault = [{"point": "start", "action": "exit", "times": 1}]
    (run_dir / "faults.json").write_text(json.dumps({"client1": fault}))
    yield from _run_once(Campaign(config, run_dir, []), patch)


def _run_once(campaign: Campaign, patch: pytest.MonkeyPatch) -> Iterator[Campaign]:
    """Run ``campaign`` to the end and yield it; undo ``patch`` (the environment a module's
    campaign ran in) after the module's tests."""
    try:
        campaign.run()
        yield campaign
    finally:
        patch.undo()


def shim_calls(dataset: Path) -> list[list[str]]:
    lines = (dataset / "shim" / "calls.jsonl").read_text().splitlines()
    out = []
    for line in lines:
        argv = [w for w in json.loads(line)["argv"] if w != "--quiet"]
        if argv != ["--version"]:
            out.append(argv)
    return out


def test_campaign_through_the_apptainer_shim_equals_the_reference(
    shim_campaign: Campaign, dataset: Path, reference: Path
) -> None:
    assert difference(shim_campaign, reference) <= TOLERANCE
    calls = shim_calls(dataset)
    starts = [c for c in calls if c[:2] == ["instance", "start"]]
    execs = [c for c in calls if c[:1] == ["exec"]]
    stops = [c for c in calls if c[:2] == ["instance", "stop"]]
    assert len(starts) == len(stops) == 1
    repo = shim_campaign.config.model.repository
    assert starts[0][2:5] == ["--nv", "--bind", f"{repo}:/models:ro"]
    assert starts[0][5] == str(dataset / "tritonserver.sif")
    name = starts[0][6]
    assert stops[0][-1] == name
    assert execs[0][:5] == ["exec", "--cleanenv", "--env", "CUDA_VISIBLE_DEVICES=0",
                            f"instance://{name}"]
    assert execs[0][5:7] == ["tritonserver", "--model-repository=/models"]
    assert not list((dataset / "shim" / "instances").iterdir())
    assert "in " + str(dataset / "tritonserver.sif") in (
        shim_campaign.run_dir / "logs" / "server0.out"
    ).read_text()


def test_client_failing_once_is_retried(shim_campaign: Campaign) -> None:
    run_dir, log = shim_campaign.run_dir, shim_campaign.log
    assert "client1: failed with exit code 1 (see logs/client1.err), retrying" in log
    assert "client1: started (attempt 2/3)" in log
    assert json.loads((run_dir / "faults-state.json").read_text()) == {"client1:0": 1}
    state = json.loads((run_dir / "local-state.json").read_text())["nodes"]
    assert (state["client1"]["attempts"], state["client0"]["attempts"]) == (2, 1)
    assert "injected failure at start" in (run_dir / "logs" / "client1.err").read_text()
    status = read_status(RunDir(run_dir))
    assert {n.name: n.retries for n in status.nodes}["client1"] == 1
    assert status.output_complete and read_final_summary(RunDir(run_dir)).output_complete


def test_second_run_local_does_nothing(shim_campaign: Campaign, dataset: Path) -> None:
    before = len(shim_calls(dataset))
    log = shim_campaign.run()
    assert log == [f"nothing to do: every node of {shim_campaign.run_dir} is complete"]
    assert len(shim_calls(dataset)) == before  # no server was started


def test_deleting_a_part_redoes_exactly_that_client(
    shim_campaign: Campaign, reference: Path
) -> None:
    parts = shim_campaign.run_dir / "parts"
    kept = (parts / "client1.h5").stat().st_mtime_ns
    for suffix in (".h5", ".json"):
        (parts / f"client0{suffix}").unlink()
    log = shim_campaign.run()
    assert "client1: complete, not run again" in log
    jobs = [name for name in shim_campaign.started() if name.startswith("client")]
    assert jobs == ["client0"]
    # and the shard merge that reads client0, then the index
    assert set(shim_campaign.started()) == {"server0", "client0", "shard0", "merge", "final"}
    assert (parts / "client1.h5").stat().st_mtime_ns == kept  # not recomputed
    assert difference(shim_campaign, reference) <= TOLERANCE


def snapshot(root: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``root``: (size, modification time in ns)."""
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(root.rglob("*")) if p.is_file() and not p.is_symlink()}


def external_files(path: Path) -> set[Path]:
    """The files an index's datasets keep their bytes in (HDF5 external storage)."""
    import h5py

    found: set[Path] = set()
    with h5py.File(path, "r") as f:
        f.visititems(lambda name, item: found.update(
            Path(entry[0].decode() if isinstance(entry[0], bytes) else entry[0])
            for entry in (item.external or []))
            if isinstance(item, h5py.Dataset) else None)
    return found


def test_a_copied_run_directory_runs_its_own_nodes_under_its_own_lock(
    shim_campaign: Campaign, reference: Path, tmp_path: Path
) -> None:
    """A finished run directory copied elsewhere: with a part deleted in the copy, run-local on
    the copy reruns that client, its shard merge and the index in the copy, while the
    original's lock is held (as by a run-local on it) and not one file of the original
    changes; the copy's index names the copy's shards. The copy's lock is its own."""
    import fcntl
    import shutil

    from offline_iaas.errors import RunError

    original = shim_campaign.run_dir
    before = snapshot(original)
    assert before, "the original run directory is empty"
    copy = tmp_path / "elsewhere" / "run"
    shutil.copytree(original, copy, symlinks=True)
    for suffix in (".h5", ".json"):
        (copy / "parts" / f"client0{suffix}").unlink()
    moved = Campaign(shim_campaign.config, copy, [])
    with open(RunDir(original).lock, "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)  # the original is "running"
        log = moved.run()
    assert "client1: complete, not run again" in log
    assert set(moved.started()) == {"server0", "client0", "shard0", "merge", "final"}
    assert snapshot(original) == before  # nothing of the original was read for writing
    assert (copy / "parts" / "client0.json").exists() and (copy / "logs" / "client0.out").exists()
    assert difference(moved, reference) <= TOLERANCE
    shards = external_files(copy / "output" / "campaign.h5")
    assert shards and all(p.parent == copy / "output" / "shards" for p in shards), shards
    # a copy of the finished copy reruns only its merge (its index names the copy's shards)
    second = tmp_path / "second" / "run"
    shutil.copytree(copy, second, symlinks=True)
    again = Campaign(shim_campaign.config, second, [])
    log = again.run()
    assert [n for n in again.started() if n not in ("server0", "final")] == ["merge"]
    assert any(f"merge: runs again: its output was written in {copy}" in line for line in log)
    assert {p.parent for p in external_files(second / "output" / "campaign.h5")} == {
        second / "output" / "shards"}
    # the copy's lock is the copy's: held, the copy refuses to run; the original is free
    with open(RunDir(second).lock, "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        (second / "parts" / "client1.json").unlink()
        with pytest.raises(RunError, match=f"another run-local is already running on {second}"):
            run_local(RunDir(second))
    assert snapshot(original) == before


@pytest.fixture(scope="module")
def transfer_campaign(dataset: Path) -> Iterator[Campaign]:
    """No shared filesystem: file transfer, the job-ad rendezvous and PRE scripts."""
    patch = pytest.MonkeyPatch()
    patch.delenv(FAKE_ENV, raising=False)  # run-local's own stand-in: RUN/job-ads.json
    config = load_config(dataset / "campaign.toml", ['site.filesystem="transfer"'])
    run_dir = dataset / "transfer-run"
    make_dag(config, RunDir(run_dir))
    # DAGMan waits DEFER_SECONDS between PRE script runs; this test cannot afford 30 s.
    dag = run_dir / "offline.dag"
    dag.write_text(dag.read_text().replace(f"DEFER {DEFER_EXIT} {DEFER_SECONDS} ",
                                           f"DEFER {DEFER_EXIT} 1 "))
    yield from _run_once(Campaign(config, run_dir, []), patch)


def test_pre_script_rendezvous_without_a_shared_filesystem(
    transfer_campaign: Campaign, dataset: Path, reference: Path
) -> None:
    run_dir, log = transfer_campaign.run_dir, transfer_campaign.log
    assert difference(transfer_campaign, reference) <= TOLERANCE
    # The server ran in its scratch directory and published only in its job ad ...
    server_out = (run_dir / "logs" / "server0.out").read_text()
    assert "via its job ad" in server_out
    ads = json.loads((run_dir / "job-ads.json").read_text())
    run_id = json.loads((run_dir / "run.json").read_text())["run_id"]
    assert ADDRESS_ATTRIBUTE not in ads[f"{run_id}/server0"]  # withdrawn when it stopped
    # ... the PRE scripts waited for it, then wrote it where the clients' transfer takes it.
    pre_log = (run_dir / "logs" / "client0.pre.log").read_text()
    assert "has published no address yet; deferring" in pre_log
    assert "client0: server0 is at 127.0.0.1:" in pre_log
    assert any("client0: PRE script deferred (exit code 75)" in line for line in log)
    address = json.loads((run_dir / "servers" / "server0.json").read_text())
    assert f"server0 is at 127.0.0.1:{address['grpc_port']}" in pre_log
    # The clients connected (their parts came back through transfer_output_files).
    for node in ("client0", "client1"):
        assert json.loads((run_dir / "parts" / f"{node}.json").read_text())["complete"] is True
        assert "streaming" in (run_dir / "logs" / f"{node}.out").read_text()
    assert not (run_dir / "scratch").exists()
    lines = "\n".join(status_lines(read_status(RunDir(run_dir))))
    assert "output: output/campaign.h5 (complete)" in lines and "(100%)" in lines
