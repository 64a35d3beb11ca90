"""A full disk (``ENOSPC``) anywhere is one line naming the file and "no space left on
device" (``NoSpaceError``, exit code 8), leaves no temporary file, reaches run-local's summary
even when the node's own log cannot be written, and a rerun after space is freed gives what a
run that never met it gives.

Without root, the full disk is an ``OSError(ENOSPC)`` raised where the writes happen (the
fault hook's ``enospc`` action, or a patched writer) and ``/dev/full`` as the node's log; with
root, ``tests/test_disk_full_tmpfs.py`` fills a real tmpfs under a campaign.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest

from offline_iaas.atomic import replaced_atomically, write_text_atomic
from offline_iaas.cli import failure, main
from offline_iaas.client.part import PartWriter
from offline_iaas.config import load_config
from offline_iaas.errors import NoSpaceError, RunError, exit_code, no_space
from offline_iaas.job_specs import read_client_job
from offline_iaas.merge import index as index_module
from offline_iaas.merge.merge import merge
from offline_iaas.merge.output import CampaignWriter
from offline_iaas.merge.shard_merge import merge_shard
from offline_iaas.records import read_run_info
from offline_iaas.rundir import RunDir
from offline_iaas.workflow.local import run_local
from tests.error_catalogue import documented
from tests.helpers import captured_log, node_complete
from tests.test_zero_data import write_run

FULL = os.strerror(errno.ENOSPC)


def with_parts(run: RunDir, seed: int = 0) -> RunDir:
    """Every client's part, complete, with finite rows (as the clients write them)."""
    config = load_config(run.config)
    rng = np.random.default_rng(seed)
    for node in read_run_info(run).clients:
        segment = read_client_job(run, node)
        writer = PartWriter(run, segment, config.outputs.names, config.stream_hash())
        for number, piece in enumerate(segment.pieces):
            writer.write_checkpoint(number, 0, {"statistic": rng.normal(size=piece.windows)
                                           .astype(np.float32)})
        writer.commit()
    return run


def temporaries(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if ".tmp" in p.name)


def fault(run: RunDir, node: str, point: str, path: str) -> None:
    (run.path / "faults.json").write_text(json.dumps(
        {node: [{"point": point, "action": "enospc", "path": path, "times": 1}]}))


def test_no_space_is_one_line_naming_the_file() -> None:
    # HDF5's message: errno 28 in its text, a line break, the temporary file's name
    hdf5 = OSError(errno.ENOSPC, "Can't synchronously write data (file write failed: time = "
                   "Wed Nov 25 23:48:05 2026\n, filename = '/r/output/.c.h5.7.tmp', file "
                   "descriptor = 3, errno = 28, error message = 'No space left on device')")
    assert str(no_space(hdf5)).startswith("/r/output/.c.h5.7.tmp: no space left on device (")
    assert str(no_space(hdf5, "/r/output/c.h5")).startswith("/r/output/c.h5: no space left")
    assert "\n" not in str(no_space(hdf5))
    # still an OSError: a writer that goes on after a failed write (run-local's state) does
    assert isinstance(no_space(hdf5), OSError) and no_space(hdf5).errno == errno.ENOSPC
    quota = OSError(errno.EDQUOT, os.strerror(errno.EDQUOT), "/home/u/run/parts/c0.h5")
    assert str(no_space(quota)).startswith("/home/u/run/parts/c0.h5: disk quota exceeded (")
    try:  # raised from None over the OSError, as a writer that wraps it does
        try:
            raise OSError(errno.ENOSPC, FULL)
        except OSError:
            raise RunError("client0: cannot write x") from None
    except RunError as wrapped:
        assert str(no_space(wrapped, fallback="/r")).startswith("/r: no space left on device")
    # the controls: not a full disk
    assert no_space(OSError(errno.EACCES, os.strerror(errno.EACCES), "/r/x")) is None
    assert no_space(RunError("errno = 13")) is None and no_space(ValueError("x")) is None


def test_an_atomic_write_on_a_full_disk_names_the_file_and_leaves_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "run.json"
    path.write_text("before")

    def full(*_args: object) -> None:
        raise OSError(errno.ENOSPC, FULL)

    monkeypatch.setattr(os, "replace", full)
    with pytest.raises(NoSpaceError, match=f"^{path}: no space left on device"):
        write_text_atomic(path, "after")
    assert path.read_text() == "before" and temporaries(tmp_path) == []


def test_an_hdf5_file_written_into_a_missing_directory_names_the_file_not_its_temporary(
        tmp_path: Path) -> None:
    """h5py names the file it could not create only in its error's text: the one line names
    the file asked for, with the errno's reason, and no temporary name."""
    path = tmp_path / "absent" / "injections.h5"
    with pytest.raises(FileNotFoundError) as caught, replaced_atomically(path) as tmp:
        h5py.File(tmp, "w")
    line = str(failure(caught.value))
    assert line == f"{os.strerror(errno.ENOENT)}: {path}", line
    assert ".tmp" not in line and exit_code(failure(caught.value)) == 6
    with pytest.raises(FileNotFoundError) as caught:  # control: without it, the temporary
        h5py.File(tmp, "w")
    assert ".tmp" in str(failure(caught.value))


def test_a_merge_writer_refused_its_second_file_leaves_no_temporary(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The staging file refused (the output's temporary file was made): neither stays, where
    a 0-byte ``.shard0.h5.<pid>.tmp`` used to."""
    run = write_run(tmp_path, monkeypatch, 4096)
    config = load_config(run.config)
    opened: list[str] = []
    real = h5py.File

    def second_refused(name, *args, **kwargs):
        opened.append(str(name))
        if len(opened) == 2:
            raise OSError(errno.ENOSPC, f"Unable to create file (errno = 28, name = '{name}')")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(h5py, "File", second_refused)
    out = run.shard_output("shard0")[0]
    with pytest.raises(NoSpaceError, match=f"^{out}: no space left on device"):
        CampaignWriter(out, config, [])
    assert len(opened) == 2 and temporaries(run.path) == []


def test_a_shard_merge_on_a_full_disk_exits_8_with_one_line_and_keeps_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    run = with_parts(write_run(tmp_path, monkeypatch, 4096))
    fault(run, "shard0", "mid-write", "output/shards/.shard0.h5.1.tmp")
    capsys.readouterr()
    assert main(["merge-shard", "--run-dir", str(run.path), "--node", "shard0"]) == 8
    (line,) = capsys.readouterr().err.splitlines()
    out = run.shard_output("shard0")[0]
    assert line == (f"offline-iaas merge-shard: error: {out}: no space left on device (free "
                    "space there, then run again: finished nodes are not redone)")
    documented("disk-full-shard-merge", line.removeprefix("offline-iaas merge-shard: error: "),
               {run.path: "RUN"}, exit_code=8)
    assert temporaries(run.path) == [] and not out.exists()
    assert not node_complete(run, "shard0")
    merge_shard(run, "shard0")  # space freed (the fault is spent): it completes
    assert node_complete(run, "shard0") and temporaries(run.path) == []


@pytest.mark.parametrize("shard_seconds", [0, 4096], ids=["single merge", "index"])
def test_the_merge_or_index_on_a_full_disk_names_its_output_and_keeps_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shard_seconds: float) -> None:
    run = with_parts(write_run(tmp_path, monkeypatch, shard_seconds))
    if shard_seconds:
        merge_shard(run, "shard0")
        real = index_module.h5py.File

        def full(name, mode="r", *args, **kwargs):
            if mode == "w":
                raise OSError(errno.ENOSPC, "Unable to synchronously create file (errno = 28, "
                                            f"error message = '{FULL}', name = '{name}')")
            return real(name, mode, *args, **kwargs)

        monkeypatch.setattr(index_module.h5py, "File", full)
    else:
        fault(run, "merge", "mid-write", "output/.campaign.h5.1.tmp")
    with pytest.raises(NoSpaceError, match=f"^{run.output[0]}: no space left on device"):
        merge(run)
    assert temporaries(run.path) == [] and not node_complete(run, "merge")
    monkeypatch.undo()
    merge(run)  # space freed
    assert node_complete(run, "merge") and temporaries(run.path) == []


def test_run_local_says_why_a_node_failed_when_its_log_cannot_be_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The shard merge's log is ``/dev/full`` (every write: ENOSPC) and its output's disk is
    full: its error line still reaches run-local's summary through the error pipe, with exit
    code 8; run again once space is freed, it completes and equals a merge that never met a
    full disk."""
    run = with_parts(write_run(tmp_path, monkeypatch, 4096))
    clean = RunDir(tmp_path / "clean")
    shutil.copytree(run.path, clean.path)
    merge_shard(clean, "shard0")
    submit = re.sub(r"(?m)^(output|error)( +)= logs/\$\(node\)\.(out|err)$", r"\1 = /dev/full",
                    run.submit("shard").read_text())
    assert submit.count("/dev/full") == 2
    run.submit("shard").write_text(submit)
    run.dag.write_text('JOB shard0 shard.sub\nVARS shard0 node="shard0"\n')
    fault(run, "shard0", "mid-write", "output/shards/.shard0.h5.1.tmp")
    out = run.shard_output("shard0")[0]
    lines: list[str] = []
    with captured_log(lines), pytest.raises(RunError) as err:
        run_local(run)
    message = str(err.value)
    documented("disk-full-run-local-log", message, {run.path: "RUN"},
               exit_code=exit_code(RunError))
    assert "\n" not in message
    assert (f"shard0 (exit code 8 after 1 attempt: {out}: no space left on device (free space "
            "there, then run again: finished nodes are not redone); see /dev/full, /dev/full)"
            ) in message, message
    assert any(f"shard0: failed with exit code 8 (see /dev/full): {out}: no space left" in line
               for line in lines), lines
    assert temporaries(run.path) == []
    run_local(run)  # the disk has room again (the fault is spent); its log is still /dev/full
    a = h5py.File(out, "r")
    b = h5py.File(clean.shard_output("shard0")[0], "r")
    with a, b:
        (name,) = list(b["statistic"])  # one stretch
        ours, theirs = a[f"statistic/{name}"][()], b[f"statistic/{name}"][()]
        assert len(theirs) > 100 and np.array_equal(ours, theirs)
        assert not np.array_equal(ours[1:], theirs[:-1])  # the control: one window off
