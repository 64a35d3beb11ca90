"""A command whose stdout's reader has gone (``offline-iaas inspect F | head -1``) ends quietly:
exit 0 and nothing on stderr, as ``head``'s other writers do, not "error: Broken pipe" (6).

Only stdout's own EPIPE: a ``BrokenPipeError`` of a socket (a Triton server gone) is still an
error. Stdout is the pipe whose reader is gone when polling it reports ``POLLERR``.
"""

from __future__ import annotations

import os
import select
import sys


def reader_gone(err: BaseException) -> bool:
    """Whether ``err`` is the EPIPE of writing to a stdout whose reader has closed it."""
    if not isinstance(err, BrokenPipeError):
        return False
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)  # POLLERR: no reader left
        return any(event & select.POLLERR for _, event in poller.poll(0))
    except (AttributeError, ValueError, OSError):  # no file descriptor (a test's capture)
        return False


def leave_quietly() -> int:
    """Point stdout at ``/dev/null`` (Python's exit flushes what is left there), and 0."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return 0
