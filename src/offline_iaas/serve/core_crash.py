"""Crashes of tritonserver inside Triton's own code, where no code of this project runs: in its
core library (``core_crashes``), or an abort on an uncaught exception while it loads the models
(``startup_aborts``).

The project's Python (the fused model) runs in the python-backend stubs, processes apart from
tritonserver; tritonserver runs only Triton's core (``libtritonserver``), its python backend
(``libtriton_python.so``) and its gRPC and HTTP frontends. A tritonserver that dies by a signal
with Triton's backtrace running through the core library, and not through the python backend,
died of a fault in Triton. One was seen in CI (``tests/test_load.py``, 32 clients on one
2-core machine, embedded tritonserver 2.51): SIGSEGV in the direct sequence batcher's thread,
adding the control inputs to a queued request whose input map was no longer valid
(``DirectSequenceBatch::BatcherThread`` → ``SequenceBatch::SetControlTensors`` →
``InferenceRequest::AddOverrideInput``; the wheel's library keeps its symbols, so the frames
were read from its disassembly), with no client told anything and no stub dead first.

``serve`` and run-local treat it as any crash: the node is restarted, the clients resume from
their checkpoints and the run ends equal to its reference. This module tells such crashes
apart from a log, so that the test suite's watch on crashes can name the cause instead of
failing the test it happened under (``tests/helpers.py``).
"""

from __future__ import annotations

from offline_iaas.serve.crashes import (
    FatalLine,
    backtrace_frames,
    fatal_lines,
    first_crash,
    served_epochs_fatal_lines,
)
from offline_iaas.serve.stalled_stub import PYTHON_BACKEND_LIBRARY

CORE_LIBRARY = "libtritonserver"
"""How Triton's core library is named in a backtrace frame: ``libtritonserver.so`` in Triton's
containers, ``libtritonserver-<hash>.so`` in the ``nvidia-pytriton`` wheel."""


def _in_core(lines: list[str], fatal: FatalLine) -> bool:
    """``fatal`` is tritonserver's own ``Signal (N) received.``, and the backtrace after it runs
    through the core library and not through the python backend."""
    if fatal.process != "tritonserver" or not fatal.text.startswith("Signal "):
        return False
    frames = backtrace_frames(lines, fatal)
    return any(CORE_LIBRARY in frame for frame in frames) and \
        not any(PYTHON_BACKEND_LIBRARY in frame for frame in frames)


def core_crashes(log_text: str) -> dict[int, int]:
    """The fatal lines of a whole tritonserver log (``log_text``) that follow from tritonserver
    crashing in Triton's core: line number → the server epoch it is in (the how-manieth start
    of tritonserver in the log, from 1).

    In a server epoch whose first crash (its first fatal line and any other that begins before
    its trace does) is tritonserver's alone, traced through the core library and not through
    the python backend, that line and every fatal line after it in the epoch (``serve``'s
    line for the same death) count. An epoch whose first crash is a stub's, one traced
    through the python backend, or one before the server served (epoch 0) counts none."""
    lines = log_text.splitlines()
    counted: dict[int, int] = {}
    for epoch, (_, fatals) in served_epochs_fatal_lines(log_text).items():
        crash = first_crash(lines, fatals)
        if all(_in_core(lines, fatal) for fatal in crash):
            counted.update(dict.fromkeys((fatal.line_number for fatal in fatals), epoch))
    return counted


UNCAUGHT_EXCEPTION = "terminate called after throwing an instance of "
"""What the C++ runtime writes as it aborts a process on an exception nothing caught."""


def startup_aborts(log_text: str) -> dict[int, int]:
    """``serve``'s lines of a whole tritonserver log (``log_text``) that tritonserver died by
    SIGABRT before it was ready, right after the C++ runtime said it was ending on an uncaught
    exception: Triton's own abort while it loads the models (its process runs Triton's code
    alone; a model's ``initialize`` runs in a stub). Seen once in CI (``test_load[32]``, 32
    clients and three test workers on 2 cores): ``boost::interprocess::lock_exception`` from
    the python backend as two instances started. Line number → a key of its own per abort,
    ``-line_number`` (each ended one start of the node's server, before any epoch)."""
    lines = log_text.splitlines()
    return {fatal.line_number: -fatal.line_number for fatal in fatal_lines(log_text)
            if fatal.process == "tritonserver" and fatal.signal == "SIGABRT"
            and fatal.text.endswith("before it was ready")
            and any(line.startswith(UNCAUGHT_EXCEPTION)
                    for line in lines[max(0, fatal.line_number - 4):fatal.line_number - 1])}
