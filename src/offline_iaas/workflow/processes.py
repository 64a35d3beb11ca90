"""The processes of ``run-local``: a node's run record (``NodeRun``), process groups (every
node runs in its own group, so that stopping it stops its whole tree) and the SIGTERM/SIGINT
handlers (held while a child is being started)."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from types import FrameType
from typing import Any

from offline_iaas.errors import RunError
from offline_iaas.workflow.dag import DagNode
from offline_iaas.workflow.emulation import NodeCommand


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes of a process group."""
    proc = Path("/proc")
    if not proc.is_dir():  # not Linux: ask the kernel whether the group exists at all
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return []
        return [pgid]
    members = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # Fields after the command name, which is in parentheses and may hold spaces.
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 2 and fields[0] != "Z" and int(fields[2]) == pgid:
            members.append(int(entry.name))
    return members


def signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def terminate_group(pgid: int) -> None:
    """SIGTERM to a process group, then SIGCONT: a stopped process (SIGSTOP, a debugger)
    acts on SIGTERM only once it runs again, and would otherwise wait for the SIGKILL."""
    signal_group(pgid, signal.SIGTERM)
    signal_group(pgid, signal.SIGCONT)


def describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"



class Signals:
    """SIGTERM/SIGINT handlers that raise, except while a process is being started.

    A signal that arrives while ``Popen`` runs would lose the new child's handle (a process
    nobody stops), so the exception is held until the child is recorded.
    """

    def __init__(self) -> None:
        self.hold = False
        self.pending: BaseException | None = None
        self._previous: dict[int, Any] = {}

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # signal handlers can only be set from the main thread
        for sig in (signal.SIGTERM, signal.SIGINT):
            self._previous[sig] = signal.signal(sig, self._handle)

    def restore(self) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, signal.SIG_DFL if previous is None else previous)
        self._previous.clear()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if signum == signal.SIGINT:
            exc: BaseException = KeyboardInterrupt()
        else:
            exc = RunError("run-local stopped by SIGTERM; every node it started was stopped")
        if self.hold:
            self.pending = self.pending or exc
            return
        raise exc

    @contextmanager
    def held(self) -> Iterator[None]:
        self.hold = True
        try:
            yield
        finally:
            self.hold = False
        if self.pending is not None:
            exc, self.pending = self.pending, None
            raise exc


def now() -> str:
    """The local time, as run-local records it."""
    return datetime.now().astimezone().isoformat(timespec="milliseconds")


@dataclass
class NodeRun:
    """One node of run-local: its command, state, processes and attempts."""

    node: DagNode
    command: NodeCommand
    ordinal: int = 0
    status: str = "pending"
    attempts: int = 0
    proc: subprocess.Popen[bytes] | None = None
    pre_proc: subprocess.Popen[bytes] | None = None
    exit_code: int | None = None
    started: str | None = None
    ended: str | None = None
    clock: float = 0.0
    defer_until: float = 0.0
    deferrals: int = 0
    sandbox: Path | None = None
    sandbox_before: set[str] = field(default_factory=set)
    history: list[dict[str, Any]] = field(default_factory=list)
    """Finished attempts: ``{attempt, started, ended, exit_code, status}`` each."""

    def close_attempt(self, status: str, exit_code: int | None = None) -> None:
        """Record the attempt under way as finished with ``status``."""
        if self.started is None or any(h["attempt"] == self.attempts for h in self.history):
            return
        self.history.append({
            "attempt": self.attempts,
            "started": self.started,
            "ended": self.ended or now(),
            "exit_code": self.exit_code if exit_code is None else exit_code,
            "status": status,
        })

    @property
    def is_service(self) -> bool:
        return self.node.kind == "SERVICE"
