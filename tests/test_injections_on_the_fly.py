"""Injections on the fly (issue #41, ``search.inject``): each client adds the set's signals to the
strain it read and streams the windows they reach as a foreground beside the clean background.

Proven equal to injections in the data: one set of (untrained, scaled) weights runs on frames
with the set baked in by ``synth`` and on the same clean frames (``synth`` with no injection,
the same seed: the same noise) with the set injected on the fly; the foreground statistic equals
the baked-in statistic at every window it covers (``TOLERANCE``), in the reference and in
campaigns of two splits, and the set moved by one frame sample fails (the negative control).
"""

from __future__ import annotations

import json
import os
import signal
from dataclasses import replace
from pathlib import Path

import h5py
import numpy as np
import pytest

from offline_iaas.config import load_config
from offline_iaas.data.discovery import discover_frames
from offline_iaas.data.frames import read_span
from offline_iaas.data.synth import INJECTION_SET, write_synthetic_dataset
from offline_iaas.errors import ConfigError, exit_code
from offline_iaas.merge import reference as reference_module
from offline_iaas.merge.output import compare_outputs
from offline_iaas.merge.reference import run_reference
from offline_iaas.repository.export import export_repository
from offline_iaas.rundir import RunDir
from offline_iaas.search import onthefly
from offline_iaas.search.foreground import injection_times, share_foreground, stretch_foreground
from offline_iaas.search.injection_file import read_injection_set, write_injection_set
from offline_iaas.search.waveforms import arrival_time
from offline_iaas.stretches import client_shares, whole_span
from offline_iaas.workflow.local import run_local
from offline_iaas.workflow.make_dag import make_dag
from tests.error_catalogue import documented
from tests.faults.inject import HELD, go_when_published, release, until_published
from tests.faults.test_faults import FAST_FAILURE, RunLocal, fault_fired
from tests.helpers import (
    SMALL_CAMPAIGN,
    SPLITS,
    WITNESSES,
    processes_mentioning,
    run_dag,
    run_split,
    untrained_weights,
    wait_for,
)
from tests.oracle import read_series

TOLERANCE = 1e-7
"""Largest |foreground - baked-in| / max |baked-in statistic| over the windows the foreground
covers: about two float32 ulps. Measured: 0 (bit-identical: synth's strain is ``noise +
coupling + signal`` in float64, the clean frames hold ``noise + coupling``, and the client adds
the same float64 signal at the frame rate before the same resampling). The injections move the
untrained network's statistic by ~1e-4 of its scale and one frame sample late by ~1e-5, so the
negative control stands 100x above the tolerance."""
STREAMED_TOLERANCE = 1e-6
"""The same with ``model.streamed``, whose layers sum in another order than the whole-window
graph's: measured 2.2e-7; the injections one frame sample late 6.3e-6 (the test's negative
control)."""
FRAME_RATE = 1024
"""Frames at 4x the model rate: the signal is added at the frame rate, before resampling."""


def _campaign_text(injections: int) -> str:
    return (SMALL_CAMPAIGN.replace("duration = 64", "duration = 32")
            .replace("injections = 1", f"injections = {injections}")
            .replace("frame_sample_rate = 256", f"frame_sample_rate = {FRAME_RATE}"))


def write_baked_and_clean(root: Path, campaign_text=_campaign_text) -> None:
    """``root/baked.toml`` and ``root/clean.toml`` (``campaign_text`` of 2 injections and of
    none) and their frames in ``root/baked`` and ``root/clean``: the same seed's noise, the
    injections in the first only."""
    for name, count in (("baked", 2), ("clean", 0)):
        (root / f"{name}.toml").write_text(campaign_text(count))
        write_synthetic_dataset(load_config(root / f"{name}.toml",
                                            [f'data.frames="{root / name}"']))


@pytest.fixture(scope="module")
def frames(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The same seed's frames with 2 injections baked in and without any; one repository."""
    root = tmp_path_factory.mktemp("onthefly")
    configs = {}
    write_baked_and_clean(root)
    weights = untrained_weights(root / "weights")
    injections = root / "baked" / INJECTION_SET
    base = ['model.mode="bbhnet"', f'model.repository="{root / "repository"}"',
            f'search.injections="{injections}"']
    configs["baked"] = load_config(root / "baked.toml", [*base, f'data.frames="{root / "baked"}"'])
    configs["clean"] = load_config(root / "clean.toml", [
        *base, f'data.frames="{root / "clean"}"', "search.inject=true"])
    export_repository(configs["baked"], weights)
    return {"root": root, **configs}


def foreground_of(path: Path) -> np.ndarray:
    with h5py.File(path, "r") as f:
        return f["foreground"][()]


def on_grid(times: np.ndarray, x0: float, dx: float) -> tuple[bool, np.ndarray]:
    """Whether ``times`` are samples ``x0 + k dx`` to a microsecond (absolute: at GPS times
    ~1.26e9 a relative tolerance is thousands of seconds), and their ``k``."""
    index = np.round((times - x0) / dx).astype(int)
    return bool(np.allclose(x0 + index * dx, times, rtol=0, atol=1e-6)), index


def baked_at(path: Path, times: np.ndarray) -> np.ndarray:
    """The baked-in run's statistic at ``times`` (its one stretch)."""
    [(x0, dx, values)] = read_series(path)["statistic"]
    grid, index = on_grid(times, x0, dx)
    assert grid and (index >= 0).all()
    assert not on_grid(times + 0.3 * dx, x0, dx)[0]  # control: off the grid is caught
    return values[index].reshape(len(index), -1)[:, 0]


def mismatch(foreground: np.ndarray, baked: Path) -> float:
    expected = baked_at(baked, foreground["time"]).astype(np.float64)
    error = np.abs(foreground["statistic"] - expected).max()
    return float(error / np.abs(expected).max())


def test_synth_writes_the_same_noise_whether_or_not_it_injects(frames) -> None:
    """Baked-in strain less clean strain is the injections' signal alone: the noise streams do
    not depend on the injection draws."""
    config = frames["clean"]
    start, end = config.data.start, config.data.start + config.data.duration
    channels = list(config.data.channels)
    baked = read_span(discover_frames(frames["baked"].data), channels, start, end, FRAME_RATE)
    clean = read_span(discover_frames(config.data), channels, start, end, FRAME_RATE)
    added = read_span(discover_frames(config.data), channels, start, end, FRAME_RATE, None,
                      onthefly.on_the_fly(config))
    signal = baked.astype(np.float64) - clean
    assert np.abs(signal).max() > 10 * np.abs(baked - added).max()  # there is a signal
    assert np.abs(baked - added).max() <= 2 * np.spacing(np.abs(baked).max())


def test_the_foreground_covers_each_injection_s_found_window(frames) -> None:
    config = frames["clean"]
    times = injection_times(config.search)
    [stretch] = whole_span(config)
    pieces = stretch_foreground(config.geometry, config.search, stretch, times)
    assert len(times) == 2 and 1 <= len(pieces) <= 2
    dx = config.stride_seconds
    for t in times:
        assert any(p.gps_start < t < p.gps_end for p in pieces)
    assert all(p.output_start - p.first_window <= config.warmup_windows for p in pieces)
    streamed = sum(p.windows for p in pieces) * dx
    assert streamed < config.data.duration  # not a second campaign


def test_the_reference_s_foreground_equals_the_baked_in_run_and_one_sample_late_fails(
        frames, monkeypatch) -> None:
    root = frames["root"]
    baked, _ = run_reference(frames["baked"], root / "baked.h5")
    fly, _ = run_reference(frames["clean"], root / "fly.h5")
    foreground = foreground_of(fly)
    assert len(foreground) > 0
    assert mismatch(foreground, baked) <= TOLERANCE
    summary = json.loads(fly.with_suffix(".json").read_text())["bbhnet"]
    assert summary["injection_counts"]["listed"] == 2
    # the negative control: the same set, one frame sample late
    late = onthefly.on_the_fly

    def one_sample_late(config, shift_seconds: float = 0.0):
        return late(config, shift_seconds + 1.0 / FRAME_RATE)

    monkeypatch.setattr(reference_module, "on_the_fly", one_sample_late)
    shifted, _ = run_reference(frames["clean"], root / "late.h5")
    assert mismatch(foreground_of(shifted), baked) > 10 * TOLERANCE


def test_with_time_slides_the_foreground_streams_no_slide_history_and_equals_the_baked_in_run(
        frames) -> None:
    """The foreground keeps the zero lag, which no slide's history reaches: with 8 slides of
    1 s (32 windows of history) its pieces stream the stretch's warm-up only, and still equal
    the uninterrupted baked-in stream's statistic (whose background has the slides)."""
    root = frames["root"]
    slides = ["search.slides=8", f'model.repository="{root / "repository-slides"}"']
    baked = load_config(root / "baked.toml", [
        'model.mode="bbhnet"', f'search.injections="{root / "baked" / INJECTION_SET}"',
        f'data.frames="{root / "baked"}"', *slides])
    clean = load_config(root / "clean.toml", [
        'model.mode="bbhnet"', f'search.injections="{root / "baked" / INJECTION_SET}"',
        f'data.frames="{root / "clean"}"', "search.inject=true", *slides])
    export_repository(baked, untrained_weights(root / "weights"))
    pieces = stretch_foreground(clean.geometry, clean.search, whole_span(clean)[0],
                                injection_times(clean.search))
    assert clean.slide_history_windows == 32
    assert all(p.output_start - p.first_window <= clean.stretch_warmup_windows for p in pieces)
    assert any(p.first_window > 0 for p in pieces)  # a piece that starts inside the stretch
    baked_out, _ = run_reference(baked, root / "baked-slides.h5")
    fly, _ = run_reference(clean, root / "fly-slides.h5")
    assert mismatch(foreground_of(fly), baked_out) <= TOLERANCE


@pytest.mark.slow
@pytest.mark.parametrize(("clients", "shard_seconds"), SPLITS)
def test_a_campaign_s_foreground_equals_the_reference_and_the_baked_in_run(
        frames, clients: int, shard_seconds: int) -> None:
    root = frames["root"]
    config, run_dir = run_split(root / "clean.toml", [
        'model.mode="bbhnet"', f'model.repository="{root / "repository"}"',
        f'search.injections="{root / "baked" / INJECTION_SET}"', f'data.frames="{root / "clean"}"',
        "search.inject=true"], clients, shard_seconds)
    campaign = foreground_of(run_dir / "output" / "campaign.h5")
    baked = root / "baked.h5"
    if not baked.exists():
        run_reference(frames["baked"], baked)
    fly = root / "fly.h5"
    if not fly.exists():
        run_reference(frames["clean"], fly)
    comparison = compare_outputs(run_dir / "output" / "campaign.h5", fly)
    assert comparison.problems == [] and comparison.worst <= TOLERANCE
    assert {"foreground/statistic", "foreground/time"} <= set(comparison.relative) | set(
        comparison.time_seconds)
    assert mismatch(campaign, baked) <= TOLERANCE
    with h5py.File(run_dir / "parts" / "client0.h5", "r") as f:
        assert "foreground" in f


@pytest.mark.slow
def test_a_streamed_network_s_foreground_equals_its_reference_and_the_whole_window_run(
        frames) -> None:
    """``model.streamed`` (issue #42): the foreground's pieces stream BBHnet layer by layer on
    their own sequences; the campaign equals its reference (which runs the same streamed
    graphs) and, within the module's tolerance, the whole-window baked-in run."""
    root = frames["root"]
    config = load_config(root / "clean.toml", [
        'model.mode="bbhnet"', f'model.repository="{root / "repository-streamed"}"',
        f'search.injections="{root / "baked" / INJECTION_SET}"', f'data.frames="{root / "clean"}"',
        "search.inject=true", "model.streamed=true"])
    export_repository(config, untrained_weights(root / "weights"))
    run_dir = run_dag(config, root / "run-streamed")
    fly, _ = run_reference(config, root / "fly-streamed.h5")
    comparison = compare_outputs(run_dir / "output" / "campaign.h5", fly)
    assert comparison.problems == [] and comparison.worst == 0.0, comparison.describe()
    baked = root / "baked.h5"
    if not baked.exists():
        run_reference(frames["baked"], baked)
    foreground = foreground_of(run_dir / "output" / "campaign.h5")
    assert len(foreground) > 0 and mismatch(foreground, baked) <= STREAMED_TOLERANCE
    # the negative control: the same set one frame sample late, through the streamed graphs
    late = onthefly.on_the_fly

    def one_sample_late(config, shift_seconds: float = 0.0):
        return late(config, shift_seconds + 1.0 / FRAME_RATE)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(reference_module, "on_the_fly", one_sample_late)
        shifted, _ = run_reference(config, root / "late-streamed.h5")
    assert mismatch(foreground_of(shifted), baked) > 3 * STREAMED_TOLERANCE


@pytest.mark.slow
def test_a_client_killed_between_foreground_streams_resumes_and_equals_the_reference(
        frames) -> None:
    """SIGKILL after the first foreground stream is checkpointed: the retry resumes after the
    checkpoints (the background's and that stream's) and the output equals the reference."""
    root = frames["root"]
    config = load_config(root / "clean.toml", [
        'model.mode="bbhnet"', f'model.repository="{root / "repository"}"',
        f'search.injections="{root / "baked" / INJECTION_SET}"', f'data.frames="{root / "clean"}"',
        "search.inject=true", "layout.clients_per_server=1", "client.in_flight=1",
        "client.checkpoint_requests=1"])
    run = RunDir(root / "killed")
    make_dag(config, run)
    (run.path / "faults.json").write_text(json.dumps(
        {"client0": [{"point": "between-foreground", "action": "sigkill", "times": 1}]}))
    try:
        run_local(run)
    finally:
        assert processes_mentioning(str(run.path)) == []
    log = (run.path / "logs" / "client0.out").read_text() + (
        run.path / "logs" / "client0.err").read_text()
    assert "injected fault 'sigkill' at between-foreground" in log
    assert "resuming after" in log
    fly = root / "fly.h5"
    if not fly.exists():
        run_reference(frames["clean"], fly)
    comparison = compare_outputs(run.path / "output" / "campaign.h5", fly)
    assert comparison.problems == [] and comparison.worst <= TOLERANCE


def test_inject_is_refused_where_it_is_not_supported_yet(small_config_file: Path) -> None:
    with pytest.raises(ConfigError, match="search.inject.*needs a BBHnet search") as caught:
        load_config(small_config_file, ['model.mode="classifier"', "search.inject=true",
                                        'search.injections="x.h5"'])
    documented("inject-outside-bbhnet", str(caught.value), {small_config_file: "C"},
               exit_code=exit_code(ConfigError))
    with pytest.raises(ConfigError, match="needs search.injections") as caught:
        load_config(small_config_file, ['model.mode="bbhnet"', "search.inject=true"])
    documented("inject-without-injections", str(caught.value), {small_config_file: "C"},
               exit_code=exit_code(ConfigError))
    with pytest.raises(ConfigError, match="on_bad_file = 'fail'") as caught:
        load_config(small_config_file, ['model.mode="bbhnet"', "search.inject=true",
                                        'search.injections="x.h5"', 'data.on_bad_file="gap"'])
    documented("inject-with-gaps", str(caught.value), {small_config_file: "C"},
               exit_code=exit_code(ConfigError))
    with pytest.raises(ConfigError, match="in mode 'e2e' needs search.whitening") as caught:
        load_config(small_config_file, ['model.mode="e2e"', "search.inject=true",
                                        'search.injections="x.h5"', 'search.whitening="rolling"',
                                        f"data.witnesses={WITNESSES}"])
    documented("inject-e2e-rolling-whitening", str(caught.value), {small_config_file: "C"},
               exit_code=exit_code(ConfigError))
    load_config(small_config_file, ['model.mode="bbhnet"', "search.inject=true",
                                    'search.injections="x.h5"', 'search.whitening="rolling"'])


def test_the_set_and_its_found_window_join_the_stream_hash_only_when_injected(
        frames, tmp_path: Path) -> None:
    clean = frames["clean"]
    root = frames["root"]
    off = load_config(root / "clean.toml", ['model.mode="bbhnet"',
                                            f'search.injections="{root / "baked" / INJECTION_SET}"',
                                            f'data.frames="{root / "clean"}"'])
    assert off.stream_hash() != clean.stream_hash()
    wider = load_config(root / "clean.toml", [
        'model.mode="bbhnet"', f'search.injections="{root / "baked" / INJECTION_SET}"',
        f'data.frames="{root / "clean"}"', "search.inject=true", "search.found_seconds=2"])
    assert wider.stream_hash() != clean.stream_hash()
    copy = tmp_path / INJECTION_SET
    data = (root / "baked" / INJECTION_SET).read_bytes()
    copy.write_bytes(data)
    same = load_config(root / "clean.toml", [
        'model.mode="bbhnet"', f'search.injections="{copy}"', f'data.frames="{root / "clean"}"',
        "search.inject=true"]).stream_hash()
    copy.write_bytes(data + b"\0")  # another set: the parts are redone
    edited = load_config(root / "clean.toml", [
        'model.mode="bbhnet"', f'search.injections="{copy}"', f'data.frames="{root / "clean"}"',
        "search.inject=true"])
    assert same != edited.stream_hash()
    # without inject the set is the merge's only: the clients' hash ignores it
    off_edited = load_config(root / "clean.toml", [
        'model.mode="bbhnet"', f'search.injections="{copy}"', f'data.frames="{root / "clean"}"'])
    assert off_edited.stream_hash() == off.stream_hash()


def test_the_demo_s_run_time_path_reads_clean_frames_and_adds_synth_s_population(
        tmp_path: Path) -> None:
    from offline_iaas.demo import demo_config

    config = demo_config(tmp_path, None, ["search.inject=true"], mode="bbhnet")
    assert config.search.inject and config.data.frames == tmp_path / "frames-clean"
    assert config.search.injections == tmp_path / "frames" / INJECTION_SET
    plain = demo_config(tmp_path, None, [], mode="bbhnet")
    assert plain.data.frames == tmp_path / "frames" and not plain.search.inject


def _denser_set(source: Path, target: Path, gps_times: list[float]) -> Path:
    """``source``'s set with its binaries also at ``gps_times`` (in turn): more foreground
    pieces in a share."""
    found = read_injection_set(source)
    extra = [replace(found.binaries[j % len(found)], gps_time=t)
             for j, t in enumerate(gps_times)]
    binaries = (*found.binaries, *extra)

    def extended(values: dict) -> dict:
        return {ifo: (*v, *(v[j % len(found)] for j in range(len(extra))))
                for ifo, v in values.items()}

    write_injection_set(target, replace(
        found, binaries=binaries, snr=extended(found.snr), snr_design=extended(found.snr_design),
        arrival_time={ifo: tuple(arrival_time(b, ifo) for b in binaries)
                      for ifo in found.arrival_time}))
    return target


@pytest.mark.slow
@pytest.mark.server_exits  # the test kills a server node
def test_a_server_killed_while_a_client_streams_its_foreground_fails_over_and_equals_the_reference(
        frames) -> None:
    """Two servers, one client each; client1 has three foreground pieces (the set has two
    binaries more in its share). While it is held after its second foreground stream's first
    request, server1's node is SIGKILLed (by PID) and never restarted: client1 moves to
    server0, resumes its checkpoints there, and the campaign, its ``foreground`` table
    included, equals the in-process reference."""
    root = frames["root"]
    start = frames["clean"].data.start
    dense = _denser_set(root / "baked" / INJECTION_SET, root / "dense.h5",
                        [start + 19.3, start + 29.4])
    config = load_config(root / "clean.toml", [
        'model.mode="bbhnet"', f'model.repository="{root / "repository"}"',
        f'search.injections="{dense}"', f'data.frames="{root / "clean"}"', "search.inject=true",
        "layout.servers=2", "layout.clients_per_server=1", "client.failover_seconds=20",
        "layout.rebalance=false", "workflow.retries=0", *FAST_FAILURE])
    shares = client_shares(config)
    times = injection_times(config.search)
    assert len(share_foreground(config.geometry, config.search, shares[1], times)) == 3
    run = RunDir(root / "failover")
    make_dag(config, run)
    faults = until_published(2)  # each client on its own server, however slowly they start
    faults["client1"].insert(0, {**HELD, "point": "between-foreground"})
    (run.path / "faults.json").write_text(json.dumps(faults))
    local = RunLocal(run.path)
    try:
        go_when_published(run.path, ["server0", "server1"])
        wait_for(lambda: fault_fired(run.path, "client1:0"), 120, "client1's foreground")
        serve_pid = json.loads((run.path / "servers" / "server1.json").read_text())["pid"]
        os.kill(serve_pid, signal.SIGKILL)
        release(run.path, "between-foreground")
        output = local.finish(240)
    finally:
        local.kill()
        assert processes_mentioning(str(run.path)) == []
    assert "server1: exited with" in output
    assert int((run.path / "servers" / "server1.epoch").read_text()) == 1  # never restarted
    sidecar = json.loads((run.path / "parts" / "client1.json").read_text())
    assert sidecar["servers"] == ["server1", "server0"] and sidecar["reconnects"] >= 1
    reference, _ = run_reference(config, root / "dense-reference.h5")
    comparison = compare_outputs(run.path / "output" / "campaign.h5", reference)
    assert comparison.problems == [] and comparison.worst <= TOLERANCE
    assert {"foreground/statistic", "foreground/time"} <= set(comparison.relative) | set(
        comparison.time_seconds)
    assert len(foreground_of(reference)) == 4 * 8  # four injections, 8 found windows each
