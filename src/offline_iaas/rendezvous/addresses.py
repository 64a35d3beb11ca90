"""Server addresses published in the run directory: ``servers/<node>.json``.

A server writes its file atomically once every model is ready and removes it when it stops.
Each start of a server node gets a new ``epoch`` (one more than the last one published), so a
client can tell a restarted server from the one it was streaming to. The address and a
client's word that the server's model is not healthy (``servers/<node>.unhealthy``) are
records (``records.py``), written and read here; a damaged one is one ``RunError`` naming the
file and field.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from offline_iaas.atomic import write_text_atomic
from offline_iaas.bounded_read import read_text_or
from offline_iaas.errors import RunError
from offline_iaas.records import Record, parse, read_optional
from offline_iaas.rundir import RunDir


class ServerAddress(Record):
    """``RUN/servers/<node>.json`` (or the server's job ad): where a server node's current
    start listens."""

    KIND: ClassVar[str] = "server address"

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
    text = read_text_or(path, RunError) if path.exists() else "0"
    if not text.strip().isdigit():  # int() takes "+1" and "1_0"; serve writes digits alone
        raise RunError(f"{path}: not an epoch (a whole number, serve's count of its starts): "
                       f"delete it and {run.unhealthy(node)} (a report of an earlier epoch), "
                       "and the next start counts from 1")
    previous = int(text)
    _atomic_write(path, str(previous + 1))
    return previous + 1


def address_text(address: ServerAddress) -> str:
    """The address as a document (the file's, and the job ad attribute's)."""
    return address.model_dump_json()


def parse_address(text: str, where: Path) -> ServerAddress:
    """The address in ``text`` (a job ad attribute's: ``where`` names it); RunError if it is
    not one."""
    return parse(ServerAddress, text, where)


def publish_address(run: RunDir, address: ServerAddress) -> None:
    _atomic_write(run.address(address.node), address_text(address))


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
    """Server ``node``'s published address, or None while it publishes none."""
    return read_optional(ServerAddress, run.address(node))


def publish_refusal(run: RunDir, node: str, reason: str) -> None:
    """A server refuses to serve (its repository does not fit the campaign): its clients
    read why (``read_refusal``) instead of waiting for an address."""
    _atomic_write(run.refusal(node), reason)


def read_refusal(run: RunDir, node: str) -> str | None:
    """Why server ``node`` refused to serve, or None."""
    try:
        return read_text_or(run.refusal(node), RunError).strip() or None
    except FileNotFoundError:
        return None


class UnhealthyReport(Record):
    """``RUN/servers/<node>.unhealthy``: a client's word that Triton answered it, at server
    ``epoch``, that the model's stub is not healthy (``serve/stalled_stub.py``): ``serve``
    ends that epoch as on a crash."""

    KIND: ClassVar[str] = "unhealthy report"

    epoch: int
    client: str


def report_unhealthy(run: RunDir, address: ServerAddress, client: str) -> None:
    """Tell ``address``'s server (through the shared run directory) that Triton called its
    model's stub not healthy while answering ``client``."""
    report = UnhealthyReport(epoch=address.epoch, client=client)
    _atomic_write(run.unhealthy(address.node), report.model_dump_json())


def read_unhealthy(run: RunDir, node: str) -> UnhealthyReport | None:
    """The last report that server ``node``'s model was called not healthy, or None."""
    return read_optional(UnhealthyReport, run.unhealthy(node))


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, text)
