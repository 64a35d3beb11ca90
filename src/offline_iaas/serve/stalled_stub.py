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
``libtriton_python.so``, or SIGABRT on a C++ exception). Seen here under heavy load and
reproduced by stopping a stub for 3 s mid-stream (``tests/test_server_crashes.py``).

``serve`` restarts such a server like any other crash and the clients resume from their
checkpoints; a client told "not healthy" waits for that restart instead of trusting the same
server epoch again (``client/node.py``). This module recognises Triton's answer and tells
such crashes apart from the others, from the server's log and the clients' logs, so that the
test suite's watch on crashes can name the cause.
"""

from __future__ import annotations

import re

from offline_iaas.serve.crashes import FatalLine, fatal_lines

_NOT_HEALTHY = r"Stub process '[^']*' is not healthy\."
_TOLD_NOT_HEALTHY = re.compile(
    r"(?P<server>\S+) at (?P<address>\S+) answered with an error: " + _NOT_HEALTHY)
_GRPC_STARTED = re.compile(r'Started GRPCInferenceService at ([^"\s]+)')
_PYTHON_BACKEND_LIBRARY = "libtriton_python.so"


def says_not_healthy(message: str) -> bool:
    """``message`` is Triton's answer that the model's stub is not healthy (dead, or only
    stalled): from then on that server may hand a request the answer to an earlier one."""
    return re.search(_NOT_HEALTHY, message) is not None


def told_not_healthy(client_output: str, server: str) -> set[str]:
    """The gRPC addresses of ``server`` at which Triton answered a client that its stub was
    not healthy (``client_output``: the clients' ``logs/client*.out``)."""
    return {match["address"] for match in _TOLD_NOT_HEALTHY.finditer(client_output)
            if match["server"] == server}


def _stub_crashed_in_native_code(lines: list[str], fatal: FatalLine) -> bool:
    """The stub's ``faulthandler`` dump after ``fatal`` shows no Python frame in its crashing
    thread (the crash is in the backend's C++, not in the model's Python)."""
    for index in range(fatal.line_number, min(len(lines), fatal.line_number + 60)):
        if lines[index].startswith("Current thread "):
            return index + 1 < len(lines) and lines[index + 1].strip() == "<no Python frame>"
    return False


def _backtrace_in_python_backend(lines: list[str], fatal: FatalLine) -> bool:
    """Triton's backtrace after its ``Signal (N) received.`` runs through the python
    backend's library."""
    trace = lines[fatal.line_number:fatal.line_number + 25]
    return any(_PYTHON_BACKEND_LIBRARY in line for line in trace)


def stalled_stub_crashes(log_text: str, unhealthy_addresses: set[str]) -> dict[int, int]:
    """The fatal lines of a whole tritonserver log (``log_text``) that follow from the
    backend declaring a live stub not healthy: line number → the server epoch it is in (the
    how-manieth start of tritonserver in the log, from 1).

    In a server epoch (from ``Started GRPCInferenceService at <address>``) whose address is
    in ``unhealthy_addresses`` (:func:`told_not_healthy`), the first fatal line must be the
    stub's crash with no Python frame in its crashing thread, or tritonserver's own crash
    with the python backend's library in its backtrace; it and every fatal line after it in
    that epoch (tritonserver's crash on the corrupted state, ``serve``'s own lines) count.
    Any other first crash (one in the model's Python code, or in an epoch where no client was
    told so) makes none of that epoch's lines count."""
    lines = log_text.splitlines()
    epoch_of_line: list[tuple[int, str | None]] = []  # (epoch, its address) per line
    epoch, address = 0, None
    for line in lines:
        if match := _GRPC_STARTED.search(line):
            epoch, address = epoch + 1, match.group(1)
        epoch_of_line.append((epoch, address))
    counted: dict[int, int] = {}
    settled: dict[int, bool] = {}  # per epoch: whether its first fatal line qualified
    for fatal in fatal_lines(log_text):
        epoch, address = epoch_of_line[fatal.line_number - 1]
        if address is None or address not in unhealthy_addresses:
            continue
        if epoch not in settled:
            settled[epoch] = (
                _stub_crashed_in_native_code(lines, fatal)
                if fatal.process == "python-backend stub" and fatal.text.startswith("Fatal ")
                else fatal.process == "tritonserver" and fatal.text.startswith("Signal ")
                and _backtrace_in_python_backend(lines, fatal))
        if settled[epoch]:
            counted[fatal.line_number] = epoch
    return counted
