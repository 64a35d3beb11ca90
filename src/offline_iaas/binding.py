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

from offline_iaas import records
from offline_iaas.bounded_read import NotRegularFile, read_text, refuse_unless_regular
from offline_iaas.completeness import Hashes
from offline_iaas.config import CampaignConfig, load_config
from offline_iaas.digests import file_sha256
from offline_iaas.errors import ConfigError, RunError
from offline_iaas.records import ClientJob, RunInfo, ServedModel, ShardJob
from offline_iaas.rundir import RunDir, restore_advice


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
    try:
        text = read_text(run.run_info)  # a FIFO is not waited on, /dev/zero not read
    except FileNotFoundError:
        return "missing"
    except (OSError, ValueError) as err:  # NotRegularFile, TooLarge, UnicodeDecodeError
        return f"unreadable ({err})"
    try:
        data = json.loads(text)
    except ValueError as err:
        return f"damaged (not JSON: {err})"
    return None if isinstance(data, dict) else "damaged (not a JSON object)"


def is_make_dag_run(run: RunDir) -> bool:
    """Whether the directory is make-dag's (it has a campaign config or a run record), rather
    than a DAG written by hand."""
    return run.config.exists() or run.run_info.exists()


def read_bound_run(run: RunDir) -> tuple[CampaignConfig, RunInfo]:
    """The run's config and record, once the record is there and the config is the campaign
    make-dag planned (the same stream hash; merge-only settings may differ).

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
    config = load_config(run.config)  # its own line when it is missing or not valid
    damage = run_info_damage(run)
    if damage is not None:
        raise ConfigError(f"{run.run_info} is {damage}, so nothing can check what make-dag "
                          f"planned: {restore_advice(run)}")
    info = records.read_run_info(run)
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


def changed_job_specs(run: RunDir, info: RunInfo, nodes: Iterable[str]) -> list[str]:
    """Those of ``nodes`` whose job spec has another SHA-256 than run.json's ``job_sha256``
    (edited, replaced by another node's, or damaged since make-dag); a spec missing or no
    regular file is left to its reader, and a run older than ``job_sha256`` records none."""
    changed = []
    for node in nodes:
        recorded, path = info.job_sha256.get(node), run.job(node)
        if recorded is None:
            continue
        try:
            refuse_unless_regular(path)  # a FIFO's open would wait for a writer
            found = file_sha256(path)
        except (OSError, NotRegularFile):  # the reader's line, when the node reads it
            continue
        if found != recorded:
            changed.append(node)
    return changed


def check_job_specs(run: RunDir, info: RunInfo, nodes: Iterable[str]) -> None:
    """RunError, naming the file, where the job spec of one of ``nodes`` is not the one
    make-dag wrote (``changed_job_specs``), before a node streams or merges by it; a spec
    missing, unreadable or damaged has its reader's line (``records.read_job``)."""
    for node in changed_job_specs(run, info, nodes):
        records.read_job(ClientJob if node in info.clients else ShardJob, run, node)
        raise RunError(f"{run.job(node)} is not the job spec make-dag wrote for {node} (its "
                       f"SHA-256 is not run.json's: edited, or replaced since): "
                       f"{restore_advice(run)}")


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
