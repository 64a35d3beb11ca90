"""A model repository's file that is there but cannot be read (a permission) is named with the
OS's reason, not "export again", which would not give its reader access; the exit code is a
repository problem's (``ModelError``, 4), and nothing written before changes.

For real: the file's mode is 0 and, as root, each command runs without the capabilities that
read through a mode (as ``tests/test_frames.py``'s unlistable frame directory).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from offline_iaas.errors import ModelError, exit_code
from tests.error_catalogue import cli_error, documented
from tests.helpers import file_hashes

UNPRIVILEGED = (["setpriv", "--bounding-set=-dac_override,-dac_read_search"]
                if os.geteuid() == 0 else [])
TIMEOUT_SECONDS = 120

pytestmark = pytest.mark.slow  # eleven command-line processes reading frames: 22 s of CPU


@pytest.fixture(scope="module")
def root(small_campaign_dir: Callable[..., Path]) -> Path:
    """SMALL_CAMPAIGN with its frames and its exported repository (its classifier streamed
    layer by layer, ``model.streamed = "auto"``)."""
    return small_campaign_dir()


def offline_iaas(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``offline-iaas <args>`` in ``root``, without reading through file modes."""
    return subprocess.run([*UNPRIVILEGED, sys.executable, "-m", "offline_iaas.cli", *args],
                          cwd=root, capture_output=True, text=True, timeout=TIMEOUT_SECONDS)


@contextmanager
def unreadable(path: Path) -> Iterator[None]:
    """``path`` of mode 0 while the block runs."""
    mode = path.stat().st_mode
    path.chmod(0)
    try:
        yield
    finally:
        path.chmod(mode)


def refusals(root: Path, path: Path, commands: list[list[str]]) -> list[str]:
    """Each command's one-line message while ``path`` cannot be read; each exits with
    ModelError's code and leaves every file of ``root`` as it was."""
    before = file_hashes(root)
    messages = []
    with unreadable(path):
        for command in commands:
            done = offline_iaas(root, *command)
            assert done.returncode == exit_code(ModelError), (command, done.stderr)
            assert len(done.stderr.strip().splitlines()) == 1, (command, done.stderr)
            messages.append(cli_error(done.stderr))
    assert file_hashes(root) == before  # nothing changed, no file left behind
    return messages


def test_unreadable_manifest_names_the_permission_not_export_again(root: Path) -> None:
    manifest = root / "model-repository" / "manifest.json"
    commands = [["check", "campaign.toml"], ["make-dag", "campaign.toml", "--out", "run"],
                ["reference", "campaign.toml", "--out", str(root / "r.h5")],
                ["export", "campaign.toml"]]
    messages = refusals(root, manifest, commands)
    assert messages == [f"{manifest}: cannot read: Permission denied"] * len(commands)
    documented("repository-manifest-unreadable", messages[0], {root: "<ws>"},
               exit_code=exit_code(ModelError))
    assert offline_iaas(root, "check", "campaign.toml").returncode == 0  # the control


@pytest.mark.parametrize("graph", ["classifier.onnx", "classifier.streamed/head.onnx"])
def test_unreadable_graph_names_the_permission_not_export_again(root: Path, graph: str) -> None:
    """``check`` loads every graph; ``reference`` opens those it runs (the streamed ones) and
    hashes the whole-window one (which a permission made "cannot write the reference output")."""
    path = root / "model-repository" / "offline-iaas" / "1" / graph
    commands = [["check", "campaign.toml"],
                ["reference", "campaign.toml", "--out", str(root / "r.h5")]]
    messages = refusals(root, path, commands)
    assert messages == [f"{path}: cannot read: Permission denied"] * len(commands)
    if graph == "classifier.onnx":
        documented("repository-graph-unreadable", messages[0], {root: "<ws>"},
                   exit_code=exit_code(ModelError))
    assert offline_iaas(root, "check", "campaign.toml").returncode == 0  # the control
