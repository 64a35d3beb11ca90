"""One bench tritonserver: locked down like a campaign's, started and stopped by PID.

The server is the project's (``serve/tritonserver.py``: located, free ports, the run's token,
its own log), serving the repository ``export`` wrote for a workload. Its CPU time includes
the python-backend stubs, which are its children. On exit tritonserver gets SIGTERM (then
SIGKILL), and any stub still alive afterwards is killed by its PID (while the process with
that PID is still the stub: its start time is checked).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from offline_iaas.bench import accounting
from offline_iaas.errors import ServerError
from offline_iaas.lifetime import is_running
from offline_iaas.rendezvous.access import auth_headers, write_token
from offline_iaas.rundir import RunDir
from offline_iaas.serve.node import stop_process
from offline_iaas.serve.readiness import wait_until_ready
from offline_iaas.serve.stub_watch import Stub, find_stubs
from offline_iaas.serve.tritonserver import (
    Ports,
    free_ports,
    locate_tritonserver,
    server_command,
    start_server,
)

READY_TIMEOUT_SECONDS = 180.0
EXIT_TIMEOUT_SECONDS = 5.0


@dataclass
class BenchServer:
    """A running bench server."""

    pid: int
    ports: Ports
    run: RunDir
    """Holds the token (``RUN/token``) and the server log (``RUN/logs``)."""
    stub_pids: list[int] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"127.0.0.1:{self.ports.grpc}"

    @property
    def headers(self) -> dict[str, str]:
        """gRPC headers carrying the token."""
        return auth_headers(self.run)

    def cpu_seconds(self) -> float:
        """CPU seconds of tritonserver and its python-backend stubs so far."""
        self.stub_pids = sorted(set(self.stub_pids) | set(accounting.children_of(self.pid)))
        return accounting.tree_cpu_seconds([self.pid, *self.stub_pids])


@contextmanager
def bench_server(repository: Path, run: RunDir, models: list[str]) -> Iterator[BenchServer]:
    """Start tritonserver on ``repository``; yield it once ``models`` are ready; stop it."""
    run.logs.mkdir(parents=True, exist_ok=True)
    token = write_token(run)
    install = locate_tritonserver()
    ports = Ports(*free_ports("127.0.0.1"))
    cmd = server_command(
        install, repository, ports, "127.0.0.1", EXIT_TIMEOUT_SECONDS, token=token
    )
    log_path = run.tritonserver_log("bench")
    offset = log_path.stat().st_size if log_path.exists() else 0
    proc = start_server(cmd, install, log_path)
    server = BenchServer(proc.pid, ports, run)
    stubs: list[Stub] = []
    try:
        if not wait_until_ready(
            proc, server.url, models, READY_TIMEOUT_SECONDS, threading.Event(), log_path, offset
        ):
            tail = log_path.read_text(errors="replace").strip().splitlines()[-5:]
            raise ServerError(
                f"bench tritonserver exited with code {proc.returncode} before it was ready "
                f"(see {log_path}): {' | '.join(tail)}"
            )
        server.stub_pids = accounting.children_of(proc.pid)
        stubs = find_stubs(proc.pid)
        yield server
    finally:
        server.stub_pids = sorted(set(server.stub_pids) | set(accounting.children_of(proc.pid)))
        stubs += [stub for stub in find_stubs(proc.pid) if stub not in stubs]
        stop_process(proc, EXIT_TIMEOUT_SECONDS + 10, stubs)
        _kill_leftovers(stubs)


def _kill_leftovers(stubs: list[Stub]) -> None:
    """SIGKILL the stubs that outlived their server (they are ours: we started their parent);
    a stub's PID taken by a later process is left alone."""
    deadline = time.monotonic() + 5
    while any(is_running(s.pid, s.start_ticks) for s in stubs) and time.monotonic() < deadline:
        time.sleep(0.1)
    for stub in stubs:
        if is_running(stub.pid, stub.start_ticks):
            with contextlib.suppress(ProcessLookupError):
                os.kill(stub.pid, signal.SIGKILL)
