"""``serve --repository <tarball>`` (the transfer profiles: HTCondor brings make-dag's
``model-repository.tar.gz`` into the job's sandbox): a tarball cut short, or a file that is no
tar archive, is one line naming it, the refusal is published for the clients waiting, and the
repository already in the run directory is left as it was (it was deleted before the archive
was opened, and the server died with a traceback)."""

from __future__ import annotations

import shutil
import tarfile
from pathlib import Path

import pytest

from offline_iaas.cli import main
from offline_iaas.rundir import RunDir
from offline_iaas.serve.node import unpack_repository
from tests.bad_input_cases import run_dir
from tests.error_catalogue import documented
from tests.helpers import file_hashes


@pytest.fixture(scope="module")
def base(small_campaign_dir) -> Path:
    return small_campaign_dir()


@pytest.mark.parametrize("damage", ["cut short", "not a tar archive"])
def test_serve_names_a_damaged_repository_tarball_and_keeps_the_repository_there(
        base: Path, tmp_path: Path, capsys: pytest.CaptureFixture, damage: str) -> None:
    ws = tmp_path / "ws"
    shutil.copytree(base, ws)
    run = RunDir(run_dir(ws))
    tarball = run.path / "model-repository.tar.gz"
    with tarfile.open(tarball, "w:gz") as tar:
        tar.add(ws / "model-repository", arcname="model-repository")
    shutil.copytree(ws / "model-repository", run.model_repository)  # an earlier unpacking
    data = tarball.read_bytes()
    tarball.write_bytes(data[: len(data) // 2] if damage == "cut short" else b"[data]\n")
    before = file_hashes(run.model_repository)
    code = main(["serve", "--run-dir", str(run.path), "--node", "server0",
                 "--repository", str(tarball)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 4 and len(err) == 1, err
    message = err[0].removeprefix("offline-iaas serve: error: ")
    assert message.startswith(f"{tarball}: not a whole tar archive of a model repository")
    assert file_hashes(run.model_repository) == before
    assert run.refusal("server0").read_text().strip()  # the clients are told why
    assert not list(run.path.glob(".model-repository.*.tmp"))
    if damage == "cut short":
        documented("repository-tarball-damaged", message, {ws: "<ws>"}, exit_code=code)
    # control: the whole tarball is unpacked over the earlier repository, and what a server
    # killed while unpacking left (a whole copy, in its temporary name) is removed
    tarball.write_bytes(data)
    shutil.rmtree(run.model_repository / "offline-iaas")
    killed = run.path / ".model-repository.99999.unpacking.tmp" / "model-repository"
    shutil.copytree(ws / "model-repository", killed)
    assert unpack_repository(run, tarball) == run.model_repository
    assert file_hashes(run.model_repository) == file_hashes(ws / "model-repository")
    assert not list(run.path.glob(".model-repository.*.tmp"))
