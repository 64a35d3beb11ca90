"""The job specs of ``RUN/jobs/``, which make-dag writes for each node to read: a client's
share (``ClientJob``) and a shard merge's interval and parents (``ShardJob``), each a record
of ``records``' framework; reading one checks that it is its node's and that its pieces are
make-dag's, and names the nodes of the kind asked for where the node is not one of them."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from offline_iaas.errors import RunError
from offline_iaas.records import (
    ClientShare,
    MergeShard,
    Piece,
    R,
    Record,
    RunInfo,
    ShareRecord,
    fields_of,
    parse,
    read,
    read_or_none,
    share_fields,
    write,
)
from offline_iaas.rundir import MERGE_NODE, RunDir, restore_advice

_V1_JOB_FIELDS = ("run_dir", "config", "repository", "model", "config_hash")
"""Fields version-1 job specs carried that nothing read."""


class JobSpec(Record):
    """A job spec of ``RUN/jobs/``, which make-dag writes for a node to read."""

    @classmethod
    def from_v1(cls, data: dict[str, Any], path: Path) -> dict[str, Any]:
        return {k: v for k, v in data.items() if k not in _V1_JOB_FIELDS}


class ClientJob(JobSpec, ShareRecord):
    """``RUN/jobs/<client>.json``: a client's share (``ClientShare``)."""

    KIND: ClassVar[str] = "client job spec"

    @classmethod
    def of(cls, share: ClientShare) -> ClientJob:
        return cls(**share_fields(share))


class ShardJob(JobSpec, MergeShard):
    """``RUN/jobs/<shard>.json``: a shard merge's interval and parents (``MergeShard``'s
    fields)."""

    KIND: ClassVar[str] = "shard merge job spec"

    @classmethod
    def of(cls, shard: MergeShard) -> ShardJob:
        return cls(**fields_of(shard, MergeShard))

    @property
    def shard(self) -> MergeShard:
        """The shard alone (equal to the ``MergeShard`` it was made of)."""
        return MergeShard(**fields_of(self, MergeShard))


def write_client_job(run: RunDir, share: ClientShare) -> None:
    """Write a client's job spec (``ClientJob``) for its share (make-dag)."""
    write(ClientJob.of(share), run.job(share.node))


def read_job(kind: type[R], run: RunDir, node: str, text: str | None = None) -> R:
    """``node``'s job spec (``text``: its contents, read already; RunError naming the file;
    damaged: with make-dag's command; a node of another kind or none of this run: naming the
    nodes of the kind asked for). run.json is read only when the spec is missing or does not
    read as ``kind``: the merge reads every client's spec, and run.json lists them all."""
    path, advice = run.job(node), restore_advice(run)
    if text is not None or path.exists():
        try:
            job = read(kind, path, advice) if text is None else parse(kind, text, path, advice)
            if getattr(job, "node", node) != node:  # a copy of, or a link to, another's
                raise RunError(f"{path} is the job spec of {job.node}, not of {node}: {advice}")
            for number, piece in enumerate(getattr(job, "pieces", ())):
                if (damage := piece_damage(piece)) is not None:
                    raise RunError(f"{path}: piece {number} {damage}, which make-dag never "
                                   f"plans (edited by hand?): {advice}")
            return job
        except RunError:
            if (info := read_or_none(RunInfo, run.run_info)) is not None:
                _check_node_kind(_kind_name(kind), info, node)
            raise
    if (info := read_or_none(RunInfo, run.run_info)) is not None:  # unreadable: its own line
        _check_node_kind(_kind_name(kind), info, node)
    advice = f": {advice}" if info is not None else ""
    raise RunError(f"{path}: no job spec for node {node}{advice}")


def piece_damage(p: Piece) -> str | None:
    """Why make-dag never plans piece ``p`` ("piece N ..."): no kept windows, or they out of
    order; None if planned. Its GPS span against its stretch's grid is
    ``stretches.piece_off_its_stretch``'s (an exact comparison here refused pieces make-dag
    planned at a stride of no exact binary form, 0.1 s)."""
    if not 0 <= p.first_window <= p.output_start < p.output_stop:
        return f"keeps windows [{p.output_start}, {p.output_stop}) from window {p.first_window}"
    return None


def check_server_node(run: RunDir, node: str) -> None:
    """RunError when ``node`` is not a plain node name, or not one of the servers run.json
    lists (a client given to serve, a typo), before ``serve`` names a file after it; where
    run.json cannot be read its own commands say so."""
    if not node or "/" in node or node.startswith("."):
        raise RunError(f"{node!r} is not a node name (a server of this run: server0, ...)")
    if (info := read_or_none(RunInfo, run.run_info)) is not None:
        _check_node_kind("server", info, node)


def _kind_name(kind: type[Record]) -> str:
    return "shard merge" if kind is ShardJob else "client"


def _check_node_kind(wanted: str, info: RunInfo, node: str) -> None:
    """RunError when ``node`` is not one of ``info``'s nodes of kind ``wanted`` (``client``,
    ``shard merge``, ``server``: a client given to merge-shard or serve, a server to
    prescript, a typo)."""
    kinds = {"client": info.clients, "shard merge": info.shards, "server": info.servers}
    if node in kinds[wanted]:
        return
    nodes = ", ".join(kinds[wanted]) or "none"
    found = next((name for name, names in kinds.items() if node in names),
                 "merge" if node == MERGE_NODE else None)
    what = f"a {found} node, not a {wanted}" if found else "not a node of this run"
    raise RunError(f"{node} is {what} (this run's {wanted}s: {nodes})")


def read_client_job(run: RunDir, node: str) -> ClientShare:
    """A client's share (RunError naming the file when it is missing or not a spec)."""
    return read_job(ClientJob, run, node).share


def write_shard_job(run: RunDir, shard: MergeShard) -> None:
    """Write a shard merge's job spec (``ShardJob``) for its shard (make-dag)."""
    write(ShardJob.of(shard), run.job(shard.node))


def read_shard_job(run: RunDir, node: str) -> MergeShard:
    """A shard merge's spec (RunError naming the file when it is missing or not a spec)."""
    return read_job(ShardJob, run, node).shard
