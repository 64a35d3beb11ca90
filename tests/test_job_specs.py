"""A job spec edited or replaced after make-dag (``binding.check_job_specs``): the node that
would stream or merge by it refuses it, naming the file, before anything is written (a bad-input
hunt: a client whose spec named another node wrote over that node's finished part; a shard
spec without a client's name merged zeros into a campaign called complete)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from offline_iaas.binding import check_job_specs
from offline_iaas.cli import main
from offline_iaas.config import load_config
from offline_iaas.errors import RunError
from offline_iaas.records import read_run_info
from offline_iaas.rundir import RunDir
from offline_iaas.workflow.make_dag import make_dag
from tests.bad_input_cases import fake_parts
from tests.error_catalogue import cli_error, documented
from tests.helpers import file_hashes


@pytest.fixture
def run_dir(small_campaign_dir, tmp_path: Path) -> Path:
    """make-dag of the small campaign with two shard merges, its parts faked as finished."""
    ws = small_campaign_dir()
    run = tmp_path / "run"
    make_dag(load_config(ws / "campaign.toml", ["merge.shard_seconds=32"]), RunDir(run))
    fake_parts(run)
    return run


def refused(args: list[str], capsys) -> tuple[int, str]:
    code = main(args)
    return code, cli_error(capsys.readouterr().err)


def test_a_client_whose_spec_is_another_clients_is_refused_before_it_writes(
        run_dir: Path, capsys) -> None:
    run = RunDir(run_dir)
    info = read_run_info(run)
    check_job_specs(run, info, [*info.clients, *info.shards])  # control: as make-dag wrote
    spec = run.job("client0")
    spec.unlink()
    spec.symlink_to(run.job("client1"))  # another node's spec under client0's name
    before = file_hashes(run_dir / "parts")
    code, message = refused(["client", "--run-dir", str(run_dir), "--node", "client0"], capsys)
    assert code == 6
    documented("job-spec-of-another-node", message, {str(run_dir): "RUN"}, exit_code=6)
    assert file_hashes(run_dir / "parts") == before  # client1's finished part untouched
    # the merge refuses it too; make-dag's own command restores it, the parts kept
    assert refused(["merge", "--run-dir", str(run_dir)], capsys)[0] == 6
    spec.unlink()
    assert main(["make-dag", str(run_dir / "campaign.toml"), "--out", str(run_dir)]) == 0
    check_job_specs(run, read_run_info(run), ["client0"])
    assert file_hashes(run_dir / "parts") == before


def test_a_shard_spec_without_a_client_is_refused_not_merged_into_zeros(
        run_dir: Path, capsys) -> None:
    run = RunDir(run_dir)
    (shard, *_) = read_run_info(run).shards
    spec = json.loads(run.job(shard).read_text())
    assert spec["clients"]
    spec["clients"] = spec["clients"][1:]  # a client fewer (here: none)
    run.job(shard).write_text(json.dumps(spec, indent=2) + "\n")
    code, message = refused(["merge-shard", "--run-dir", str(run_dir), "--node", shard], capsys)
    assert code == 6
    documented("job-spec-changed", message, {str(run_dir): "RUN"}, exit_code=6)
    assert not run.shard_output(shard)[0].exists()
    shutil.rmtree(run_dir / "jobs")  # a missing spec is its reader's line, not this one's
    code, message = refused(["merge-shard", "--run-dir", str(run_dir), "--node", shard], capsys)
    assert code != 0 and "is not the job spec" not in message


def test_a_merge_hashes_the_specs_and_parses_only_one_that_changed(
        run_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The merges check every client's spec against run.json's hash (``check_job_specs``'s
    default): at O3 scale 1,600 specs in each of 6,163 shard merges, so an unchanged spec is
    hashed, not parsed; one that changed is read for its line (``job_specs.read_job``)."""
    from offline_iaas import job_specs

    parsed: list[str] = []
    reader = job_specs.read_job
    monkeypatch.setattr(job_specs, "read_job",
                        lambda kind, run, node, text=None: parsed.append(node)
                        or reader(kind, run, node, text))
    run = RunDir(run_dir)
    info = read_run_info(run)
    specs = check_job_specs(run, info, [*info.clients, *info.shards])
    assert parsed == [] and all(s.job is None and not s.changed for s in specs.values())
    check_job_specs(run, info, info.clients, parse=True)  # control: status's parses each
    assert parsed == list(info.clients)
    parsed.clear()
    spec = json.loads(run.job("client1").read_text())
    run.job("client1").write_text(json.dumps(spec, indent=2))  # the same spec, other bytes
    with pytest.raises(RunError, match="client1.json is not the job spec make-dag wrote"):
        check_job_specs(run, info, [*info.clients, *info.shards])
    assert parsed == ["client1"]
