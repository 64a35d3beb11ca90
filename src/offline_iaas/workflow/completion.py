"""Which nodes of a run directory's DAG are complete, and so are not run again."""

from __future__ import annotations

from offline_iaas.rundir import RunDir
from offline_iaas.workflow.dag import Dag, DagNode


def node_complete(run: RunDir, node: DagNode) -> bool:
    """Whether a JOB node's output is already there (it is then not run again): the run
    directory says so (``RunDir.node_complete``).
    """
    if node.kind != "JOB":
        return False
    return run.node_complete(node.name)


def complete_nodes(run: RunDir, dag: Dag) -> set[str]:
    """JOB nodes whose output is there and whose parents are all complete too.

    A node below one that must run again runs again (its output was made from the old one),
    as after deleting a part: the client and the merge run, nothing else.
    """
    complete = {n.name for n in dag.nodes.values() if node_complete(run, n)}
    changed = True
    while changed:
        changed = False
        for name in list(complete):
            if not dag.nodes[name].parents <= complete:
                complete.discard(name)
                changed = True
    return complete
