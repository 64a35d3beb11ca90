"""``offline-iaas status RUN``: where a campaign stands, and the FINAL node's summary.

Node states come from whichever was written last: DAGMan's node status file
(``offline.status``, ClassAds, ``NODE_STATUS_FILE``) or run-local's ``local-state.json``.
Data seconds done count what the complete parts (``parts/<client>.json``) analysed, the gaps
of bad frame files left out (and counted as lost); the ETA extrapolates
the rate since the run started (the first node start run-local recorded, else the oldest
file in ``logs/``, which condor_submit creates when DAGMan submits the first job).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import ClassVar

from pydantic import BaseModel, Field

from offline_iaas import records
from offline_iaas.binding import client_job_or_problem
from offline_iaas.bounded_read import read_text
from offline_iaas.completeness import ReadAlready, read_record
from offline_iaas.config import CampaignConfig, load_config, read_config_text
from offline_iaas.errors import ConfigError, RunError
from offline_iaas.job_specs import ClientJob
from offline_iaas.lifetime import is_running
from offline_iaas.local_state import LocalState, read_local_state, unix_seconds
from offline_iaas.records import ClientShare, PartRecord, RunInfo
from offline_iaas.rundir import MERGE_NODE, RunDir
from offline_iaas.serve.crashes import crash_lines
from offline_iaas.workflow.binding import CheckedRun, check_run
from offline_iaas.workflow.completion import not_done
from offline_iaas.workflow.failures import last_error

logger = logging.getLogger(__name__)

# DAGMan NodeStatus values (node status file) -> our states.
_DAGMAN_STATES = {0: "waiting", 1: "waiting", 2: "waiting", 3: "running", 4: "running",
                  5: "done", 6: "failed", 7: "not run"}
# run-local statuses -> our states.
_LOCAL_STATES = {"pending": "waiting", "prerun": "waiting", "deferred": "waiting",
                 "running": "running", "removing": "running", "done": "done",
                 "complete": "done", "failed": "failed", "not-run": "not run",
                 "removed": "not run", "stopped": "stopped", "exited": "exited"}


@dataclass
class NodeState:
    """One node of the DAG."""

    name: str
    kind: str
    state: str
    """waiting, running, done, failed, not run, interrupted (recorded running by a run-local
    that was killed: its process is gone), or, for servers, stopped/exited."""
    retries: int = 0
    """Attempts beyond the first."""
    detail: str = ""
    server: str = ""
    """A client's server: the one it ended on once its part is written, else its own."""


class RunStatus(BaseModel):
    """A run directory's progress (``status --json`` prints it; ``FinalSummary`` holds it)."""

    run_dir: str
    source: str
    """Where the node states came from."""
    nodes: list[NodeState] = Field(default_factory=list)
    data_seconds_done: float = 0.0
    """Data seconds analysed by the complete parts (in gaps of bad frame files: not)."""
    data_seconds_total: float = 0.0
    """Data seconds to analyse: the planned ones less ``data_seconds_lost``."""
    data_seconds_lost: float = 0.0
    """Planned data seconds in the gaps of the bad frame files known so far."""
    bad_frame_files: int = 0
    elapsed_seconds: float | None = None
    eta_seconds: float | None = None
    output_complete: bool = False
    server_crashes: list[str] = Field(default_factory=list)
    """Server processes that died by a signal, and server restarts (``serve/crashes.py``)."""

    def count(self, state: str) -> int:
        return sum(1 for n in self.nodes if n.state == state and n.kind != "SERVICE")


def _data_seconds(run: RunDir, config: CampaignConfig, specs: dict[str, ClientShare | None],
                  complete: set[str], info: RunInfo | None,
                  sidecars: dict[str, PartRecord | None]) -> tuple[float, float, float, int]:
    """(done, total, lost, bad files) over the client nodes (``specs``: their job specs, None
    where unreadable; ``complete``: the nodes whose output is there; ``info`` and
    ``sidecars``: run.json, None where there is none, and the parts' sidecars, read already),
    in data seconds analysed: a part's kept windows less those in the gaps of the bad frame
    files known so far (make-dag's and the complete parts'), which are ``lost`` (the merge
    stages the same windows)."""
    from offline_iaas.merge.stitch import analysed_windows, bad_files, campaign_stretches

    stride = config.stride_seconds
    clients = list(specs)
    shares = [spec for spec in specs.values() if spec is not None]
    if not clients or len(shares) < len(clients):  # unreadable specs: clients as equal shares
        total = config.data.duration
        return (total * len(complete & set(clients)) / len(clients) if clients else 0.0,
                total, 0.0, 0)
    try:
        bad = bad_files(run, shares, info=info, sidecars=sidecars)
    except RunError:  # no run record: no bad file known
        bad = []
    windows = analysed_windows(config.geometry, shares, campaign_stretches(config, shares, bad))
    planned = sum(share.kept_windows for share in shares)
    total = sum(windows.values())
    done = sum(windows[node] for node in complete & set(clients))
    return done * stride, total * stride, (planned - total) * stride, len(bad)


def _note_server(node: NodeState, spec: ClientShare | None,
                 sidecar: PartRecord | None) -> None:
    """A client's server (its spec's, or the last its sidecar names), and a move (failover or
    rebalance) said in its detail."""
    own = spec.server if spec is not None else ""
    servers = list(sidecar.servers) if sidecar is not None else []
    node.server = own
    if servers:
        node.server = servers[-1]
        if own and servers != [own]:
            moved = f"on {node.server} (moved from {own})"
            node.detail = f"{node.detail}; {moved}" if node.detail else moved


def _local_states(local: LocalState) -> dict[str, NodeState]:
    out = {}
    writer = local.executor
    gone = ("run-local did not stop it" if writer is None
            or not is_running(writer.pid, writer.pid_start)
            else f"run-local ({writer.pid}) could not record its end (a full disk?)")
    for name, node in local.nodes.items():
        detail = ""
        if node.status == "deferred":
            detail = "PRE script: waiting for its server's address"
        elif node.status == "prerun":
            detail = "PRE script running"
        elif node.exit_code not in (None, 0):
            detail = f"exit code {node.exit_code}"
        state = _LOCAL_STATES.get(node.status, node.status)
        if state == "running" and node.pid is not None and not is_running(
                node.pid, node.pid_start):  # a stale record: run-local killed, a full disk
            state, detail = "interrupted", f"its process ({node.pid}) is gone: {gone}"
        out[name] = NodeState(name, node.kind, state, max(0, node.attempts - 1), detail)
    return out


def _dagman_states(text: str) -> dict[str, NodeState]:
    import classad2

    out = {}
    for ad in classad2.parseAds(text):
        if ad.get("Type") != "NodeStatus":
            continue
        name = str(ad.get("Node"))
        code = int(ad.get("NodeStatus", 0))
        details = str(ad.get("StatusDetails", ""))
        state = _DAGMAN_STATES.get(code, "waiting")
        if code == 3 and "running" not in details.lower():
            state = "waiting"  # queued: idle or held
        if code == 2:
            details = details or "PRE script running"
        out[name] = NodeState(name, "JOB", state, int(ad.get("RetryCount", 0)), details)
    return out


@dataclass(frozen=True)
class KnownStates:
    """The node states a run's files record (``_known_states``)."""

    states: dict[str, NodeState]
    source: str
    """Where they came from."""
    local: LocalState | None
    """run-local's ``local-state.json`` (None: none)."""
    dagman: bool
    """Whether they are DAGMan's (its node status file is the newer)."""


def _known_states(run: RunDir) -> KnownStates:
    """The node states of whichever was written last, DAGMan's node status file or run-local's
    ``local-state.json`` (RunError naming the file where the one read, or run-local's, is
    damaged)."""
    local_path, dagman_path = run.local_state, run.dagman_status
    local = read_local_state(run)
    use_dagman = dagman_path.exists() and (
        local is None or dagman_path.stat().st_mtime >= local_path.stat().st_mtime
    )
    if use_dagman:
        try:
            states = _dagman_states(read_text(dagman_path))  # a FIFO is not waited on
        except (OSError, ValueError) as err:  # NotRegularFile, TooLarge, UnicodeDecodeError
            raise RunError(f"{dagman_path}: cannot read DAGMan's node status: {err}") from None
        return KnownStates(states, f"DAGMan ({dagman_path.name})", local, True)
    if local is not None:
        return KnownStates(_local_states(local), f"run-local ({local_path.name})", local, False)
    return KnownStates({}, "files only (not started)", None, False)


def checked_inputs(run: RunDir, config_text: str | None = None
                   ) -> tuple[CheckedRun, KnownStates]:
    """What ``status`` reads of a run before its nodes' outputs, each file once, and refuses:
    its DAG, make-dag's plan and job specs (``binding.check_run``; ``config_text``:
    campaign.toml's text read already), and its node states (``_known_states``); ``report``
    exits by the same refusals (``report_command``)."""
    run = run.absolute()
    return check_run(run, config_text), _known_states(run)


def report_command(run: RunDir) -> None:
    """``offline-iaas report``: ``report.build.write_report``, then, where ``status`` refuses
    the run, the same error (``checked_inputs``: campaign.toml or run.json missing or
    damaged, campaign.toml edited since make-dag, the DAG without a node run.json lists, a job
    spec edited since make-dag, local-state.json damaged, ...). The page is written first,
    whatever state the run is in, with status's line at its top, and names the problem where
    it was not drawn too (a damaged file). Each file is read once: the page is
    drawn from what the check read (``report.run_view.ReadFirst``); where the check refuses
    the run, it reads for itself what it can."""
    from offline_iaas.report.build import write_report
    from offline_iaas.report.run_view import ReadFirst

    try:  # read once: parsed by the check, shown on the page
        config_text: str | ConfigError = read_config_text(run.absolute().config)
    except ConfigError as err:  # the check reads it again where it needs it, and says why
        config_text = err
    try:
        checked, known = checked_inputs(run, config_text if isinstance(config_text, str)
                                        else None)
    except Exception as err:  # a refusal, or an error the check did not foresee: the page first
        refusal = str(err) or type(err).__name__
        logger.info(f"report: {write_report(run, config_text=config_text, refusal=refusal)}")
        raise
    read = None
    if checked.config is not None and checked.info is not None:  # else: a DAG by hand
        read = ReadFirst(checked.config, checked.info, checked.specs, known.local)
    logger.info(f"report: {write_report(run, read, config_text)}")


def _started(run: RunDir, state: LocalState | None) -> float | None:
    if state:
        times = [unix_seconds(n.started) for n in state.nodes.values() if n.started]
        if times:
            return min(times)
    logs = [p.stat().st_mtime for p in run.logs.glob("*") if p.is_file()]
    return min(logs) if logs else None


def _ended(status_file: Path | None, state: LocalState | None, finished: bool) -> float:
    """Now, or when a finished run ended (its last node's end, or the status file's update)."""
    if finished and status_file is not None:
        return status_file.stat().st_mtime
    if finished and state:
        times = [unix_seconds(n.ended) for n in state.nodes.values()
                 if n.kind == "JOB" and n.ended]
        if times:
            return max(times)
    return time.time()


def read_status(run: RunDir, verify: bool = False) -> RunStatus:
    """The progress of a run directory (any time: before, during or after the run);
    ``verify``: read every checksum (``completion.not_done``)."""
    run = run.absolute()
    checked, known = checked_inputs(run)
    dag = checked.dag
    states, local, use_dagman = known.states, known.local, known.dagman
    dagman_path = run.dagman_status

    status = RunStatus(run_dir=str(run.path), source=known.source)
    names = [n.name for n in dag.nodes.values() if n.kind == "JOB" and n.submit == "client.sub"]
    read = ReadAlready({node: spec.job for node, spec in checked.specs.items()},  # each once
                       {node: read_record(PartRecord, run.part(node)[1]) for node in names})
    problems = not_done(run, dag, verify, checked.config, read)
    complete = {n.name for n in dag.nodes.values() if n.kind == "JOB" and n.name not in problems}
    for node in dag.nodes.values():
        found = states.get(node.name)
        if found is None:
            found = NodeState(node.name, node.kind,
                              "done" if node.name in complete else "waiting")
        found.kind = node.kind
        problem = problems.get(node.name)
        if found.state in ("waiting", "not run") and node.name in complete:
            found.state = "done"  # its output is there (a resubmission will skip it)
        elif found.state == "done" and problem is not None:
            found.state = "waiting"  # done once, but its output is gone, damaged or stale
            found.detail = problem.reason
        elif found.state in ("waiting", "not run") and problem is not None and problem.written:
            found.detail = f"{found.detail}; {problem}" if found.detail else problem.reason
        if found.state == "failed":
            why = last_error(run.node_log(node.name, "err"))
            found.detail = f"{found.detail}: {why}" if found.detail and why else \
                found.detail or why
        status.nodes.append(found)

    # each client's job spec and part sidecar, read once
    # (a sidecar missing or damaged: None; why the node is not done is not_done's)
    config = checked.config if checked.config is not None else load_config(run.config)
    clients = {name: (client_job_or_problem(run, config.geometry, name, checked.specs.get(name)),
                      sidecar if isinstance(sidecar := read.sidecars[name], PartRecord) else None)
               for name in names}
    shares = {name: job.share if isinstance(job, ClientJob) else None
              for name, (job, _) in clients.items()}
    for node in status.nodes:
        if node.name in clients:
            job = clients[node.name][0]
            if isinstance(job, str):  # the spec's problem, named: its node cannot run
                node.detail = f"{node.detail}; {job}" if node.detail else job
            _note_server(node, shares[node.name], clients[node.name][1])
    (status.data_seconds_done, status.data_seconds_total, status.data_seconds_lost,
     status.bad_frame_files) = _data_seconds(
         run, config, shares, complete, checked.info,
         {name: sidecar for name, (_, sidecar) in clients.items()})
    status.server_crashes = crash_lines(run, [n.name for n in dag.nodes.values()
                                              if n.kind == "SERVICE"], local)
    status.output_complete = MERGE_NODE in dag.nodes and MERGE_NODE in complete
    started = _started(run, local if not use_dagman else None)
    finished = not any(n.state in ("waiting", "running") for n in status.nodes
                       if n.kind == "JOB")
    if started is not None:
        status.elapsed_seconds = max(0.0, _ended(dagman_path if use_dagman else None, local,
                                                 finished) - started)
    left = status.data_seconds_total - status.data_seconds_done
    if status.elapsed_seconds and status.data_seconds_done > 0 and left > 0:
        rate = status.data_seconds_done / status.elapsed_seconds
        status.eta_seconds = left / rate
    elif left <= 0 and status.data_seconds_total > 0:
        status.eta_seconds = 0.0
    return status


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "unknown"
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s"


def balance_lines(status: RunStatus) -> list[str]:
    """A line per server whose clients are all done while other servers' clients are not (its
    GPU idles while the campaign waits on the others)."""
    clients = [n for n in status.nodes if n.server and n.kind == "JOB"]
    left: dict[str, int] = {n.name: 0 for n in status.nodes if n.kind == "SERVICE"}
    for n in clients:
        if n.state != "done":
            left[n.server] = left.get(n.server, 0) + 1
    waiting = sum(left.values())
    return [f"{server}: all its clients done while {waiting} client(s) of other servers are not"
            for server, count in left.items() if count == 0 and waiting]


def status_lines(status: RunStatus) -> list[str]:
    """The status as the terminal shows it."""
    width = max((len(n.name) for n in status.nodes), default=4)
    lines = [f"run {status.run_dir} (node states from {status.source})"]
    servers = [n.name for n in status.nodes if n.kind == "SERVICE"]
    column = max((len(s) for s in servers), default=6)
    lines.append(f"  {'node'.ljust(width)}  {'kind':7}  {'state':8}  retries  "
                 f"{'server'.ljust(column)}  detail")
    for n in status.nodes:
        lines.append(
            f"  {n.name.ljust(width)}  {n.kind:7}  {n.state:8}  {n.retries:7d}  "
            f"{n.server.ljust(column)}  {n.detail}".rstrip()
        )
    lines += balance_lines(status)
    if status.server_crashes:
        lines.append("server crashes and restarts:")
        lines += [f"  {line}" for line in status.server_crashes]
    jobs = [n for n in status.nodes if n.kind != "SERVICE"]
    counts = ", ".join(
        f"{status.count(s)} {s}"
        for s in ("done", "running", "waiting", "failed", "not run", "interrupted")
        if status.count(s)
    )
    lines.append(f"nodes: {len(jobs)} ({counts})")
    total, done = status.data_seconds_total, status.data_seconds_done
    share = 100 * done / total if total else 0.0
    lost = (f"; {status.data_seconds_lost:.1f} s lost to {status.bad_frame_files} bad frame "
            "file(s)" if status.data_seconds_lost > 0 else "")
    lines.append(f"data seconds done: {done:.1f} of {total:.1f} ({share:.0f}%){lost}")
    lines.append(f"elapsed: {_duration(status.elapsed_seconds)}")
    if status.output_complete:
        lines.append("output: output/campaign.h5 (complete)")
    elif status.count("failed"):
        lines.append("ETA: none (nodes failed; fix and run again: the finished parts are kept)")
    elif any(n.state == "interrupted" for n in status.nodes):
        lines.append("ETA: none (run-local was interrupted; run it again: the finished parts "
                     "are kept)")
    else:
        lines.append(f"ETA: {_duration(status.eta_seconds)}")
    return lines


def print_status(run: RunDir, as_json: bool = False, verify: bool = False) -> None:
    """Print a run directory's status on stdout (lines, or one JSON object): the command's
    output, not log lines, so ``--quiet`` keeps it (``verify``: ``read_status``'s)."""
    status = read_status(run, verify)
    if as_json:
        print(status.model_dump_json(indent=2), flush=True)
    else:
        for line in status_lines(status):
            print(line, flush=True)


class FinalSummary(records.Record, RunStatus):
    """``RUN/summary.json``: the run's status when the DAG ended, and DAGMan's verdict (one
    flat object: a summary written before it was a record, without ``schema_version``, reads
    as it is)."""

    KIND: ClassVar[str] = "FINAL node's summary (summary.json)"

    dag_status: int
    """DAGMan's ``$(DAG_STATUS)``: 0 ok, 2 nodes failed, 3 aborted, 4 removed."""
    failed_count: int
    """DAGMan's ``$(FAILED_COUNT)``."""
    written: str
    """When the FINAL node wrote it (ISO 8601)."""


def read_final_summary(run: RunDir) -> FinalSummary:
    """``RUN/summary.json`` (RunError naming the file where it is missing or damaged)."""
    return records.read(FinalSummary, run.final_summary)


def final_summary(run: RunDir, dag_status: int, failed_count: int) -> FinalSummary:
    """The FINAL node: write ``summary.json``, print the status; RunError if the DAG did not
    succeed.

    Parameters
    ----------
    run
        The run directory.
    dag_status, failed_count
        DAGMan's ``$(DAG_STATUS)`` (0 ok, 2 nodes failed, 3 aborted, 4 removed) and
        ``$(FAILED_COUNT)``.
    """
    run = run.absolute()
    status = read_status(run)
    summary = records.build(FinalSummary, {
        **status.model_dump(),
        "dag_status": dag_status,
        "failed_count": failed_count,
        "written": datetime.now().astimezone().isoformat(timespec="seconds"),
    })
    path = run.final_summary
    records.write(summary, path)
    for line in status_lines(status):
        print(line, flush=True)
    print(f"summary: {path}", flush=True)
    if dag_status != 0 or failed_count or not status.output_complete:
        why = {2: "nodes failed", 3: "the DAG was aborted", 4: "the DAG was removed"}.get(
            dag_status, f"DAG status {dag_status}"
        )
        merge = next((n for n in status.nodes if n.name == MERGE_NODE), None)
        if dag_status == 0:  # the merge's own reason: a copy of the run is not "missing"
            why = (f"the campaign output is not complete ({MERGE_NODE}: {merge.detail})"
                   if merge is not None and merge.detail else "the campaign output is missing")
        raise RunError(
            f"campaign incomplete: {why} ({failed_count} failed); "
            f"{status.data_seconds_done:.1f} of {status.data_seconds_total:.1f} data seconds "
            "done. Fix the cause and submit again: finished parts are kept."
        )
    return summary
