"""Shared fixtures: small campaign configs written to temporary directories; the package's
log lines; the fault injection hook every node started by a test inherits
(``offline_iaas.hooks``); and the rule that only tests marked ``slow`` start a tritonserver
(``make check`` runs the others)."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from offline_iaas.hooks import HOOK_ENV
from tests.helpers import SMALL_CAMPAIGN, captured_log

# Nodes fail where RUN/faults.json says (tests/faults/inject.py); without it nothing happens.
os.environ[HOOK_ENV] = f"{Path(__file__).parent / 'faults' / 'inject.py'}:inject"


@pytest.fixture
def small_config_file(tmp_path: Path) -> Path:
    path = tmp_path / "campaign.toml"
    path.write_text(SMALL_CAMPAIGN)
    return path


@pytest.fixture
def log_lines() -> Iterator[list[str]]:
    """The package's log lines (info and above) while the test runs, as the CLI prints them."""
    with captured_log() as lines:
        yield lines


NO_SERVER = """#!/bin/sh
echo "$PYTEST_CURRENT_TEST" >> "$(dirname "$0")/started"
echo "tritonserver: refused: a test not marked slow may not start a server" >&2
exit 97
"""


@pytest.fixture(autouse=True)
def no_server_unless_slow(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
                          monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A test not marked ``slow`` finds a ``tritonserver`` first on PATH that refuses to start
    (``serve`` takes the one on PATH first) and fails, naming the mark it lacks."""
    if request.node.get_closest_marker("slow") is not None:
        yield
        return
    stub = tmp_path_factory.getbasetemp() / "no-tritonserver" / "tritonserver"
    if not stub.exists():
        stub.parent.mkdir(exist_ok=True)
        stub.write_text(NO_SERVER)
        stub.chmod(stub.stat().st_mode | stat.S_IXUSR)
    started = stub.with_name("started")
    started.unlink(missing_ok=True)
    monkeypatch.setenv("PATH", f"{stub.parent}{os.pathsep}{os.environ.get('PATH', '')}")
    yield
    if started.exists():
        pytest.fail(f"{request.node.nodeid} starts a tritonserver: mark it @pytest.mark.slow "
                    "(make check runs the tests that start none)")
