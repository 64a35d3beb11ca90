"""Processes whose lives are tied together: a child that dies with the process that started it,
a process known by its PID *and* start time (a PID alone may have been reused), and the one
way a process (or a process group) is stopped: SIGTERM and SIGCONT, SIGKILL after a grace.

Linux only (``prctl(PR_SET_PDEATHSIG)``, ``/proc``); elsewhere the tie is not made and a
process is taken as alive if its PID exists.
"""

from __future__ import annotations

import ctypes
import os
import signal
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

PR_SET_PDEATHSIG = 1

T = TypeVar("T")


def die_with_parent(signum: int) -> Callable[[], None]:
    """A ``preexec_fn`` for ``subprocess.Popen``: the child gets ``signum`` when its parent
    dies, however it dies (SIGKILL, the out-of-memory killer).

    The kernel sends it when the *thread* that forked the child ends, so call ``Popen`` from a
    thread that lives as long as the child should (the main thread). A parent that died before
    the tie was made is noticed in the child, which then sends itself ``signum``.
    """
    parent = os.getpid()
    try:  # loaded here, in the parent: the child runs only the call
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # not Linux
        return lambda: None

    def tie() -> None:
        prctl(PR_SET_PDEATHSIG, signum, 0, 0, 0)
        if os.getppid() != parent:
            os.kill(os.getpid(), signum)

    return tie


def stat_fields(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name, state first (field 3 of
    proc(5) is index 0); None if the process is gone (or without ``/proc``)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rfind(")") + 2:].split()  # the command name may hold spaces and ")"


def start_ticks(pid: int) -> int | None:
    """When process ``pid`` started, in clock ticks since boot (``/proc/<pid>/stat`` field
    22); None if it does not exist or is a zombie (or without ``/proc``)."""
    fields = stat_fields(pid)
    if fields is None or len(fields) < 20 or fields[0] == "Z":
        return None
    return int(fields[19])


def is_running(pid: int, ticks: int | None = None) -> bool:
    """Whether process ``pid`` runs (not a zombie) and, given its recorded ``ticks``
    (``start_ticks``), is still the process that was recorded, not a later one with its PID."""
    if not Path("/proc").is_dir():
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    now = start_ticks(pid)
    return now is not None and (ticks is None or now == ticks)


def terminate(send: Callable[[int], None]) -> None:
    """SIGTERM, then SIGCONT, through ``send`` (one process's, or one group's): a stopped
    process (SIGSTOP, a debugger) acts on SIGTERM only once it runs again, and would otherwise
    wait for the SIGKILL."""
    send(signal.SIGTERM)
    send(signal.SIGCONT)


def stop_or_kill(targets: Sequence[T], send: Callable[[T, int], None],
                 gone: Callable[[T], bool], grace_seconds: float,
                 poll_seconds: float = 0.05) -> list[T]:
    """Stop ``targets`` (processes, process groups): ``terminate`` each, wait up to
    ``grace_seconds`` until each is ``gone`` (asked every ``poll_seconds``, and once more at
    the deadline), then SIGKILL the others; returns those, the ones that took the SIGKILL.
    ``send(target, signum)`` signals one target."""
    for target in targets:
        terminate(lambda signum, target=target: send(target, signum))
    deadline = time.monotonic() + grace_seconds
    waiting = list(targets)
    while True:
        waiting = [target for target in waiting if not gone(target)]
        if not waiting or time.monotonic() >= deadline:
            break
        time.sleep(poll_seconds)
    for target in waiting:
        send(target, signal.SIGKILL)
    return waiting
