"""``offline-iaas run-local``: run a run directory's DAG with local processes.

Works only from the written files: ``offline.dag`` and the submit files it names, read with
HTCondor's parser, the node's VARS expanded into ``executable``, ``arguments``, ``initialdir``,
``output``, ``error``, ``environment`` and the file-transfer commands. SERVICE nodes start
first and are stopped at the end; JOB nodes run once their parents are done, throttled by
``MAXJOBS``, retried per ``RETRY`` (``UNLESS-EXIT``), after their PRE script (``SCRIPT DEFER``
re-runs it later); ``ABORT-DAG-ON`` removes every running job; the FINAL node runs last with
``$(DAG_STATUS)`` and ``$(FAILED_COUNT)``. Nodes whose output exists (and whose parents' does)
are not run again. Every node runs in its own process group, so that stopping it stops its
whole process tree, and dies with run-local (``lifetime.die_with_parent``); servers start
only once a job that uses them is to run (not for merges alone).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from offline_iaas.rundir import RunDir
from offline_iaas.workflow.binding import read_bound_dag
from offline_iaas.workflow.completion import not_done
from offline_iaas.workflow.emulation import node_command
from offline_iaas.workflow.executor import Executor
from offline_iaas.workflow.processes import NodeRun, Signals, locked
from offline_iaas.workflow.submit import parse_submit

logger = logging.getLogger(__name__)

STOP_TIMEOUT_SECONDS = 30.0
"""How long a stopped node may take to exit after SIGTERM before its group is killed."""


def run_local(
    run: RunDir,
    *,
    stop_timeout_seconds: float = STOP_TIMEOUT_SECONDS,
    on_state: Callable[[dict[str, tuple[str, str]]], None] | None = None,
) -> None:
    """Run the DAG of a run directory on this machine.

    Parameters
    ----------
    run
        Directory written by ``make-dag`` (or any directory with an ``offline.dag`` whose
        submit files sit beside it).
    stop_timeout_seconds
        How long a stopped node may take to exit after SIGTERM before its group is killed.
    on_state
        Called with every node's ``(kind, status)`` whenever the state file is written (a
        progress display).

    Raises
    ------
    RunError
        If the DAG or a submit file is invalid (before anything starts), if a node failed all
        its attempts or the DAG was aborted (after the FINAL node has run, naming the failed
        nodes and their log files), or on SIGTERM. Every process started is stopped in all
        cases.
    """
    run = run.absolute()
    # run.json, campaign.toml and the model: make-dag's plan; each read once
    dag, bound = read_bound_dag(run)

    submits: dict[str, dict[str, str]] = {}
    runs: dict[str, NodeRun] = {}
    for ordinal, node in enumerate(dag.nodes.values(), start=1):
        if node.submit not in submits:
            submits[node.submit] = parse_submit(run.resolve(node.submit))
        command = node_command(run, node, submits[node.submit], ordinal)
        runs[node.name] = NodeRun(node=node, command=command, ordinal=ordinal)

    jobs = [r for r in runs.values() if r.node.kind == "JOB"]
    # completeness.py: record, hash, size, checksum, place
    redo = not_done(run, dag, config=bound[0] if bound is not None else None)
    for r in jobs:
        if r.node.name not in redo:
            r.status = "complete"
    if all(r.status == "complete" for r in jobs):
        logger.info(f"nothing to do: every node of {run.path} is complete")
        return
    for r in jobs:
        problem = redo.get(r.node.name)
        if problem is None:
            logger.info(f"{r.node.name}: complete, not run again")
        elif problem.written:  # something of it is there: say why it is redone
            logger.info(f"{r.node.name}: runs again: {problem}")

    with locked(run):
        signals = Signals()
        executor = Executor(
            run, dag, runs, submits, stop_timeout_seconds, signals, on_state
        )
        began = time.monotonic()
        executor.write_state()
        signals.install()
        try:
            executor.run()
        finally:
            # Signals during the stop are held, so they cannot cut it short.
            signals.hold = True
            try:
                executor.stop_all()
            finally:
                signals.restore()
        for r in (r for r in runs.values() if r.is_service and r.attempts > 1):  # say why
            logger.warning(f"{r.node.name}: restarted {r.attempts - 1} time(s); "
                           f"offline-iaas status {run.path} says why")
        if signals.pending is not None:
            raise signals.pending
        error = executor.failure()
        if error is not None:
            raise error
        # the nodes status counts: every one but the services (the FINAL node too)
        done = sum(1 for r in runs.values() if not r.is_service and r.status == "done")
        elapsed = time.monotonic() - began
        logger.info(f"run-local: {done} node{'s' if done != 1 else ''} done in {elapsed:.1f} s")
