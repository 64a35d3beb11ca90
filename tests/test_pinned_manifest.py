"""A run's model repository whose ``manifest.json`` is there, a regular file, but damaged (not
JSON, a field missing) after make-dag: the check that the repository still serves the model
make-dag recorded (``repository/pinning.py``) refuses it up front with ``read_manifest``'s own
line naming the file, exit 4, in ``status``, ``report`` (after writing its page) and
``run-local`` (before anything starts). Before, it was passed over as "the server's own check
names it": status exited 0 and run-local started the servers, each of which refused it as
often as it was retried. No server is started here: the run's parts are faked.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from offline_iaas.cli import main
from offline_iaas.config import load_config
from offline_iaas.errors import ModelError, exit_code
from offline_iaas.manifest import read_manifest
from offline_iaas.rundir import RunDir
from offline_iaas.workflow.make_dag import make_dag
from tests.bad_input_cases import fake_parts
from tests.error_catalogue import cli_error, documented


@pytest.fixture(scope="module")
def base(small_campaign_dir: Callable[..., Path]) -> Path:
    """The small campaign, its frames and its exported repository (copied by each test)."""
    return small_campaign_dir()


@pytest.fixture
def run(base: Path, tmp_path: Path) -> Path:
    """A copy of the small campaign, make-dag's run of it (``ws/run``), its parts faked."""
    ws = Path(shutil.copytree(base, tmp_path / "ws", symlinks=True))
    make_dag(load_config(ws / "campaign.toml"), RunDir(ws / "run"))
    fake_parts(ws / "run")
    return ws / "run"


def command(capsys: pytest.CaptureFixture, *argv: str) -> tuple[int, list[str]]:
    """``offline-iaas argv`` in this process: its exit code and its error lines."""
    capsys.readouterr()
    code = main(list(argv))
    return code, capsys.readouterr().err.strip().splitlines()


def _not_json(text: str) -> str:
    return text[: len(text) // 2]


def _without_versions(text: str) -> str:
    record = json.loads(text)
    del record["versions"]
    return json.dumps(record)


@pytest.mark.parametrize("damage", [_not_json, _without_versions])
def test_a_damaged_manifest_of_a_runs_repository_is_refused_up_front_naming_it(
        run: Path, capsys: pytest.CaptureFixture, damage: Callable[[str], str]) -> None:
    manifest = run.parent / "model-repository" / "manifest.json"
    saved = manifest.read_text()
    manifest.write_text(damage(saved))
    with pytest.raises(ModelError) as caught:
        read_manifest(manifest.parent)
    expected = str(caught.value)  # every reader's line: the file and "export again"
    assert expected.startswith(f"{manifest}") and "export the repository again" in expected
    for argv in (["status", str(run)], ["report", str(run)], ["run-local", str(run)]):
        code, lines = command(capsys, *argv)
        assert code == exit_code(ModelError) and len(lines) == 1, (argv, lines)
        assert cli_error(lines[0]) == expected, argv
    assert (run / "report" / "index.html").is_file()  # the report's page is written first
    assert not (run / "local-state.json").exists()  # run-local started nothing
    if damage is _without_versions:
        documented("run-repository-manifest-damaged", expected, {run.parent: "<ws>"},
                   exit_code=exit_code(ModelError))
    manifest.write_text(saved)  # the control: the manifest as exported passes again
    for argv in (["status", str(run)], ["report", str(run)]):
        assert command(capsys, *argv)[0] == 0, argv
