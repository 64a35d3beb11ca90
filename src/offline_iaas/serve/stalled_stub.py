"""Crashes that Triton's python backend brings about itself when a stub stalls.

Triton 2.51's python backend waits for a stub's answer to ``execute`` in windows of one second:
at the start of each it clears the stub's health flag, which a thread of the stub sets again
every 0.3 s. A stub that gives no beat through a whole window (the stub or the whole node
stalled for about a second: an overloaded or paused machine, a stopped process) is declared
"not healthy" although it is alive and still executing. The backend then answers the pending
requests with ``Stub process '<instance>' is not healthy.`` and lets their shared memory go,
while the stub, once it runs again, finishes the execute and frees the same requests; the
stub's late answer is also taken as the answer to the next requests. The shared-memory pool
and the message queue between the two processes are corrupted from then on: the stub dies by
SIGSEGV in the backend's C++ (freeing a request: ``priv_deallocate`` under ``~InferRequest``,
with no Python frame in its crashing thread), and tritonserver often dies too (SIGSEGV in
``libtriton_python.so``, SIGABRT on a C++ exception, or SIGBUS on a page of the shared memory,
which Triton does not trace: a CI run; or SIGSEGV with no trace at all, after which the
stub aborted on the shared memory's lock: another). Seen here under heavy load and
reproduced by stopping a stub for 3 s mid-stream (``tests/test_server_crashes.py``).

The stub does not always die (a CI run's stub lived on, and its server with it). So a client
told "not healthy" reports it in the run directory (``rendezvous/addresses.py``:
``servers/<node>.unhealthy``, naming the epoch) and waits for a fresh server epoch instead of
trusting that one again (``client/node.py``); ``serve`` ends the epoch it names as on a crash
(``serve/node.py``), unless the crash came first. Either way the node is restarted and the
clients resume from their checkpoints. Without a shared filesystem (job-ad rendezvous) the
report cannot reach the server: a client then waits ``client.server_wait_seconds`` and fails,
and the DAG retries it. This module recognises Triton's answer, writes ``serve``'s line for an
epoch so ended, and tells such crashes apart from the others, from the server's log and the
clients' logs, so that the test suite's watch on crashes can name the cause.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

from offline_iaas.serve.crashes import (
    SERVE_PREFIX,
    FatalLine,
    append_serve_line,
    backtrace_frames,
    first_crash,
    served_epochs_fatal_lines,
    server_epochs,
)

logger = logging.getLogger(__name__)

_NOT_HEALTHY = r"Stub process '[^']*' is not healthy\."
_TOLD_NOT_HEALTHY = re.compile(
    r"(?P<server>\S+) at (?P<address>\S+) answered with an error: " + _NOT_HEALTHY)
PYTHON_BACKEND_LIBRARY = "libtriton_python.so"
_LOCK_BROKEN = ("terminate called after throwing an instance of "
                "'boost::interprocess::lock_exception'")
_ENDED_EPOCH_LINE = (SERVE_PREFIX + "ending epoch {epoch}: {client} was answered that the "
                     "model's stub is not healthy")
_ENDED_EPOCH = re.compile("^" + re.escape(_ENDED_EPOCH_LINE).replace(r"\{epoch\}", r"\d+")
                          .replace(r"\{client\}", r"\S+") + "$")


def says_not_healthy(message: str) -> bool:
    """``message`` is Triton's answer that the model's stub is not healthy (dead, or only
    stalled): from then on that server may hand a request the answer to an earlier one."""
    return re.search(_NOT_HEALTHY, message) is not None


def ended_epoch_line(client: str, epoch: int) -> str:
    """``serve``'s line in tritonserver's log when it ends server epoch ``epoch`` because
    ``client`` reported Triton's answer (``serve/node.py``)."""
    return _ENDED_EPOCH_LINE.format(epoch=epoch, client=client)


def note_ended_epoch(client: str, epoch: int, log: Path, node: str) -> str:
    """Append :func:`ended_epoch_line` to tritonserver's ``log``, warn, and return the line's
    words without the prefix."""
    words = append_serve_line(log, ended_epoch_line(client, epoch))
    logger.warning(f"{node}: {words}; stopping tritonserver (see {log})")
    return words


def told_not_healthy(client_output: str, server: str) -> set[str]:
    """The gRPC addresses of ``server`` at which Triton answered a client that its stub was
    not healthy (``client_output``: the clients' ``logs/client*.out``)."""
    return {match["address"] for match in _TOLD_NOT_HEALTHY.finditer(client_output)
            if match["server"] == server}


def _stub_crashed_in_native_code(lines: list[str], fatal: FatalLine) -> bool | None:
    """Whether the stub's ``faulthandler`` dump after ``fatal`` shows no Python frame in its
    crashing thread (the crash is in the backend's C++, not in the model's Python); None
    where the dump names no crashing thread."""
    for index in range(fatal.line_number, min(len(lines), fatal.line_number + 60)):
        if lines[index].startswith("Current thread "):
            return index + 1 < len(lines) and lines[index + 1].strip() == "<no Python frame>"
    return None


def _aborted_on_the_shared_lock(lines: list[str], fatal: FatalLine) -> bool:
    """``fatal`` (a stub's ``Fatal Python error: Aborted`` or Triton's ``Signal (6)``) is the
    abort on an uncaught ``boost::interprocess::lock_exception``: the lock of the shared memory
    between tritonserver and the stub, left broken by the other process (dead holding it, or
    its memory corrupted). Only the backend's C++ takes that lock, whatever Python frame
    called into it (the model's metric ``set`` sends a message through it)."""
    before = lines[max(0, fatal.line_number - 4):fatal.line_number - 1]
    return fatal.signal == "SIGABRT" and any(_LOCK_BROKEN in line for line in before)


def _backend_brought_it_about(lines: list[str], crash: list[FatalLine],
                              later: list[FatalLine]) -> bool:
    """The processes of ``crash`` (one, or tritonserver and the stub dying at the same
    moment) died as the backend's corrupted state makes them die: the stub in native code or
    on the shared memory's broken lock, or tritonserver in the python backend's library, or
    untraced with the epoch's next death (``later``: the fatal lines after ``crash``) an
    abort on that lock; and no stub died in its Python code otherwise."""
    backend = False
    for fatal in crash:
        if fatal.process == "python-backend stub" and fatal.text.startswith("Fatal "):
            in_backend = _aborted_on_the_shared_lock(lines, fatal) or \
                _stub_crashed_in_native_code(lines, fatal)
            if in_backend is False:
                return False
            backend = backend or bool(in_backend)
        elif fatal.process == "tritonserver" and fatal.text.startswith("Signal "):
            # Triton's signal line with no frame after it: its trace failed (a CI run's
            # stalled-stub test: SIGSEGV untraced, then the stub aborted on the lock)
            frames = backtrace_frames(lines, fatal)
            untraced_then_lock = not frames and bool(later) and \
                _aborted_on_the_shared_lock(lines, later[0])
            backend = backend or untraced_then_lock or \
                any(PYTHON_BACKEND_LIBRARY in frame for frame in frames)
        elif fatal.process == "tritonserver" and fatal.signal == "SIGBUS":
            # a fault on a page of the shared memory (Triton traces SIGSEGV and SIGABRT
            # only, so serve's line is the sole witness); the model's Python runs in the
            # stub and cannot bring it about in tritonserver
            backend = True
    return backend


def ended_epoch_lines(text: str, first_line: int = 1) -> list[int]:
    """The numbers of ``serve``'s :func:`ended_epoch_line` lines in a tritonserver log
    (``text``, whose first line is number ``first_line``)."""
    return [number for number, line in enumerate(text.splitlines(), start=first_line)
            if _ENDED_EPOCH.match(line.strip())]


def stalled_stub_crashes(log_text: str, unhealthy_addresses: set[str]) -> dict[int, int]:
    """The fatal lines of a whole tritonserver log (``log_text``) that follow from the
    backend declaring a live stub not healthy, and ``serve``'s lines ending an epoch for it:
    line number → the server epoch it is in (the how-manieth start of tritonserver in the
    log, from 1).

    In a server epoch (from ``Started GRPCInferenceService at <address>``) whose address is
    in ``unhealthy_addresses`` (:func:`told_not_healthy`), the first crash must be the stub's
    with no Python frame in its crashing thread or its abort on the shared memory's broken
    lock, or tritonserver's own with the python backend's library in its backtrace, by
    SIGBUS, or untraced and followed by an abort on that lock, or come after ``serve`` ended
    the epoch on a client's report; it and every fatal line after it in that epoch (tritonserver's
    crash on the corrupted state, ``serve``'s own lines) count. The first crash is the
    epoch's first fatal line and any other that begins before its trace does (tritonserver
    and the stub dying at once write their traces into each other). Any other first crash
    (one in the model's Python code, or in an epoch where no client was told so) makes none
    of that epoch's lines count."""
    lines = log_text.splitlines()
    epoch_of_line = server_epochs(lines)

    def told(line_number: int) -> int | None:
        epoch, address = epoch_of_line[line_number - 1]
        return epoch if address is not None and address in unhealthy_addresses else None

    in_epoch = {epoch: fatals for epoch, (address, fatals)
                in served_epochs_fatal_lines(log_text).items() if address in unhealthy_addresses}
    ended: dict[int, int] = {}  # epoch → serve's line ending it
    for number in ended_epoch_lines(log_text):
        if (epoch := told(number)) is not None:
            ended.setdefault(epoch, number)
    counted = {number: epoch for epoch, number in ended.items()}
    for epoch, fatals in in_epoch.items():
        crash = first_crash(lines, fatals)
        if ended.get(epoch, len(lines) + 1) < fatals[0].line_number or \
                _backend_brought_it_about(lines, crash, fatals[len(crash):]):
            counted.update(dict.fromkeys((fatal.line_number for fatal in fatals), epoch))
    return counted
