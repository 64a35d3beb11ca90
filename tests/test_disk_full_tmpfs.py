"""A campaign on a real full disk: the run directory on a small tmpfs, which a fault fills
(``tests/faults/inject.py``, action ``fill``) while a client streams, then while the shard
merge writes. Every node's log is on the full disk too, so the error lines reach run-local
only through its error pipe. Needs root to mount the tmpfs (skipped otherwise: the injected
``ENOSPC`` of ``tests/test_disk_full.py`` covers the same code without).

Each time: run-local fails with one line naming the file and "no space left on device", every
attempt of the node exits 8 (none dies by a signal), no temporary file is left, and once the
filler is deleted a second run-local completes with an output equal to the in-process
reference. A BBHnet shard merge, whose HDF5 close met the full disk and whose process then
died by SIGSEGV in HDF5's exit handler (``full_disk_exit.py``), is filled six attempts over.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from offline_iaas.config import load_config
from offline_iaas.data.synth import write_synthetic_dataset
from offline_iaas.errors import RunError
from offline_iaas.merge.output import compare_outputs
from offline_iaas.merge.reference import run_reference
from offline_iaas.repository.export import export_repository
from offline_iaas.rundir import RunDir
from offline_iaas.workflow.local import run_local
from offline_iaas.workflow.make_dag import make_dag
from tests.helpers import (
    SMALL_CAMPAIGN,
    TOLERANCE,
    captured_log,
    node_complete,
    processes_mentioning,
    untrained_weights,
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def dataset(small_campaign_dir) -> Path:
    root = small_campaign_dir()
    run_reference(load_config(root / "campaign.toml"), root / "reference.h5")
    return root


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    """A 32 MiB tmpfs, unmounted at the end."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root (tests/test_disk_full.py injects ENOSPC)")
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=32m", "tmpfs", str(mount)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def fill_at(run: RunDir, node: str, point: str) -> None:
    """``node`` fills the disk (with ``../filler``, beside the run directory) at ``point``."""
    (run.path / "faults.json").write_text(json.dumps(
        {node: [{"point": point, "action": "fill", "path": "../filler", "times": 1}]}))


def fails_on_the_full_disk(run: RunDir, node: str, log_full: bool) -> str:
    """run-local fails; the summary's line for ``node``; nothing left running, no temporary
    file; the disk freed. ``log_full``: the node's log could not take its error line either
    (it came through run-local's error pipe)."""
    try:
        with pytest.raises(RunError) as err, captured_log() as lines:
            run_local(run)
    finally:
        assert processes_mentioning(str(run.path)) == []
    message = str(err.value)
    assert "\n" not in message
    # every attempt exited 8: none died by a signal (h5py's clean-up after an HDF5 write error)
    failed = [line for line in lines if line.startswith(f"{node}: failed with ")]
    assert len(failed) == 3, lines  # RETRY 2: the disk stays full for all three
    assert all(line.startswith(f"{node}: failed with exit code 8 ") for line in failed), failed
    found = re.search(rf"{node} \(exit code 8 after \d attempts?: (\S+): no space left on "
                      r"device \(free space there", message)
    assert found, message
    leftovers = [str(p) for p in run.path.parent.rglob("*") if ".tmp" in p.name]
    assert leftovers == []
    if log_full:  # the line came through run-local's error pipe
        assert "no space left" not in (run.logs / f"{node}.err").read_text()
    (run.path.parent / "filler").unlink()
    return found.group(1)


def test_a_full_disk_stops_the_campaign_with_one_line_and_a_rerun_completes_it(
        dataset: Path, disk: Path) -> None:
    config = load_config(dataset / "campaign.toml")
    reference = dataset / "reference.h5"
    run = RunDir(disk / "run")
    make_dag(config, run)

    fill_at(run, "client0", "mid-stream")
    written = Path(fails_on_the_full_disk(run, "client0", log_full=True))
    assert written.is_relative_to(run.parts), written  # a checkpoint or the part
    run_local(run)
    assert compare_outputs(run.output[0], reference).passes(TOLERANCE)

    # the shard merge's turn: its output and the index gone, the disk fills as it writes
    fails_in_the_shard_merge(run)
    run_local(run)
    comparison = compare_outputs(run.output[0], reference)
    assert comparison.passes(TOLERANCE), comparison.describe()


def fails_in_the_shard_merge(run: RunDir) -> None:
    """shard0's output and the index gone, the disk fills as shard0 writes: three attempts,
    each exit code 8 and one line in its log, no traceback."""
    for path in [*run.shard_output("shard0"), *run.output]:
        path.unlink(missing_ok=True)
    (run.path / "faults-state.json").unlink(missing_ok=True)
    fill_at(run, "shard0", "mid-write")
    log = run.logs / "shard0.err"
    before = log.stat().st_size if log.exists() else 0
    # (deleting its temporary files frees what its log then takes: its .err has the line)
    out = Path(fails_on_the_full_disk(run, "shard0", log_full=False))
    assert out == run.shard_output("shard0")[0]
    assert not node_complete(run, "shard0")
    with open(log) as f:  # what the three attempts wrote: their line each, nothing else
        f.seek(before)
        lines = f.read().splitlines()
    assert len(lines) == 3, lines
    assert all(line == f"offline-iaas merge-shard: error: {out}: no space left on device (free "
               "space there, then run again: finished nodes are not redone)" for line in lines)


BBHNET = ['model.mode="bbhnet"', "layout.clients_per_server=2", "merge.shard_seconds=32",
          "deepclean.frame_seconds=16"]


@pytest.fixture(scope="module")
def bbhnet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small BBHnet campaign (2 clients, 2 shard merges) with its frames, untrained
    networks, model repository and in-process reference."""
    root = tmp_path_factory.mktemp("disk-full-bbhnet")
    (root / "campaign.toml").write_text(SMALL_CAMPAIGN)
    write_synthetic_dataset(load_config(root / "campaign.toml"))
    untrained_weights(root / "weights")
    config = load_config(root / "campaign.toml", bbhnet_overrides(root))
    export_repository(config, root / "weights")
    run_reference(config, root / "reference.h5")
    return root


def bbhnet_overrides(root: Path) -> list[str]:
    return [*BBHNET, f'search.injections="{root / "frames" / "synth.json"}"']


def test_a_bbhnet_shard_merge_on_a_full_disk_exits_8_on_every_attempt(
        bbhnet: Path, disk: Path) -> None:
    config = load_config(bbhnet / "campaign.toml", bbhnet_overrides(bbhnet))
    run = RunDir(disk / "run")
    make_dag(config, run)
    run_local(run)
    for _ in range(2):  # two run-locals, six attempts
        fails_in_the_shard_merge(run)
    run_local(run)
    comparison = compare_outputs(run.output[0], bbhnet / "reference.h5")
    assert comparison.passes(TOLERANCE), comparison.describe()
