"""Frame discovery through a real gwdatafind-server on loopback (tests/datafind_server.py)."""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from offline_iaas.config import CampaignConfig, config_from_dict
from offline_iaas.data.discovery import datafind_frames, discover_frames, find_frames
from offline_iaas.data.preflight import preflight
from offline_iaas.data.synth import write_synthetic_dataset
from offline_iaas.errors import DataError
from offline_iaas.rundir import RunDir
from tests.datafind_server import free_port, running_datafind_server
from tests.error_catalogue import documented
from tests.helpers import processes_mentioning

START = 1262304000
DURATION = 32
STRAIN = ["H1:GDS-CALIB_STRAIN", "L1:GDS-CALIB_STRAIN"]
FRAMETYPES = ["H1_SYNTH", "L1_SYNTH"]


def raw_config(**data: Any) -> dict[str, Any]:
    return {
        "data": {
            "channels": STRAIN,
            "start": START,
            "duration": DURATION,
            "sample_rate": 128,
            **data,
        },
        "model": {"repository": "repo", "kernel_seconds": 1.0, "inference_rate": 4},
        "layout": {"servers": 1, "clients_per_server": 2},
        "synth": {"file_duration": 4, "frame_sample_rate": 256, "injections": 0, "seed": 5},
    }


def datafind_config(tmp: Path, url: str, **data: Any) -> CampaignConfig:
    raw = raw_config(datafind_server=url, frametypes=FRAMETYPES, **data)
    return config_from_dict(raw, tmp / "campaign.toml")


@pytest.fixture(scope="module")
def frame_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """8 files x 4 s per interferometer, in a tree ``frames/<IFO>/<file>.gwf``."""
    tmp = tmp_path_factory.mktemp("datafind")
    flat = tmp / "flat"
    write_synthetic_dataset(config_from_dict(raw_config(frames="flat"), tmp / "c.toml"), flat)
    tree = tmp / "frames"
    for path in flat.glob("*.gwf"):
        ifo = path.name.split("-")[1][:2]
        (tree / ifo).mkdir(parents=True, exist_ok=True)
        shutil.move(path, tree / ifo / path.name)
    shutil.rmtree(flat)
    return tree


@pytest.fixture(scope="module")
def server(frame_tree: Path) -> Iterator[str]:
    with running_datafind_server(frame_tree) as url:
        yield url


def test_discovery_through_the_server_equals_the_directory(
    frame_tree: Path, server: str, tmp_path: Path
) -> None:
    from_dir = find_frames(frame_tree)
    assert len(from_dir) == 16
    assert discover_frames(datafind_config(tmp_path, server).data) == from_dir
    # a sub-range gets only the files that overlap it
    part = datafind_frames(server, ["L1_SYNTH"], START + 5, START + 9)
    assert [(f.observatory, f.gps_start) for f in part] == [("L", START + 4), ("L", START + 8)]


def test_preflight_and_make_dag_from_the_server(
    frame_tree: Path, server: str, tmp_path: Path
) -> None:
    from offline_iaas.repository.export import export_repository
    from offline_iaas.workflow.make_dag import make_dag

    config = datafind_config(tmp_path, server)
    export_repository(config)  # make-dag checks it
    span = preflight(config)
    assert span.stretches == [(START, START + DURATION)]
    assert span.dropped == []
    run = tmp_path / "run"
    make_dag(config, RunDir(run))
    specs = sorted((run / "jobs").glob("client*.json"))
    assert len(specs) == 2
    for spec in specs:
        assert json.loads(spec.read_text())["node"] == spec.stem
    assert (run / "offline.dag").is_file()
    assert f'datafind_server = "{server}"' in (run / "campaign.toml").read_text()


def test_check_cli_through_the_server(server: str, tmp_path: Path) -> None:
    config = tmp_path / "campaign.toml"
    config.write_text("[data]\n[model]\n")
    sets = {**raw_config(datafind_server=server, frametypes=FRAMETYPES)["data"]}
    args = [f"data.{k}={json.dumps(v)}" for k, v in sets.items()]
    args += ["model.repository=repo", "layout.clients_per_server=2"]
    done = subprocess.run(
        [sys.executable, "-m", "offline_iaas.cli", "check", str(config)]
        + [a for s in args for a in ("--set", s)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "check: 16 frame file(s) (H: 8, L: 8)" in done.stdout
    assert f"datafind server {server}" in done.stdout
    assert "analysable: 32 s in 1 stretch(es)" in done.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["campaign.toml"]


def test_unknown_frametype_names_it_and_the_span(server: str) -> None:
    with pytest.raises(DataError) as info:
        datafind_frames(server, ["H1_NOPE"], START, START + 8)
    message = str(info.value)
    assert f"datafind server {server} lists no files of frame type H1_NOPE" in message
    assert f"[{START}, {START + 8})" in message
    assert "frame types it has for H: H1_SYNTH" in message


def test_unreachable_server_names_the_url(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(DataError) as info:
        discover_frames(datafind_config(tmp_path, url).data)
    message = str(info.value)
    assert message.startswith(f"datafind server {url} failed to list frame type H1_SYNTH")
    assert "Traceback" not in message and "\n" not in message
    with pytest.raises(DataError, match=f"datafind server {url}/nothing-here failed"):
        datafind_frames(f"{url}/nothing-here", ["H1_SYNTH"], START, START + 1)


def test_server_answers_errors_as_data_errors(server: str) -> None:
    with pytest.raises(DataError, match=rf"datafind server {server}/bad failed .*404"):
        datafind_frames(f"{server}/bad", ["H1_SYNTH"], START, START + 4)


def test_the_server_is_stopped_on_exit_and_on_failure(frame_tree: Path) -> None:
    with running_datafind_server(frame_tree) as url:
        port = url.rsplit(":", 1)[1]
        assert processes_mentioning(f"--port {port}")
    assert not processes_mentioning(f"--port {port}")
    with pytest.raises(requests.ConnectionError):
        requests.get(f"{url}/api/v1/gwf.json", timeout=2)
    with pytest.raises(KeyError):
        with running_datafind_server(frame_tree) as url:
            port = url.rsplit(":", 1)[1]
            raise KeyError("test failure inside the block")
    assert not processes_mentioning(f"--port {port}")


def test_two_frame_types_of_one_observatory_from_the_server_are_refused(
    frame_tree: Path, tmp_path: Path
) -> None:
    tree = tmp_path / "frames"
    shutil.copytree(frame_tree, tree)
    first = tree / "H1" / f"H-H1_SYNTH-{START}-4.gwf"
    other = tree / "H1" / f"H-H1_OTHER-{START}-4.gwf"  # a second frame type of H's first 4 s
    shutil.copyfile(first, other)
    with running_datafind_server(tree) as url:
        # the control: one frame type per observatory passes
        config = datafind_config(tmp_path, url)
        assert preflight(config).stretches == [(START, START + DURATION)]
        both = dataclasses.replace(config, data=dataclasses.replace(
            config.data, frametypes=("H1_SYNTH", "H1_OTHER", "L1_SYNTH")))
        with pytest.raises(DataError) as info:
            preflight(both)
    # the advice is what a datafind campaign can follow: no data.frames to move files out of
    documented("frame-types-overlap-datafind", str(info.value),
               {tmp_path: "<ws>", url: "http://127.0.0.1:<port>"}, exit_code=3)
    assert (f"frame files {other} and {first} both hold H1:GDS-CALIB_STRAIN (frame type "
            f"H1_OTHER, H1_SYNTH) for "
            f"[{START}, {START + 4}), and the reader would mix them: two frame types, H1_OTHER "
            "and H1_SYNTH; ask for one of them in data.frametypes"
            ) in str(info.value)
    # the control: the same files from a directory keep the advice to move files out of it
    with pytest.raises(DataError) as info:
        preflight(both, find_frames(tree))
    assert "keep one of them (move the other's files out of data.frames" in \
        str(info.value)
