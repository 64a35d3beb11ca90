"""One definition of a complete node, used by ``run-local``, the merge, ``status`` and
``report``.

A node is complete when its record (``records.py``) says so, for this campaign, and its data
file is the one the record describes:

* a client: its sidecar ``parts/<client>.json`` says complete, under the campaign's
  ``stream_hash``, for the windows of its job spec; ``parts/<client>.h5`` exists with the size
  and SHA-256 the sidecar records;
* a shard merge: its summary ``output/shards/<shard>.json`` says complete, under the
  campaign's ``merge_hash``, for its job spec's interval and parents; its file has the
  recorded size and SHA-256;
* the merge (single, or the index): ``output/campaign.json`` says complete under the
  campaign's ``merge_hash``; ``output/campaign.h5`` has the recorded size and SHA-256.

The size is always checked. The checksum, a full read of the file, is checked when asked
(``verify``: the merge, before it uses a part; ``run-local``, on the parents of a node that
failed; ``status --verify``) and otherwise only when the data file was modified after its
record was written (a file rewritten in place; the node writes the record last): ``run-local``
and ``status`` then cost a ``stat`` per node, not a read of the campaign. A file whose checksum
failed where it was read in full (bit rot keeps the size and the mtime) is set aside as
``<name>.damaged`` (``set_aside``), so that every later look, lazy or not, finds its node not
done and ``run-local`` runs it again.

Each function returns None for a complete node, else why it is not done (``NotDone``: one
line), which ``status`` shows and the merge puts in its refusal.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from offline_iaas.config import CampaignConfig, load_config
from offline_iaas.digests import file_sha256
from offline_iaas.errors import RunError
from offline_iaas.gps import gps_span_text
from offline_iaas.job_specs import ClientJob, ShardJob
from offline_iaas.records import (
    V1_HASH_PREFIX,
    ClientShare,
    MergeShard,
    PartRecord,
    R,
    read_optional,
    read_or_none,
)
from offline_iaas.rundir import MERGE_NODE, RunDir, is_shard_node
from offline_iaas.summaries import CampaignSummary, ShardSummary


@dataclass(frozen=True)
class NotDone:
    """Why a node is not complete."""

    reason: str
    written: bool = True
    """Whether the node wrote anything (False: its record and data are both absent, as before
    it ever ran)."""
    unchecked: bool = False
    """Whether the record is complete but no campaign config was there to check it against."""
    damaged: Path | None = None
    """The data file, when its checksum is not the recorded one (``set_aside`` moves it)."""

    def __str__(self) -> str:
        return self.reason


@dataclass(frozen=True)
class Hashes:
    """The campaign's hashes, against which records are checked."""

    stream: str
    """``CampaignConfig.stream_hash``: what parts depend on."""
    merge: str
    """``CampaignConfig.merge_hash``: what merge outputs depend on."""
    v1: str
    """``CampaignConfig.v1_hash``: what version-1 records carry."""

    @classmethod
    def of(cls, config: CampaignConfig) -> Hashes:
        return cls(config.stream_hash(), config.merge_hash(), config.v1_hash())

    def is_stream(self, recorded: str) -> bool:
        return recorded in (self.stream, V1_HASH_PREFIX + self.v1)

    def is_merge(self, recorded: str) -> bool:
        return recorded in (self.merge, V1_HASH_PREFIX + self.v1)


def campaign_hashes(run: RunDir) -> Hashes | None:
    """The hashes of the run's config (``RUN/campaign.toml``); None when it has none (then no
    node is complete). ConfigError when it is there but invalid."""
    if not run.config.exists():
        return None
    return Hashes.of(load_config(run.config))


def _relative(run: RunDir, path: Path) -> str:
    try:
        return str(path.relative_to(run.path))
    except ValueError:
        return str(path)


def _absent(run: RunDir, what: str, data: Path, record_path: Path) -> NotDone:
    """A node without its record: never ran, or stopped before it wrote the record."""
    if data.exists():
        return NotDone(f"{_relative(run, data)} without its record {_relative(run, record_path)}"
                       " (stopped before it finished)")
    return NotDone(f"{what} (no {_relative(run, record_path)})", written=False)


def data_problem(run: RunDir, data: Path, record_path: Path, size: int | None,
                 sha256: str | None, verify: bool) -> NotDone | None:
    """Why a data file is not the one its record describes (None: it is): missing, another
    size, another checksum (module docstring: when the checksum is read)."""
    name = _relative(run, data)
    try:
        stat = data.stat()
    except FileNotFoundError:
        if _aside(data).exists():
            return NotDone(_set_aside_reason(run, data))
        return NotDone(f"{name} missing")
    except OSError as err:
        return NotDone(f"{name}: cannot read: {err}")
    if size is not None and stat.st_size != size:
        what = "truncated" if stat.st_size < size else "grown"
        return NotDone(f"{name} {what} ({stat.st_size} of the {size} bytes its record says)")
    if sha256 is None:
        return None
    try:
        changed = stat.st_mtime_ns > record_path.stat().st_mtime_ns
    except OSError:
        changed = True
    if (verify or changed or size is None) and file_sha256(data) != sha256:
        return NotDone(f"{name} changed after it was written (checksum mismatch)", damaged=data)
    return None


def _aside(data: Path) -> Path:
    return data.with_name(f"{data.name}.damaged")


def _set_aside_reason(run: RunDir, data: Path) -> str:
    return (f"{_relative(run, data)} changed after it was written (checksum mismatch; set aside "
            f"as {_relative(run, _aside(data))})")


def set_aside(run: RunDir, problem: NotDone) -> NotDone:
    """Move a data file whose checksum failed (``problem.damaged``) aside as
    ``<name>.damaged`` (replacing an older one), so that its node is not complete to any later
    look (module docstring); return why the node is not done now. Any other problem, or a
    file that cannot be moved (a read-only run directory), is returned as it is."""
    if problem.damaged is None:
        return problem
    try:
        os.replace(problem.damaged, _aside(problem.damaged))
    except OSError:
        return problem
    return NotDone(_set_aside_reason(run, problem.damaged))


def read_record(kind: type[R], path: Path) -> R | RunError | None:
    """``records.read_optional`` of ``path``, its RunError returned, not raised: a node's record
    as ``_record`` judges it (``ReadAlready.sidecars``)."""
    try:
        return read_optional(kind, path)
    except RunError as err:
        return err


def _found(kind: type[R], path: Path, node: str,
           read: Mapping[str, R | RunError | None] | None) -> R | RunError | None:
    """``node``'s record in ``read`` where its reader read it already, else ``read_record``
    of ``path`` now."""
    if read is not None and node in read:
        return read[node]
    return read_record(kind, path)


def part_sidecar(run: RunDir, node: str,
                 read: Mapping[str, PartRecord | RunError | None] | None = None,
                 ) -> PartRecord | RunError | None:
    """Client ``node``'s part sidecar as ``read_record`` reads it: the one in ``read`` where
    its reader read it already (``ReadAlready.sidecars``), else read now.

    Parameters
    ----------
    run : RunDir
        The run directory.
    node : str
        The client node.
    read : Mapping or None
        Sidecars read already, by node; None, or ``node`` absent: read here.

    Returns
    -------
    PartRecord or RunError or None
        The sidecar, its RunError (unreadable), or None (absent).
    """
    return _found(PartRecord, run.part(node)[1], node, read)


@dataclass(frozen=True)
class ReadAlready:
    """Files of a run its reader read already (``status``: ``binding.check_run``'s job specs,
    the part sidecars; the report: the sidecars, the merge's summary), so that the nodes'
    checks do not read them again; a node absent from one has its file read there."""

    specs: Mapping[str, ClientJob | ShardJob | None] = field(default_factory=dict)
    """Job specs (None: one that does not read as a record)."""
    sidecars: Mapping[str, PartRecord | RunError | None] = field(default_factory=dict)
    """Part sidecars, as ``read_record`` read them."""
    summaries: Mapping[str, ShardSummary | CampaignSummary | RunError | None] = field(
        default_factory=dict)
    """Merge summaries (a shard merge's by its node, the merge's by ``MERGE_NODE``), as
    ``read_record`` read them."""


def _record(run: RunDir, found: R | RunError | None, data: Path, path: Path, what: str,
            absent: str, record: str) -> tuple[R | None, NotDone | None]:
    """A node's record (``found``: as ``read_record`` read it), or why the node is not done:
    the ``record`` unreadable, absent (``absent``), or not complete."""
    if isinstance(found, RunError):
        return None, NotDone(f"{record} unreadable: {found}")
    if found is None:
        return None, _absent(run, absent, data, path)
    if not found.complete:  # type: ignore[attr-defined]
        return None, NotDone(f"{what} incomplete ({_relative(run, path)})")
    return found, None


def _other_campaign(what: str, which: str, recorded: str, hashes: Hashes | None) -> NotDone:
    if hashes is None:
        return NotDone(f"no campaign.toml to check the {what} against", unchecked=True)
    ours = hashes.stream if which == "stream" else hashes.merge
    return NotDone(f"{what} from another campaign's config ({which} hash {recorded}, this "
                   f"campaign's {ours})")


def part_problem(run: RunDir, node: str, hashes: Hashes | None,
                 spec: ClientShare | None = None, verify: bool = False,
                 read: ReadAlready | None = None) -> NotDone | None:
    """Why client ``node``'s part is not complete, or None (``spec``: its job spec, when the
    part must cover its windows; ``read``: its sidecar, where read already)."""
    data, path = run.part(node)
    found = part_sidecar(run, node, read.sidecars if read is not None else None)
    sidecar, problem = _record(run, found, data, path, "part", "part missing", "sidecar")
    if sidecar is None:
        return problem
    if hashes is None or not hashes.is_stream(sidecar.stream_hash):
        return _other_campaign("part", "stream", sidecar.stream_hash, hashes)
    if spec is not None and sidecar.share != spec:
        return NotDone("part covers other windows than its job spec")
    return data_problem(run, data, path, sidecar.bytes, sidecar.sha256, verify)


def shard_problem(run: RunDir, node: str, hashes: Hashes | None,
                  spec: MergeShard | None = None, verify: bool = False,
                  read: ReadAlready | None = None) -> NotDone | None:
    """Why shard merge ``node``'s output is not complete, or None (``spec``: its job spec;
    ``read``: its summary, where read already)."""
    data, path = run.shard_output(node)
    found = _found(ShardSummary, path, node, read.summaries if read is not None else None)
    summary, problem = _record(run, found, data, path, "shard merge", "shard merge not done",
                               "summary")
    if summary is None:
        return problem
    if hashes is None or not hashes.is_merge(summary.merge_hash):
        return _other_campaign("shard merge", "merge", summary.merge_hash, hashes)
    if spec is not None and not is_of_shard(summary, spec):
        return NotDone("shard merge of another sharding (GPS "
                       f"{gps_span_text(summary.gps[0], summary.gps[1])}, its job spec "
                       f"{gps_span_text(spec.gps_start, spec.gps_end)})")
    return data_problem(run, data, path, summary.bytes, summary.sha256, verify)


def is_of_shard(summary: ShardSummary, spec: MergeShard) -> bool:
    """Whether a shard merge's summary is of this shard: its GPS interval and parents."""
    return summary.gps == (spec.gps_start, spec.gps_end) and summary.clients == spec.clients


def merge_problem(run: RunDir, hashes: Hashes | None, verify: bool = False,
                  read: ReadAlready | None = None) -> NotDone | None:
    """Why the merge's output (``output/campaign.h5``) is not complete, or None (``read``: its
    summary, where read already)."""
    data, path = run.output
    found = _found(CampaignSummary, path, MERGE_NODE,
                   read.summaries if read is not None else None)
    summary, problem = _record(run, found, data, path, "merge", "merge not done", "summary")
    if summary is None:
        return problem
    if hashes is None or not hashes.is_merge(summary.merge_hash):
        return _other_campaign("merge", "merge", summary.merge_hash, hashes)
    elsewhere = written_elsewhere(run, summary)
    if elsewhere is not None:
        return NotDone(f"its output was written in {elsewhere} and names files there (this "
                       "run directory is a copy of it, or was moved)")
    return data_problem(run, data, path, summary.bytes, summary.sha256, verify)


def written_elsewhere(run: RunDir, summary: CampaignSummary) -> str | None:
    """The run directory the merge's output was written in, when that is not ``run`` (a
    copy, or a move: the old directory is gone); None when it is ``run`` itself (by any name)
    or the summary names none.

    The merge's output is the one thing of a run directory that names its place, by design of
    its formats: the index's HDF5 external storage names the shard files by absolute path, and
    the LAL cache of DeepClean's frames names them by URL. Everything that runs a node names
    paths relative to the run directory, so a copy runs its own nodes under its own lock, and
    only its merge (the index takes seconds) runs again."""
    if not summary.run_dir:
        return None
    try:
        if os.path.samefile(summary.run_dir, run.path):
            return None
    except OSError:  # the directory it was written in is gone: moved
        pass
    return summary.run_dir


def node_problem(run: RunDir, node: str, hashes: Hashes | None, verify: bool = False,
                 read: ReadAlready | None = None) -> NotDone | None:
    """Why a JOB node of the run's DAG is not complete (its role by its name: the merge, a
    shard merge, else a client), or None (``verify``: read its data file's checksum;
    ``read``: its job spec and sidecar or summary, where read already)."""
    if node == MERGE_NODE:
        return merge_problem(run, hashes, verify, read)
    found = read.specs[node] if read is not None and node in read.specs else (
        read_or_none(ShardJob if is_shard_node(node) else ClientJob, run.job(node)))
    if is_shard_node(node):
        return shard_problem(run, node, hashes,
                             found.shard if isinstance(found, ShardJob) else None, verify, read)
    return part_problem(run, node, hashes, found.share if isinstance(found, ClientJob) else None,
                        verify, read)
