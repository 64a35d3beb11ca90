"""run-local's terminal output: a live progress line on a terminal, plain lines otherwise.

On an interactive terminal a ``rich`` progress bar counts the DAG's jobs (done, running,
failed) with the event lines printed above it. Anywhere else (a batch job, a pipe, a file, or
``TERM=dumb``) every event is one plain line, flushed, with no control characters.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from types import TracebackType
from typing import TextIO

_DONE = ("done", "complete")
_RUNNING = ("running", "prerun", "deferred", "removing")
_FAILED = ("failed",)
_NOT_RUN = ("removed", "not-run")


def is_interactive(stream: TextIO) -> bool:
    """Whether ``stream`` is a terminal that can show a live display."""
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):
        return False
    return tty and os.environ.get("TERM", "") not in ("", "dumb")


def count_states(states: Mapping[str, tuple[str, str]]) -> dict[str, int]:
    """Jobs (not services) done, running, failed, not run or waiting; services running."""
    counts = {"total": 0, "done": 0, "running": 0, "failed": 0, "not run": 0, "waiting": 0,
              "services": 0}
    for kind, status in states.values():
        if kind == "SERVICE":
            counts["services"] += status == "running"
            continue
        counts["total"] += 1
        key = ("done" if status in _DONE else "running" if status in _RUNNING
               else "failed" if status in _FAILED else "not run" if status in _NOT_RUN
               else "waiting")
        counts[key] += 1
    return counts


class RunProgress:
    """The display; ``log`` and ``update`` are run-local's ``log`` and ``on_state``.

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

    def __enter__(self) -> RunProgress:
        if self.interactive:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                SpinnerColumn,
                TextColumn,
                TimeElapsedColumn,
            )

            self._progress = Progress(
                SpinnerColumn(),
                TextColumn("run-local"),
                BarColumn(bar_width=20),
                MofNCompleteColumn(),
                TextColumn("{task.fields[detail]}"),
                TimeElapsedColumn(),
                console=Console(file=self.stream),
                transient=False,
            )
            self._progress.start()
            self._task = self._progress.add_task("run-local", total=None, detail="starting")
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

    def log(self, line: str) -> None:
        """One event line (above the live display on a terminal)."""
        if self._progress is not None:
            self._progress.console.print(line, markup=False, highlight=False)
        else:
            print(line, file=self.stream, flush=True)

    def update(self, states: Mapping[str, tuple[str, str]]) -> None:
        """New node states (``name -> (kind, status)``); only the live display shows them."""
        if self._progress is None or self._task is None:
            return
        c = count_states(states)
        detail = (f"{c['running']} running, {c['failed']} failed, {c['not run']} not run, "
                  f"{c['waiting']} waiting; servers up: {c['services']}")
        self._progress.update(self._task, total=c["total"], completed=c["done"], detail=detail)
