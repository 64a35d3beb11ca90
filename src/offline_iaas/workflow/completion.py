"""Which nodes of a run directory's DAG are complete, and so are not run again, and why the
others are not (``completeness.py``: one definition of a complete node)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from offline_iaas.completeness import (
    Hashes,
    NotDone,
    ReadAlready,
    campaign_hashes,
    node_problem,
    set_aside,
)
from offline_iaas.config import CampaignConfig
from offline_iaas.errors import OfflineIaasError
from offline_iaas.rundir import RunDir
from offline_iaas.workflow.dag import Dag

if TYPE_CHECKING:
    from offline_iaas.workflow.processes import NodeRun

logger = logging.getLogger(__name__)


def not_done(run: RunDir, dag: Dag, verify: bool = False, config: CampaignConfig | None = None,
             read: ReadAlready | None = None) -> dict[str, NotDone]:
    """Why each JOB node whose output is not there (or not this campaign's, or damaged) is not
    done; complete nodes are absent. A node below one that is not done is not done either
    (its output was made from the old one). ``verify``: read every data file's checksum, and
    set aside those that fail (``completeness.set_aside``), so that ``run-local`` reruns
    their nodes. ``config`` and ``read``: the run's campaign.toml and those of its files read
    already (``binding.check_run``'s; None: read here)."""
    hashes = Hashes.of(config) if config is not None else campaign_hashes(run)
    why = {}
    for node in dag.nodes.values():
        if node.kind == "JOB":
            problem = node_problem(run, node.name, hashes, verify, read)
            if problem is not None:
                why[node.name] = set_aside(run, problem) if verify else problem
    changed = True
    while changed:
        changed = False
        for node in dag.nodes.values():
            if node.kind != "JOB" or node.name in why:
                continue
            redone = sorted(p for p in node.parents if p in why)
            if redone:
                why[node.name] = NotDone(f"made from the old output of {', '.join(redone)}")
                changed = True
    return why


def reopen_damaged_parents(run: RunDir, dag: Dag, runs: dict[str, NodeRun], node: str
                           ) -> bool:
    """After an attempt of ``node`` failed (a merge refuses a part whose checksum fails): its
    parents taken for complete whose output is not, their checksums read in full, are set
    aside and pending again, so that run-local runs them before ``node``'s next attempt;
    whether any was."""
    try:
        hashes = campaign_hashes(run)
    except OfflineIaasError:  # campaign.toml damaged meanwhile: the node's own error says so
        return False
    reopened = False
    for parent in dag.nodes[node].parents:
        if dag.nodes[parent].kind != "JOB" or runs[parent].status not in ("done", "complete"):
            continue
        problem = node_problem(run, parent, hashes, verify=True)
        if problem is not None:
            logger.warning(f"{parent}: runs again: {set_aside(run, problem)}")
            runs[parent].status = "pending"
            reopened = True
    return reopened
