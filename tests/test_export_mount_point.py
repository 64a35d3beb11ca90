"""``export`` into a model repository that is a mount point of its own (a container's bind
mount, NFS, a tmpfs): its staging directory was made in the repository's parent, another
filesystem, and the rename of the new version into the repository failed with EXDEV
(``model repository R: cannot write offline-iaas/1: Invalid cross-device link``, exit 6).

The staging directory is now made inside such a repository where Triton does not take it for
a model (``repository/rollback.staging_place``): a model directory (Triton ignores a version
directory whose name is not a number, checked with the tritonserver of the nvidia-pytriton
wheel: "ignore version directory '.export-staging-...' which fails to convert to integral
number"), else the repository's top while it holds no model (that Triton does not start with
a leftover dot-directory there: "failed to load model '.export-staging-...'"; the next export
removes a leftover)."""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from offline_iaas.cli import main
from offline_iaas.config import load_config
from offline_iaas.manifest import read_manifest
from offline_iaas.repository.export import export_repository
from offline_iaas.repository.rollback import STAGING_PREFIX, staging_place
from tests.error_catalogue import cli_error, documented


def staged_entries(repo: Path) -> list[str]:
    """The staging directories in ``repo``, at its top or in a model directory."""
    return sorted(p.relative_to(repo).as_posix() for p in repo.rglob(f"{STAGING_PREFIX}*"))


def mounted(monkeypatch: pytest.MonkeyPatch, repo: Path) -> None:
    """Make ``repo`` look like a mount point at the process's system-call boundary: its
    ``st_dev`` differs from its parent's and a rename across it fails with EXDEV, as the
    kernel's does (the fast check; ``test_export_into_a_real_tmpfs_mount_point`` mounts one)."""
    real_stat, real_replace = os.stat, os.replace
    top = repo.absolute()

    def stat(path: object, *args: object, **kwargs: object) -> os.stat_result:
        result = real_stat(path, *args, **kwargs)
        if isinstance(path, str | os.PathLike) and Path(path).absolute() == top:
            fields = list(result[:10])
            fields[2] += 1  # st_dev
            return os.stat_result(fields)
        return result

    def replace(src: object, dst: object, *args: object, **kwargs: object) -> None:
        ends = [Path(os.fsdecode(p)).absolute().is_relative_to(top) for p in (src, dst)]
        if ends[0] != ends[1]:
            raise OSError(errno.EXDEV, os.strerror(errno.EXDEV), src, None, dst)
        real_replace(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "stat", stat)
    monkeypatch.setattr(os, "replace", replace)


@pytest.mark.parametrize("ensemble", [False, True], ids=["fused", "ensemble"])
def test_export_into_a_mount_point_stages_inside_it_and_leaves_no_staging(
        small_campaign_dir: Callable[..., Path], monkeypatch: pytest.MonkeyPatch,
        ensemble: bool) -> None:
    """Before: the first export failed with EXDEV (RunError, exit 6). Checked on the old code:
    ``cannot write offline-iaas/1: Invalid cross-device link``."""
    root = small_campaign_dir(export=False)
    config = load_config(root / "campaign.toml", ["model.streamed=false"])
    repo = config.model.repository
    repo.mkdir()
    with monkeypatch.context() as patched:
        mounted(patched, repo)
        assert staging_place(repo) == repo  # no model yet: the top (nothing serves it)
        export_repository(config, ensemble=ensemble)
        model = repo / config.model.name
        assert staging_place(repo).parent == repo  # a model directory now
        (model / f"{STAGING_PREFIX}killed").mkdir()  # left by an export killed part-way
        export_repository(config, ensemble=ensemble)
    assert read_manifest(repo).versions == {"classifier": 2}
    assert staged_entries(repo) == []  # the leftover removed, no staging of its own left
    assert not [p for p in root.iterdir() if p.name.startswith(STAGING_PREFIX)]
    # control: a repository on its parent's filesystem stages beside it, as before
    assert staging_place(repo) == repo.parent
    export_repository(config, ensemble=ensemble)
    assert read_manifest(repo).versions == {"classifier": 3}


def test_a_staging_directory_left_in_a_repository_without_manifest_is_not_foreign(
        small_campaign_dir: Callable[..., Path]) -> None:
    """A mounted repository whose first export was killed holds only its staging directory:
    the next export took it for another program's file and refused the directory."""
    root = small_campaign_dir(export=False)
    config = load_config(root / "campaign.toml", ["model.streamed=false"])
    repo = config.model.repository
    (repo / f"{STAGING_PREFIX}killed" / "fused" / "1").mkdir(parents=True)
    export_repository(config)
    assert read_manifest(repo).versions == {"classifier": 1}
    assert staged_entries(repo) == []
    # control: anything else there is still foreign
    other = load_config(root / "campaign.toml", ['model.repository="other"'])
    (other.model.repository / "notes").mkdir(parents=True)
    with pytest.raises(Exception, match="not a model repository of export"):
        export_repository(other)


def test_a_mounted_repository_whose_models_are_links_is_refused_before_it_is_touched(
        small_campaign_dir: Callable[..., Path], monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A mount point holding a manifest whose model directories are links (elsewhere, maybe
    another filesystem): no model directory to stage in, and a staging directory at the top,
    left by a killed export, would stop Triton starting (a review's finding: it was made
    there). Refused in one line naming the key, the repository as it was."""
    root = small_campaign_dir(export=False)
    config = load_config(root / "campaign.toml", ["model.streamed=false"])
    repo = config.model.repository
    export_repository(config)
    model = repo / config.model.name
    elsewhere = tmp_path / "models" / config.model.name
    elsewhere.parent.mkdir()
    shutil.move(model, elsewhere)
    model.symlink_to(elsewhere)
    before = sorted(p.relative_to(repo).as_posix() for p in repo.rglob("*"))
    with monkeypatch.context() as patched:
        mounted(patched, repo)
        code = main(["export", str(root / "campaign.toml"), "--set", "model.streamed=false"])
    message = cli_error(capsys.readouterr().err)
    assert code == 6
    documented("export-mount-point-models-are-links", message,
               {str(repo): "<ws>/model-repository"}, exit_code=6)
    assert sorted(p.relative_to(repo).as_posix() for p in repo.rglob("*")) == before
    # control: the same repository on its parent's filesystem exports (staged beside it)
    export_repository(config)
    assert read_manifest(repo).versions == {"classifier": 2}


EXPORT_TWICE = """
import json, sys
from pathlib import Path
from offline_iaas.config import load_config
from offline_iaas.repository.export import export_repository
config = load_config(Path(sys.argv[1]), ["model.streamed=false"])
repo = config.model.repository
export_repository(config)
export_repository(config)
print(json.dumps(sorted(p.relative_to(repo).as_posix() for p in repo.rglob("*")
                        if "__pycache__" not in p.parts and len(p.parts) - len(repo.parts) < 3)))
"""


@pytest.mark.slow
def test_export_into_a_real_tmpfs_mount_point(
        small_campaign_dir: Callable[..., Path]) -> None:
    """A tmpfs mounted on the repository in a mount namespace of the child's own (``unshare
    -m``, root; gone with the child): two exports, each version renamed in."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("mounting a tmpfs needs root and unshare (the shim above checks the same)")
    root = small_campaign_dir(export=False)
    repo = root / "model-repository"
    repo.mkdir()
    probe = subprocess.run(["unshare", "-m", "mount", "-t", "tmpfs", "none", str(repo)],
                           capture_output=True, text=True, timeout=30)
    if probe.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {probe.stderr.strip()}")
    script = (f'mount -t tmpfs none "{repo}" && exec "{sys.executable}" -c "$0" '
              f'"{root / "campaign.toml"}"')
    done = subprocess.run(["unshare", "-m", "sh", "-c", script, EXPORT_TWICE],
                          capture_output=True, text=True, timeout=300, env=os.environ)
    assert done.returncode == 0, done.stderr
    entries = json.loads(done.stdout.strip().splitlines()[-1])
    assert entries == ["manifest.json", "offline-iaas", "offline-iaas/1", "offline-iaas/2",
                       "offline-iaas/config.pbtxt"]
    assert list(repo.iterdir()) == []  # the tmpfs was the child's alone
    assert not [p for p in root.iterdir() if p.name.startswith(STAGING_PREFIX)]
