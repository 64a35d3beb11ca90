"""The bad-input catalogue's cases that need a simulated failure (a full disk, no free port),
run in-process on a copy of the small campaign (test_bad_input.py and
test_bad_input_run_directories.py run the others through the real command line)."""

from __future__ import annotations

import errno
import os
import shutil
import socket
import subprocess
from pathlib import Path

import numpy as np
import pytest

from offline_iaas.client.part import PartWriter
from offline_iaas.config import load_config
from offline_iaas.errors import NoSpaceError, ServerError, exit_code
from offline_iaas.job_specs import read_client_job
from offline_iaas.records import ClientShare
from offline_iaas.rundir import RunDir
from tests.bad_input_cases import run_dir
from tests.error_catalogue import documented
from tests.helpers import file_hashes


@pytest.fixture(scope="module")
def base(small_campaign_dir) -> Path:
    """The small campaign, its frames and its model repository (copied by each case)."""
    return small_campaign_dir()


def _client0_writer(base: Path, tmp_path: Path) -> tuple[Path, ClientShare, PartWriter]:
    """A copy of the campaign with its run directory, client0's share and a part writer."""
    ws = tmp_path / "ws"
    shutil.copytree(base, ws)
    run = run_dir(ws)
    config = load_config(run / "campaign.toml")
    segment = read_client_job(RunDir(run), "client0")
    return run, segment, PartWriter(RunDir(run), segment, ("statistic",), config.stream_hash())


def test_disk_full_during_a_part_write(
    base: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run, segment, writer = _client0_writer(base, tmp_path)
    writer.write_checkpoint(0, 0, {"statistic": np.arange(16, dtype=np.float32)})
    before = file_hashes(run)

    def full(*_args, **_kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(np, "savez", full)
    with pytest.raises(NoSpaceError) as caught:
        writer.write_checkpoint(0, 16, {"statistic": np.arange(16, dtype=np.float32)})
    message = str(caught.value)
    assert message.startswith(f"{run / 'parts' / 'client0.checkpoints' / 'p0-16-32.npz'}: no space "
                              "left on device (free space there, then run again")
    assert "\n" not in message and exit_code(NoSpaceError) == 8
    documented("disk-full-checkpoint", message, {run.parent: "<ws>"},
               exit_code=exit_code(NoSpaceError))
    # the earlier shard is intact, nothing half-written is left, the part is not complete
    assert file_hashes(run) == before
    assert writer.progress() == [16]
    assert not (run / "parts" / "client0.json").exists()


def test_disk_full_while_assembling_a_part(
    base: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import h5py

    run, segment, writer = _client0_writer(base, tmp_path)
    for number, piece in enumerate(segment.pieces):
        writer.write_checkpoint(number, 0, {"statistic": np.zeros(piece.windows, dtype=np.float32)})
    before = file_hashes(run)

    class FullFile(h5py.File):
        def create_dataset(self, *_args, **_kwargs):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(h5py, "File", FullFile)
    with pytest.raises(NoSpaceError, match=r"^\S*/parts/client0\.h5: no space left on "
                       r"device") as caught:
        writer.commit()
    documented("disk-full-part", str(caught.value), {run.parent: "<ws>"},
               exit_code=exit_code(NoSpaceError))
    # the shards survive for the retry; no part file, no sidecar saying "complete"
    assert file_hashes(run) == before
    assert not (run / "parts" / "client0.h5").exists()
    assert not (run / "parts" / "client0.json").exists()


def _serve_in_process(run: Path, capsys: pytest.CaptureFixture) -> tuple[int, list[str]]:
    from offline_iaas.cli import main

    capsys.readouterr()
    code = main(["serve", "--run-dir", str(run), "--node", "server0"])
    return code, capsys.readouterr().err.strip().splitlines()


def test_port_range_exhausted(
    base: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    # Every bind fails as when the ephemeral port range is used up.
    from offline_iaas.serve import tritonserver

    class NoPorts(socket.socket):
        def bind(self, address) -> None:
            raise OSError(errno.EADDRNOTAVAIL, os.strerror(errno.EADDRNOTAVAIL))

    ws = tmp_path / "ws"
    shutil.copytree(base, ws)
    run = run_dir(ws)
    monkeypatch.setattr(tritonserver.socket, "socket", NoPorts)
    code, err = _serve_in_process(run, capsys)
    assert code == exit_code(ServerError) == 5
    assert err == ["offline-iaas serve: error: cannot get a free port on '127.0.0.1' "
                   "(server.bind): Cannot assign requested address"]
    documented("port-range-exhausted", err[0].removeprefix("offline-iaas serve: error: "),
               exit_code=code)


def test_no_free_port_after_every_attempt(
    base: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    # Each start loses its ports to another process before tritonserver binds them.
    from offline_iaas.serve import node

    class TakenPorts:
        starts = 0

        def start(self, ports, bind, exit_timeout, log: Path) -> subprocess.Popen:
            TakenPorts.starts += 1
            log.parent.mkdir(parents=True, exist_ok=True)
            log.write_text(f"failed to bind {bind}:{ports.grpc}: Address already in use\n")
            return subprocess.Popen(["true"])

        def close(self) -> None:
            pass

    ws = tmp_path / "ws"
    shutil.copytree(base, ws)
    run = run_dir(ws)
    monkeypatch.setattr(node, "make_launcher", lambda *args, **kwargs: TakenPorts())
    code, err = _serve_in_process(run, capsys)
    assert code == 5 and TakenPorts.starts == node.PORT_ATTEMPTS
    assert err == [f"offline-iaas serve: error: no free ports found for server0 after "
                   f"{node.PORT_ATTEMPTS} attempts"]
    documented("no-free-port", err[0].removeprefix("offline-iaas serve: error: "),
               exit_code=code)
    assert not (ws / "run" / "servers" / "server0.json").exists()


def test_a_checkpoint_the_filesystem_cannot_read_is_kept_not_discarded(
    base: Path, tmp_path: Path
) -> None:
    """Only a checkpoint whose bytes are damaged is removed at a retry's start; one the OS
    cannot read now (here a directory in its name: EISDIR, as EIO or ESTALE on a network
    filesystem) is an error and stays, with the checkpoints beside it."""
    run, segment, writer = _client0_writer(base, tmp_path)
    writer.write_checkpoint(0, 0, {"statistic": np.arange(16, dtype=np.float32)})
    unreadable = run / "parts" / "client0.checkpoints" / "p0-16-32.npz"
    unreadable.mkdir()
    before = file_hashes(run)
    with pytest.raises(IsADirectoryError):
        writer.discard_damaged_checkpoints()
    assert file_hashes(run) == before and unreadable.is_dir()
    unreadable.rmdir()  # control: an emptied one is removed, the good one kept
    unreadable.write_bytes(b"")
    assert [p for p, _ in writer.discard_damaged_checkpoints()] == [unreadable]
    assert writer.progress() == [16]


def test_checkpoints_under_a_damaged_stamp_are_discarded_with_a_reason(
    base: Path, tmp_path: Path
) -> None:
    """A byte of the checkpoints' stamp (``share.json``) flipped, its mtime kept: nothing can
    tell which share the checkpoints were made for, so a retry streams the rows again, and
    says so (before, silently)."""
    run, segment, writer = _client0_writer(base, tmp_path)
    writer.write_checkpoint(0, 0, {"statistic": np.arange(16, dtype=np.float32)})
    config = load_config(run / "campaign.toml")
    again = PartWriter(RunDir(run), segment, ("statistic",), config.stream_hash())
    assert again.discarded is None and again.progress() == [16]  # control: the stamp intact
    stamp = run / "parts" / "client0.checkpoints" / "share.json"
    kept, data = stamp.stat(), bytearray(stamp.read_bytes())
    data[0] ^= 0xFF
    stamp.write_bytes(data)
    os.utime(stamp, ns=(kept.st_atime_ns, kept.st_mtime_ns))
    retry = PartWriter(RunDir(run), segment, ("statistic",), config.stream_hash())
    assert retry.progress() == [0]
    assert retry.discarded == (f"1 checkpoint(s) in {stamp.parent} discarded (their stamp "
                               f"{stamp} is damaged or of another version): their rows are "
                               "streamed again")
