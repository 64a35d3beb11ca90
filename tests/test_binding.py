"""A run bound to what make-dag planned (#44), on a finished campaign with a real tritonserver.

One small BBHnet campaign (64 s, 1 server x 2 clients) is run once; each test works on a copy
of its run directory (a copy runs its own nodes: only its merge, whose output names the
original's files, runs again):

* a stream setting edited in ``RUN/campaign.toml`` (``data.duration``): ``run-local``, ``status``
  and the client and server nodes refuse it with one line before anything starts, nothing in
  the run directory changes; a merge-only edit is taken (the control);
* ``run.json`` cut in half: refused at once, before any node streams; the advice, followed
  literally, restores it, and the campaign completes equal to the reference with only the
  lost part streamed again;
* the shared model repository exported again with other weights (version 2): ``run-local``
  and the server node itself refuse it with one line, the lost part is not made with the new
  model, the output still equals the reference; make-dag into the same directory refuses it,
  into a new one takes it (the control).
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
from pathlib import Path

import pytest

from offline_iaas.cli import main
from offline_iaas.config import load_config
from offline_iaas.errors import ConfigError, ModelError, RunError, exit_code
from offline_iaas.manifest import read_manifest
from offline_iaas.merge.output import compare_outputs
from offline_iaas.records import read_run_info
from offline_iaas.repository.export import export_repository
from offline_iaas.repository.served import model_record
from offline_iaas.rundir import RunDir
from offline_iaas.workflow.binding import check_binding
from offline_iaas.workflow.local import run_local
from offline_iaas.workflow.make_dag import make_dag
from offline_iaas.workflow.status import read_status
from tests.error_catalogue import cli_error, documented
from tests.helpers import (
    TOLERANCE,
    FinishedCampaign,
    finished_campaign,
    processes_mentioning,
    run_local_stopping_all,
    untrained_weights,
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> FinishedCampaign:
    """The campaign run once to the end, and its in-process reference."""
    root = tmp_path_factory.mktemp("binding")
    return finished_campaign(root, ['model.mode="bbhnet"',
                                   f'search.injections="{root / "frames" / "synth.json"}"'])


def copy_run(finished: FinishedCampaign, name: str) -> Path:
    copy = finished.root / name
    shutil.copytree(finished.run_dir, copy, symlinks=True)
    return copy


def snapshot(run_dir: Path) -> dict[str, tuple[int, int]]:
    """Every file of the run directory: its mtime (ns) and size."""
    return {str(p.relative_to(run_dir)): (p.stat().st_mtime_ns, p.stat().st_size)
            for p in sorted(run_dir.rglob("*")) if p.is_file()}


def cli(capsys: pytest.CaptureFixture, *argv: str) -> tuple[int, str]:
    """``offline-iaas argv`` in process: its exit code and its error line (prefix removed)."""
    capsys.readouterr()
    code = main(list(argv))
    err = capsys.readouterr().err.strip().splitlines()
    return code, cli_error(err[-1]) if err else ""


def equals_reference(run_dir: Path, finished: FinishedCampaign) -> None:
    comparison = compare_outputs(run_dir / "output" / "campaign.h5", finished.reference)
    assert comparison.passes(TOLERANCE), comparison.describe()


def test_a_stream_setting_edited_in_the_run_config_is_refused_before_any_node_starts(
    finished: FinishedCampaign, capsys: pytest.CaptureFixture
) -> None:
    run_dir = copy_run(finished, "edited")
    path = run_dir / "campaign.toml"
    planned = path.read_text()
    info = read_run_info(RunDir(run_dir))

    # the control: an edit of a merge-only setting is taken, the merge runs again
    assert re.search(r"^cluster_seconds = ", planned, re.M)
    path.write_text(re.sub(r"^cluster_seconds = .*$", "cluster_seconds = 2.5", planned,
                           flags=re.M))
    check_binding(RunDir(run_dir))
    found = {n.name: (n.state, n.detail) for n in read_status(RunDir(run_dir)).nodes}
    assert [found[c][0] for c in info.clients] == ["done", "done"]
    assert found["merge"][0] == "waiting"
    assert "merge from another campaign's config (merge hash" in found["merge"][1]

    edited = re.sub(r"^duration = .*$", "duration = 32", planned, flags=re.M)
    assert edited != planned
    path.write_text(edited)
    before = snapshot(run_dir)
    with pytest.raises(ConfigError) as caught:
        run_local(RunDir(run_dir))
    message = str(caught.value)
    ours = load_config(path).stream_hash()
    assert message == (
        f"{path} was edited since make-dag planned this run (stream hash {ours}, run.json's "
        f"{info.stream_hash}: a setting the clients' parts depend on changed): undo the edit, "
        "or run the edited campaign with make-dag into a new run directory")
    documented("run-config-edited", message, {
        finished.root: "<ws>", ours: "<hash of the edited config>",
        info.stream_hash: "<hash of the run>"}, exit_code=exit_code(ConfigError))
    assert processes_mentioning(str(run_dir)) == []
    assert snapshot(run_dir) == before  # nothing started, no part rewritten

    # status says why; each node, started by DAGMan, refuses too before it streams or serves
    assert cli(capsys, "status", str(run_dir)) == (exit_code(ConfigError), message)
    assert cli(capsys, "client", "--run-dir", str(run_dir), "--node", "client0") == (
        exit_code(ConfigError), message)
    assert snapshot(run_dir) == before
    assert cli(capsys, "serve", "--run-dir", str(run_dir), "--node", "server0") == (
        exit_code(ConfigError), message)
    assert RunDir(run_dir).refusal("server0").read_text() == message  # its clients read why
    assert processes_mentioning(str(run_dir)) == []

    path.write_text(planned)  # undone: the run is make-dag's plan again
    check_binding(RunDir(run_dir))
    assert cli(capsys, "status", str(run_dir))[0] == 0


def test_a_damaged_run_record_is_refused_at_once_and_its_advice_restores_the_run(
    finished: FinishedCampaign, capsys: pytest.CaptureFixture
) -> None:
    run_dir = copy_run(finished, "damaged")
    paths = RunDir(run_dir)
    planned = json.loads(paths.run_info.read_text())
    jobs = {p.name: p.read_bytes() for p in paths.jobs.iterdir()}
    for lost in paths.part("client1"):  # a part lost too: streamed again once restored
        lost.unlink()
    kept = paths.part("client0")[0].stat().st_mtime_ns

    paths.run_info.unlink()
    with pytest.raises(ConfigError, match=r"run\.json is missing, so nothing can check"):
        run_local(paths)
    text = (finished.run_dir / "run.json").read_bytes()
    paths.run_info.write_bytes(text[:len(text) // 2])  # cut in half
    with pytest.raises(ValueError) as unparsed:
        json.loads(paths.run_info.read_text())
    why = str(unparsed.value)
    before = snapshot(run_dir)
    with pytest.raises(ConfigError) as caught:
        run_local(paths)
    message = str(caught.value)
    command = f"offline-iaas make-dag {run_dir}/campaign.toml --out {run_dir}"
    assert message == (
        f"{run_dir}/run.json is damaged (not JSON: {why}), so nothing can check what make-dag "
        f"planned: restore it with '{command}' (the finished parts are kept)")
    documented("run-record-damaged", message, {finished.root: "<ws>", why: "<JSON error>"},
               exit_code=exit_code(ConfigError))
    assert snapshot(run_dir) == before  # before any node started
    assert processes_mentioning(str(run_dir)) == []
    assert cli(capsys, "status", str(run_dir)) == (exit_code(ConfigError), message)
    assert cli(capsys, "client", "--run-dir", str(run_dir), "--node", "client1") == (
        exit_code(ConfigError), message)
    assert not paths.part("client1")[0].exists()

    # the advice, as written
    argv = shlex.split(message.split("restore it with '")[1].split("'")[0])
    assert argv[0] == "offline-iaas"
    assert main(argv[1:]) == 0
    restored = json.loads(paths.run_info.read_text())
    for key in ("stream_hash", "merge_hash", "sequence_base", "servers", "clients", "shards",
                "model", "training"):
        assert restored[key] == planned[key], key
    assert {p.name: p.read_bytes() for p in paths.jobs.iterdir()} == jobs  # the same plan

    started, _ = run_local_stopping_all(run_dir)
    assert "client0" not in started and "client1" in started  # only the lost part streamed
    assert paths.part("client0")[0].stat().st_mtime_ns == kept
    assert read_status(paths).output_complete
    equals_reference(run_dir, finished)


def test_a_model_repository_exported_again_is_refused_and_nothing_is_mixed(
    finished: FinishedCampaign, capsys: pytest.CaptureFixture
) -> None:
    run_dir = copy_run(finished, "reexported")
    paths = RunDir(run_dir)
    recorded = read_run_info(paths).model
    assert recorded is not None and recorded.networks["bbhnet"].version == 1
    for lost in paths.part("client1"):  # the lost part must not be made by another model
        lost.unlink()
    repository = finished.config.model.repository
    backup = finished.root / "repository-as-planned"
    shutil.copytree(repository, backup, symlinks=True)
    try:
        # another campaign exports the shared repository with other weights: version 2
        export_repository(finished.config, untrained_weights(finished.root / "other", seed=5))
        before = snapshot(run_dir)
        with pytest.raises(ModelError) as caught:
            run_local(paths)
        message = str(caught.value)
        was = recorded.networks["bbhnet"].sha256[:12]
        now = model_record(repository, read_manifest(repository)).networks["bbhnet"].sha256[:12]
        assert now != was
        assert message == (
            f"model repository {repository} changed since make-dag planned this run: it serves "
            "bbhnet version 2 where run.json records version 1; a campaign's parts come from "
            "one model: run make-dag into a new run directory to use this one")
        documented("model-repository-exported-again", message, {finished.root: "<ws>"},
                   exit_code=exit_code(ModelError))
        assert snapshot(run_dir) == before  # nothing started: the lost part not remade
        assert processes_mentioning(str(run_dir)) == []
        equals_reference(run_dir, finished)  # the output of one model, as it was

        assert cli(capsys, "status", str(run_dir)) == (exit_code(ModelError), message)

        # the server itself refuses it (under DAGMan no run-local checks first), its graphs read
        code, served = cli(capsys, "serve", "--run-dir", str(run_dir), "--node", "server0")
        assert (code, served) == (exit_code(ModelError), (
            f"model repository {repository} changed since make-dag planned this run: it serves "
            f"bbhnet version 2 (graph sha256 {now}) where run.json records version 1 ({was}); "
            "a campaign's parts come from one model: run make-dag into a new run directory to "
            "use this one"))
        documented("server-model-changed", served, {
            finished.root: "<ws>", now: "<sha256 of the new graph>",
            was: "<sha256 of the run's>"}, exit_code=exit_code(ModelError))
        assert paths.refusal("server0").read_text() == served  # what its clients read
        assert processes_mentioning(str(run_dir)) == []  # no tritonserver started

        # make-dag into the same directory would bind its parts to the new model: refused
        with pytest.raises(RunError, match="holds the parts of another model") as refused:
            make_dag(finished.config, paths)
        documented("run-directory-of-another-model", str(refused.value), {
            finished.root: "<ws>", now: "<sha256 of the new graph>",
            was: "<sha256 of the run's>"}, exit_code=exit_code(RunError))
        assert not paths.part("client1")[0].exists()
        # the control: a new run directory takes the new model
        make_dag(finished.config, RunDir(finished.root / "new-model"))
        new = read_run_info(RunDir(finished.root / "new-model")).model
        assert new is not None and new.networks["bbhnet"].version == 2
        assert new.networks["bbhnet"].sha256.startswith(now)
    finally:
        shutil.rmtree(repository)
        shutil.copytree(backup, repository, symlinks=True)
