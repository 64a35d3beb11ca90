"""Which nodes of a run directory's DAG are complete, and so are not run again, and why the
others are not (``completeness.py``: one definition of a complete node)."""

from __future__ import annotations

from offline_iaas.completeness import NotDone, campaign_hashes, node_problem
from offline_iaas.rundir import RunDir
from offline_iaas.workflow.dag import Dag


def not_done(run: RunDir, dag: Dag) -> dict[str, NotDone]:
    """Why each JOB node whose output is not there (or not this campaign's, or damaged) is not
    done; complete nodes are absent. A node below one that is not done is not done either
    (its output was made from the old one)."""
    hashes = campaign_hashes(run)
    why = {}
    for node in dag.nodes.values():
        if node.kind == "JOB":
            problem = node_problem(run, node.name, hashes)
            if problem is not None:
                why[node.name] = problem
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
