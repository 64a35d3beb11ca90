"""Shared fixtures: small campaign configs written to temporary directories; the package's
log lines; the fault injection hook every node started by a test inherits
(``offline_iaas.hooks``); the rule that only tests marked ``slow`` start a tritonserver
(``make check`` runs the others); and, after every test, the check that no server it started
crashed (``server_log_watch.ServerLogWatch``: a fatal signal in a tritonserver log, or a
server node that exited on its own and so was restarted by run-local, fails the test at its teardown
unless it is marked ``server_exits`` or ``server_crashes``, see pyproject.toml; a crash that
Triton brought about itself is a warning instead: its python backend's on a stalled stub,
``serve/stalled_stub.py``, or tritonserver's in Triton's core library, ``serve/core_crash.py``).
"""

from __future__ import annotations

import os
import stat
import warnings
from collections.abc import Callable, Generator, Iterator
from pathlib import Path

import pytest

from offline_iaas.hooks import HOOK_ENV
from tests.helpers import SMALL_CAMPAIGN, captured_log, small_campaign
from tests.server_log_watch import ServerLogWatch

# pytest-xdist runs two or three workers on the machine's cores, each with torch's OpenMP pool
# as wide as the machine: the pools spin-wait on each other's cores (a streamed network's
# test took 25 s beside another worker, 0.4 s alone). One thread per worker, and per process it
# starts (a training child sets its own count; servers' onnxruntime sessions have theirs).
os.environ.setdefault("OMP_NUM_THREADS", "1")

# Nodes fail where RUN/faults.json says (tests/faults/inject.py); without it nothing happens.
os.environ[HOOK_ENV] = f"{Path(__file__).parent / 'faults' / 'inject.py'}:inject"

_SERVER_LOGS = pytest.StashKey[ServerLogWatch]()


LONGEST_FIRST = (
    "test_demo_physics.py", "test_faults.py", "test_oracle.py", "test_merge_tree.py",
    "test_injections_on_the_fly.py", "test_time_slides.py", "test_server_crashes.py",
    "test_bad_frames.py", "test_modes.py", "test_bench.py",
    "test_run_local_lifetime_servers.py", "test_streamed_campaign.py",
)
"""The modules that take longest, started first, slowest first (``make test`` at ``4eecd74``
on a 2-core AMD EPYC, each module's time summed from ``--junitxml``: 435 s down to 69 s): on
the pytest-xdist workers a long module begun last would run alone at the end."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run the modules of ``LONGEST_FIRST`` first, in that order, then the slow modules, then
    the rest (each module's tests keep their order)."""
    def rank(item: pytest.Item) -> int:
        name = item.path.name
        if name in LONGEST_FIRST:
            return LONGEST_FIRST.index(name)
        return len(LONGEST_FIRST) + (0 if item.get_closest_marker("slow") else 1)
    items[:] = [item for _, item in sorted(enumerate(items),
                                           key=lambda pair: (rank(pair[1]), pair[0]))]


@pytest.fixture(scope="session", autouse=True)
def _server_log_watch(request: pytest.FixtureRequest,
                      tmp_path_factory: pytest.TempPathFactory) -> None:
    request.config.stash[_SERVER_LOGS] = ServerLogWatch(tmp_path_factory.getbasetemp())


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None
                            ) -> Generator[None, None, None]:
    """After a test and the fixtures it ends (a module's servers stop with its last test):
    fail it when a server crashed or exited on its own meanwhile."""
    yield
    watch = item.config.stash.get(_SERVER_LOGS, None)
    if watch is None:
        return
    problems = watch.problems(
        exits_expected=item.get_closest_marker("server_exits") is not None,
        crashes_expected=item.get_closest_marker("server_crashes") is not None,
    )
    upstream, watch.upstream = watch.upstream, []
    for crash in upstream:  # not this project's fault, but never silent
        warnings.warn(f"a crash Triton brought about itself (the server was restarted): "
                      f"{crash}", stacklevel=1)
    if problems:
        pytest.fail("a server crashed or exited on its own (a restart would hide it):\n"
                    + "\n".join(problems), pytrace=False)


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


@pytest.fixture(scope="module")
def small_campaign_dir(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Path]:
    """Factory of a test module's small campaign: ``make(export=True, weights=False)`` is a
    new directory with ``helpers.SMALL_CAMPAIGN`` written and its frames synthesised, its model
    repository exported (``export``) and untrained weights in ``weights/`` (``weights``)."""
    def make(*, export: bool = True, weights: bool = False) -> Path:
        root = tmp_path_factory.mktemp("small-campaign")
        small_campaign(root, export=export, weights=root / "weights" if weights else None)
        return root

    return make
