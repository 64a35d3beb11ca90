"""Watching the python-backend stubs of a serving tritonserver (the processes that run the
python models), so that a stub that dies mid-stream stops the server node like a crash.

Triton 2.51 (the nvidia-pytriton wheel's) does not notice a stub that dies while it serves:
it keeps reporting the server and the model ready, answers every request to that model with
``Stub process '<instance>' is not healthy.`` (on a gRPC stream, a response without outputs),
never starts the stub again, and leaves it a zombie it does not reap
(``tests/test_server_crashes.py``). Readiness polling sees nothing, so ``serve`` notes the
stubs once the models are ready and looks at them each time it looks at tritonserver: a stub
that is a zombie, or gone, is a dead model. A zombie's ``/proc/<pid>/stat`` still holds how
it ended (``exit_code``, field 52, as ``waitpid`` gives it).
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

from offline_iaas.lifetime import is_running, stat_fields
from offline_iaas.serve.crashes import SERVE_PREFIX, append_serve_line, signal_name

logger = logging.getLogger(__name__)

STUB_NAME = "triton_python_backend_stub"
_PROC = Path("/proc")


@dataclass(frozen=True)
class Stub:
    """One python-backend stub process of a tritonserver."""

    pid: int
    start_ticks: int
    """When it started (``/proc/<pid>/stat`` field 22): tells a reused PID apart."""
    instance: str
    """The model instance it runs (``offline-iaas_0_0``), as its command line names it."""
    leaves_with_server: bool = False
    """Its model has ``server_watch.py`` beside ``model.py`` (an export by this version, seen
    from here: not inside a container), so it ends itself once tritonserver has exited."""


@dataclass(frozen=True)
class StubDeath:
    """A stub found dead while its tritonserver serves."""

    stub: Stub
    status: int | None
    """Its wait status (``os.WIFSIGNALED`` ...), None when it was reaped already."""

    def words(self) -> str:
        """``signal SIGSEGV``, ``exit code 1``, or ``an unknown status`` (reaped)."""
        if self.status is None:
            return "an unknown status"
        if os.WIFSIGNALED(self.status):
            return f"signal {signal_name(os.WTERMSIG(self.status))}"
        return f"exit code {os.WEXITSTATUS(self.status)}"

    def log_line(self, when: str) -> str:
        """``serve``'s line in tritonserver's log (``serve/crashes.py`` reads it back)."""
        return (f"{SERVE_PREFIX}python-backend stub {self.stub.instance} (pid {self.stub.pid}) "
                f"died by {self.words()} {when}")


def _descendants(root_pid: int) -> list[int]:
    """Every process below ``root_pid`` (one scan of ``/proc``)."""
    parents: dict[int, list[int]] = {}
    for entry in _PROC.iterdir():
        if entry.name.isdigit() and (fields := stat_fields(int(entry.name))) is not None:
            parents.setdefault(int(fields[1]), []).append(int(entry.name))
    found, todo = [], [root_pid]
    while todo:
        children = parents.get(todo.pop(), [])
        found += children
        todo += children
    return found


def find_stubs(root_pid: int) -> list[Stub]:
    """The live python-backend stubs below process ``root_pid`` (tritonserver, or the
    container runtime that started it, when the container shares this PID namespace)."""
    stubs = []
    for pid in _descendants(root_pid):
        fields = stat_fields(pid)
        try:
            argv = (_PROC / str(pid) / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if fields is None or fields[0] == "Z" or Path(argv[0].decode(errors="replace")).name \
                != STUB_NAME:
            continue
        instance = argv[8].decode(errors="replace") if len(argv) > 8 else f"pid {pid}"
        model = Path(argv[1].decode(errors="replace")) if len(argv) > 1 else None
        watched = model is not None and model.with_name("server_watch.py").is_file()
        stubs.append(Stub(pid, int(fields[19]), instance, watched))
    return stubs


def dead_stub(stubs: list[Stub]) -> StubDeath | None:
    """The first of ``stubs`` that is a zombie or gone (its PID reused counts as gone)."""
    for stub in stubs:
        fields = stat_fields(stub.pid)
        if fields is None or int(fields[19]) != stub.start_ticks:
            return StubDeath(stub, None)
        if fields[0] in ("Z", "X"):
            status = int(fields[49]) if len(fields) > 49 else None
            return StubDeath(stub, status)
    return None


def wait_stubs_gone(stubs: list[Stub], seconds: float) -> bool:
    """Wait up to ``seconds`` until none of ``stubs`` that end themselves when tritonserver
    exits (``leaves_with_server``) runs (a zombie counts as gone); whether they all went."""
    deadline = time.monotonic() + seconds
    watched = [stub for stub in stubs if stub.leaves_with_server]
    while any(is_running(stub.pid, stub.start_ticks) for stub in watched):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def note_stub_death(death: StubDeath, log: Path, node: str) -> str:
    """Append ``serve``'s line for ``death`` to tritonserver's ``log`` (after whatever the
    stub printed there), warn, and return the line's words without the prefix."""
    words = append_serve_line(log, death.log_line("while serving"))
    logger.warning(f"{node}: {words}; tritonserver does not notice, stopping it (see {log})")
    return words
