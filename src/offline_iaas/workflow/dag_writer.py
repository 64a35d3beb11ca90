"""Write make-dag's ``offline.dag`` (pure logic, no I/O).

``dag_text`` writes the DAGMan input file of a campaign: one SERVICE node per server, one JOB
per client (retried unless it failed on the configuration, which aborts the DAG; throttled by
a category; optionally a deferring PRE script), shard merge JOBs each the child of the
clients it reads (``merge.shard_seconds``), a merge JOB child of every shard merge (or of
every client without shards), a FINAL
node that writes the campaign summary, and a node status file. ``workflow/dag.py`` reads it
back.
"""

from __future__ import annotations

from collections.abc import Sequence

from offline_iaas.records import ClientShare
from offline_iaas.rundir import DAGMAN_STATUS_FILE, MERGE_NODE, RunDir
from offline_iaas.workflow.dag import FINAL_NODE, MAKE_DAG_HEADER, Script

RELATIVE = RunDir(".")
"""Paths within a run directory as the DAG names them (relative: a run is relocatable)."""

CLIENT_CATEGORY = "clients"
"""DAGMan category of the client nodes (throttled by ``MAXJOBS``)."""
MERGE_CATEGORY = "merges"
"""DAGMan category of the shard merge nodes (throttled by ``MAXJOBS``)."""
STATUS_INTERVAL_SECONDS = 30
ABORT_RETURN = 1
"""``ABORT-DAG-ON ... RETURN`` value: DAGMan leaves the queue for 0, 1 or 2 only."""


def _quote_var(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def dag_text(
    servers: list[str],
    clients: list[ClientShare],
    retries: int,
    max_parallel_clients: int,
    *,
    fatal_exit: int | None = None,
    final: bool = False,
    client_pre: Script | None = None,
    shards: Sequence[tuple[str, Sequence[str]]] = (),
    transfer: bool = False,
    max_parallel_merges: int = 0,
) -> str:
    """The ``offline.dag`` of a campaign.

    Parameters
    ----------
    servers
        Server node names (SERVICE nodes, submit file ``server.sub``).
    clients
        The client shares (JOB nodes, submit file ``client.sub``).
    retries
        ``RETRY`` count of every client node, shard merge and the merge (or index) node.
    max_parallel_clients
        ``MAXJOBS`` of the client category; 0 means no limit.
    fatal_exit
        Exit code that means the configuration is wrong: never retried (``UNLESS-EXIT``) and
        aborts the DAG (``ABORT-DAG-ON``) when a client or the merge exits with it.
    final
        Add the FINAL node ``final`` (submit file ``final.sub``).
    client_pre
        PRE script of every client node (its arguments may use ``$JOB``).
    shards
        Shard merge nodes (submit file ``shard.sub``), each with the clients it reads: the
        merge node is then their child, not the clients'.
    transfer
        The shard merges get their parents' parts by file transfer (``VARS ... parts``).
    max_parallel_merges
        ``MAXJOBS`` of the shard merges' category; 0 means no limit.
    """
    if retries < 0 or max_parallel_clients < 0:
        raise ValueError("retries and max_parallel_clients must not be negative")
    unknown = sorted({c.server for c in clients} - set(servers))
    if unknown:
        raise ValueError(f"client shares name unknown servers: {', '.join(unknown)}")
    lines = [
        MAKE_DAG_HEADER,
        "#   on a cluster:   condor_submit_dag -usedagdir <this directory>/offline.dag",
        "#   on this host:   offline-iaas run-local <this directory>",
        "# Written by hand rather than with htcondor2.dags: that module has no SERVICE nodes and",
        "# writes CATEGORY where MAXJOBS is meant.",
        "",
        "# Servers: SERVICE nodes, started with the DAG and removed once every other node is done.",
    ]
    for name in servers:
        lines += [f"SERVICE {name} server.sub", f"VARS {name} node={_quote_var(name)}"]
    lines += _client_lines(clients, retries, fatal_exit, client_pre)
    lines += _shard_lines(shards, retries, fatal_exit, transfer)
    lines += [
        "",
        "# Merge: runs once every shard merge is done, and writes their index (retried)."
        if shards else "# Merge: runs once every client is done (retried).",
        f"JOB {MERGE_NODE} merge.sub",
        f"VARS {MERGE_NODE} node={_quote_var(MERGE_NODE)}",
        *_retried(MERGE_NODE, retries, fatal_exit),
    ]
    merge_parents = [node for node, _ in shards] or [c.node for c in clients]
    if merge_parents:
        lines.append(f"PARENT {' '.join(merge_parents)} CHILD {MERGE_NODE}")
    if final:
        lines += [
            "",
            "# Final: always runs last, even after failures or condor_rm; writes summary.json.",
            f"FINAL {FINAL_NODE} final.sub",
            f"VARS {FINAL_NODE} node={_quote_var(FINAL_NODE)}",
        ]
    lines.append("")
    if max_parallel_clients > 0:
        lines.append(f"MAXJOBS {CLIENT_CATEGORY} {max_parallel_clients}")
    if max_parallel_merges > 0 and shards:
        lines.append(f"MAXJOBS {MERGE_CATEGORY} {max_parallel_merges}")
    lines.append(f"NODE_STATUS_FILE {DAGMAN_STATUS_FILE} {STATUS_INTERVAL_SECONDS}")
    return "\n".join(lines) + "\n"


def _retried(node: str, retries: int, fatal_exit: int | None, category: str | None = None
             ) -> list[str]:
    """A retried node's ``RETRY`` line (and its ``CATEGORY``), never retrying (and aborting
    the DAG on) the configuration error's exit code ``fatal_exit``."""
    unless = f" UNLESS-EXIT {fatal_exit}" if fatal_exit is not None else ""
    lines = [f"RETRY {node} {retries}{unless}"]
    if category is not None:
        lines.append(f"CATEGORY {node} {category}")
    if fatal_exit is not None:
        lines.append(f"ABORT-DAG-ON {node} {fatal_exit} RETURN {ABORT_RETURN}")
    return lines


def _client_lines(clients: list[ClientShare], retries: int, fatal_exit: int | None,
                  client_pre: Script | None) -> list[str]:
    """The client nodes (``client.sub``), each in the client category, with its PRE script."""
    lines = ["", "# Clients: one per client share, retried; a complete part is never redone."]
    if fatal_exit is not None:
        lines.append(
            f"# Exit code {fatal_exit} (configuration error) is not retried and aborts the DAG."
        )
    if client_pre is not None:
        lines.append(
            "# PRE script (on the access point): waits, deferring with exit code "
            f"{client_pre.defer_status}, until the client's server has published its address."
        )
    for share in clients:
        lines += [
            f"JOB {share.node} client.sub",
            f"VARS {share.node} node={_quote_var(share.node)} server={_quote_var(share.server)}",
            *_retried(share.node, retries, fatal_exit, CLIENT_CATEGORY),
        ]
        if client_pre is not None:
            lines.append(_script_line("PRE", share.node, client_pre))
    return lines


def _shard_lines(shards: Sequence[tuple[str, Sequence[str]]], retries: int,
                 fatal_exit: int | None, transfer: bool) -> list[str]:
    """The shard merge nodes (``shard.sub``), each the child of the clients it reads; with
    ``transfer``, their parts named for file transfer."""
    lines = ["", "# Shard merges: each runs once the clients it reads are done (retried)."]
    for node, parents in shards:
        variables = f"VARS {node} node={_quote_var(node)}"
        if transfer:
            files = [str(path) for p in parents for path in RELATIVE.part(p)]
            variables += f" parts={_quote_var(', '.join(files))}"
        lines += [f"JOB {node} shard.sub", variables,
                  *_retried(node, retries, fatal_exit, MERGE_CATEGORY)]
        if parents:
            lines.append(f"PARENT {' '.join(parents)} CHILD {node}")
    return lines if shards else []


def _script_line(kind: str, node: str, script: Script) -> str:
    words = ["SCRIPT"]
    if script.defer_status is not None:
        words += ["DEFER", str(script.defer_status), str(script.defer_seconds)]
    words += [kind, node, script.executable, *script.arguments]
    for word in words[1:]:
        if not word or any(c.isspace() for c in word):
            raise ValueError(f"SCRIPT words cannot be empty or hold white space: {word!r}")
    return " ".join(words)
