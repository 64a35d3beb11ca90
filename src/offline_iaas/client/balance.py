"""Which server a client starts on: its own, or a less loaded live one (``layout.rebalance``).

Every client records the server it streams to in ``RUN/parts/<node>.claim`` (``RunDir.claim``)
whenever that changes. A server's load is the number of clients whose claim names it and whose
part is not complete yet. A client that has not streamed yet (no checkpoint) starts on the live
server with the smallest load, its own on a tie; so when one server's clients are done early,
the clients that start late (``MAXJOBS``, a slow queue) go to it rather than queue behind the
others. Without a shared filesystem the claims are not shared and every client starts on its
own server.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import ClassVar

from offline_iaas.completeness import Hashes, part_problem
from offline_iaas.records import Record, read_optional, write
from offline_iaas.rendezvous.addresses import published_servers
from offline_iaas.rundir import RunDir

logger = logging.getLogger(__name__)


class Claim(Record):
    """``RUN/parts/<client>.claim``: the server a client streams to now."""

    KIND: ClassVar[str] = "client's claim"

    server: str


def claim(run: RunDir, node: str, server: str) -> None:
    """Record that client ``node`` streams to ``server`` now."""
    path = run.claim(node)
    path.parent.mkdir(parents=True, exist_ok=True)
    write(Claim(server=server), path)


def server_loads(run: RunDir, hashes: Hashes) -> dict[str, int]:
    """Clients streaming to each server now (claimed, part not complete:
    ``completeness.part_problem``)."""
    loads: dict[str, int] = {}
    for path in sorted(run.parts.glob("*.claim")):
        record = read_optional(Claim, path)
        if record is None or part_problem(run, path.stem, hashes) is None:
            continue
        loads[record.server] = loads.get(record.server, 0) + 1
    return loads


def start_server(run: RunDir, node: str, own: str, is_live: Callable[[str], bool],
                 hashes: Hashes) -> str:
    """The server client ``node`` starts on: the least loaded live one, ``own`` on a tie (and
    when none is live: ``connect`` then waits for it, and fails over as usual)."""
    loads = server_loads(run, hashes)
    own_load = loads.get(own, 0)
    others = sorted((loads.get(s, 0), s) for s in published_servers(run) if s != own)
    for load, server in others:
        if load >= own_load:
            break
        if is_live(server):
            logger.info(f"{node}: starting on {server} ({load} client(s) streaming) instead "
                        f"of {own} ({own_load})")
            return server
    return own
