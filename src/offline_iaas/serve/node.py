"""``offline-iaas serve``: one server node of the DAG.

Starts tritonserver on free ports (retrying when a port is taken meanwhile), waits until the
server and every model are ready, publishes its address in the run directory, then waits.
On SIGTERM or SIGINT (DAGMan removing the service, run-local ending) it withdraws the address
and stops tritonserver within ``exit_timeout_seconds`` plus a short grace.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

from offline_iaas.config import load_config
from offline_iaas.errors import ServerError
from offline_iaas.repository.export import check_repository
from offline_iaas.repository.model_configs import CLASSIFIER, SNAPSHOTTER
from offline_iaas.serve import rendezvous
from offline_iaas.serve.tritonserver import (
    Ports,
    free_ports,
    locate_tritonserver,
    server_command,
    start_server,
)

PORT_ATTEMPTS = 5


def published_host(bind: str) -> str:
    """The address clients use: the bind address, or this host's name for a wildcard bind."""
    return socket.getfqdn() if bind in ("0.0.0.0", "::", "") else bind


def wait_until_ready(
    proc: subprocess.Popen, url: str, models: list[str], timeout_seconds: float,
    stop: threading.Event,
) -> bool:
    """True once the server and ``models`` are ready; False if the process exited first."""
    import tritonclient.grpc as grpcclient

    deadline = time.monotonic() + timeout_seconds
    client = grpcclient.InferenceServerClient(url)
    try:
        while time.monotonic() < deadline and not stop.is_set():
            if proc.poll() is not None:
                return False
            try:
                if client.is_server_ready() and all(client.is_model_ready(m) for m in models):
                    return True
            except Exception:  # not listening yet
                pass
            time.sleep(0.25)
    finally:
        client.close()
    if stop.is_set():
        return False
    raise ServerError(f"tritonserver at {url} not ready within {timeout_seconds:.0f} s")


def stop_process(proc: subprocess.Popen, grace_seconds: float) -> None:
    """SIGTERM, then SIGKILL after ``grace_seconds``."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(grace_seconds)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _log_tail(path: Path, lines: int = 5) -> str:
    try:
        return " | ".join(path.read_text(errors="replace").strip().splitlines()[-lines:])
    except FileNotFoundError:
        return ""


def serve(run_dir: Path, node: str, log: Callable[[str], None] = print) -> None:
    """Run server node ``node`` of the campaign in ``run_dir`` until SIGTERM."""
    run_dir = run_dir.resolve()
    config = load_config(run_dir / "campaign.toml")
    check_repository(config)
    install = locate_tritonserver()
    models = [SNAPSHOTTER, CLASSIFIER, config.model.name]
    bind = config.server.bind
    server_log = run_dir / "logs" / f"{node}-tritonserver.log"

    stop = threading.Event()
    previous = {
        sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGTERM, signal.SIGINT)
    }
    proc: subprocess.Popen | None = None
    epoch = 0
    try:
        for attempt in range(1, PORT_ATTEMPTS + 1):
            ports = Ports(*free_ports(bind))
            cmd = server_command(
                install, config.model.repository, ports, bind, config.server.exit_timeout_seconds
            )
            log(f"{node}: starting tritonserver (grpc {ports.grpc}, attempt {attempt})")
            proc = start_server(cmd, install, server_log)
            url = f"{bind}:{ports.grpc}"
            if wait_until_ready(proc, url, models, config.server.ready_timeout_seconds, stop):
                break
            if stop.is_set():
                return
            tail = _log_tail(server_log)
            if "already in use" not in tail.lower():
                raise ServerError(
                    f"tritonserver exited with code {proc.returncode} before it was ready "
                    f"(see {server_log}): {tail}"
                )
            log(f"{node}: port taken, retrying with other ports")
        else:
            raise ServerError(f"no free ports found for {node} after {PORT_ATTEMPTS} attempts")

        epoch = rendezvous.next_epoch(run_dir, node)
        rendezvous.publish_address(
            run_dir,
            rendezvous.ServerAddress(
                node=node,
                host=published_host(bind),
                grpc_port=ports.grpc,
                http_port=ports.http,
                metrics_port=ports.metrics,
                epoch=epoch,
                pid=os.getpid(),
            ),
        )
        log(f"{node}: ready at {published_host(bind)}:{ports.grpc} (epoch {epoch})")
        while not stop.wait(0.5):
            if proc.poll() is not None:
                raise ServerError(
                    f"tritonserver exited with code {proc.returncode} while serving "
                    f"(see {server_log}): {_log_tail(server_log)}"
                )
        log(f"{node}: stopping")
    finally:
        if epoch:
            rendezvous.remove_address(run_dir, node, epoch)
        if proc is not None:
            stop_process(proc, config.server.exit_timeout_seconds + 10)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
