"""Crashes of tritonserver inside Triton's own core library, where no code of this project runs.

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
