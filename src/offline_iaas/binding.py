"""A run bound to what ``make-dag`` planned.

``make-dag`` records in ``RUN/run.json`` the campaign's stream hash (what the clients' parts
depend on, ``CampaignConfig.stream_hash``) and the model it checked (each network's version and
graph SHA-256, ``records.ServedModel``). Before anything of a run starts, ``run-local``,
``status`` and every node check the run against that record (``read_bound_run``):

* ``run.json`` missing or damaged (not a JSON object): refused, with the command that restores
  it — ``make-dag`` of the run's own config into the same directory, which keeps the finished
  parts (the client shares are planned again with the sequence base the job specs carry,
  ``planned_sequence_base``);
* ``RUN/campaign.toml`` edited in a setting the parts depend on (another stream hash): refused
  (undo the edit, or run the edited campaign with ``make-dag`` into a new run directory); an
  edit of a merge-only setting (``config.MERGE_ONLY``) is taken: the merges run again;
* the model a server would serve against the one recorded: ``model_mismatch`` (the server node
  and ``run-local`` read the repository, ``repository/pinning.py``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from offline_iaas import job_specs, records
from offline_iaas.bounded_read import read_bytes, read_text
from offline_iaas.completeness import Hashes
from offline_iaas.config import CampaignConfig, config_from_text, load_config
from offline_iaas.digests import bytes_sha256
from offline_iaas.errors import ConfigError, RunError
from offline_iaas.geometry import StreamGeometry
from offline_iaas.job_specs import ClientJob, ShardJob
from offline_iaas.records import RunInfo, ServedModel
from offline_iaas.rundir import RunDir, restore_advice
from offline_iaas.stretches import piece_off_its_stretch


def not_a_run_directory(run: RunDir) -> RunError:
    """The error of a path that is no run directory of make-dag (a typo, another folder)."""
    return RunError(f"{run.path} holds no offline.dag (not a run directory: write one with "
                    "offline-iaas make-dag)")


def check_run_directory(run: RunDir) -> None:
    """``not_a_run_directory`` when ``run`` holds none of make-dag's marks (``offline.dag``,
    ``campaign.toml``, ``run.json``): before a command reads any file of it."""
    if not run.dag.exists() and not is_make_dag_run(run):
        raise not_a_run_directory(run)


def run_info_damage(run: RunDir) -> str | None:
    """How ``run.json`` is lost ('missing', 'damaged: ...'), or None when it is a JSON object
    (whose fields ``records.read`` checks)."""
    return _run_info_text(run)[1]


def read_run_record(run: RunDir) -> RunInfo | str:
    """``run.json``'s record, read once, or how it is lost (``run_info_damage``'s words).

    Raises
    ------
    RunError
        It is a JSON object but no run record this offline-iaas reads (``records.read``).
    """
    text, damage = _run_info_text(run)
    return records.parse(RunInfo, text, run.run_info) if text is not None else str(damage)


def _run_info_text(run: RunDir) -> tuple[str | None, str | None]:
    """``run.json``'s text when it holds a JSON object, else None and how it is lost."""
    try:
        text = read_text(run.run_info)  # a FIFO is not waited on, /dev/zero not read
    except FileNotFoundError:
        return None, "missing"
    except (OSError, ValueError) as err:  # NotRegularFile, TooLarge, UnicodeDecodeError
        return None, f"unreadable ({err})"
    try:
        data = json.loads(text)
    except ValueError as err:
        return None, f"damaged (not JSON: {err})"
    return (text, None) if isinstance(data, dict) else (None, "damaged (not a JSON object)")


def is_make_dag_run(run: RunDir) -> bool:
    """Whether the directory is make-dag's (it has a campaign config or a run record), rather
    than a DAG written by hand."""
    return run.config.exists() or run.run_info.exists()


def read_bound_run(run: RunDir, record: RunInfo | str | None = None,
                   config_text: str | None = None) -> tuple[CampaignConfig, RunInfo]:
    """The run's config and record, once the record is there and the config is the campaign
    make-dag planned (the same stream hash; merge-only settings may differ); ``record``:
    run.json as ``read_run_record`` read it already (None: read here); ``config_text``:
    campaign.toml's text as ``config.read_config_text`` read it already (None: read here).

    Raises
    ------
    ConfigError
        One line: ``run.json`` missing or damaged (and the command that restores it), or
        ``campaign.toml`` edited in a setting the parts depend on. Never retried by a DAG.
    RunError
        ``run`` is no run directory (``check_run_directory``), or ``run.json`` is a JSON
        object but not a run record this offline-iaas reads (a newer schema, a renamed field:
        ``records.read``).
    """
    check_run_directory(run)
    config = (load_config(run.config) if config_text is None  # its own line when missing
              else config_from_text(config_text, run.config))  # or not valid
    info = record if record is not None else read_run_record(run)
    if isinstance(info, str):
        raise ConfigError(f"{run.run_info} is {info}, so nothing can check what make-dag "
                          f"planned: {restore_advice(run)}")
    edited = config_edited(run, config, info)
    if edited is not None:
        raise ConfigError(edited)
    return config, info


def config_edited(run: RunDir, config: CampaignConfig, info: RunInfo) -> str | None:
    """The line saying ``run``'s campaign.toml (read as ``config``) was edited since make-dag
    in a setting the parts depend on (its stream hash is not ``info``'s); None when it is the
    campaign make-dag planned (a merge-only setting may differ). ``read_bound_run`` refuses
    the run with it; the report shows it at the top of its page."""
    ours = Hashes.of(config)
    if ours.is_stream(info.stream_hash):
        return None
    return (f"{run.config} was edited since make-dag planned this run (stream hash "
            f"{ours.stream}, run.json's {info.stream_hash}: a setting the clients' parts depend "
            "on changed): undo the edit, or run the edited campaign with make-dag into a new "
            "run directory")


def planned_sequence_base(run: RunDir) -> int | None:
    """The sequence base the run's client job specs were planned with (their first sequence
    ID less one, ``stretches.client_shares``), None without a readable spec."""
    ids = []
    for path in run.jobs.glob("*.json"):
        try:
            job = records.read(ClientJob, path)
        except RunError:  # a shard's spec, or a damaged one: not a client's plan
            continue
        ids += [piece.sequence_id for piece in job.pieces]
    return min(ids) - 1 if ids else None


@dataclass(frozen=True)
class JobSpecRead:
    """A node's job spec as ``read_job_specs`` read it, once."""

    job: ClientJob | ShardJob | None
    """Its record (``records.parse``: what a reader that shows what is there takes), None where
    it is missing, unreadable or no record, or was not parsed (``read_job_specs``' ``parse``)."""
    problem: str | None
    """``job_specs.read_job``'s line where that refuses it (missing, damaged, another node's, a
    piece make-dag never plans), else None."""
    changed: bool
    """Its SHA-256 is not run.json's ``job_sha256`` (edited, replaced by another node's, or
    damaged since make-dag); False where unknown: a spec missing or no regular file, or a run
    older than ``job_sha256``."""


def read_job_specs(run: RunDir, info: RunInfo, nodes: Iterable[str], parse: bool = True
                   ) -> dict[str, JobSpecRead]:
    """The job spec of each of ``nodes``, each file read once: hashed, and parsed and checked
    as ``job_specs.read_job`` checks it (a spec that does not read is read again for its line)
    where ``parse`` or its hash is not run.json's; a node that needs only the hash (a merge of
    1,600 clients' parts) parses none of the unchanged."""
    specs = {}
    for node in nodes:
        kind: type[ClientJob | ShardJob] = ClientJob if node in info.clients else ShardJob
        path, recorded = run.job(node), info.job_sha256.get(node)
        try:
            data: bytes | None = read_bytes(path)  # a FIFO is not waited on
        except (OSError, ValueError):  # missing, NotRegularFile, TooLarge: the reader's line
            data = None
        changed = data is not None and recorded is not None and bytes_sha256(data) != recorded
        if not (parse or changed):
            specs[node] = JobSpecRead(None, None, False)
            continue
        try:
            text = data.decode() if data is not None else None
        except UnicodeDecodeError:  # read_job reads it for its line
            text = None
        try:
            job, problem = job_specs.read_job(kind, run, node, text), None
        except RunError as err:
            job, problem = _record_or_none(kind, text, path), str(err)
        specs[node] = JobSpecRead(job, problem, changed)
    return specs


def _record_or_none(kind: type[ClientJob | ShardJob], text: str | None, path: Path
                    ) -> ClientJob | ShardJob | None:
    try:
        return records.parse(kind, text, path) if text is not None else None
    except RunError:
        return None


def client_job_or_problem(run: RunDir, geometry: StreamGeometry | None, client: str,
                          read: JobSpecRead | None = None) -> ClientJob | str:
    """A client's job spec, or what is wrong with it, the line ``status`` shows on the
    client's line and the report in its table of them (missing or damaged, naming the file;
    a piece off ``geometry``'s grid: a spec edited in a run older than run.json's
    ``job_sha256``; ``geometry`` None, a campaign.toml that does not read: not compared);
    ``read``: the spec as ``workflow.binding.check_run`` read it (None: read here)."""
    if read is not None and read.problem is not None:
        return read.problem
    job = read.job if read is not None else None
    try:
        if not isinstance(job, ClientJob):  # not read yet, or a spec of another node kind (a
            job = job_specs.read_job(ClientJob, run, client)  # DAG edited): its reader's line
    except RunError as err:
        return str(err)
    if geometry is None:
        return job
    for number, piece in enumerate(job.pieces):
        if (damage := piece_off_its_stretch(geometry, piece)) is not None:
            return (f"{run.job(client)}: piece {number} {damage}, which make-dag never plans "
                    f"(edited by hand?): {restore_advice(run)}")
    return job


def check_job_specs(run: RunDir, info: RunInfo, nodes: Iterable[str],
                    named_by_node: bool = False, parse: bool = False) -> dict[str, JobSpecRead]:
    """The job specs of ``nodes`` (``read_job_specs``, each parsed with ``parse``), once none
    is changed since make-dag: RunError, naming the file, where one is not the one make-dag
    wrote (``JobSpecRead.changed``), before a node streams or merges by it; one that does not
    read has its reader's line (``job_specs.read_job``), or, ``named_by_node`` (status, the
    report), is left for the node's line to name."""
    specs = read_job_specs(run, info, nodes, parse)
    for node, spec in specs.items():
        if not spec.changed or (spec.problem is not None and named_by_node):
            continue
        if spec.problem is not None:
            raise RunError(spec.problem)
        raise RunError(f"{run.job(node)} is not the job spec make-dag wrote for {node} (its "
                       f"SHA-256 is not run.json's: edited, or replaced since): "
                       f"{restore_advice(run)}")
    return specs


def model_mismatch(recorded: ServedModel | None, found: ServedModel, graphs: bool = True
                   ) -> str | None:
    """What the model found holds that differs from the one make-dag recorded, for a sentence
    "it serves ..." (None: the same, or none recorded): each network's version and (``graphs``)
    graph SHA-256."""
    if recorded is None:
        return None
    differ = []
    for name in sorted({*recorded.networks, *found.networks}):
        was, now = recorded.networks.get(name), found.networks.get(name)
        if was is None:
            differ.append(f"{name}, which run.json does not record")
        elif now is None:
            differ.append(f"no {name} (run.json records version {was.version})")
        elif not graphs and was.version != now.version:
            differ.append(f"{name} version {now.version} where run.json records version "
                          f"{was.version}")
        elif graphs and (was.version, was.sha256) != (now.version, now.sha256):
            differ.append(f"{name} version {now.version} (graph sha256 {now.sha256[:12]}) "
                          f"where run.json records version {was.version} ({was.sha256[:12]})")
    return ", ".join(differ) or None
