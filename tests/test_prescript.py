"""The job-ad rendezvous: the JobAds interface (chirp + schedd, and its file fake) and the PRE
script's logic, run for real (in process and as the ``offline-iaas prescript`` command)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import classad2
import htcondor2
import htcondor2.htchirp
import pytest

from offline_iaas import records
from offline_iaas.config import load_config
from offline_iaas.errors import RunError, ServerError, exit_code
from offline_iaas.job_specs import write_client_job
from offline_iaas.records import ClientShare, RunInfo
from offline_iaas.rendezvous import addresses
from offline_iaas.rendezvous.job_ads import (
    ADDRESS_ATTRIBUTE,
    FAKE_ENV,
    FileJobAds,
    HTCondorJobAds,
    QueuedAd,
    job_ads,
)
from offline_iaas.rendezvous.prescript import DEFER_EXIT, current_address, prescript
from offline_iaas.rundir import RunDir
from tests.error_catalogue import documented
from tests.helpers import SMALL_CAMPAIGN
from tests.test_own_files_not_regular import FIFO, refused

RUN_ID = "feedfacecafebeef"


def address(epoch: int = 1, port: int = 8001) -> addresses.ServerAddress:
    return addresses.ServerAddress(node="server0", host="node17.cluster", grpc_port=port,
                                   http_port=port + 1, metrics_port=port + 2, epoch=epoch,
                                   pid=4242)


def as_json(addr: addresses.ServerAddress) -> str:
    return addresses.address_text(addr)


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    """The files a PRE script reads on the access point: the campaign config, run.json and
    the client's job spec."""
    run = tmp_path / "run"
    (run / "jobs").mkdir(parents=True)
    (run / "campaign.toml").write_text(SMALL_CAMPAIGN)
    write_run_info(run, ("server0",))
    write_client_job(RunDir(run), ClientShare(index=0, node="client0", server="server0", pieces=()))
    return run


def write_run_info(run: Path, servers: tuple[str, ...]) -> None:
    """run.json as make-dag writes it for the run's campaign.toml (its hashes)."""
    config = load_config(run / "campaign.toml")
    records.write(RunInfo(run_id=RUN_ID, stream_hash=config.stream_hash(),
                          merge_hash=config.merge_hash(),
                          sequence_base=1 << 20, servers=servers, clients=("client0",),
                          created="2025-01-01T00:00:00+00:00"), run / "run.json")


def test_file_job_ads_round_trip(tmp_path: Path) -> None:
    ads = FileJobAds(tmp_path / "ads.json")
    assert ads.find(RUN_ID, "server0") == [] and ads.get_own(RUN_ID, "server0", "X") is None
    ads.set_own(RUN_ID, "server0", ADDRESS_ATTRIBUTE, "text")
    ads.set_own(RUN_ID, "server0", "NumJobStarts", 3)
    assert ads.get_own(RUN_ID, "server0", "NumJobStarts") == 3
    [ad] = ads.find(RUN_ID, "server0")
    assert (ad.address, ad.job_status, ad.job_starts, ad.refusal) == ("text", 2, 3, None)
    assert ads.find("another-run", "server0") == []
    ads.set_own(RUN_ID, "server0", ADDRESS_ATTRIBUTE, None)
    assert ads.find(RUN_ID, "server0")[0].address is None


def test_a_damaged_job_ads_file_is_an_error_naming_it_and_is_left_as_it_was(
    tmp_path: Path
) -> None:
    path = tmp_path / "ads.json"
    ads = FileJobAds(path)
    ads.set_own(RUN_ID, "server0", ADDRESS_ATTRIBUTE, "text")
    ads.set_own(RUN_ID, "server1", ADDRESS_ATTRIBUTE, "other")
    assert [ad.address for ad in ads.find(RUN_ID, "server1")] == ["other"]  # the control
    data = bytearray(path.read_bytes())
    data[0] ^= 0x01  # "{" becomes "z": one byte flipped, the mtime kept
    stat = path.stat()
    path.write_bytes(bytes(data))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    for call in (lambda: ads.find(RUN_ID, "server1"),
                 lambda: ads.set_own(RUN_ID, "server0", ADDRESS_ATTRIBUTE, "new")):
        with pytest.raises(ServerError) as caught:
            call()
        documented("job-ads-damaged", str(caught.value), {path: "RUN/job-ads.json"},
                   exit_code=exit_code(caught.value))
        assert path.read_bytes() == bytes(data)  # not emptied, not rewritten
    path.write_text(json.dumps({f"{RUN_ID}/server0": "not an ad"}))
    with pytest.raises(ServerError, match="not an object of ads"):
        ads.find(RUN_ID, "server0")


def test_job_ads_factory(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(FAKE_ENV, raising=False)
    assert isinstance(job_ads(), HTCondorJobAds)
    monkeypatch.setenv(FAKE_ENV, str(tmp_path / "ads.json"))
    assert isinstance(job_ads(), FileJobAds)


def test_only_the_current_start_of_a_running_server_counts() -> None:
    good = {"JobStatus": 2, "NumJobStarts": 2, ADDRESS_ATTRIBUTE: as_json(address(epoch=2))}

    def current(*ads: dict[str, Any], node: str = "server0") -> addresses.ServerAddress | None:
        return current_address([QueuedAd.from_ad(ad) for ad in ads], node)

    assert current(good) == address(epoch=2)
    assert current({**good, "JobStatus": 1}) is None  # idle: restarting
    assert current({**good, "NumJobStarts": 3}) is None  # stale address
    assert current({**good, ADDRESS_ATTRIBUTE: "{not json"}) is None
    assert current({**good, ADDRESS_ATTRIBUTE: None}) is None
    assert current({**good, ADDRESS_ATTRIBUTE: 7}) is None  # another program's attribute
    assert current(good, node="server1") is None
    newer = {"JobStatus": 2, "NumJobStarts": None, ADDRESS_ATTRIBUTE: as_json(address(3, 9000))}
    assert current(good, newer) == address(3, 9000)


def test_prescript_defers_until_the_server_publishes(
    run_dir: Path, tmp_path: Path, log_lines: list[str]
) -> None:
    ads = FileJobAds(tmp_path / "ads.json")
    lines = log_lines
    assert prescript(RunDir(run_dir), "client0", ads) is False
    assert "deferring" in lines[-1] and not (run_dir / "servers").exists()

    # The server side of the same interface: what `serve --rendezvous jobad` does.
    ads.set_own(RUN_ID, "server0", ADDRESS_ATTRIBUTE, as_json(address()))
    assert prescript(RunDir(run_dir), "client0", ads) is True
    assert "server0 is at node17.cluster:8001 (epoch 1)" in lines[-1]
    assert addresses.read_address(RunDir(run_dir), "server0") == address()


def test_a_fifo_as_the_pre_scripts_deferral_file_is_named_not_waited_on(
        run_dir: Path, tmp_path: Path) -> None:
    """``logs/client0.pre-waiting-since`` (when the PRE script first deferred): a FIFO there
    was read for ever, the DAG's client never started. The control: the time it holds."""
    ads = FileJobAds(tmp_path / "ads.json")
    waiting = RunDir(run_dir).node_log("client0", "pre-waiting-since")
    waiting.parent.mkdir(parents=True)
    os.mkfifo(waiting)
    err = refused(lambda: prescript(RunDir(run_dir), "client0", ads), RunError)
    assert str(err) == f"{waiting}: cannot read: {FIFO}"
    documented("prescript-waiting-not-regular", str(err), {tmp_path: "<ws>"},
               exit_code=exit_code(err))
    waiting.unlink()
    waiting.write_text("1000.0\n")
    assert prescript(RunDir(run_dir), "client0", ads, now=1010.0) is False  # deferred again


def test_a_fifo_as_the_job_ads_file_is_named_not_waited_on(tmp_path: Path) -> None:
    """The job ads' stand-in (``OFFLINE_IAAS_FAKE_JOB_ADS``): read under its lock by every
    server and PRE script. The control: the ads written are read back."""
    path = tmp_path / "ads.json"
    os.mkfifo(path)
    err = refused(lambda: FileJobAds(path).get_own(RUN_ID, "server0", "x"), ServerError)
    assert str(err) == f"{path}: cannot read: {FIFO}"
    documented("job-ads-not-regular", str(err), {tmp_path: "<ws>"}, exit_code=exit_code(err))
    path.unlink()
    FileJobAds(path).set_own(RUN_ID, "server0", "x", 3)
    assert FileJobAds(path).get_own(RUN_ID, "server0", "x") == 3


def test_prescript_command_exit_codes(run_dir: Path, tmp_path: Path) -> None:
    """The PRE script as DAGMan runs it: exit 75 (DEFER) until the address is known, then 0."""
    fake = tmp_path / "ads.json"
    env = {**os.environ, FAKE_ENV: str(fake)}
    cmd = [sys.executable, "-m", "offline_iaas.cli", "prescript", "--run-dir", str(run_dir),
           "--node", "client0"]
    first = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
    assert first.returncode == DEFER_EXIT, first.stderr
    FileJobAds(fake).set_own(RUN_ID, "server0", ADDRESS_ATTRIBUTE, as_json(address()))
    second = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
    assert second.returncode == 0, second.stderr
    assert json.loads((run_dir / "servers" / "server0.json").read_text())["grpc_port"] == 8001
    broken = subprocess.run([*cmd[:-1], "client9"], env=env, capture_output=True, text=True,
                            timeout=60)
    assert broken.returncode == 6 and "client9 is not a node of this run" in broken.stderr



def test_prescript_refuses_a_run_whose_record_is_damaged_or_config_edited(
    run_dir: Path, tmp_path: Path
) -> None:
    """The PRE script checks the run against make-dag's plan first: a run.json cut in half
    and a stream setting edited in campaign.toml are each one line, exit 2, and no address
    is written."""
    env = {**os.environ, FAKE_ENV: str(tmp_path / "ads.json")}
    FileJobAds(tmp_path / "ads.json").set_own(RUN_ID, "server0", ADDRESS_ATTRIBUTE,
                                              as_json(address()))
    cmd = [sys.executable, "-m", "offline_iaas.cli", "prescript", "--run-dir", str(run_dir),
           "--node", "client0"]
    record = (run_dir / "run.json").read_text()
    (run_dir / "run.json").write_text(record[: len(record) // 2])
    cut = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
    assert cut.returncode == 2 and "run.json is damaged" in cut.stderr, cut.stderr
    assert len(cut.stderr.strip().splitlines()) == 1
    (run_dir / "run.json").write_text(record)
    config = run_dir / "campaign.toml"
    config.write_text(config.read_text().replace("duration = 64", "duration = 32"))
    edited = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
    assert edited.returncode == 2 and "was edited since make-dag" in edited.stderr
    assert not (run_dir / "servers" / "server0.json").exists()
    config.write_text(config.read_text().replace("duration = 32", "duration = 64"))
    undone = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
    assert undone.returncode == 0, undone.stderr  # the control: the plan's config passes

class FakeChirp:
    """Stands in for htcondor2.htchirp.HTChirp: a job ad held in a dict."""

    ad: dict[str, str] = {}

    def __enter__(self) -> FakeChirp:
        return self

    def __exit__(self, *args: object) -> None:
        pass

    def set_job_attr(self, name: str, expression: str) -> None:
        FakeChirp.ad[name] = expression

    def get_job_attr(self, name: str) -> str:
        return FakeChirp.ad.get(name, "undefined")


class FakeSchedd:
    constraints: list[tuple[str, list[str]]] = []

    def query(self, constraint: str, projection: list[str]) -> list[classad2.ClassAd]:
        FakeSchedd.constraints.append((constraint, projection))
        ad = classad2.ClassAd()
        ad["JobStatus"], ad["NumJobStarts"], ad["ClusterId"] = 2, 1, 77
        ad[ADDRESS_ATTRIBUTE] = classad2.ExprTree(FakeChirp.ad[ADDRESS_ATTRIBUTE]).eval()
        return [ad]


def test_htcondor_job_ads_use_chirp_and_the_schedd(
    monkeypatch: pytest.MonkeyPatch, run_dir: Path
) -> None:
    monkeypatch.setattr(htcondor2.htchirp, "HTChirp", FakeChirp)
    monkeypatch.setattr(htcondor2, "Schedd", FakeSchedd)
    FakeChirp.ad = {"NumJobStarts": "1"}
    ads = HTCondorJobAds()
    text = as_json(address())
    ads.set_own(RUN_ID, "server0", ADDRESS_ATTRIBUTE, text)
    assert FakeChirp.ad[ADDRESS_ATTRIBUTE] == classad2.quote(text)  # a ClassAd string literal
    assert ads.get_own(RUN_ID, "server0", ADDRESS_ATTRIBUTE) == text
    assert ads.get_own(RUN_ID, "server0", "NumJobStarts") == 1
    assert ads.get_own(RUN_ID, "server0", "Missing") is None

    assert prescript(RunDir(run_dir), "client0", ads) is True
    constraint, projection = FakeSchedd.constraints[-1]
    assert constraint == f'OfflineIaasRun == "{RUN_ID}" && OfflineIaasNode == "server0"'
    assert ADDRESS_ATTRIBUTE in projection and "NumJobStarts" in projection
    assert addresses.read_address(RunDir(run_dir), "server0") == address()

    ads.set_own(RUN_ID, "server0", ADDRESS_ATTRIBUTE, None)  # withdrawn when the server stops
    assert FakeChirp.ad[ADDRESS_ATTRIBUTE] == "undefined"


def test_chirp_outside_a_job_says_what_is_missing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)  # no .chirp.config here
    monkeypatch.delenv("_CONDOR_CHIRP_CONFIG", raising=False)
    with pytest.raises(ServerError, match="want_io_proxy"):
        HTCondorJobAds().set_own(RUN_ID, "server0", ADDRESS_ATTRIBUTE, "x")


def test_prescript_fails_over_to_a_live_server_after_the_deadline(
    run_dir: Path, tmp_path: Path, log_lines: list[str]
) -> None:
    (run_dir / "campaign.toml").write_text(SMALL_CAMPAIGN + "\n[client]\nfailover_seconds = 600\n")
    write_run_info(run_dir, ("server0", "server1"))
    ads = FileJobAds(tmp_path / "ads.json")
    other = address().model_copy(update={"node": "server1", "grpc_port": 9001})
    ads.set_own(RUN_ID, "server1", ADDRESS_ATTRIBUTE, as_json(other))  # server0 never starts
    assert prescript(RunDir(run_dir), "client0", ads, now=1000.0) is False
    # written for the client anyway
    assert addresses.read_address(RunDir(run_dir), "server1") == other
    assert prescript(RunDir(run_dir), "client0", ads, now=1599.0) is False
    assert prescript(RunDir(run_dir), "client0", ads, now=1600.0) is True
    assert "failing over to a live one (server1)" in log_lines[-1]
    assert addresses.read_address(RunDir(run_dir), "server0") is None
    # its own server is preferred as soon as it is there
    ads.set_own(RUN_ID, "server0", ADDRESS_ATTRIBUTE, as_json(address()))
    assert prescript(RunDir(run_dir), "client0", ads, now=1601.0) is True
    assert addresses.read_address(RunDir(run_dir), "server0") == address()
    # and a server gone from the schedd loses its file
    ads.set_own(RUN_ID, "server1", ADDRESS_ATTRIBUTE, None)
    assert prescript(RunDir(run_dir), "client0", ads, now=1602.0) is True
    assert addresses.read_address(RunDir(run_dir), "server1") is None


def test_a_server_that_refused_to_serve_lets_its_client_start_and_say_why(
    run_dir: Path, tmp_path: Path
) -> None:
    from offline_iaas.rendezvous.job_ads import REFUSAL_ATTRIBUTE

    ads = FileJobAds(tmp_path / "ads.json")
    run = RunDir(run_dir)
    why = "model repository R: exported for mode 'bbhnet', the campaign runs mode 'e2e'"
    ads.set_own(RUN_ID, "server0", REFUSAL_ATTRIBUTE, why)  # what `serve` does, refusing
    assert prescript(run, "client0", ads) is True  # no deferring: the client fails at once
    assert addresses.read_refusal(run, "server0") == why
    # the server, started again on a good repository, publishes an address: no refusal now
    ads.set_own(RUN_ID, "server0", REFUSAL_ATTRIBUTE, None)
    ads.set_own(RUN_ID, "server0", ADDRESS_ATTRIBUTE, as_json(address()))
    assert prescript(run, "client0", ads) is True
    assert addresses.read_refusal(run, "server0") is None
    assert addresses.read_address(run, "server0") == address()
