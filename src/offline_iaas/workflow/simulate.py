"""Predict a campaign DAG's makespan by replaying it (a discrete-event simulation; pure logic).

``simulate`` runs the nodes of a parsed ``offline.dag`` on a simulated clock, from the DAG's
start to the end of its FINAL node, and reports when each stage ended, which chain of nodes set
the makespan (the critical path), and how many job attempts it took. With a failure model it
repeats the replay (Monte Carlo replications) and reports the mean and the spread. It is meant
for ``offline-iaas plan --simulate``: the rates come from a bench or a pilot run, the DAG and
the per-node work from ``make-dag``.

Model
-----
Roles. A node's role is its submit file's basename: ``server.sub`` (a SERVICE node: a Triton
server), ``client.sub`` (a JOB streaming its segment to the server named by its ``server``
variable), ``chunk.sub`` (a JOB merging the parts of its parent clients), ``merge.sub`` (the
index merge) and ``final.sub`` (the FINAL node). Any other node is refused.

Clock. Every server that starts is ready ``server_start_seconds`` after the DAG starts; a
server in ``never_starting_servers`` never is. A JOB (or FINAL) node is submitted once all
its parents are done; every attempt then spends ``job_start_seconds`` before it runs
(scheduling, transfer, start-up). ``MAXJOBS`` limits how many nodes of a category are
submitted at once: a node holds its slot from submission to the end of the attempt (waiting for
a server included); a node waiting for a slot queues in the order it became ready, a retry at
the back of the queue.

Streaming. A running client waits for its own server. Once it is ready the client streams its
remaining work (data seconds). A server's throughput, ``server_data_seconds_per_second``, is
shared equally by the clients streaming to it at that moment (processor sharing), each share
capped at ``client_data_seconds_per_second`` when that is positive. A client whose server is
not ready ``failover_seconds`` after it began waiting moves to the ready server with the
fewest streaming clients (the first in file order on a tie); if none is ready yet, it takes its
own server if that becomes ready first, else the least loaded of the first servers to become
ready. With ``failover_seconds = 0`` it waits for ever. Clients never move once streaming, and
servers never fail once ready.

Failures. Only client attempts fail: an attempt fails with probability ``failure_rate``, after
a uniformly random fraction of the work it had left. Clients checkpoint, so a retry resumes
where the failed attempt stopped (paying ``job_start_seconds`` and waiting for its own server
again). DAGMan runs a node at most ``RETRY + 1`` times; a node whose last attempt fails has
failed, and its descendants never run. The other nodes run on as far as they can, then FINAL
runs (as in DAGMan): the makespan is then the time the DAG stops, and the result is not
finished. A client waiting for ever makes the DAG never stop: the makespan is infinite and
the result names the stuck clients (``client.server_wait_seconds`` is not modelled).

Other nodes. A chunk merge takes its work (data seconds; by default the sum of its parents'
work) at ``merge_data_seconds_per_second``; chunk merges run in parallel without limit (unless a
``MAXJOBS`` category says otherwise). The index merge takes ``merge_index_seconds``, the FINAL
node ``final_seconds``; neither fails.

Randomness. The draws of replication ``r`` are taken from one ``random.Random(seed)`` in a
fixed order (each client in file order; for each of its ``RETRY + 1`` possible attempts, whether
it fails, then where), before the replay: the same inputs and seed give the same result on
any machine, and a client's draws do not depend on the schedule, so two DAGs of the same
clients and RETRY counts (another MAXJOBS, other rates) see the same failures for one seed. Without
failures (``failure_rate = 0``) the replay is deterministic and is run once.

Results. The makespan is averaged over the replications (a replication that fails stops when
FINAL ends; one that never stops makes the mean infinite); the stage times over the
replications that reach each stage. The critical path and the end time of each node are those
of the median replication (replayed a second time, so that the others need not keep them).
"""

from __future__ import annotations

import heapq
import math
import random
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import PurePosixPath

from offline_iaas.config import ClientConfig
from offline_iaas.stretches import ClientSegment
from offline_iaas.workflow.dag import Dag
from offline_iaas.workflow.submit import ROLES

SERVER_ROLE = "server"
CLIENT_ROLE = "client"
CHUNK_ROLE = "chunk"
MERGE_ROLE = "merge"
FINAL_ROLE = "final"
ROLE_OF_SUBMIT: dict[str, str] = {f"{role}.sub": role for role in ROLES}
"""Submit file basename to node role (``make-dag`` writes ``<role>.sub``)."""
_KIND_OF_ROLE = {
    SERVER_ROLE: "SERVICE",
    CLIENT_ROLE: "JOB",
    CHUNK_ROLE: "JOB",
    MERGE_ROLE: "JOB",
    FINAL_ROLE: "FINAL",
}
P90 = 0.9
_PATH_SHOWN = 8
"""``describe`` shows a longer critical path as its first and last few nodes."""


@dataclass(frozen=True)
class SimulationRates:
    """How fast the nodes work (measured by a bench or a pilot run)."""

    server_data_seconds_per_second: float
    """Streaming throughput of one server, shared by the clients streaming to it."""
    client_data_seconds_per_second: float = 0.0
    """Most one client streams, whatever its share of the server; 0: no cap."""
    merge_data_seconds_per_second: float = math.inf
    """Throughput of one chunk merge; ``inf``: chunk merges take no time beyond the job start."""
    merge_index_seconds: float = 0.0
    """The index merge node's work."""
    final_seconds: float = 0.0
    """The FINAL node's work."""
    server_start_seconds: float = 0.0
    """From the DAG's start to a server being ready."""
    job_start_seconds: float = 0.0
    """From a JOB or FINAL attempt's submission to its start (added to every attempt)."""

    def __post_init__(self) -> None:
        if not self.server_data_seconds_per_second > 0:
            raise ValueError("server_data_seconds_per_second must be positive")
        if not self.merge_data_seconds_per_second > 0:
            raise ValueError("merge_data_seconds_per_second must be positive (inf: no time)")
        for name in ("client_data_seconds_per_second", "merge_index_seconds", "final_seconds",
                     "server_start_seconds", "job_start_seconds"):
            value = getattr(self, name)
            if not (value >= 0 and math.isfinite(value)):
                raise ValueError(f"{name} must be finite and not negative, got {value}")


@dataclass(frozen=True)
class FailureModel:
    """What goes wrong, and how often the replay is repeated."""

    failure_rate: float = 0.0
    """Probability that a client attempt fails."""
    never_starting_servers: frozenset[str] = frozenset()
    """SERVICE nodes that are never ready."""
    failover_seconds: float = ClientConfig().failover_seconds
    """A client waits this long for its own server before moving to another; 0: never."""
    seed: int = 0
    replications: int = 1
    """Monte Carlo repetitions (run once without failures: the replay is then deterministic)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "never_starting_servers", frozenset(self.never_starting_servers))
        if not 0 <= self.failure_rate <= 1:
            raise ValueError(f"failure_rate must be in [0, 1], got {self.failure_rate}")
        if not (self.failover_seconds >= 0 and math.isfinite(self.failover_seconds)):
            raise ValueError(f"failover_seconds must be finite and not negative, "
                             f"got {self.failover_seconds}")
        if self.replications < 1:
            raise ValueError(f"replications must be at least 1, got {self.replications}")


@dataclass(frozen=True)
class Stages:
    """When each stage ended (seconds from the DAG's start); None: never (or no such node)."""

    servers_ready_seconds: float | None = None
    """The last server that starts is ready."""
    clients_done_seconds: float | None = None
    """Every client has ended (done or failed)."""
    chunks_done_seconds: float | None = None
    """Every chunk merge has ended."""
    merge_done_seconds: float | None = None
    """The index merge has ended."""
    final_done_seconds: float | None = None
    """The FINAL node has ended."""


@dataclass(frozen=True)
class Replication:
    """One replay of the DAG."""

    makespan_seconds: float
    """The DAG's start to the end of its last node; ``inf`` if it never stops."""
    finished: bool
    """Every node ended successfully."""
    stages: Stages
    critical_path: tuple[str, ...]
    """From the first to the last node whose end set the makespan (for a DAG that never stops:
    to its first stuck client)."""
    attempts: int
    """JOB and FINAL attempts submitted."""
    retries: int
    """Attempts beyond each node's first."""
    failed: tuple[str, ...] = ()
    """Nodes whose last attempt failed."""
    stuck: tuple[str, ...] = ()
    """Clients still waiting for a server when nothing else can happen."""
    not_run: int = 0
    """Nodes that never ran (below a failed node, or behind a stuck one)."""
    failed_over: tuple[str, ...] = ()
    """Clients that streamed to a server other than their own."""
    end_seconds: Mapping[str, float] = field(default_factory=dict)
    """JOB and FINAL node name to the end of its last attempt, for the nodes that ended; kept
    for the representative replication only (empty in the others)."""


@dataclass(frozen=True)
class SimulationResult:
    """The predicted makespan of a DAG."""

    makespan_seconds: float
    """Mean over the replications."""
    p90_seconds: float
    """90th percentile (nearest rank) over the replications."""
    min_seconds: float
    max_seconds: float
    stages: Stages
    """Mean over the replications that reach each stage (None: none does)."""
    critical_path: tuple[str, ...]
    """Of the median replication (``representative``)."""
    mean_attempts: float
    """JOB and FINAL attempts per replication."""
    mean_retries: float
    finished: bool
    """Every replication finished."""
    finished_fraction: float
    stuck_or_failed: tuple[str, ...]
    """Nodes that failed or were stuck in some replication, in file order."""
    representative: Replication
    """The median replication (by makespan; the first such on a tie)."""
    replications: tuple[Replication, ...]
    rates: SimulationRates
    failures: FailureModel
    counts: dict[str, int]
    """Nodes of each role."""

    def describe(self) -> list[str]:
        """The prediction and how it was reached, as readable lines."""
        r, f, c = self.rates, self.failures, self.counts
        cap = (f", at most {_rate(r.client_data_seconds_per_second)} per client"
               if r.client_data_seconds_per_second > 0 else "")
        merge = ("take no time" if math.isinf(r.merge_data_seconds_per_second)
                 else f"at {_rate(r.merge_data_seconds_per_second)}")
        runs = len(self.replications)
        lines = [
            f"simulated makespan: {_duration(self.makespan_seconds)}"
            + (f" (mean of {runs} replications; p90 {_seconds(self.p90_seconds)}, "
               f"min {_seconds(self.min_seconds)}, max {_seconds(self.max_seconds)})"
               if runs > 1 else ""),
            f"DAG: {c.get(SERVER_ROLE, 0)} server(s), {c.get(CLIENT_ROLE, 0)} client(s), "
            f"{c.get(CHUNK_ROLE, 0)} chunk merge(s), {c.get(MERGE_ROLE, 0)} index merge, "
            f"{c.get(FINAL_ROLE, 0)} FINAL node",
            f"model: each server streams {_rate(r.server_data_seconds_per_second)} shared by "
            f"its streaming clients{cap}; servers ready after {_seconds(r.server_start_seconds)}"
            f", {_seconds(r.job_start_seconds)} to start each job attempt; chunk merges "
            f"{merge}, index merge {_seconds(r.merge_index_seconds)}, FINAL "
            f"{_seconds(r.final_seconds)}",
        ]
        s = self.stages
        lines.append(
            "stages" + (" (mean over the replications that reach each)" if runs > 1 else "")
            + ": "
            + ", ".join(f"{label} {_when(value, c.get(role, 0))}" for label, role, value in (
                ("servers ready", SERVER_ROLE, s.servers_ready_seconds),
                ("last client", CLIENT_ROLE, s.clients_done_seconds),
                ("last chunk merge", CHUNK_ROLE, s.chunks_done_seconds),
                ("index merge", MERGE_ROLE, s.merge_done_seconds),
                ("FINAL", FINAL_ROLE, s.final_done_seconds),
            ))
        )
        lines.append("critical path" + (" (median replication)" if runs > 1 else "") + ": "
                     + _path(self.critical_path))
        number = "{:,.1f}" if runs > 1 else "{:,.0f}"
        lines.append(
            f"attempts: {number.format(self.mean_attempts)} job attempt(s), "
            f"{number.format(self.mean_retries)} retries" + (" per replication" if runs > 1 else "")
            + f" (client failure rate {f.failure_rate:g})"
        )
        if f.never_starting_servers:
            after = (f"its clients fail over after {_seconds(f.failover_seconds)}"
                     if f.failover_seconds > 0 else "failover is off")
            lines.append(f"never starting: {', '.join(sorted(f.never_starting_servers))} "
                         f"({after})")
        rep = self.representative
        if rep.failed_over:
            lines.append(f"failed over: {_names(rep.failed_over)}")
        if not self.finished:
            lines.append(
                f"NOT FINISHED in {runs - round(self.finished_fraction * runs)} of {runs} "
                f"replication(s): stuck or failed: {_names(self.stuck_or_failed)}"
            )
            if rep.stuck:
                lines.append(f"  stuck (waiting for a server that never starts): "
                             f"{_names(rep.stuck)}")
            if rep.failed:
                lines.append(f"  failed (retries exhausted): {_names(rep.failed)}")
            if rep.not_run:
                lines.append(f"  {rep.not_run} node(s) never ran")
        return lines


def _seconds(value: float) -> str:
    return "never" if math.isinf(value) else f"{value:,.0f} s"


def _duration(value: float) -> str:
    if math.isinf(value):
        return "never (the DAG does not finish)"
    return f"{value:,.0f} s = {value / 3600:,.2f} h"


def _when(value: float | None, nodes: int) -> str:
    if value is None:
        return "not reached" if nodes else "(none)"
    return _seconds(value)


def _rate(value: float) -> str:
    return f"{value:,.2f} data-s/s"


def _names(names: tuple[str, ...], shown: int = 10) -> str:
    head = ", ".join(names[:shown])
    return head + (f" and {len(names) - shown} more" if len(names) > shown else "")


def _path(path: tuple[str, ...]) -> str:
    if not path:
        return "none"
    if len(path) <= _PATH_SHOWN:
        return " -> ".join(path)
    half = _PATH_SHOWN // 2
    return (" -> ".join(path[:half]) + f" -> ... ({len(path) - 2 * half} more) -> "
            + " -> ".join(path[-half:]))


def segment_work_seconds(segments: Iterable[ClientSegment]) -> dict[str, float]:
    """Client node name to the data seconds it streams (warm-ups included).

    The segments of a run directory are ``[load_job(run_dir, node) for node in clients]``
    (``client/stream.py``).
    """
    return {seg.node: seg.streamed_seconds for seg in segments}


def node_role(submit: str) -> str | None:
    """The role of a node from its submit file (``server``, ``client``...), None if unknown."""
    return ROLE_OF_SUBMIT.get(PurePosixPath(submit).name)


# ---- the static plan ----------------------------------------------------------------------
@dataclass
class _Plan:
    names: list[str]
    """JOB and FINAL nodes, in file order."""
    roles: list[str]
    servers: list[str]
    server_of: list[int]
    """A client's server index (-1 for other nodes)."""
    work: list[float]
    """A client's data seconds."""
    fixed_seconds: list[float]
    """A non-client node's run time (after its job start)."""
    children: list[list[int]]
    parent_count: list[int]
    retries: list[int]
    category: list[str | None]
    limits: dict[str, int]
    final: int
    """Index of the FINAL node, -1 without one."""
    starting: list[bool]
    """Per server: it becomes ready."""


def _plan(dag: Dag, work_seconds: Mapping[str, float], rates: SimulationRates,
          failures: FailureModel) -> _Plan:
    servers: list[str] = []
    names: list[str] = []
    roles: list[str] = []
    for node in dag.nodes.values():
        role = node_role(node.submit)
        if role is None:
            raise ValueError(f"node {node.name}: submit file {node.submit!r} has no known role "
                             f"({', '.join(ROLE_OF_SUBMIT)})")
        if node.kind != _KIND_OF_ROLE[role]:
            raise ValueError(f"node {node.name}: a {role} node must be a "
                             f"{_KIND_OF_ROLE[role]} node, not {node.kind}")
        if role == SERVER_ROLE:
            servers.append(node.name)
        else:
            names.append(node.name)
            roles.append(role)
    unknown = sorted(failures.never_starting_servers - set(servers))
    if unknown:
        raise ValueError(f"never_starting_servers names unknown servers: {', '.join(unknown)}")
    index = {name: i for i, name in enumerate(names)}
    server_index = {name: i for i, name in enumerate(servers)}
    count = len(names)
    children: list[list[int]] = [[] for _ in range(count)]
    parent_count = [0] * count
    for i, name in enumerate(names):
        for parent in sorted(dag.nodes[name].parents, key=index.__getitem__):
            children[index[parent]].append(i)
        parent_count[i] = len(dag.nodes[name].parents)
    server_of = [-1] * count
    work = [0.0] * count
    fixed = [0.0] * count
    missing = []
    for i, (name, role) in enumerate(zip(names, roles, strict=True)):
        node = dag.nodes[name]
        if role == CLIENT_ROLE:
            server = node.variables.get("server")
            if server not in server_index:
                raise ValueError(f"client {name}: its server variable {server!r} names no "
                                 "server node")
            server_of[i] = server_index[server]
            if name not in work_seconds:
                missing.append(name)
                continue
            work[i] = _work(name, work_seconds[name])
        elif role == CHUNK_ROLE:
            if name in work_seconds:
                data = _work(name, work_seconds[name])
            else:
                lacking = [p for p in node.parents if p not in work_seconds]
                missing.extend(lacking)
                data = sum(float(work_seconds.get(p, 0.0)) for p in node.parents)
            fixed[i] = 0.0 if math.isinf(rates.merge_data_seconds_per_second) else (
                data / rates.merge_data_seconds_per_second)
        elif role == MERGE_ROLE:
            fixed[i] = rates.merge_index_seconds
        else:
            fixed[i] = rates.final_seconds
    if missing:
        missing = sorted(set(missing), key=index.__getitem__)
        raise ValueError(f"no work (data seconds) given for {_names(tuple(missing))}")
    finals = [i for i, role in enumerate(roles) if role == FINAL_ROLE]
    return _Plan(
        names=names,
        roles=roles,
        servers=servers,
        server_of=server_of,
        work=work,
        fixed_seconds=fixed,
        children=children,
        parent_count=parent_count,
        retries=[dag.nodes[name].retries for name in names],
        category=[dag.nodes[name].category for name in names],
        limits={cat: n for cat, n in dag.maxjobs.items() if n > 0},
        final=finals[0] if finals else -1,
        starting=[name not in failures.never_starting_servers for name in servers],
    )


def _work(name: str, value: float) -> float:
    value = float(value)
    if not (value >= 0 and math.isfinite(value)):
        raise ValueError(f"node {name}: work must be finite and not negative, got {value}")
    return value


# ---- one replay ---------------------------------------------------------------------------
_PENDING, _QUEUED, _SUBMITTED, _RUNNING, _DONE, _FAILED, _BLOCKED = range(7)
# event kinds; events at one time are handled in the order they were pushed
_SERVER_READY, _JOB_STARTED, _STREAM_DONE, _NODE_DONE, _FAILOVER, _ADOPT = range(6)


class _Replay:
    """The state of one replay; ``run`` returns its Replication."""

    def __init__(self, plan: _Plan, rates: SimulationRates, failures: FailureModel,
                 draws: list[list[tuple[float, float]]] | None) -> None:
        self.plan, self.rates, self.failures, self.draws = plan, rates, failures, draws
        count, servers = len(plan.names), len(plan.servers)
        self.state = [_PENDING] * count
        self.missing = list(plan.parent_count)
        self.cause: list[str | None] = [None] * count
        self.end = [math.nan] * count
        self.attempts = [0] * count
        self.remaining = list(plan.work)
        self.attempt_work = [0.0] * count
        self.attempt_fails = [False] * count
        self.streaming_on = [-1] * count
        self.failed_over: set[int] = set()
        self.ready = [False] * servers
        self.ready_at = [math.nan] * servers
        self.virtual = [0.0] * servers
        """Per server: data seconds each of its streaming clients has streamed since t = 0."""
        self.updated = [0.0] * servers
        self.share = [0.0] * servers
        self.streams: list[list[tuple[float, int, int]]] = [[] for _ in range(servers)]
        self.version = [0] * servers
        self.waiting_own: list[list[tuple[int, int]]] = [[] for _ in range(servers)]
        self.waiting_any: list[tuple[int, int]] = []
        self.ready_servers: list[int] = []
        self.running_in = dict.fromkeys(plan.limits, 0)
        self.queues: dict[str, deque[int]] = {cat: deque() for cat in plan.limits}
        self.events: list[tuple[float, int, int, int, int]] = []
        self.sequence = 0
        self.open = sum(1 for i in range(count) if i != plan.final)
        """Non-FINAL nodes that have not ended (done, failed or blocked)."""
        self.last_ended = -1

    # -- events
    def push(self, time: float, kind: int, a: int, b: int = 0) -> None:
        self.sequence += 1
        heapq.heappush(self.events, (time, self.sequence, kind, a, b))

    def run(self, keep_times: bool = False) -> Replication:
        plan, rates = self.plan, self.rates
        for s, starts in enumerate(plan.starting):
            if starts:
                self.push(rates.server_start_seconds, _SERVER_READY, s)
        if self.open == 0 and plan.final >= 0:
            self.submit(plan.final, 0.0, None)
        for i, count in enumerate(plan.parent_count):
            if count == 0 and i != plan.final:
                self.submit(i, 0.0, None)
        handlers = {
            _SERVER_READY: self.on_server_ready,
            _JOB_STARTED: self.on_job_started,
            _STREAM_DONE: self.on_stream_done,
            _NODE_DONE: self.on_node_done,
            _FAILOVER: self.on_failover,
            _ADOPT: self.on_adopt,
        }
        while self.events:
            time, _, kind, a, b = heapq.heappop(self.events)
            handlers[kind](time, a, b)
        return self.result(keep_times)

    # -- scheduling
    def submit(self, i: int, now: float, cause: str | None) -> None:
        """Node ``i`` may run (again): take a slot of its category or queue for one."""
        if cause is not None:
            self.cause[i] = cause
        category = self.plan.category[i]
        if category in self.queues:
            if self.running_in[category] >= self.plan.limits[category]:
                self.state[i] = _QUEUED
                self.queues[category].append(i)
                return
            self.running_in[category] += 1
        self.state[i] = _SUBMITTED
        self.attempts[i] += 1
        self.push(now + self.rates.job_start_seconds, _JOB_STARTED, i)

    def release(self, i: int, now: float) -> None:
        """Node ``i``'s attempt ended: its slot goes to the first node queued for one."""
        category = self.plan.category[i]
        if category not in self.queues:
            return
        self.running_in[category] -= 1
        queue = self.queues[category]
        if queue:
            self.submit(queue.popleft(), now, self.plan.names[i])

    def on_job_started(self, now: float, i: int, _: int) -> None:
        self.state[i] = _RUNNING
        if self.plan.roles[i] != CLIENT_ROLE:
            self.push(now + self.plan.fixed_seconds[i], _NODE_DONE, i)
            return
        attempt = self.attempts[i]
        self.attempt_work[i] = self.remaining[i]
        self.attempt_fails[i] = False
        if self.draws is not None:
            fail_draw, fraction = self.draws[i][attempt - 1]
            if fail_draw < self.failures.failure_rate:
                self.attempt_fails[i] = True
                self.attempt_work[i] = self.remaining[i] * fraction
        own = self.plan.server_of[i]
        if self.ready[own]:
            self.join([i], own, now)
            return
        self.waiting_own[own].append((i, attempt))
        if self.failures.failover_seconds > 0:
            self.push(now + self.failures.failover_seconds, _FAILOVER, i, attempt)

    def waiting(self, i: int, attempt: int) -> bool:
        return (self.state[i] == _RUNNING and self.attempts[i] == attempt
                and self.streaming_on[i] < 0)

    def on_failover(self, now: float, i: int, attempt: int) -> None:
        if not self.waiting(i, attempt):
            return
        if self.ready_servers:
            self.join([i], self.least_loaded(), now)
        else:
            self.waiting_any.append((i, attempt))

    def on_server_ready(self, now: float, s: int, _: int) -> None:
        self.ready[s] = True
        self.ready_at[s] = now
        self.updated[s] = now
        self.ready_servers.append(s)
        # Its own clients come first, also those past their failover deadline (a client tries
        # its own server first); the others wait until every server ready now is ready.
        own = self.waiting_own[s] + [w for w in self.waiting_any if self.plan.server_of[w[0]] == s]
        self.waiting_own[s] = []
        self.waiting_any = [w for w in self.waiting_any if self.plan.server_of[w[0]] != s]
        # (a client past its deadline is listed twice: under its server and as waiting for any)
        clients = list(dict.fromkeys(i for i, attempt in own if self.waiting(i, attempt)))
        for i in clients:
            self.cause[i] = self.plan.servers[s]
        self.join(clients, s, now)
        if self.waiting_any:
            self.push(now, _ADOPT, s)

    def on_adopt(self, now: float, s: int, _: int) -> None:
        """Clients past their failover deadline go to the least loaded ready server."""
        waiting, self.waiting_any = self.waiting_any, []
        for i, attempt in waiting:
            if self.waiting(i, attempt):
                target = self.least_loaded()
                self.cause[i] = self.plan.servers[s]
                self.join([i], target, now)

    def least_loaded(self) -> int:
        return min(self.ready_servers, key=lambda s: (len(self.streams[s]), s))

    # -- processor sharing
    def advance(self, s: int, now: float) -> None:
        self.virtual[s] += self.share[s] * (now - self.updated[s])
        self.updated[s] = now

    def reschedule(self, s: int, now: float) -> None:
        streams = self.streams[s]
        share = self.rates.server_data_seconds_per_second / len(streams) if streams else 0.0
        cap = self.rates.client_data_seconds_per_second
        self.share[s] = min(share, cap) if cap > 0 else share
        self.version[s] += 1
        if streams:
            left = max(streams[0][0] - self.virtual[s], 0.0)
            self.push(now + left / self.share[s], _STREAM_DONE, s, self.version[s])

    def join(self, clients: list[int], s: int, now: float) -> None:
        if not clients:
            return
        self.advance(s, now)
        for i in clients:
            self.streaming_on[i] = s
            if s != self.plan.server_of[i]:
                self.failed_over.add(i)
            self.sequence += 1
            heapq.heappush(self.streams[s], (self.virtual[s] + self.attempt_work[i],
                                             self.sequence, i))
        self.reschedule(s, now)

    def on_stream_done(self, now: float, s: int, version: int) -> None:
        if version != self.version[s]:
            return
        self.advance(s, now)
        streams = self.streams[s]
        tolerance = 1e-9 * max(1.0, abs(self.virtual[s]))
        ended = []
        # the first stream is the one this event was scheduled for, whatever the rounding
        finish, _, i = heapq.heappop(streams)
        self.virtual[s] = max(self.virtual[s], finish)
        ended.append(i)
        while streams and streams[0][0] <= self.virtual[s] + tolerance:
            ended.append(heapq.heappop(streams)[2])
        self.reschedule(s, now)
        for i in ended:
            self.streaming_on[i] = -1
            self.remaining[i] -= self.attempt_work[i]
            self.release(i, now)
            if not self.attempt_fails[i]:
                self.remaining[i] = 0.0
                self.ended(i, now, _DONE)
            elif self.attempts[i] <= self.plan.retries[i]:
                self.submit(i, now, None)
            else:
                self.ended(i, now, _FAILED)

    def on_node_done(self, now: float, i: int, _: int) -> None:
        self.release(i, now)
        self.ended(i, now, _DONE)

    # -- the DAG
    def ended(self, i: int, now: float, state: int) -> None:
        self.state[i] = state
        self.end[i] = now
        self.last_ended = i
        if i == self.plan.final:
            return
        self.open -= 1
        name = self.plan.names[i]
        if state == _DONE:
            for child in self.plan.children[i]:
                self.missing[child] -= 1
                if self.missing[child] == 0 and self.state[child] == _PENDING:
                    self.submit(child, now, name)
        else:
            todo = list(self.plan.children[i])
            while todo:
                child = todo.pop()
                if self.state[child] == _PENDING:
                    self.state[child] = _BLOCKED
                    self.open -= 1
                    todo.extend(self.plan.children[child])
        if self.open == 0 and self.plan.final >= 0:
            self.submit(self.plan.final, now, name)

    def result(self, keep_times: bool) -> Replication:
        plan, names = self.plan, self.plan.names
        stuck = tuple(names[i] for i, st in enumerate(self.state)
                      if st == _RUNNING and plan.roles[i] == CLIENT_ROLE)
        failed = tuple(names[i] for i, st in enumerate(self.state) if st == _FAILED)
        not_run = sum(1 for st in self.state if st in (_PENDING, _QUEUED, _BLOCKED))
        stops = not stuck
        if not stops:
            makespan, last = math.inf, names.index(stuck[0])
        else:
            makespan = max((e for e in self.end if not math.isnan(e)), default=0.0)
            last = self.last_ended
        attempts = sum(self.attempts)
        started = sum(1 for a in self.attempts if a > 0)
        started_servers = [t for t in self.ready_at if not math.isnan(t)]
        return Replication(
            makespan_seconds=makespan,
            finished=stops and not failed and not_run == 0,
            stages=Stages(
                servers_ready_seconds=max(started_servers) if started_servers else None,
                clients_done_seconds=self.stage(CLIENT_ROLE),
                chunks_done_seconds=self.stage(CHUNK_ROLE),
                merge_done_seconds=self.stage(MERGE_ROLE),
                final_done_seconds=self.stage(FINAL_ROLE),
            ),
            critical_path=self.path(last),
            attempts=attempts,
            retries=attempts - started,
            failed=failed,
            stuck=stuck,
            not_run=not_run,
            failed_over=tuple(names[i] for i in sorted(self.failed_over)),
            end_seconds={names[i]: e for i, e in enumerate(self.end) if not math.isnan(e)}
            if keep_times else {},
        )

    def stage(self, role: str) -> float | None:
        ends = [self.end[i] for i, r in enumerate(self.plan.roles) if r == role]
        if not ends or any(math.isnan(e) for e in ends):
            return None
        return max(ends)

    def path(self, last: int) -> tuple[str, ...]:
        if last < 0:
            return ()
        index = {name: i for i, name in enumerate(self.plan.names)}
        path: list[str] = []
        seen: set[str] = set()
        name: str | None = self.plan.names[last]
        while name is not None and name not in seen:
            path.append(name)
            seen.add(name)
            i = index.get(name)
            name = None if i is None else self.cause[i]
        return tuple(reversed(path))


# ---- the simulation -----------------------------------------------------------------------
def simulate(
    dag: Dag,
    work_seconds: Mapping[str, float],
    rates: SimulationRates,
    failures: FailureModel | None = None,
) -> SimulationResult:
    """Replay ``dag`` on a simulated clock and predict its makespan (see the module's model).

    Parameters
    ----------
    dag
        The campaign DAG (``parse_dag``).
    work_seconds
        Node name to its work in data seconds: every client node (``segment_work_seconds``),
        and chunk merge nodes (default: the sum of their parents' work).
    rates
        How fast servers stream and merges work; the start-up latencies.
    failures
        Client failures, servers that never start, failover, seed and replications (default:
        nothing fails, one replay).

    Returns
    -------
    The mean, p90, min and max makespan over the replications, the mean stage times, the
    critical path of the median replication, attempts, and the nodes that failed or were stuck.

    Raises
    ------
    ValueError
        A node whose role is unknown, a client without work or whose server is not a server
        node, an unknown server in ``never_starting_servers``.
    """
    failures = FailureModel() if failures is None else failures
    plan = _plan(dag, work_seconds, rates, failures)
    if failures.failure_rate == 0:
        once = _Replay(plan, rates, failures, None).run(keep_times=True)
        replications = (once,) * failures.replications
        median = 0
    else:
        rng = random.Random(failures.seed)
        clients = [i for i, role in enumerate(plan.roles) if role == CLIENT_ROLE]

        def draws() -> list[list[tuple[float, float]]]:
            out: list[list[tuple[float, float]]] = [[] for _ in plan.names]
            for i in clients:
                out[i] = [(rng.random(), rng.random()) for _ in range(plan.retries[i] + 1)]
            return out

        runs, states = [], []
        for _ in range(failures.replications):
            states.append(rng.getstate())
            runs.append(_Replay(plan, rates, failures, draws()).run())
        median = _median_index([r.makespan_seconds for r in runs])
        rng.setstate(states[median])
        runs[median] = _Replay(plan, rates, failures, draws()).run(keep_times=True)
        replications = tuple(runs)
    counts = {SERVER_ROLE: len(plan.servers)}
    for role in plan.roles:
        counts[role] = counts.get(role, 0) + 1
    return _summarise(replications, median, rates, failures, counts, plan.names)


def _median_index(spans: list[float]) -> int:
    """The replication of median makespan (the lower median; the first on a tie)."""
    ranked = sorted(range(len(spans)), key=lambda k: (spans[k], k))
    return ranked[(len(ranked) - 1) // 2]


def _mean(values: list[float]) -> float:
    if any(math.isinf(v) for v in values):
        return math.inf
    return math.fsum(values) / len(values)


def _summarise(
    replications: tuple[Replication, ...],
    median: int,
    rates: SimulationRates,
    failures: FailureModel,
    counts: dict[str, int],
    order: list[str],
) -> SimulationResult:
    spans = [r.makespan_seconds for r in replications]
    ordered = sorted(spans)
    stage_means = {}
    for item in fields(Stages):
        values = [getattr(r.stages, item.name) for r in replications]
        reached = [v for v in values if v is not None]
        stage_means[item.name] = _mean(reached) if reached else None
    bad = {name for r in replications for name in (*r.failed, *r.stuck)}
    position = {name: k for k, name in enumerate(order)}
    finished = sum(1 for r in replications if r.finished)
    return SimulationResult(
        makespan_seconds=_mean(spans),
        p90_seconds=ordered[max(0, math.ceil(P90 * len(ordered)) - 1)],
        min_seconds=ordered[0],
        max_seconds=ordered[-1],
        stages=Stages(**stage_means),
        critical_path=replications[median].critical_path,
        mean_attempts=math.fsum(r.attempts for r in replications) / len(replications),
        mean_retries=math.fsum(r.retries for r in replications) / len(replications),
        finished=finished == len(replications),
        finished_fraction=finished / len(replications),
        stuck_or_failed=tuple(sorted(bad, key=position.__getitem__)),
        representative=replications[median],
        replications=replications,
        rates=rates,
        failures=failures,
        counts=counts,
    )
