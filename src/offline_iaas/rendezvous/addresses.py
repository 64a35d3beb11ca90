"""Server addresses published in the run directory: ``servers/<node>.json``.

A server writes its file atomically once every model is ready and removes it when it stops.
Each start of a server node gets a new ``epoch`` (one more than the last one published), so a
client can tell a restarted server from the one it was streaming to.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from offline_iaas.atomic import write_text_atomic
from offline_iaas.rundir import RunDir


@dataclass(frozen=True)
class ServerAddress:
    node: str
    host: str
    grpc_port: int
    http_port: int
    metrics_port: int
    epoch: int
    pid: int

    @property
    def grpc_url(self) -> str:
        return f"{self.host}:{self.grpc_port}"


def next_epoch(run: RunDir, node: str) -> int:
    """Claim the next epoch of a server node (kept after the address file is removed)."""
    path = run.epoch(node)
    previous = int(path.read_text()) if path.exists() else 0
    _atomic_write(path, str(previous + 1))
    return previous + 1


def publish_address(run: RunDir, address: ServerAddress) -> None:
    _atomic_write(run.address(address.node), json.dumps(asdict(address)))


def remove_address(run: RunDir, node: str, epoch: int) -> None:
    """Remove the address file if it is still the one of ``epoch``."""
    current = read_address(run, node)
    if current is not None and current.epoch == epoch:
        run.address(node).unlink(missing_ok=True)


def published_servers(run: RunDir) -> list[str]:
    """The server nodes whose address file is in the run directory now, by name."""
    directory = run.servers
    if not directory.is_dir():
        return []
    return sorted(p.stem for p in directory.glob("*.json") if not p.name.startswith("."))


def read_address(run: RunDir, node: str) -> ServerAddress | None:
    try:
        return ServerAddress(**json.loads(run.address(node).read_text()))
    except (FileNotFoundError, json.JSONDecodeError, TypeError):
        return None


def publish_refusal(run: RunDir, node: str, reason: str) -> None:
    """A server refuses to serve (its repository does not fit the campaign): its clients
    read why (``read_refusal``) instead of waiting for an address."""
    _atomic_write(run.refusal(node), reason)


def read_refusal(run: RunDir, node: str) -> str | None:
    """Why server ``node`` refused to serve, or None."""
    try:
        return run.refusal(node).read_text().strip() or None
    except FileNotFoundError:
        return None


@dataclass(frozen=True)
class UnhealthyReport:
    """A client's word that Triton answered it, at server ``epoch``, that the model's stub is
    not healthy (``serve/stalled_stub.py``): ``serve`` ends that epoch as on a crash."""

    epoch: int
    client: str


def report_unhealthy(run: RunDir, address: ServerAddress, client: str) -> None:
    """Tell ``address``'s server (through the shared run directory) that Triton called its
    model's stub not healthy while answering ``client``."""
    _atomic_write(run.unhealthy(address.node),
                  json.dumps(asdict(UnhealthyReport(address.epoch, client))))


def read_unhealthy(run: RunDir, node: str) -> UnhealthyReport | None:
    """The last report that server ``node``'s model was called not healthy, or None."""
    try:
        return UnhealthyReport(**json.loads(run.unhealthy(node).read_text()))
    except (FileNotFoundError, json.JSONDecodeError, TypeError):
        return None


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, text)
