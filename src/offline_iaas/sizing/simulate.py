"""``offline-iaas plan --simulate``: predict a campaign DAG's makespan by replaying it.

``simulate`` replays a parsed ``offline.dag`` (``sizing/replay.py``) from the DAG's start to the
end of its FINAL node, once without failures or as Monte Carlo replications under a failure
model, and reports when each stage ended, which chain of nodes set the makespan (the critical
path), and how many job attempts it took. ``simulate_run`` does it for a
run directory with the rates a finished pilot measured (``sizing/pilot.py``).

Model
-----
Roles. A node's role is its submit file's basename: ``server.sub`` (a SERVICE node: a Triton
server), ``client.sub`` (a JOB streaming its share to the server named by its ``server``
variable), ``shard.sub`` (a JOB merging the parts of its parent clients), ``merge.sub`` (the
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

Other nodes. A shard merge takes its work (data seconds; by default the sum of its parents'
work) at ``merge_data_seconds_per_second``; shard merges run in parallel without limit (unless a
``MAXJOBS`` category says otherwise). The index merge takes ``merge_index_seconds``, the FINAL
node ``final_seconds``; neither fails.

Randomness. The draws of replication ``r`` are taken from one ``random.Random(seed)`` in a
fixed order (each client in file order; for each of its ``RETRY + 1`` possible attempts, whether
it fails, then where), before the replay: the same inputs and seed give the same result on
any machine, and a client's draws do not depend on the schedule, so two DAGs of the same
clients and RETRY counts (another MAXJOBS, other rates) see the same failures for one seed. Only
the draws up to a client's first attempt that does not fail are kept (no later one runs); the
generator is moved past the rest, so memory does not grow with ``RETRY``. Without
failures (``failure_rate = 0``) the replay is deterministic and is run once.

Results. The makespan is averaged over the replications (a replication that fails stops when
FINAL ends; one that never stops makes the mean infinite); the stage times over the
replications that reach each stage. The critical path and the end time of each node are those
of the median replication (replayed a second time, so that the others need not keep them).
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields

from offline_iaas import records
from offline_iaas.config import load_config
from offline_iaas.errors import names_text
from offline_iaas.job_specs import read_client_job, read_shard_job
from offline_iaas.records import ClientShare
from offline_iaas.rundir import RunDir
from offline_iaas.sizing.pilot import PilotRun, check_same_stream
from offline_iaas.sizing.replay import (
    CLIENT_ROLE,
    FINAL_ROLE,
    MERGE_ROLE,
    SERVER_ROLE,
    SHARD_ROLE,
    FailureModel,
    Replay,
    Replication,
    SimulationRates,
    Stages,
    graph_of,
)
from offline_iaas.workflow.binding import read_run_dag
from offline_iaas.workflow.dag import Dag

P90 = 0.9
_PATH_SHOWN = 8
"""``describe`` shows a longer critical path as its first and last few nodes."""


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
            f"{c.get(SHARD_ROLE, 0)} shard merge(s), {c.get(MERGE_ROLE, 0)} index merge, "
            f"{c.get(FINAL_ROLE, 0)} FINAL node",
            f"model: each server streams {_rate(r.server_data_seconds_per_second)} shared by "
            f"its streaming clients{cap}; servers ready after {_seconds(r.server_start_seconds)}"
            f", {_seconds(r.job_start_seconds)} to start each job attempt; shard merges "
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
                ("last shard merge", SHARD_ROLE, s.shards_done_seconds),
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
            lines.append(f"failed over: {names_text(rep.failed_over)}")
        if not self.finished:
            lines.append(
                f"NOT FINISHED in {runs - round(self.finished_fraction * runs)} of {runs} "
                f"replication(s): stuck or failed: {names_text(self.stuck_or_failed)}"
            )
            if rep.stuck:
                lines.append(f"  stuck (waiting for a server that never starts): "
                             f"{names_text(rep.stuck)}")
            if rep.failed:
                lines.append(f"  failed (retries exhausted): {names_text(rep.failed)}")
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


def _path(path: tuple[str, ...]) -> str:
    if not path:
        return "none"
    if len(path) <= _PATH_SHOWN:
        return " -> ".join(path)
    half = _PATH_SHOWN // 2
    return (" -> ".join(path[:half]) + f" -> ... ({len(path) - 2 * half} more) -> "
            + " -> ".join(path[-half:]))


def share_work_seconds(shares: Iterable[ClientShare]) -> dict[str, float]:
    """Client node name to the data seconds it streams (warm-ups included).

    The shares of a run directory are ``[read_client_job(run, node) for node in clients]``
    (``records.py``).
    """
    return {share.node: share.streamed_seconds for share in shares}


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
        Node name to its work in data seconds: every client node (``share_work_seconds``),
        and shard merge nodes (default: the sum of their parents' work).
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
    graph = graph_of(dag, work_seconds, rates, failures)
    if failures.failure_rate == 0:
        once = Replay(graph, rates, failures, None).run(keep_times=True)
        replications = (once,) * failures.replications
        median = 0
    else:
        rng = random.Random(failures.seed)
        clients = [i for i, role in enumerate(graph.roles) if role == CLIENT_ROLE]

        def draws() -> list[list[tuple[float, float]]]:
            out: list[list[tuple[float, float]]] = [[] for _ in graph.names]
            for i in clients:
                out[i] = _attempt_draws(rng, graph.retries[i] + 1, failures.failure_rate)
            return out

        runs, states = [], []
        for _ in range(failures.replications):
            states.append(rng.getstate())
            runs.append(Replay(graph, rates, failures, draws()).run())
        median = _median_index([r.makespan_seconds for r in runs])
        rng.setstate(states[median])
        runs[median] = Replay(graph, rates, failures, draws()).run(keep_times=True)
        replications = tuple(runs)
    counts = {SERVER_ROLE: len(graph.servers)}
    for role in graph.roles:
        counts[role] = counts.get(role, 0) + 1
    return _summarise(replications, median, rates, failures, counts, graph.names)


_SKIP_CHUNK_DRAWS = 1 << 14
"""Attempts' draws passed over at once (``_attempt_draws``): bounds the memory of a skip."""


def _attempt_draws(rng: random.Random, attempts: int, failure_rate: float
                   ) -> list[tuple[float, float]]:
    """One client's (fails?, fraction) draws: those of its attempts up to its first that does
    not fail (no later attempt runs), then ``rng`` moved past the draws of the rest, as if
    they had been drawn (each ``random()`` takes two 32-bit words of the generator, so an
    attempt's pair four: ``getrandbits`` takes as many), so the stream, and the result of a
    seed, are those of drawing every attempt; memory does not grow with the RETRY count."""
    out: list[tuple[float, float]] = []
    while len(out) < attempts:
        out.append((rng.random(), rng.random()))
        if out[-1][0] >= failure_rate:
            break
    left = attempts - len(out)
    while left > 0:
        step = min(left, _SKIP_CHUNK_DRAWS)
        rng.getrandbits(128 * step)
        left -= step
    return out


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


def simulate_run(run: RunDir, pilot: PilotRun, failures: FailureModel | None = None
                 ) -> SimulationResult:
    """Replay the DAG of the run directory ``run`` (``make-dag``'s) with the rates a finished
    ``pilot`` measured: each server streams what the pilot's did per second, shared by its
    clients; a shard merge works at the pilot's merge throughput; the servers' start-up, a
    job's start-up, the index and the FINAL node take the pilot's times.

    Raises
    ------
    ConfigError
        A pilot of another stream (``pilot.check_same_stream``).
    ValueError
        A DAG the replay cannot run (``replay.graph_of``).
    """
    config = load_config(run.config)
    check_same_stream(pilot, config)
    info = records.read_run_info(run)
    work = share_work_seconds(read_client_job(run, node) for node in info.clients)
    shards = list(info.shards)
    for node in shards:
        work[node] = read_shard_job(run, node).data_seconds
    per_server = pilot.streamed_seconds / pilot.streaming_seconds / pilot.config.layout.servers
    index = (pilot.index_seconds if shards else
             config.data.duration / pilot.merge_rate if pilot.merge_rate else pilot.merge_seconds)
    rates = SimulationRates(
        server_data_seconds_per_second=per_server,
        merge_data_seconds_per_second=pilot.merge_rate or math.inf,
        merge_index_seconds=index, final_seconds=pilot.final_seconds,
        server_start_seconds=pilot.start_seconds, job_start_seconds=pilot.job_start_seconds)
    if failures is None:
        failures = FailureModel(failover_seconds=config.client.failover_seconds)
    return simulate(read_run_dag(run), work, rates, failures)
