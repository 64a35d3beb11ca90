"""run-local's state (``RUN/local-state.json``) as a record: each node's status, attempts and
process, rewritten by ``run-local`` at every change.

It is informative (``status``, the report's node timeline, the crash lines, ``plan
--from-run``): ``run-local`` decides what to run from the nodes' own records
(``completeness.py``), never from this file. A state written before it had a version (no
``schema_version``) is read as it is: the fields then were these.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, overload

from pydantic import AfterValidator, BaseModel, ConfigDict

from offline_iaas.records import Record, build, read_optional
from offline_iaas.rundir import RunDir

_STRICT = ConfigDict(strict=True, frozen=True, extra="forbid")


def _iso_time(text: str) -> str:
    """``text`` if it is an ISO 8601 time with its UTC offset (what run-local writes), else
    ValueError (a time without one was read as this machine's local time: hours off)."""
    try:
        offset = datetime.fromisoformat(text).utcoffset()
    except ValueError:
        raise ValueError(f"not an ISO 8601 time: {text[:40]!r}") from None
    if offset is None:
        raise ValueError(f"an ISO 8601 time without its UTC offset: {text[:40]!r}")
    return text


IsoTime = Annotated[str, AfterValidator(_iso_time)]
"""A time run-local wrote (``datetime.isoformat``): checked when the state is read, so that
every reader (``status``, the report, ``plan --from-run``) refuses a damaged one alike."""


@overload
def unix_seconds(time: str) -> float: ...


@overload
def unix_seconds(time: None) -> None: ...


def unix_seconds(time: str | None) -> float | None:
    """Unix seconds of a time the state holds (an ``IsoTime``, with its UTC offset: checked
    when the state was read); None for None. Every reader's one conversion."""
    return None if time is None else datetime.fromisoformat(time).timestamp()


NODE_STATUSES = ("pending", "prerun", "deferred", "running", "removing", "done", "complete",
                 "failed", "not-run", "removed", "stopped", "exited")
"""Every status run-local gives a node (``workflow/local.py``, ``workflow/executor.py``); a
state holding another is damaged, and refused as one."""


def _node_status(text: str) -> str:
    if text not in NODE_STATUSES:
        raise ValueError(f"{text[:40]!r} is no status run-local writes "
                         f"({', '.join(NODE_STATUSES)})")
    return text


class _Span(BaseModel):
    """A record with a start and an end, both from run-local's wall clock: an end before the
    start is a clock set back while it ran (NTP), not damage."""

    model_config = _STRICT

    started: IsoTime | None = None
    """ISO time."""
    ended: IsoTime | None = None


class Attempt(_Span):
    """One finished attempt of a node."""

    model_config = _STRICT

    attempt: int
    status: str
    """How it ended: ``done``, ``failed``, ``stopped`` (by run-local), ``exited`` (a SERVICE
    node that ended on its own), ``interrupted``."""
    exit_code: int | None = None
    """Negative: killed by that signal (``Popen``'s convention)."""


class NodeRecord(_Span):
    """A node as run-local last saw it."""

    model_config = _STRICT

    kind: str = "JOB"
    """``JOB``, ``SERVICE`` or ``FINAL``."""
    status: Annotated[str, AfterValidator(_node_status)] = "pending"
    """One of ``NODE_STATUSES``."""
    attempts: int = 0
    retries: int = 0
    pid: int | None = None
    """The process of the attempt under way or last."""
    pid_start: int | None = None
    """Its start time (``lifetime.start_ticks``): a reused PID is not taken for it."""
    exit_code: int | None = None
    history: tuple[Attempt, ...] = ()
    """Finished attempts, oldest first."""


class Executor(BaseModel):
    """The run-local process that writes the state."""

    model_config = _STRICT

    pid: int
    pid_start: int | None = None


class LocalState(Record):
    """``RUN/local-state.json``."""

    KIND = "run-local state"

    dag: str = ""
    updated: IsoTime | None = None
    """ISO time of the last write."""
    executor: Executor | None = None
    aborted: tuple[str, int] | None = None
    """The node and its exit code that aborted the DAG (``ABORT-DAG-ON``), if one did."""
    nodes: dict[str, NodeRecord] = {}
    """In the DAG's order."""

    def services(self) -> dict[str, NodeRecord]:
        """The SERVICE nodes."""
        return {name: n for name, n in self.nodes.items() if n.kind == "SERVICE"}


def read_local_state(run: RunDir) -> LocalState | None:
    """run-local's state, or None where run-local has not run (``RunError`` naming the file
    and field where it is damaged)."""
    return read_optional(LocalState, run.local_state)


def local_state_text(fields: dict[str, Any]) -> str:
    """The document for ``fields`` (checked as strictly as a state read back)."""
    return build(LocalState, fields).model_dump_json(indent=2) + "\n"
