"""One replay of a campaign DAG on a simulated clock (a discrete-event simulation; pure logic).

``Replay`` runs the nodes of a parsed ``offline.dag`` on a simulated clock, from the DAG's
start to the end of its FINAL node, and records when each stage ended, which chain of nodes set
the makespan (the critical path), and how many job attempts it took (a ``Replication``).
``sizing/simulate.py`` repeats it under a failure model and summarises the replications for
``offline-iaas plan --simulate``.

The model (roles, clock, streaming, failures, other nodes, randomness) is stated in
``sizing/simulate.py``.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from offline_iaas.config_sections import ClientConfig
from offline_iaas.errors import names_text
from offline_iaas.workflow.dag import Dag
from offline_iaas.workflow.submit import ROLES

SERVER_ROLE = "server"
CLIENT_ROLE = "client"
SHARD_ROLE = "shard"
MERGE_ROLE = "merge"
FINAL_ROLE = "final"
ROLE_OF_SUBMIT: dict[str, str] = {f"{role}.sub": role for role in ROLES}
"""Submit file basename to node role (``make-dag`` writes ``<role>.sub``)."""
_KIND_OF_ROLE = {
    SERVER_ROLE: "SERVICE",
    CLIENT_ROLE: "JOB",
    SHARD_ROLE: "JOB",
    MERGE_ROLE: "JOB",
    FINAL_ROLE: "FINAL",
}
MAX_REPLICATIONS = 10_000
"""The most Monte Carlo replications (``plan --simulate --replications``): each replays the
whole DAG, and the mean and p90 settle long before (a bound, not a wait without end)."""



@dataclass(frozen=True)
class SimulationRates:
    """How fast the nodes work (measured by a bench or a pilot run)."""

    server_data_seconds_per_second: float
    """Streaming throughput of one server, shared by the clients streaming to it."""
    client_data_seconds_per_second: float = 0.0
    """Most one client streams, whatever its share of the server; 0: no cap."""
    merge_data_seconds_per_second: float = math.inf
    """Throughput of one shard merge; ``inf``: shard merges take no time beyond the job start."""
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
        if not 1 <= self.replications <= MAX_REPLICATIONS:
            raise ValueError(f"replications must be in [1, {MAX_REPLICATIONS}], "
                             f"got {self.replications}")


@dataclass(frozen=True)
class Stages:
    """When each stage ended (seconds from the DAG's start); None: never (or no such node)."""

    servers_ready_seconds: float | None = None
    """The last server that starts is ready."""
    clients_done_seconds: float | None = None
    """Every client has ended (done or failed)."""
    shards_done_seconds: float | None = None
    """Every shard merge has ended."""
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



def node_role(submit: str) -> str | None:
    """The role of a node from its submit file (``server``, ``client``...), None if unknown."""
    return ROLE_OF_SUBMIT.get(PurePosixPath(submit).name)


# ---- the DAG as the replay sees it -----------------------------------------------------------
@dataclass
class ReplayGraph:
    """The DAG's JOB and FINAL nodes by index, with their roles, work and links."""

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


def graph_of(dag: Dag, work_seconds: Mapping[str, float], rates: SimulationRates,
             failures: FailureModel) -> ReplayGraph:
    """The replay's view of ``dag`` (ValueError naming a node the replay cannot run)."""
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
        elif role == SHARD_ROLE:
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
        raise ValueError(f"no work (data seconds) given for {names_text(tuple(missing))}")
    finals = [i for i, role in enumerate(roles) if role == FINAL_ROLE]
    return ReplayGraph(
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


class Replay:
    """The state of one replay; ``run`` returns its Replication."""

    def __init__(self, graph: ReplayGraph, rates: SimulationRates, failures: FailureModel,
                 draws: list[list[tuple[float, float]]] | None) -> None:
        self.graph, self.rates, self.failures, self.draws = graph, rates, failures, draws
        count, servers = len(graph.names), len(graph.servers)
        self.state = [_PENDING] * count
        self.missing = list(graph.parent_count)
        self.cause: list[str | None] = [None] * count
        self.end = [math.nan] * count
        self.attempts = [0] * count
        self.remaining = list(graph.work)
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
        self.running_in = dict.fromkeys(graph.limits, 0)
        self.queues: dict[str, deque[int]] = {cat: deque() for cat in graph.limits}
        self.events: list[tuple[float, int, int, int, int]] = []
        self.sequence = 0
        self.open = sum(1 for i in range(count) if i != graph.final)
        """Non-FINAL nodes that have not ended (done, failed or blocked)."""
        self.last_ended = -1

    # -- events
    def push(self, time: float, kind: int, a: int, b: int = 0) -> None:
        self.sequence += 1
        heapq.heappush(self.events, (time, self.sequence, kind, a, b))

    def run(self, keep_times: bool = False) -> Replication:
        graph, rates = self.graph, self.rates
        for s, starts in enumerate(graph.starting):
            if starts:
                self.push(rates.server_start_seconds, _SERVER_READY, s)
        if self.open == 0 and graph.final >= 0:
            self.submit(graph.final, 0.0, None)
        for i, count in enumerate(graph.parent_count):
            if count == 0 and i != graph.final:
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
        category = self.graph.category[i]
        if category in self.queues:
            if self.running_in[category] >= self.graph.limits[category]:
                self.state[i] = _QUEUED
                self.queues[category].append(i)
                return
            self.running_in[category] += 1
        self.state[i] = _SUBMITTED
        self.attempts[i] += 1
        self.push(now + self.rates.job_start_seconds, _JOB_STARTED, i)

    def release(self, i: int, now: float) -> None:
        """Node ``i``'s attempt ended: its slot goes to the first node queued for one."""
        category = self.graph.category[i]
        if category not in self.queues:
            return
        self.running_in[category] -= 1
        queue = self.queues[category]
        if queue:
            self.submit(queue.popleft(), now, self.graph.names[i])

    def on_job_started(self, now: float, i: int, _: int) -> None:
        self.state[i] = _RUNNING
        if self.graph.roles[i] != CLIENT_ROLE:
            self.push(now + self.graph.fixed_seconds[i], _NODE_DONE, i)
            return
        attempt = self.attempts[i]
        self.attempt_work[i] = self.remaining[i]
        self.attempt_fails[i] = False
        if self.draws is not None:
            fail_draw, fraction = self.draws[i][attempt - 1]
            if fail_draw < self.failures.failure_rate:
                self.attempt_fails[i] = True
                self.attempt_work[i] = self.remaining[i] * fraction
        own = self.graph.server_of[i]
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
        own = self.waiting_own[s] + [w for w in self.waiting_any
                                     if self.graph.server_of[w[0]] == s]
        self.waiting_own[s] = []
        self.waiting_any = [w for w in self.waiting_any if self.graph.server_of[w[0]] != s]
        # (a client past its deadline is listed twice: under its server and as waiting for any)
        clients = list(dict.fromkeys(i for i, attempt in own if self.waiting(i, attempt)))
        for i in clients:
            self.cause[i] = self.graph.servers[s]
        self.join(clients, s, now)
        if self.waiting_any:
            self.push(now, _ADOPT, s)

    def on_adopt(self, now: float, s: int, _: int) -> None:
        """Clients past their failover deadline go to the least loaded ready server."""
        waiting, self.waiting_any = self.waiting_any, []
        for i, attempt in waiting:
            if self.waiting(i, attempt):
                target = self.least_loaded()
                self.cause[i] = self.graph.servers[s]
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
            if s != self.graph.server_of[i]:
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
            elif self.attempts[i] <= self.graph.retries[i]:
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
        if i == self.graph.final:
            return
        self.open -= 1
        name = self.graph.names[i]
        if state == _DONE:
            for child in self.graph.children[i]:
                self.missing[child] -= 1
                if self.missing[child] == 0 and self.state[child] == _PENDING:
                    self.submit(child, now, name)
        else:
            todo = list(self.graph.children[i])
            while todo:
                child = todo.pop()
                if self.state[child] == _PENDING:
                    self.state[child] = _BLOCKED
                    self.open -= 1
                    todo.extend(self.graph.children[child])
        if self.open == 0 and self.graph.final >= 0:
            self.submit(self.graph.final, now, name)

    def result(self, keep_times: bool) -> Replication:
        graph, names = self.graph, self.graph.names
        stuck = tuple(names[i] for i, st in enumerate(self.state)
                      if st == _RUNNING and graph.roles[i] == CLIENT_ROLE)
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
                shards_done_seconds=self.stage(SHARD_ROLE),
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
        ends = [self.end[i] for i, r in enumerate(self.graph.roles) if r == role]
        if not ends or any(math.isnan(e) for e in ends):
            return None
        return max(ends)

    def path(self, last: int) -> tuple[str, ...]:
        if last < 0:
            return ()
        index = {name: i for i, name in enumerate(self.graph.names)}
        path: list[str] = []
        seen: set[str] = set()
        name: str | None = self.graph.names[last]
        while name is not None and name not in seen:
            path.append(name)
            seen.add(name)
            i = index.get(name)
            name = None if i is None else self.cause[i]
        return tuple(reversed(path))

