"""One definition of a complete node, on a finished campaign with real tritonservers.

One small BBHnet campaign (64 s, 1 server x 6 clients, four shard merges and the index) is run
once; each test works on a copy of its run directory (``make-dag`` on the copy points its
files at the copy, and keeps its parts: the same campaign):

* a part deleted, one truncated, one with a byte flipped: ``status`` names each as not done
  and why; ``run-local`` reruns exactly those clients, the shard merges that read them and the
  index, and the output equals the in-process reference;
* a byte flipped in a part keeping its size and mtime (bit rot, as ``rsync -a`` restores):
  plain ``status`` takes it for done; the shard merge that reads it refuses it and sets it
  aside, and the same ``run-local`` reruns its client and ends complete, equal to the
  reference; ``status --verify`` finds it (and a rotten shard file) before any merge does;
* ``search.injections`` pointed at another list (a merge-only setting, outside the clients'
  hash): ``make-dag`` accepts the run directory, no client reruns, every merge node does,
  and the found/missed table equals a fresh in-process run's with the new list (and differs
  from the old run's).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from offline_iaas import records
from offline_iaas.cli import main
from offline_iaas.completeness import Hashes, part_problem
from offline_iaas.config import CampaignConfig, load_config
from offline_iaas.job_specs import read_shard_job
from offline_iaas.merge.output import compare_outputs
from offline_iaas.merge.reference import run_reference
from offline_iaas.records import read_run_info
from offline_iaas.rundir import RunDir
from offline_iaas.summaries import CampaignSummary
from offline_iaas.workflow.make_dag import make_dag
from offline_iaas.workflow.status import read_status
from tests.helpers import (
    TOLERANCE,
    FinishedCampaign,
    finished_campaign,
    run_local_stopping_all,
)

pytestmark = pytest.mark.slow

OVERRIDES = ['model.mode="bbhnet"', "layout.clients_per_server=6", "merge.shard_seconds=16",
             "deepclean.frame_seconds=16"]


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> FinishedCampaign:
    """The campaign run once to the end, and its in-process reference."""
    root = tmp_path_factory.mktemp("completeness")
    return finished_campaign(root, [*OVERRIDES,
                                    f'search.injections="{root / "frames" / "synth.json"}"'])


def campaign(root: Path, injections: Path) -> CampaignConfig:
    return load_config(root / "campaign.toml",
                       [*OVERRIDES, f'search.injections="{injections}"'])


def copy_of(finished: FinishedCampaign, name: str, config: CampaignConfig | None = None) -> Path:
    """A copy of the finished run directory, written again by make-dag (``config``, by
    default the campaign's) so that its submit files name the copy."""
    copy = finished.root / name
    shutil.copytree(finished.run_dir, copy, symlinks=True)
    make_dag(config or finished.config, RunDir(copy))
    return copy


def states(run_dir: Path) -> dict[str, tuple[str, str]]:
    return {n.name: (n.state, n.detail) for n in read_status(RunDir(run_dir)).nodes}


def test_damaged_parts_show_in_status_and_only_they_and_their_merges_rerun(
    finished: FinishedCampaign,
) -> None:
    run_dir = copy_of(finished, "damaged")
    paths = RunDir(run_dir)
    info = read_run_info(paths)
    found = states(run_dir)
    assert {name: state for name, (state, _) in found.items()
            if name.startswith(("client", "shard"))} == dict.fromkeys(
        [*info.clients, *info.shards], "done")  # the control: all done
    # but the merge of a copy, whose output names the original's files
    assert found["merge"] == ("waiting", f"its output was written in {finished.run_dir} and "
                              "names files there (this run directory is a copy of it, or was "
                              "moved)")

    deleted, truncated, flipped = "client0", "client1", info.clients[-1]
    paths.part(deleted)[0].unlink()
    with open(paths.part(truncated)[0], "r+b") as f:
        f.truncate(f.seek(0, 2) // 2)
    with open(paths.part(flipped)[0], "r+b") as f:
        f.seek(-100, 2)
        byte = f.read(1)
        f.seek(-100, 2)
        f.write(bytes([byte[0] ^ 0xFF]))

    found = states(run_dir)
    assert found[deleted] == ("waiting", "parts/client0.h5 missing")
    assert found[truncated][0] == "waiting"
    assert found[truncated][1].startswith("parts/client1.h5 truncated (")
    assert found[flipped] == ("waiting", f"parts/{flipped}.h5 changed after it was written "
                                         "(checksum mismatch)")
    damaged = {deleted, truncated, flipped}
    shards = {c for c in info.shards if damaged & set(read_shard_job(paths, c).clients)}
    assert shards and shards != set(info.shards)  # some shard merge reads no damaged part
    for shard in shards:
        assert found[shard][0] == "waiting"
        assert found[shard][1].startswith("made from the old output of client")
    assert all(found[c][0] == "done" for c in set(info.shards) - shards)

    started, lines = run_local_stopping_all(run_dir)
    assert started == sorted({*damaged, *shards, "merge", "final", "server0"})
    assert f"{deleted}: runs again: parts/client0.h5 missing" in lines  # why, in its log
    assert f"{flipped}: runs again: {found[flipped][1]}" in lines
    comparison = compare_outputs(run_dir / "output" / "campaign.h5", finished.reference)
    assert comparison.passes(TOLERANCE), comparison.describe()
    assert all(state == "done" for state, _ in states(run_dir).values()
               if state not in ("stopped",))


def bbhnet_summary(path: Path) -> dict:
    """The found/missed part of a merge's (or the reference's) physics numbers."""
    bbhnet = json.loads(path.read_text())["bbhnet"]
    return {"found": bbhnet["found"], "missed": bbhnet["missed"],
            "injections": [(i["gps_time"], i["found"]) for i in bbhnet["injections"]]}


def test_editing_the_injection_list_reruns_the_merge_nodes_only(finished: FinishedCampaign) -> None:
    injections = finished.root / "other-injections.json"
    start = finished.config.data.start
    injections.write_text(json.dumps([
        {"gps_time": start + 12.3, "network_snr": 30.0},
        {"gps_time": start + 40.7, "network_snr": 8.0},
        {"gps_time": start + 55.1, "network_snr": 15.0},
    ]))
    edited = campaign(finished.root, injections)
    assert edited.stream_hash() == finished.config.stream_hash()
    run_dir = copy_of(finished, "edited", edited)  # make-dag accepts it: the same campaign
    info = read_run_info(RunDir(run_dir))

    found = states(run_dir)
    assert all(found[c] == ("done", "") for c in info.clients)
    for node in (*info.shards, "merge"):
        assert found[node][0] == "waiting"
        assert found[node][1].startswith(f"{'merge' if node == 'merge' else 'shard merge'} "
                                         "from another campaign's config (merge hash")

    started, _ = run_local_stopping_all(run_dir)
    assert not [node for node in started if node.startswith("client")]
    assert started == sorted({*info.shards, "merge", "final"})  # no server for merges alone
    summary = records.read(CampaignSummary, RunDir(run_dir).output[1])
    assert summary.merge_hash == edited.merge_hash()

    fresh, _ = run_reference(edited, finished.root / "reference-edited.h5")
    ours = bbhnet_summary(RunDir(run_dir).output[1])
    assert ours == bbhnet_summary(fresh.with_suffix(".json"))
    assert ours["found"] + ours["missed"] == 3
    # the control: the run before the edit counted the old list
    assert bbhnet_summary(RunDir(finished.run_dir).output[1]) != ours
    comparison = compare_outputs(run_dir / "output" / "campaign.h5", finished.reference)
    assert comparison.passes(TOLERANCE), comparison.describe()


def flip_keeping_mtime(path: Path) -> None:
    """Bit rot: one byte changed, the size and the access and modification times kept."""
    before = path.stat()
    with open(path, "r+b") as f:
        f.seek(-100, 2)
        byte = f.read(1)
        f.seek(-100, 2)
        f.write(bytes([byte[0] ^ 0xFF]))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert path.stat().st_mtime_ns == before.st_mtime_ns


def set_aside_reason(name: str) -> str:
    return f"{name} changed after it was written (checksum mismatch; set aside as {name}.damaged)"


def test_bit_rot_in_a_part_reruns_its_client_in_the_same_run_local(
        finished: FinishedCampaign) -> None:
    injections = finished.root / "rot-injections.json"
    injections.write_text(json.dumps([{"gps_time": finished.config.data.start + 12.3,
                                       "network_snr": 30.0}]))
    edited = campaign(finished.root, injections)  # a merge-only edit: every merge node reruns
    run_dir = copy_of(finished, "rotten", edited)
    paths = RunDir(run_dir)
    info = read_run_info(paths)
    rotten = info.clients[-1]
    flip_keeping_mtime(paths.part(rotten)[0])
    assert states(run_dir)[rotten] == ("done", "")  # plain status: size and mtime as recorded

    started, lines = run_local_stopping_all(run_dir)  # no file deleted by hand
    assert f"{rotten}: runs again: {set_aside_reason(f'parts/{rotten}.h5')}" in lines
    assert started.count(rotten) == 1 and not [c for c in info.clients
                                               if c != rotten and c in started]
    assert started.count("server0") == 1  # not for the merges; started once a client reran
    assert paths.part(rotten)[0].with_name(f"{rotten}.h5.damaged").exists()
    assert part_problem(paths, rotten, Hashes.of(edited), verify=True) is None
    comparison = compare_outputs(run_dir / "output" / "campaign.h5", finished.reference)
    assert comparison.passes(TOLERANCE), comparison.describe()
    assert all(state == "done" for state, _ in states(run_dir).values()
               if state not in ("stopped",))


def test_status_verify_finds_bit_rot_that_plain_status_takes_for_done(
        finished: FinishedCampaign, capsys: pytest.CaptureFixture[str]) -> None:
    run_dir = copy_of(finished, "verified")
    paths = RunDir(run_dir)
    info = read_run_info(paths)
    rotten = info.clients[0]
    near = {s for s in info.shards if rotten in read_shard_job(paths, s).clients}
    rotten_shard = next(s for s in info.shards if s not in near)
    flip_keeping_mtime(paths.part(rotten)[0])
    flip_keeping_mtime(paths.shard_output(rotten_shard)[0])
    plain = states(run_dir)
    assert plain[rotten] == ("done", "") and plain[rotten_shard] == ("done", "")

    capsys.readouterr()
    assert main(["status", "--verify", str(run_dir)]) == 0
    shown = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()[2:]}
    assert "waiting" in shown[rotten].split()[2]
    assert shown[rotten].endswith(set_aside_reason(f"parts/{rotten}.h5"))
    assert shown[rotten_shard].endswith(set_aside_reason(f"output/shards/{rotten_shard}.h5"))
    # set aside: plain status now sees them too, and run-local reruns them
    after = states(run_dir)
    assert after[rotten] == ("waiting", set_aside_reason(f"parts/{rotten}.h5"))
    started, _ = run_local_stopping_all(run_dir)
    assert started == sorted({rotten, *near, rotten_shard, "merge", "final", "server0"})
    comparison = compare_outputs(run_dir / "output" / "campaign.h5", finished.reference)
    assert comparison.passes(TOLERANCE), comparison.describe()
