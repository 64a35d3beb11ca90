"""Log lines: the stdlib ``logging`` module, one logger per module, configured by the CLI.

Every module logs through ``logging.getLogger(__name__)``: ``info`` for what a user follows
(a node started, a part written), ``warning`` for what they should act on, ``debug`` for what
``--verbose`` adds. Messages carry their own prefix (``client0: ...``, ``merge: ...``), so the
format is the bare message: a batch job's output file reads the same as the terminal.

The CLI calls :func:`configure` once; a progress display (``terminal.LiveDisplay``) takes the
package's lines over while it is shown with :func:`shown_by`, so they print above its bar.
Used as a library, nothing is configured and Python's defaults apply (warnings on stderr).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TextIO

PACKAGE = "offline_iaas"
QUIET, NORMAL, VERBOSE = -1, 0, 1
_LEVELS = {QUIET: logging.WARNING, NORMAL: logging.INFO, VERBOSE: logging.DEBUG}


class LineHandler(logging.Handler):
    """Writes each record's message as one line through ``write`` (flushed by the writer).

    A closed pipe (``OSError``) is ignored: losing a log line must not stop a command from
    stopping the processes it started.
    """

    def __init__(self, write: Callable[[str], None]) -> None:
        super().__init__()
        self.write = write
        self.setFormatter(logging.Formatter("%(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.write(self.format(record))
        except OSError:
            pass


def stream_writer(stream: TextIO | None = None) -> Callable[[str], None]:
    """A ``write`` for :class:`LineHandler`: one flushed line on ``stream`` (by default the
    ``sys.stdout`` of the moment, so a test's captured output is honoured)."""

    def write(line: str) -> None:
        print(line, file=stream if stream is not None else sys.stdout, flush=True)

    return write


def configure(verbosity: int = NORMAL, stream: TextIO | None = None) -> None:
    """Send the package's lines at ``verbosity``'s level to ``stream`` (stdout by default)."""
    logger = logging.getLogger(PACKAGE)
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
    logger.addHandler(LineHandler(stream_writer(stream)))
    logger.setLevel(_LEVELS[verbosity])


@contextmanager
def shown_by(write: Callable[[str], None]) -> Iterator[None]:
    """While inside, the package's lines go to ``write`` instead of its usual handlers."""
    logger = logging.getLogger(PACKAGE)
    saved = list(logger.handlers)
    for handler in saved:
        logger.removeHandler(handler)
    handler = LineHandler(write)
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        for handler in saved:
            logger.addHandler(handler)
