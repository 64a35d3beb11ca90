"""run-local's terminal output: a live progress line on a terminal, plain lines otherwise.

On an interactive terminal a ``rich`` progress bar counts the DAG's jobs (done, running,
failed) with the event lines printed above it. Anywhere else (a batch job, a pipe, a file, or
``TERM=dumb``) every event is one plain line, flushed, with no control characters.
"""

from __future__ import annotations

from collections.abc import Mapping

from offline_iaas.logs import LiveDisplay

_DONE = ("done", "complete")
_RUNNING = ("running", "prerun", "deferred", "removing")
_FAILED = ("failed",)
_NOT_RUN = ("removed", "not-run")


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


class RunProgress(LiveDisplay):
    """The display: run-local's log lines above a bar that ``update`` (its ``on_state``) moves
    (parameters: ``LiveDisplay``'s)."""

    def __enter__(self) -> RunProgress:
        LiveDisplay.__enter__(self)
        if self.interactive:
            from rich.progress import MofNCompleteColumn, TextColumn, TimeElapsedColumn

            columns = (MofNCompleteColumn(), TextColumn("{task.fields[detail]}"),
                       TimeElapsedColumn())
            self._show("run-local", columns, detail="starting")
        return self

    def update(self, states: Mapping[str, tuple[str, str]]) -> None:
        """New node states (``name -> (kind, status)``); only the live display shows them."""
        if self._progress is None or self._task is None:
            return
        c = count_states(states)
        detail = (f"{c['running']} running, {c['failed']} failed, {c['not run']} not run, "
                  f"{c['waiting']} waiting; servers up: {c['services']}")
        self._progress.update(self._task, total=c["total"], completed=c["done"], detail=detail)
