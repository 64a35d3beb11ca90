"""A port taken between ``free_ports`` and tritonserver's bind (real tritonserver).

``free_ports`` finds ports free a moment before tritonserver binds them; another process can
take one in between. tritonserver binds grpc first and answers ready on it before it binds
http and metrics, then exits "already in use" if either is taken: the serve node must not
take such a start for ready (it would publish an address that dies at once and be restarted
as a crash; CI met this at bc36b80 under test_modes[e2e]). ``wait_until_ready`` waits for
the line tritonserver logs as it starts its last endpoint, after this start's offset in a log
that earlier starts appended to, then for the start to stay up without a failed endpoint.
The outcome is what is checked (not ready, exit 1, the failure logged); the race itself (a
grpc answer inside the ~40 ms before the exit) cannot be made to happen on demand.
"""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import pytest

from offline_iaas.serve.node import stop_process
from offline_iaas.serve.readiness import ENDPOINT_FAILED, ENDPOINTS_STARTED, wait_until_ready
from offline_iaas.serve.tritonserver import (
    Ports,
    free_ports,
    locate_tritonserver,
    server_command,
    start_server,
)
from tests.helpers import small_campaign

pytestmark = pytest.mark.slow

EARLIER_START = f'I0000 00:00:00 1 http_server.cc] "{ENDPOINTS_STARTED} at 127.0.0.1:1"\n'
"""A previous start's line in the same log: it must not count for this start."""


@pytest.fixture(scope="module")
def campaign(tmp_path_factory: pytest.TempPathFactory):
    return small_campaign(tmp_path_factory.mktemp("ports"))


def _ready(campaign, ports: Ports, log: Path) -> tuple[bool, int, str]:
    """Start tritonserver on ``ports`` after ``EARLIER_START`` in ``log``; whether
    ``wait_until_ready`` took it for ready, its exit code once stopped, this start's log."""
    log.write_text(EARLIER_START)
    offset = log.stat().st_size
    install = locate_tritonserver()
    command = server_command(install, campaign.model.repository, ports, "127.0.0.1", 5)
    proc = start_server(command, install, log)
    try:
        ready = wait_until_ready(proc, f"127.0.0.1:{ports.grpc}", [campaign.model.name], 120,
                                 threading.Event(), log, offset)
    finally:
        stop_process(proc, 15)
    return ready, proc.returncode, log.read_text()[len(EARLIER_START):]


@pytest.mark.parametrize("taken", ["http", "metrics"])
def test_a_server_whose_port_was_taken_is_not_ready_though_grpc_answered(
        campaign, tmp_path: Path, taken: str) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        held = holder.getsockname()[1]
        grpc, other = free_ports("127.0.0.1", 2)
        ports = (Ports(http=held, grpc=grpc, metrics=other) if taken == "http"
                 else Ports(http=other, grpc=grpc, metrics=held))
        ready, code, log = _ready(campaign, ports, tmp_path / "server.log")
    assert not ready
    assert code == 1 and "already in use" in log and ENDPOINT_FAILED in log
    # with metrics' port taken the last endpoint's start is logged all the same (then its
    # failure): that line alone does not make a start ready
    assert (ENDPOINTS_STARTED in log) == (taken == "metrics")


def test_a_server_with_its_ports_free_is_ready_once_every_endpoint_is_bound(
        campaign, tmp_path: Path) -> None:  # the control: the same start with nothing taken
    ready, code, log = _ready(campaign, Ports(*free_ports("127.0.0.1")), tmp_path / "server.log")
    assert ready and code == 0 and ENDPOINTS_STARTED in log and ENDPOINT_FAILED not in log
