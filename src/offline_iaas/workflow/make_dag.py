"""``offline-iaas make-dag``: write a campaign's run directory.

The run directory (its layout: ``rundir.py``) holds everything a node needs, so that
``condor_submit_dag`` and ``offline-iaas run-local`` work from the same files: the resolved
config, the DAG (``dag_writer.dag_text``), a submit file per role for the site profile
(``profiles.py``), one job spec per client, the run's record (run id, config hash, sequence
base, node names, creation time), the servers' access token (mode 0600) and, for servers
without a shared filesystem, the model repository as a tarball.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import secrets
import shutil
import sys
import tarfile
from datetime import datetime
from pathlib import Path

from offline_iaas import records
from offline_iaas.atomic import replaced_atomically, write_text_atomic
from offline_iaas.binding import model_mismatch, planned_sequence_base, run_info_damage
from offline_iaas.completeness import Hashes, is_of_shard
from offline_iaas.config import CampaignConfig, load_config, write_config
from offline_iaas.config_sections import WorkflowConfig
from offline_iaas.digests import file_sha256
from offline_iaas.errors import ConfigError, ModelError, RunError, exit_code, names_text
from offline_iaas.job_specs import write_client_job, write_shard_job
from offline_iaas.manifest import read_manifest
from offline_iaas.merge.tree import shard_merges
from offline_iaas.records import ClientShare, MergeShard, RunInfo, ServedModel
from offline_iaas.rendezvous.access import write_token
from offline_iaas.rendezvous.prescript import DEFER_EXIT, DEFER_SECONDS
from offline_iaas.repository.served import model_record
from offline_iaas.rundir import RunDir
from offline_iaas.serve.startup_checks import Checking, manifest_training_spans, run_checks
from offline_iaas.stretches import client_shares, make_stretches, server_name, stretches_of
from offline_iaas.summaries import ShardSummary
from offline_iaas.workflow.dag import Script
from offline_iaas.workflow.dag_writer import dag_text
from offline_iaas.workflow.profiles import Site, resolve_site, submit_texts

logger = logging.getLogger(__name__)

SEQUENCE_BLOCK = 2**20
"""Sequence bases are multiples of this, so campaigns sharing a server get disjoint IDs."""
_SEQUENCE_BLOCKS = 2**31  # keeps every ID below 2**51: exact in JSON readers that use doubles


# HTCondor would split or expand these inside `arguments`, `initialdir` and `log`.
_UNSAFE_PATH_CHARS = set(" \t\n\r\"'$")


def _forget_other_shard(run: RunDir, node: str, shard: MergeShard | None) -> list[Path]:
    """Delete a shard merge's output made for another interval or other clients than
    ``shard`` (``merge.shard_seconds`` changed; None: the shard is gone), so that it and the
    index run again: a shard's completion is its own record. Returns what it deleted."""
    h5_path, json_path = run.shard_output(node)
    try:
        summary = records.read_optional(ShardSummary, json_path)
    except RunError:  # damaged: redone
        summary = None
    if shard is not None and summary is not None and is_of_shard(summary, shard):
        return []
    return _remove(json_path, h5_path, run.shard_frames(node))


def _remove(*paths: Path) -> list[Path]:
    """Delete files and directories; returns those that existed."""
    removed = []
    for path in paths:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        elif path.exists() or path.is_symlink():
            path.unlink(missing_ok=True)
        else:
            continue
        removed.append(path)
    return removed


def _forget_index(run: RunDir, forgotten: list[Path]) -> None:
    """With shard outputs ``forgotten``, delete the index over them too, whole (its record,
    its file of external links to the shards, its frame links, the report the merge wrote of
    it), so that no output names deleted shards; say what went and that the merge runs
    again."""
    if not forgotten:
        return
    h5_path, json_path = run.output
    removed = [*forgotten, *_remove(json_path, h5_path, run.output_frames, run.report.parent)]
    names = ", ".join(str(p.relative_to(run.path)) for p in removed)
    logger.info(f"make-dag: removed the merge's output made for other shards ({names}); "
                "run-local or the DAG merges again, the parts are kept")


def console_script() -> Path:
    """Absolute path of the ``offline-iaas`` console script of this environment."""
    beside = Path(sys.executable).absolute().parent / "offline-iaas"
    if beside.is_file() and os.access(beside, os.X_OK):
        return beside
    found = shutil.which("offline-iaas")
    if found:
        return Path(found).absolute()
    raise RunError(
        f"cannot find the offline-iaas console script (not beside {sys.executable}, not on "
        "PATH); install the package (pip install -e .) in the environment that runs make-dag"
    )


def _check_path(path: Path, what: str) -> None:
    bad = sorted(set(str(path)) & _UNSAFE_PATH_CHARS)
    if bad:
        raise RunError(
            f"{what} {str(path)!r} contains {' '.join(repr(c) for c in bad)}, which HTCondor "
            "submit files cannot carry unquoted; choose a path without them"
        )


def _write_tarball(repository: Path, path: Path) -> None:
    """Pack the model repository as ``model-repository/...`` (atomically)."""
    with replaced_atomically(path) as tmp, tarfile.open(tmp, "w:gz") as tar:
        tar.add(repository, arcname="model-repository")


def _previous_run(run: RunDir, hashes: Hashes, model: ServedModel | None) -> RunInfo | None:
    """The run record of an earlier make-dag in the run directory, if any; refuses another
    campaign's (another stream hash: its parts would all be redone), and one made with another
    model (the repository exported again since: its parts and new ones would mix two models).
    A campaign that differs in merge-only settings (``config.MERGE_ONLY``) is the same: its
    parts are kept and its merge nodes are redone. A run whose run.json is lost while its
    campaign.toml is this campaign is restored (None: no record; its parts are kept). A
    directory that holds other files and no run is refused: make-dag would overwrite them."""
    foreign = run.foreign_entries()
    if foreign:
        raise RunError(
            f"{run.path} is not a run directory of make-dag and not empty (it holds "
            f"{names_text(foreign, 3)}): "
            "make-dag would overwrite them; write the run into a new or empty directory")
    if not run.dag.exists():
        return None
    if _restores(run, hashes):
        return None
    try:
        previous = records.read_run_info(run)
    except RunError as err:
        raise RunError(
            f"{run.path} already holds an offline.dag but no readable {run.run_info.name}, so "
            f"its campaign is unknown ({err}); choose another run directory"
        ) from None
    if not hashes.is_stream(previous.stream_hash):
        raise RunError(
            f"{run.path} already holds the DAG of another campaign (stream hash "
            f"{previous.stream_hash}, this one is {hashes.stream}); choose another run directory"
        )
    mismatch = model_mismatch(previous.model, model) if model is not None else None
    if mismatch is not None:
        raise RunError(
            f"{run.path} holds the parts of another model than the repository, exported again "
            f"since (it serves {mismatch}); choose another run directory")
    return previous


def _restores(run: RunDir, hashes: Hashes) -> bool:
    """Whether make-dag restores a lost run.json (``binding.run_info_damage``): the run's
    campaign.toml is this campaign (its stream hash), so its parts are kept."""
    damage = run_info_damage(run)
    if damage is None:
        return False
    try:
        if not hashes.is_stream(load_config(run.config).stream_hash()):
            return False
    except ConfigError:  # no campaign.toml either: the campaign is unknown
        return False
    logger.info(f"make-dag: {run.run_info} is {damage}: restoring it; the finished parts are "
                "kept")
    return True


def _model_record(repository: Path) -> ServedModel | None:
    """The served model as the products' provenance records it (None without a manifest)."""
    try:
        manifest = read_manifest(repository)
    except (ModelError, OSError):
        return None
    return model_record(repository, manifest)


def make_dag(
    config: CampaignConfig,
    run: RunDir,
    sequence_base: int | None = None,
    check_files: bool = True,
) -> list[ClientShare]:
    """Check the campaign's data and write its run directory.

    Parameters
    ----------
    config
        The campaign.
    run
        Directory to write (created if needed; made absolute). One that already holds the
        DAG of the same campaign (same config hash) is rewritten and keeps its parts; another
        campaign's is refused.
    sequence_base
        Added to every client's sequence ID. Default: the previous base of this run directory,
        else a random multiple of ``SEQUENCE_BLOCK``.
    check_files
        Open the frame files in the data check and check the model repository against the
        campaign, every graph loaded (default). Without, the coverage comes from the files'
        names alone and the repository is not looked at: planning a campaign whose frames
        and model are not here.

    Returns
    -------
    The client shares, in time order. The summary of the analysable span (total,
    analysable, dropped and why) is logged.

    Raises
    ------
    ConfigError
        If ``[site]`` does not suit its profile (``profiles.resolve_site``), or ``run`` is inside
        the frames' directory (``data.frames``), before anything is checked or written.
    ConfigError, DataError, ModelError
        From make-dag's checks (``serve/startup_checks.py``, in its order: the frames, the
        injection list, the model repository), before anything is written.
    RunError
        If the directory holds another campaign, or a path cannot be written into a submit file.
    """
    site = resolve_site(config)
    _refuse_out_inside_frames(config.data.frames, run)
    # holes inside science segments end streams rather than the campaign (`check` is stricter)
    span = run_checks(Checking("make-dag", config, open_files=check_files)).span
    assert span is not None
    stretches = make_stretches(config.geometry, span.stretches)

    run = run.absolute()
    hashes = Hashes.of(config)
    executable = console_script()
    _check_path(run.path, "run directory")
    _check_path(executable, "console script")
    if site.transfer:  # packed below, checked or not
        _refuse_no_repository_to_pack(config.model.repository, config.site.filesystem, site)
    model = _model_record(config.model.repository)
    previous = _previous_run(run, hashes, model)
    sequence_base = _sequence_base(run, previous, sequence_base,
                                   config.layout.servers * config.layout.clients_per_server)

    shares = client_shares(config, stretches, sequence_base=sequence_base)
    shards = shard_merges(config, stretches_of(shares), shares)
    for line in span.summary_lines():
        logger.info(f"make-dag: {line}")
    servers = [server_name(i) for i in range(config.layout.servers)]

    run.create()
    write_token(run)  # kept when the directory is rewritten: running servers keep theirs
    job_sha256 = _write_job_specs(run, shares, shards)
    run_id = previous.run_id if previous is not None else secrets.token_hex(8)
    texts = submit_texts(config, site, executable, run_id, sharded=bool(shards))
    for role, text in texts.items():
        write_text_atomic(run.submit(role), text)
    if not shards:
        run.submit("shard").unlink(missing_ok=True)
    if site.transfer:
        _write_tarball(config.model.repository, run.repository_tarball)
    else:
        run.repository_tarball.unlink(missing_ok=True)

    # the nodes read the run's config: it holds the profile's choices resolved (server.bind)
    resolved = dataclasses.replace(config, server=dataclasses.replace(config.server,
                                                                      bind=site.bind))
    with replaced_atomically(run.config) as tmp:
        write_config(resolved, tmp)

    records.write(records.build(RunInfo, {
        "run_id": run_id,
        "stream_hash": hashes.stream,
        "merge_hash": hashes.merge,
        "sequence_base": sequence_base,
        "servers": servers,
        "clients": [share.node for share in shares],
        "shards": [shard.node for shard in shards],
        "created": datetime.now().astimezone().isoformat(timespec="seconds"),
        # the networks' training data, which the merge's physics numbers leave out
        "training": manifest_training_spans(config.model.repository),
        # what the products' provenance names (graph versions and SHA-256)
        "model": model,
        # frame files left out as gaps (data.on_bad_file = "gap"; the parts add theirs)
        "bad_frame_files": span.bad_files,
        # the job specs as written: a node refuses one edited or replaced since
        "job_sha256": job_sha256,
    }), run.run_info)
    # Last, so that a directory with an offline.dag always has the rest of its files.
    _write_dag(run, config.workflow, site, executable, servers, shares, shards)
    return shares


def _write_dag(run: RunDir, workflow: WorkflowConfig, site: Site, executable: Path,
               servers: list[str], shares: list[ClientShare], shards: list[MergeShard]) -> None:
    """Write ``RUN/offline.dag`` (``dag_writer.dag_text``): with the job-ad rendezvous, each client
    node's pre-script waits for its server's address."""
    pre = None
    if site.rendezvous == "jobad":
        args = ("prescript", "--run-dir", ".", "--node", "$JOB")  # DAGMan runs it in RUN
        pre = Script(str(executable), args, DEFER_EXIT, DEFER_SECONDS)
    text = dag_text(
        servers,
        shares,
        workflow.retries,
        workflow.max_parallel_clients,
        fatal_exit=exit_code(ConfigError),
        final=True,
        client_pre=pre,
        shards=[(c.node, c.clients) for c in shards],
        transfer=site.transfer,
        max_parallel_merges=workflow.max_parallel_merges,
    )
    write_text_atomic(run.dag, text)


def _refuse_out_inside_frames(frames: Path | None, run: RunDir) -> None:
    """ConfigError where the run directory is inside ``data.frames`` (a directory), which
    discovery searches recursively: the frames a run writes there (DeepClean's cleaned strain)
    would be found as the campaign's. The directory itself is refused later, as holding other
    files."""
    if frames is None or not frames.is_dir():
        return
    out, frames_dir = (Path(os.path.realpath(p)) for p in (run.path, frames))
    if out != frames_dir and out.is_relative_to(frames_dir):
        raise ConfigError(f"--out {run.path} is inside data.frames ({frames}): the frames the "
                          "run writes there would be found as the campaign's; write the run "
                          "directory elsewhere")


def _refuse_no_repository_to_pack(repository: Path, filesystem: str, site: Site
                                  ) -> None:
    """ConfigError where the servers get the model repository by file transfer and
    ``repository`` is no directory to pack (``filesystem``: ``site.filesystem`` as given)."""
    if repository.is_dir():
        return
    chosen = ('site.filesystem = "transfer"' if filesystem
              else f"the {site.profile.name} profile's")
    raise ConfigError(
        f"model.repository {repository}: "
        f"{'not a directory' if repository.exists() else 'no such directory'}: with file "
        f"transfer ({chosen}) make-dag packs it into RUN/model-repository.tar.gz for the "
        "servers, with --no-check too")


def _sequence_base(run: RunDir, previous: RunInfo | None, chosen: int | None,
                   clients_count: int) -> int:
    """The run's sequence base: ``chosen``, else the previous run's (or, with run.json
    restored, the one its job specs carry), else a random multiple of ``SEQUENCE_BLOCK``;
    ConfigError where it is no non-negative integer or the clients do not fit in a block."""
    base = chosen
    if base is None:
        base = previous.sequence_base if previous else planned_sequence_base(run)
    if base is None:
        base = secrets.randbelow(_SEQUENCE_BLOCKS) * SEQUENCE_BLOCK
    if not isinstance(base, int) or isinstance(base, bool) or base < 0:
        raise ConfigError(f"sequence base must be a non-negative integer, got {base!r}")
    if clients_count >= SEQUENCE_BLOCK:
        raise ConfigError(f"{clients_count} client shares do not fit in one sequence block")
    return base


def _write_job_specs(run: RunDir, shares: list[ClientShare], shards: list[MergeShard]
                     ) -> dict[str, str]:
    """Write every client's and shard merge's job spec, delete those of nodes no longer
    planned, and forget the merge's outputs made for another sharding (``_forget_other_shard``,
    ``_forget_index``). Returns each spec's SHA-256 by node, for run.json."""
    nodes = [*(share.node for share in shares), *(shard.node for shard in shards)]
    current = {f"{node}.json" for node in nodes}
    for stale in run.jobs.glob("*.json"):
        if stale.name not in current:
            stale.unlink()
    forgotten: list[Path] = []
    for stale in run.output_shards.glob("shard*.json"):
        if stale.name not in current:  # a shard of another sharding: its merge is redone
            forgotten += _forget_other_shard(run, stale.stem, None)
    for share in shares:
        write_client_job(run, share)
    for shard in shards:
        forgotten += _forget_other_shard(run, shard.node, shard)
        write_shard_job(run, shard)
    _forget_index(run, forgotten)
    return {node: file_sha256(run.job(node)) for node in nodes}
