"""What a measurement costs: CPU seconds of processes, TCP bytes of clients' connections.

CPU time is read from ``/proc/<pid>/stat`` (``utime + stime``), so it covers processes the
bench did not start itself (tritonserver's python-backend stubs). Bytes are the TCP payload
the kernel counted on the clients' established connections to the server (``ss -tip``:
``bytes_acked`` is what a client sent, ``bytes_received`` what it received), i.e. the real
wire traffic with gRPC/HTTP2 framing, without TCP/IP headers.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from offline_iaas.lifetime import stat_fields

CLOCK_TICKS_PER_SECOND = os.sysconf("SC_CLK_TCK")


def children_of(pid: int) -> list[int]:
    """PIDs of the live direct children of ``pid``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = stat_fields(int(entry.name))
            if fields is not None and int(fields[1]) == pid:
                found.append(int(entry.name))
    return found


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (0 when it is gone)."""
    fields = stat_fields(pid)
    if fields is None:
        return 0.0
    # After the command: state(0) ppid(1) ... utime(11) stime(12), in clock ticks.
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS_PER_SECOND


def tree_cpu_seconds(pids: list[int]) -> float:
    """Sum of ``cpu_seconds`` over ``pids``."""
    return sum(cpu_seconds(pid) for pid in pids)


@dataclass(frozen=True)
class TcpBytes:
    """Payload bytes of some clients' connections, from the clients' side."""

    sent: int
    """Sent by the clients (and acknowledged by the server)."""
    received: int
    """Received by the clients."""


_PID = re.compile(r"\bpid=(\d+)")
_SENT = re.compile(r"\bbytes_acked:(\d+)")
_RECEIVED = re.compile(r"\bbytes_received:(\d+)")


def client_tcp_bytes(port: int, pids: list[int]) -> TcpBytes:
    """Bytes on the established TCP connections of processes ``pids`` to local port ``port``.

    Counters of connections that closed are gone: read while the clients are connected.
    Other processes' connections to the same port (a monitor, another client) are left out.
    """
    out = subprocess.run(
        ["ss", "-tinpH", "state", "established", f"( dport = :{port} )"],
        capture_output=True, text=True, check=True,
    ).stdout
    wanted = set(pids)
    sent = received = 0
    owned = False
    for line in out.splitlines():
        if line and not line[0].isspace():  # a socket's first line: addresses and owners
            owned = bool(wanted & {int(p) for p in _PID.findall(line)})
            continue
        if owned:
            sent += sum(int(v) for v in _SENT.findall(line))
            received += sum(int(v) for v in _RECEIVED.findall(line))
    return TcpBytes(sent=sent, received=received)


def machine_busy_seconds() -> float:
    """CPU seconds every core of the machine has spent busy since boot (``/proc/stat``).

    Busy is everything but ``idle`` and ``iowait``; the difference over a measurement minus
    the measured processes' own CPU time is what other processes took meanwhile.
    """
    fields = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    # guest time is already counted in user and nice
    total = sum(fields[:8])
    return (total - idle) / CLOCK_TICKS_PER_SECOND
