"""``serve --node`` names files after the node (its address, epoch, log, monitor CSV): a name
that is none of the run's servers is refused before any file is touched (``../run`` named
``servers/../run.json``, the run's own record, and deleted it)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from offline_iaas.cli import main
from offline_iaas.job_specs import check_server_node
from offline_iaas.rundir import RunDir
from tests.bad_input_cases import run_dir
from tests.error_catalogue import documented
from tests.helpers import file_hashes


@pytest.fixture(scope="module")
def base(small_campaign_dir) -> Path:
    return small_campaign_dir()


@pytest.mark.parametrize(("node", "case", "expected"), [
    ("../run", "serve-node-not-a-name",
     "'../run' is not a node name (a server of this run: server0, ...)"),
    ("", None, "'' is not a node name"),
    ("client0", "serve-client-node",
     "client0 is a client node, not a server (this run's servers: server0)"),
    ("server9", None, "server9 is not a node of this run (this run's servers: server0)"),
])
def test_serve_refuses_a_node_that_is_no_server_of_the_run_before_writing(
    base: Path, tmp_path: Path, capsys: pytest.CaptureFixture, node: str, case: str | None,
    expected: str,
) -> None:
    ws = tmp_path / "ws"
    shutil.copytree(base, ws)
    run = run_dir(ws)
    before = file_hashes(ws)
    code = main(["serve", "--run-dir", str(run), "--node", node])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 6 and len(err) == 1, err
    message = err[0].removeprefix("offline-iaas serve: error: ")
    assert message.startswith(expected), message
    assert file_hashes(ws) == before  # run.json kept, no address, epoch, log or CSV written
    if case is not None:
        documented(case, message, {ws: "<ws>"}, exit_code=code)
    check_server_node(RunDir(run), "server0")  # control: the run's server passes
