"""Site profiles: golden submit files per profile, HTCondor's parser, and the refusals.

Regenerate the golden files after an intended change with ``UPDATE_GOLDEN=1 pytest
tests/test_profiles.py`` (that run rewrites them and fails), review the diff and run again
without it.
"""

from __future__ import annotations

import os
from pathlib import Path

import htcondor2
import pytest

from offline_iaas.cli import main
from offline_iaas.config import config_from_dict
from offline_iaas.errors import ConfigError, exit_code
from offline_iaas.merge.tree import shard_merges
from offline_iaas.rendezvous.prescript import DEFER_EXIT, DEFER_SECONDS
from offline_iaas.rundir import RunDir
from offline_iaas.stretches import client_shares, stretches_of
from offline_iaas.workflow.dag import Script
from offline_iaas.workflow.dag_writer import dag_text
from offline_iaas.workflow.make_dag import make_dag
from offline_iaas.workflow.profiles import (
    ACCOUNTING_EXAMPLE,
    accounting_problem,
    resolve_site,
    submit_texts,
)
from offline_iaas.workflow.submit import ROLES
from tests.error_catalogue import documented
from tests.helpers import skip_data_check

GOLDEN = Path(__file__).parent / "golden"
EXECUTABLE = Path("/cvmfs/software.igwn.org/envs/offline-iaas/bin/offline-iaas")
RUN_ID = "0123456789abcdef"
SERVER_IMAGE = "/cvmfs/singularity.opensciencegrid.org/igwn/offline-iaas-server:0.1"
CLIENT_IMAGE = "/cvmfs/singularity.opensciencegrid.org/igwn/offline-iaas-client:0.1"
DATAFIND = {"frames": None, "datafind_server": "datafind.igwn.org",
            "frametypes": ["H1_HOFT_C01", "L1_HOFT_C01"]}
GPU = {"bind": "0.0.0.0", "gpus": 1, "gpu_capability": 7.5, "gpu_memory_mb": 16000,
       "memory": "16GB", "disk": "8GB", "instances": 2}

PROFILE_SECTIONS: dict[str, dict] = {
    "local": {},
    "ldg": {
        "data": DATAFIND,
        "server": {**GPU, "runtime": "apptainer", "image": SERVER_IMAGE},
        "site": {"profile": "ldg", "accounting_group": ACCOUNTING_EXAMPLE,
                 "accounting_group_user": "albert.einstein"},
    },
    "osg": {
        "data": DATAFIND,
        "server": {**GPU, "image": SERVER_IMAGE},
        "site": {"profile": "osg", "accounting_group": "igwn.prod.o4.detchar.deepclean.offline",
                 "client_image": CLIENT_IMAGE, "oauth_permissions": "gwdatafind.read read:/ligo"},
    },
    "hepcloud": {
        "server": {**GPU, "image": "docker://ghcr.io/igwn/offline-iaas-server:0.1"},
        "site": {"profile": "hepcloud", "client_image": "docker://ghcr.io/igwn/offline-iaas:0.1",
                 "client_memory": "3GB"},
    },
}


def campaign(tmp: Path | None = None, **sections: dict):
    raw: dict = {
        "data": {
            "frames": "frames",
            "channels": ["H1:GDS-CALIB_STRAIN", "L1:GDS-CALIB_STRAIN"],
            "start": 1238166018,
            "duration": 4096,
            "sample_rate": 2048,
        },
        "model": {"repository": "model-repository", "kernel_seconds": 1.0, "inference_rate": 4},
        "layout": {"servers": 2, "clients_per_server": 2},
    }
    for name, values in sections.items():
        raw.setdefault(name, {}).update(values)
    raw["data"] = {k: v for k, v in raw["data"].items() if v is not None}
    source = (tmp or Path("/campaigns/o3")) / "campaign.toml"
    return config_from_dict(raw, source)


def rendered(profile: str) -> dict[str, str]:
    config = campaign(**PROFILE_SECTIONS[profile])
    site = resolve_site(config)
    files = {f"{role}.sub": text for role, text in
             submit_texts(config, site, EXECUTABLE, RUN_ID, sharded=True).items()}
    pre = None
    if site.rendezvous == "jobad":
        args = ("prescript", "--run-dir", ".", "--node", "$JOB")
        pre = Script(str(EXECUTABLE), args, DEFER_EXIT, DEFER_SECONDS)
    shares = client_shares(config)
    # 4096 s from GPS 1238166018: two shard merges of merge.shard_seconds = 4096 s
    shards = shard_merges(config, stretches_of(shares), shares)
    files["offline.dag"] = dag_text(
        ["server0", "server1"], shares, config.workflow.retries,
        config.workflow.max_parallel_clients, fatal_exit=exit_code(ConfigError), final=True,
        client_pre=pre, shards=[(c.node, c.clients) for c in shards], transfer=site.transfer,
        max_parallel_merges=config.workflow.max_parallel_merges,
    )
    return files


IN_IMAGE = "/opt/offline-iaas/bin/offline-iaas"
"""The executable inside the osg/hepcloud images."""
FIRST_WORDS = {"server": '"serve --run-dir . --node $(node)', "client": '"client --run-dir . ',
               "merge": '"merge --run-dir .', "shard": '"merge-shard --run-dir . ',
               "final": '"status . --final '}
"""How each role's ``arguments`` begins (the subcommand, the run directory)."""


def key_lines(text: str) -> dict[str, str]:
    """``key = value`` lines of a submit file, read by hand (no HTCondor parser)."""
    pairs = (line.split("=", 1) for line in text.splitlines()
             if "=" in line and not line.lstrip().startswith("#"))
    return {key.strip().lower(): value.strip() for key, value in pairs}


def expected_key_lines(profile: str, role: str) -> dict[str, str | None]:
    """Hand-written: where each job runs, what it runs, whether it asks for a GPU (None:
    the key is absent)."""
    in_image = profile in ("osg", "hepcloud") and role in ("server", "client", "shard")
    if role == "final" or (role == "merge" and profile in ("osg", "hepcloud")):
        universe = "local"  # on the access point
    else:
        universe = "container" if in_image and profile == "hepcloud" else "vanilla"
    return {"universe": universe,
            "executable": IN_IMAGE if in_image else str(EXECUTABLE),
            "request_gpus": "1" if role == "server" and profile != "local" else None}


def check_key_lines(profile: str, role: str, text: str) -> list[str]:
    """The lines of ``text`` that differ from the hand-written expectations."""
    found = key_lines(text)
    wrong = [f"{key} = {found.get(key)}, expected {value}"
             for key, value in expected_key_lines(profile, role).items()
             if found.get(key) != value]
    if not found.get("arguments", "").startswith(FIRST_WORDS[role]):
        wrong.append(f"arguments = {found.get('arguments')}, expected {FIRST_WORDS[role]}...")
    return wrong


@pytest.mark.parametrize("profile", list(PROFILE_SECTIONS))
def test_golden_submit_files(profile: str) -> None:
    files = rendered(profile)
    assert sorted(files) == sorted([f"{role}.sub" for role in ROLES] + ["offline.dag"])
    # hand-written key lines of each submit file, whatever the snapshot says
    for role in ROLES:
        assert check_key_lines(profile, role, files[f"{role}.sub"]) == [], role
    if os.environ.get("UPDATE_GOLDEN"):
        for name, text in files.items():
            golden = GOLDEN / profile / name
            golden.parent.mkdir(parents=True, exist_ok=True)
            golden.write_text(text)
        pytest.fail(f"UPDATE_GOLDEN is set: the golden files of {GOLDEN / profile} were "
                    "rewritten; review the diff (git diff tests/golden) and run again without it")
    for name, text in files.items():
        golden = GOLDEN / profile / name
        assert golden.read_text() == text, f"{golden} differs (UPDATE_GOLDEN=1 to rewrite)"


def test_the_key_line_check_catches_a_wrong_executable_universe_gpu_or_subcommand() -> None:
    """Controls for ``check_key_lines``: each edit of a right file is caught."""
    files = rendered("osg")
    server, client = files["server.sub"], files["client.sub"]
    assert check_key_lines("osg", "server", server) == []
    assert check_key_lines("osg", "client", server)  # the server's file as the client's
    assert check_key_lines("ldg", "server", server)  # the image's executable off the image
    assert check_key_lines("hepcloud", "server", server)  # vanilla, not container
    assert check_key_lines("osg", "server", server.replace("request_gpus", "#request_gpus"))
    assert check_key_lines("osg", "client", client + "request_gpus = 1\n")
    assert check_key_lines("osg", "server", server.replace('"serve ', '"client '))


@pytest.mark.parametrize("profile", list(PROFILE_SECTIONS))
def test_every_submit_file_parses(profile: str) -> None:
    for name, text in rendered(profile).items():
        if not name.endswith(".sub"):
            continue
        items = {k.lower(): v for k, v in htcondor2.Submit(text).items()}
        assert "getenv" not in items, name
        assert items["my.offlineiaasrun"] == f'"{RUN_ID}"'
        # a job starts where DAGMan submits it from: the run directory, wherever it lies
        assert "initialdir" not in items, name


def items_of(profile: str) -> dict[str, dict[str, str]]:
    return {
        name[:-4]: {k.lower(): v for k, v in htcondor2.Submit(text).items()}
        for name, text in rendered(profile).items() if name.endswith(".sub")
    }


def test_profile_table() -> None:
    local, ldg, osg, hep = (items_of(p) for p in ("local", "ldg", "osg", "hepcloud"))
    # files: shared vs transfer
    for role in ("server", "client", "shard"):
        assert local[role]["should_transfer_files"] == "NO"
        assert ldg[role]["should_transfer_files"] == "NO"
        assert osg[role]["should_transfer_files"] == "YES"
        assert hep[role]["should_transfer_files"] == "YES"
        assert "transfer_input_files" not in ldg[role]
    assert osg["client"]["transfer_input_files"] == (  # every address: failover
        "campaign.toml, run.json, token, jobs/$(node).json, servers"
    )
    assert osg["client"]["transfer_output_files"] == "parts/$(node).h5, parts/$(node).json"
    assert osg["client"]["when_to_transfer_output"] == "ON_SUCCESS"
    assert osg["server"]["transfer_input_files"].endswith("model-repository.tar.gz")
    assert osg["shard"]["transfer_input_files"] == "campaign.toml, run.json, jobs, $(parts)"
    assert osg["shard"]["transfer_output_files"] == (
        "output/shards/$(node).h5, output/shards/$(node).json, output/shards/$(node).frames")
    # the index of the shards runs on the access point, where their outputs came back
    for items in (osg, hep):
        assert items["merge"]["universe"] == "local"
        assert "should_transfer_files" not in items["merge"]
    assert local["merge"]["should_transfer_files"] == "NO"
    # accounting
    assert ldg["client"]["accounting_group"] == ACCOUNTING_EXAMPLE
    assert ldg["final"]["accounting_group_user"] == "albert.einstein"
    assert "accounting_group" not in local["server"] and "accounting_group" not in hep["server"]
    # GPUs and requests
    for items in (ldg, osg, hep):
        assert items["server"]["request_gpus"] == "1"
        assert items["server"]["gpus_minimum_capability"] == "7.5"
        assert items["server"]["gpus_minimum_memory"] == "16000"
        assert items["server"]["request_cpus"] == "3"  # instances + 1
        assert items["server"]["request_memory"] == "16GB"
    assert "request_gpus" not in local["server"]
    assert hep["client"]["request_memory"] == "3GB"
    # containers: ldg runs serve on the host (runtime apptainer); osg/hepcloud put jobs in images
    assert "my.singularityimage" not in ldg["server"] and "my.singularityimage" not in ldg["client"]
    assert ldg["server"]["executable"] == str(EXECUTABLE)
    assert osg["server"]["my.singularityimage"] == f'"{SERVER_IMAGE}"'
    assert osg["client"]["my.singularityimage"] == f'"{CLIENT_IMAGE}"'
    assert osg["client"]["executable"] == "/opt/offline-iaas/bin/offline-iaas"
    assert hep["server"]["universe"] == "container"
    assert hep["server"]["container_image"] == "docker://ghcr.io/igwn/offline-iaas-server:0.1"
    assert hep["shard"]["container_image"] == "docker://ghcr.io/igwn/offline-iaas:0.1"
    for items in (osg, hep):
        assert items["server"]["transfer_executable"] == "false"
        assert items["server"]["want_io_proxy"] == "true"
    assert "want_io_proxy" not in ldg["server"]
    # credentials: only clients read frames, only through a datafind server on a cluster
    assert ldg["client"]["use_oauth_services"] == "igwn"
    assert ldg["client"]["igwn_oauth_resource"] == "https://datafind.igwn.org"
    assert osg["client"]["igwn_oauth_permissions"] == "gwdatafind.read read:/ligo"
    assert "use_oauth_services" not in osg["server"] and "use_oauth_services" not in hep["client"]
    # the final node runs on the access point
    assert all(items["final"]["universe"] == "local" for items in (local, ldg, osg, hep))
    # arguments
    assert ldg["client"]["arguments"] == '"client --run-dir . --node $(node)"'
    assert osg["server"]["arguments"] == (
        '"serve --run-dir . --node $(node) --repository model-repository.tar.gz '
        '--rendezvous jobad"'
    )


def test_ldg_without_accounting_group_is_refused_at_make_dag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config_file = tmp_path / "campaign.toml"
    config_file.write_text(
        '[data]\nframes = "frames"\nchannels = ["H1:X", "L1:X"]\nstart = 0\nduration = 64\n'
        'sample_rate = 256\n[model]\nrepository = "repo"\n[server]\nbind = "0.0.0.0"\n'
        '[site]\nprofile = "ldg"\n'
    )
    code = main(["make-dag", str(config_file), "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == exit_code(ConfigError)
    assert "'site.accounting_group' is required" in err and str(config_file) in err
    assert f'accounting_group = "{ACCOUNTING_EXAMPLE}"' in err
    assert accounting_problem(ACCOUNTING_EXAMPLE) is None  # the example shown is valid
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    "tag",
    ["ligo.prod.o3.detchar.nonlin_coup.deepclean", "igwn.prod.o4.cbc.bbh.bbhnet",
     "ligo.dev.o4.burst.allsky.cwb", "ligo.sim.o4a.cbc.pe.bilby"],
)
def test_valid_accounting_tags(tag: str) -> None:
    assert accounting_problem(tag) is None
    resolve_site(campaign(site={"profile": "ldg", "accounting_group": tag},
                          server={"bind": "0.0.0.0"}))


@pytest.mark.parametrize(
    "tag",
    ["deepclean", "ligo.prod.o3", "ligo.prod.o3.detchar", "ligo.production.o3.detchar.x",
     "LIGO.PROD.O3.DETCHAR.X", "ligo.prod.o3.detchar x.y", "cms.prod.o3.a.b"],
)
def test_malformed_accounting_tags_are_refused(tag: str) -> None:
    with pytest.raises(ConfigError, match="site.accounting_group") as err:
        resolve_site(campaign(site={"profile": "ldg", "accounting_group": tag},
                              server={"bind": "0.0.0.0"}))
    assert ACCOUNTING_EXAMPLE in str(err.value)


@pytest.mark.parametrize(
    ("sections", "key", "words"),
    [
        ({"site": {"profile": "osg", "client_image": CLIENT_IMAGE},
          "server": {"image": SERVER_IMAGE, "bind": "127.0.0.1"}}, "server.bind", "0.0.0.0"),
        ({"site": {"profile": "osg", "client_image": CLIENT_IMAGE},  # loopback too (passed)
          "server": {"image": SERVER_IMAGE, "bind": "127.0.1.1"}}, "server.bind", "0.0.0.0"),
        ({"site": {"profile": "osg", "client_image": CLIENT_IMAGE},
          "server": {"bind": "0.0.0.0"}}, "server.image", "required"),
        ({"site": {"profile": "hepcloud"},
          "server": {"bind": "0.0.0.0", "image": SERVER_IMAGE}}, "site.client_image", "client"),
        ({"site": {"profile": "osg", "client_image": CLIENT_IMAGE},
          "server": {"bind": "0.0.0.0", "image": SERVER_IMAGE, "runtime": "apptainer"}},
         "server.runtime", "native"),
        ({"site": {"profile": "ldg", "accounting_group": ACCOUNTING_EXAMPLE,
                   "accounting_group_user": "Albert Einstein"}, "server": {"bind": "0.0.0.0"}},
         "site.accounting_group_user", "user name"),
    ],
)
def test_site_refusals_name_the_key(sections: dict, key: str, words: str) -> None:
    with pytest.raises(ConfigError) as err:
        resolve_site(campaign(**sections))
    assert f"'{key}'" in str(err.value) and words in str(err.value)
    assert "/campaigns/o3/campaign.toml" in str(err.value)


@pytest.mark.parametrize(
    ("sections", "key"),
    [
        ({"server": {"runtime": "docker"}}, "server.runtime"),
        ({"server": {"runtime": "apptainer"}}, "server.image"),
        ({"server": {"memory": "lots"}}, "server.memory"),
        ({"server": {"gpus": -1}}, "server.gpus"),
        ({"site": {"profile": "cern"}}, "site.profile"),
        ({"site": {"filesystem": "nfs"}}, "site.filesystem"),
        ({"site": {"client_disk": "2"}}, "site.client_disk"),
    ],
)
def test_config_checks(sections: dict, key: str) -> None:
    with pytest.raises(ConfigError, match=f"'{key}'"):
        campaign(**sections)


def test_where_jobs_run_does_not_change_the_campaign_hashes() -> None:
    base = campaign()
    elsewhere = campaign(
        site={"profile": "osg", "client_image": CLIENT_IMAGE, "client_memory": "8GB"},
        server={"memory": "64GB", "disk": "20GB", "gpus": 2, "gpu_capability": 8.0, "cpus": 4},
    )
    for changed in (elsewhere, campaign(server={"instances": 2})):
        assert changed.stream_hash() == base.stream_hash()
        assert changed.merge_hash() == base.merge_hash()
    assert campaign(search={"cluster_seconds": 2.0}).merge_hash() != base.merge_hash()


def test_make_dag_writes_the_transfer_run_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    skip_data_check(monkeypatch)
    repo = tmp_path / "model-repository"
    (repo / "classifier" / "1").mkdir(parents=True)
    (repo / "classifier" / "1" / "model.onnx").write_bytes(b"onnx")
    config = campaign(tmp_path, **PROFILE_SECTIONS["osg"])
    run = tmp_path / "run"
    make_dag(config, RunDir(run))
    import json
    import tarfile

    info = json.loads((run / "run.json").read_text())
    assert len(info["run_id"]) == 16
    with tarfile.open(run / "model-repository.tar.gz") as tar:
        assert "model-repository/classifier/1/model.onnx" in tar.getnames()
    assert f'MY.OfflineIaasRun  = "{info["run_id"]}"' in (run / "client.sub").read_text()
    dag = (run / "offline.dag").read_text()
    assert f"SCRIPT DEFER {DEFER_EXIT} {DEFER_SECONDS} PRE client0 " in dag
    make_dag(config, RunDir(run))  # rewritten: same run id
    assert json.loads((run / "run.json").read_text())["run_id"] == info["run_id"]
    shared = campaign(tmp_path, **{**PROFILE_SECTIONS["osg"], "site": {
        **PROFILE_SECTIONS["osg"]["site"], "filesystem": "shared"}})
    make_dag(shared, RunDir(run))
    assert not (run / "model-repository.tar.gz").exists()
    assert "SCRIPT" not in (run / "offline.dag").read_text()


def test_make_dag_with_file_transfer_and_no_repository_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--no-check`` opens no frame file and checks no repository, but file transfer packs
    the repository: a missing one was an OS error naming no key (exit 6) after the submit
    files, job specs and token were written. Now one line naming model.repository, exit 2,
    nothing written."""
    skip_data_check(monkeypatch)
    config = campaign(tmp_path, **PROFILE_SECTIONS["osg"])
    with pytest.raises(ConfigError) as refused:
        make_dag(config, RunDir(tmp_path / "run"))
    assert not (tmp_path / "run").exists()
    documented("make-dag-transfer-no-repository", str(refused.value), {tmp_path: "<ws>"},
               exit_code=exit_code(refused.value))
    (tmp_path / "model-repository").mkdir()  # control: with it there, the run is written
    make_dag(config, RunDir(tmp_path / "run"))
    assert (tmp_path / "run" / "model-repository.tar.gz").is_file()


def test_cluster_profiles_listen_on_every_interface_unless_told() -> None:
    ldg = {"profile": "ldg", "accounting_group": ACCOUNTING_EXAMPLE}
    assert resolve_site(campaign(site=ldg)).bind == "0.0.0.0"  # make-dag --set site.profile=ldg
    assert resolve_site(campaign()).bind == "127.0.0.1"  # local
    assert resolve_site(campaign(site=ldg, server={"bind": "10.1.2.3"})).bind == "10.1.2.3"
    with pytest.raises(ConfigError, match="'server.bind' is '127.0.0.1'"):
        resolve_site(campaign(site=ldg, server={"bind": "127.0.0.1"}))


@pytest.mark.parametrize(("instances", "cpus", "cores"), [
    (2, 0, "3"), (4095, 0, "4096"), (4096, 0, "4096"), (4096, 16, "16")])
def test_a_server_asks_for_one_core_per_instance_and_one_more_within_a_machine(
        instances: int, cpus: int, cores: str) -> None:
    sections = PROFILE_SECTIONS["ldg"]
    config = campaign(**{**sections, "server": {**sections["server"], "instances": instances,
                                                 "cpus": cpus}})
    text = submit_texts(config, resolve_site(config), EXECUTABLE, RUN_ID, sharded=True)
    items = {k.lower(): v for k, v in htcondor2.Submit(text["server"]).items()}
    assert items["request_cpus"] == cores  # server.cpus' own bound, 4096, holds for the default
