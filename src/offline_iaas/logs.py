"""Log lines and the progress displays that show them.

Log lines: the stdlib ``logging`` module, one logger per module, configured by the CLI.

Every module logs through ``logging.getLogger(__name__)``: ``info`` for what a user follows
(a node started, a part written), ``warning`` for what they should act on, ``debug`` for what
``--verbose`` adds. Messages carry their own prefix (``client0: ...``, ``merge: ...``), so the
format is the bare message: a batch job's output file reads the same as the terminal.

The CLI calls :func:`configure` once; a progress display (:class:`LiveDisplay`) takes the
package's lines over while it is shown with :func:`shown_by`, so they print above its bar.
Used as a library, nothing is configured and Python's defaults apply (warnings on stderr).

Progress of the ``client`` and ``merge`` commands: a ``rich`` bar on a terminal, plain lines
otherwise. ``client`` counts data seconds streamed, ``merge`` windows merged. On an interactive
terminal a bar shows the count, the rate and the ETA, with log lines printed above it. Anywhere
else (a batch job under HTCondor, a pipe, a file, ``TERM=dumb``) log lines are plain, flushed
lines and the progress is one plain line every ``interval`` seconds, with no control
characters. The streaming and merging code takes any object with ``start``, ``advance`` and
``note``; :data:`NO_PROGRESS` (the default there) does nothing.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from types import TracebackType
from typing import Any, TextIO

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


def is_interactive(stream: TextIO) -> bool:
    """Whether ``stream`` is a terminal that can show a live display."""
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):
        return False
    return tty and os.environ.get("TERM", "") not in ("", "dumb")


class LiveDisplay:
    """A ``rich`` progress bar with lines printed above it, or plain flushed lines.

    The base of ``CountProgress`` and ``workflow.progress.RunProgress``: they choose the
    columns beside the bar (``_show``) and what updates it. Entered, it prints the package's
    log lines.

    Parameters
    ----------
    stream
        Where to write (standard output by default).
    interactive
        Force the live display on or off; by default, on when ``stream`` is a terminal.
    """

    def __init__(self, stream: TextIO | None = None, interactive: bool | None = None) -> None:
        self.stream = stream if stream is not None else sys.stdout
        self.interactive = is_interactive(self.stream) if interactive is None else interactive
        self._progress = None
        self._task = None
        self._lines = ExitStack()

    def __enter__(self) -> LiveDisplay:
        self._lines.enter_context(shown_by(self._print))
        return self

    def _show(self, label: str, columns: tuple, **fields: str) -> None:
        """Start the bar: spinner, ``label``, bar, then ``columns`` (rich columns)."""
        from rich.console import Console
        from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn

        self._progress = Progress(
            SpinnerColumn(),
            TextColumn(label),
            BarColumn(bar_width=20),
            *columns,
            console=Console(file=self.stream),
            transient=False,
        )
        self._progress.start()
        self._task = self._progress.add_task(label, total=None, **fields)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        try:
            if self._progress is not None:
                self._progress.stop()
                self._progress = None
        finally:
            self._lines.close()

    def _print(self, line: str) -> None:
        """``line`` above the bar, or as a plain flushed line."""
        if self._progress is not None:
            self._progress.console.print(line, markup=False, highlight=False)
        else:
            print(line, file=self.stream, flush=True)


class NullProgress:
    """Progress that is not shown."""

    def start(self, total: float, completed: float = 0.0) -> None:
        """(Re)start the count at ``completed`` of ``total`` (a reconnection restarts it)."""

    def advance(self, amount: float) -> None:
        """``amount`` more done."""

    def note(self, text: str) -> None:
        """What is being worked on (shown beside the bar)."""


NO_PROGRESS = NullProgress()


def format_duration(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}"


class CountProgress(NullProgress, LiveDisplay):
    """The display of one command.

    Parameters
    ----------
    label
        Prefix of every progress line (``client0``, ``merge``).
    unit
        What is counted (``data-s``, ``windows``); the rate is in ``unit``/s.
    stream
        Where to write (standard output by default).
    interactive
        Force the bar on or off; by default, on when ``stream`` is a terminal.
    verbosity
        ``logs.QUIET`` shows no bar and no progress lines (the log level, set by
        ``logs.configure``, decides which log lines print).
    interval
        Seconds between plain progress lines.
    clock
        Monotonic clock (tests pass a fake one).
    """

    def __init__(
        self, label: str, unit: str, stream: TextIO | None = None,
        interactive: bool | None = None, verbosity: int = NORMAL, interval: float = 10.0,
        clock=time.monotonic,
    ) -> None:
        LiveDisplay.__init__(self, stream, interactive)
        self.label, self.unit = label, unit
        self.verbosity = verbosity
        self.interval = interval
        self.clock = clock
        self.total = self.completed = self._first = 0.0
        self.text = ""
        self._started = self._last_line = clock()

    def __enter__(self) -> CountProgress:
        LiveDisplay.__enter__(self)
        if self.interactive and self.verbosity > QUIET:
            from rich.progress import TextColumn

            self._show(self.label, (TextColumn("{task.fields[info]}"),), info="starting")
        return self

    def __exit__(self, *exc_info: Any) -> None:
        if self._progress is not None:
            self._refresh()
        LiveDisplay.__exit__(self, *exc_info)

    def start(self, total: float, completed: float = 0.0) -> None:
        self.total, self.completed, self._first = float(total), float(completed), float(completed)
        self._started = self.clock()
        self._refresh()

    def advance(self, amount: float) -> None:
        self.completed = min(self.total, self.completed + amount) if self.total else (
            self.completed + amount)
        self._refresh()

    def note(self, text: str) -> None:
        self.text = text
        self._refresh()

    def status(self) -> str:
        """``done/total unit (percent), rate unit/s, ETA h:mm:ss`` (and the note)."""
        elapsed = self.clock() - self._started
        rate = (self.completed - self._first) / elapsed if elapsed > 0 else 0.0
        parts = [f"{self.completed:.0f}/{self.total:.0f} {self.unit}"
                 + (f" ({100 * self.completed / self.total:.0f}%)" if self.total else "")]
        parts.append(f"{rate:.1f} {self.unit}/s")
        if rate > 0 and self.total:
            parts.append(f"ETA {format_duration((self.total - self.completed) / rate)}")
        else:
            parts.append("ETA -")
        return ", ".join(parts) + (f"; {self.text}" if self.text else "")

    def _refresh(self) -> None:
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task, total=self.total or None,
                                  completed=self.completed, info=self.status())
        elif self.verbosity > QUIET and not self.interactive:
            now = self.clock()
            if now - self._last_line >= self.interval:
                self._last_line = now
                print(f"{self.label}: {self.status()}", file=self.stream, flush=True)
