"""How a command's process ends after a full disk, so that it exits with its code and one line
rather than by a signal.

When a disk fills while h5py writes (a part, a shard merge, the index), HDF5 fails to flush as
the file closes (``errno = 28``), and the close is left half done: h5py, releasing the file's
objects, prints "Exception ignored in ... ObjectID.__dealloc__ ... Can't decrement id ref count"
tracebacks, and HDF5's own exit handler (``H5_term_library``, a C ``atexit`` handler) then
closes those objects again, and dies by SIGSEGV in ``H5D_close`` (seen under gdb). So a process
that met a full disk leaves by ``os._exit`` once its line is out and its streams flushed
(``leave``), with no exit handler run, and h5py's dealloc tracebacks of a full disk are not
printed (``quiet_dealloc_errors``).
"""

from __future__ import annotations

import logging
import os
import sys
import traceback
from types import TracebackType
from typing import Any, NoReturn

from offline_iaas.errors import no_space


def quiet_dealloc_errors() -> None:
    """Keep h5py's dealloc errors of a full disk off stderr (the command's own line says it):
    Cython prints them through ``sys.excepthook`` and then ``sys.unraisablehook``. Any other
    error goes to the hooks as before. Installed once per process."""
    global _installed
    if _installed:
        return
    _installed = True
    unraisable_hook, except_hook = sys.unraisablehook, sys.excepthook

    def unraisable(found: Any) -> None:
        where = f"{found.object} {found.err_msg or ''}"
        if not ("h5py" in where and _full_disk(found.exc_value)):
            unraisable_hook(found)

    def uncaught(kind: type[BaseException], error: BaseException,
                 trace: TracebackType | None) -> None:
        in_dealloc = any("h5py" in frame.f_code.co_filename and "dealloc" in frame.f_code.co_name
                         for frame, _ in traceback.walk_tb(trace))
        if not (in_dealloc and _full_disk(error)):
            except_hook(kind, error, trace)

    sys.unraisablehook, sys.excepthook = unraisable, uncaught


_installed = False


def _full_disk(error: BaseException | None) -> bool:
    return error is not None and no_space(error) is not None


def leave(exit_code: int) -> NoReturn:
    """End the process with ``exit_code`` without running exit handlers (module docstring):
    the log and the standard streams flushed first."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(exit_code)
