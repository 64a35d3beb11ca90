"""The processes of ``run-local``: a node's run record (``NodeRun``), process groups (every
node runs in its own group, so that stopping it stops its whole tree), the SIGTERM/SIGHUP/SIGINT
handlers (held while a child is being started), the run directory's lock and its place (a run
directory moved away while run-local runs is noticed, never recreated)."""

from __future__ import annotations

import fcntl
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
from offline_iaas.lifetime import stat_fields, terminate
from offline_iaas.local_state import Attempt, NodeRecord
from offline_iaas.rundir import MERGE_NODE, RunDir, is_shard_node
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
        fields = stat_fields(int(entry.name))
        if fields is not None and len(fields) > 2 and fields[0] != "Z" and int(fields[2]) == pgid:
            members.append(int(entry.name))
    return members


def signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def terminate_group(pgid: int) -> None:
    """SIGTERM to a process group, then SIGCONT (``lifetime.terminate``)."""
    terminate(lambda signum: signal_group(pgid, signum))


def describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"


class Signals:
    """SIGTERM/SIGHUP/SIGINT handlers that raise, except while a process is being started.

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
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            if sig == signal.SIGHUP and signal.getsignal(sig) == signal.SIG_IGN:
                continue  # under nohup: a closed terminal does not stop the run
            self._previous[sig] = signal.signal(sig, self._handle)

    def restore(self) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, signal.SIG_DFL if previous is None else previous)
        self._previous.clear()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if signum == signal.SIGINT:
            exc: BaseException = KeyboardInterrupt()
        else:  # SIGHUP: its terminal closed; stop as on SIGTERM
            name = signal.Signals(signum).name
            exc = RunError(f"run-local stopped by {name}; every node it started was stopped")
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


@contextmanager
def locked(run: RunDir) -> Iterator[None]:
    """Hold the run directory's lock, so that two executors never run the same nodes."""
    with open(run.lock, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RunError(f"another run-local is already running on {run.path}") from None
        yield


class RunPlace:
    """Where a run directory is: the device and inode its path named when run-local started.

    A directory moved (``mv``) or removed while run-local runs is noticed by ``here`` before
    anything is written, so that nothing recreates it at its old path.
    """

    def __init__(self, run: RunDir) -> None:
        self.path = run.path
        self.identity = self._identity()

    def _identity(self) -> tuple[int, int] | None:
        try:
            found = os.stat(self.path)
        except OSError:
            return None
        return found.st_dev, found.st_ino

    def here(self) -> bool:
        """Whether the path still names the run directory run-local started on."""
        return self.identity is not None and self._identity() == self.identity

    def check(self) -> None:
        """RunError, one line, if the run directory is no longer at its path."""
        if not self.here():
            raise RunError(
                f"the run directory {self.path} was moved or removed while run-local ran: its "
                "nodes were stopped and nothing was written there; run run-local on it where "
                "it is now"
            )


def needs_servers(jobs: list[NodeRun]) -> bool:
    """Whether a job still to run uses the servers: a merge (``merge``, ``shard<n>``) and the
    FINAL node do not."""
    return any(
        r.status == "pending" and r.node.kind == "JOB"
        and r.node.name != MERGE_NODE and not is_shard_node(r.node.name)
        for r in jobs
    )


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
    history: list[Attempt] = field(default_factory=list)
    """Finished attempts."""

    def close_attempt(self, status: str, exit_code: int | None = None) -> None:
        """Record the attempt under way as finished with ``status``."""
        if self.started is None or any(h.attempt == self.attempts for h in self.history):
            return
        self.history.append(Attempt(
            attempt=self.attempts, started=self.started, ended=self.ended or now(),
            exit_code=self.exit_code if exit_code is None else exit_code, status=status))

    def record(self, ticks: dict[int, int | None]) -> NodeRecord:
        """The node in ``local-state.json``; ``ticks``: each started PID's start time
        (``lifetime.start_ticks``), so that ``status`` can tell the process still runs."""
        pid = self.proc.pid if self.proc is not None else None
        return NodeRecord(
            kind=self.node.kind, status=self.status, attempts=self.attempts,
            retries=self.node.retries, pid=pid,
            pid_start=ticks.get(pid) if pid is not None else None, exit_code=self.exit_code,
            started=self.started, ended=self.ended, history=tuple(self.history))

    @property
    def is_service(self) -> bool:
        return self.node.kind == "SERVICE"
