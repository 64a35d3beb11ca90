"""The campaign report: its data (coverage, node timeline, monitor rates, spectra) and the page,
opened in a real headless Chromium.

The run directory is a fixture written here, following the output contract: ``campaign.h5``
with ``statistic/``, ``clean/<IFO>/``, ``noise/<IFO>/`` and ``triggers``, ``campaign.json``,
``jobs/*.json`` from the real planner, ``run.json``, ``local-state.json`` with a retried
client, and a monitor CSV.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import h5py
import numpy as np
import pytest

from offline_iaas import records
from offline_iaas.cli import main
from offline_iaas.config import CampaignConfig, load_config, write_config
from offline_iaas.demo import packaged_config
from offline_iaas.errors import RunError
from offline_iaas.job_specs import write_client_job
from offline_iaas.lifetime import start_ticks
from offline_iaas.local_state import LocalState
from offline_iaas.manifest import Manifest, ManifestShape
from offline_iaas.records import RunInfo
from offline_iaas.report import plots, write_report
from offline_iaas.report.page import table
from offline_iaas.report.provenance import manifest_rows
from offline_iaas.report.search import StatisticTrace, block_maxima, statistic_traces
from offline_iaas.report.spectra import inspiral_range
from offline_iaas.report.timeline import coverage, monitor_rates, node_attempts, span_gaps
from offline_iaas.rundir import RunDir
from offline_iaas.science.bbhnet.products import read_triggers
from offline_iaas.science.deepclean.products import strain_spectra
from offline_iaas.serve.monitor import CSV_HEADER, read_monitor_csv
from offline_iaas.stretches import client_shares, make_stretches
from offline_iaas.summaries import CampaignSummary
from tests.browser import check_page, headless_chromium, missing_browser
from tests.error_catalogue import documented
from tests.helpers import captured_log

START = 1262304000
STRETCHES = [(START, START + 96), (START + 128, START + 192)]
"""Two stretches with a 32 s gap and 64 s lost at the end of the 256 s span."""
LINE_HZ = 60.0


def fixture_config(root: Path, mode: str = "e2e") -> CampaignConfig:
    overrides = [
        f'data.frames="{root / "frames"}"',
        f'model.repository="{root / "model-repository"}"',
        "data.duration=256",
        f'model.mode="{mode}"',
    ]
    if mode in ("deepclean", "e2e"):
        overrides.append('data.witnesses=["H1:PEM-SYNTH_WITNESS_0", "L1:PEM-SYNTH_WITNESS_0"]')
    if mode == "classifier":  # the packaged demo's time slides need BBHnet
        overrides.append("search.slides=0")
    return load_config(packaged_config(), overrides)


def _series(group: h5py.Group, gps: float, values: np.ndarray, dx: float, channel: str,
            name: str, unit: str = "") -> None:
    dataset = group.create_dataset(f"{gps:.6f}".rstrip("0").rstrip("."), data=values)
    dataset.attrs.update({"x0": gps, "dx": dx, "channel": channel, "name": name,
                          "unit": unit, "xunit": "s"})


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="milliseconds")


def write_output(config: CampaignConfig, run_dir: Path, rng: np.random.Generator) -> dict:
    """campaign.h5 and campaign.json of an e2e campaign over ``STRETCHES``."""
    rate, stride = config.data.sample_rate, 1 / config.model.inference_rate
    injections = [{"gps_time": START + 40.0, "network_snr": 25.0, "statistic": 9.0,
                   "found": True, "in_training": False},
                  {"gps_time": START + 150.0, "network_snr": 8.0, "statistic": 1.0,
                   "found": False, "in_training": False}]
    (run_dir / "output").mkdir(parents=True, exist_ok=True)
    with h5py.File(run_dir / "output" / "campaign.h5", "w") as f:
        f.attrs["stretches"] = np.array(STRETCHES, dtype=np.float64)
        for start, end in STRETCHES:
            first = start + 2.0
            values = rng.normal(0, 1, int((end - first) / stride)).astype(np.float32)
            for inj in injections:
                index = int((inj["gps_time"] - first) / stride)
                if 0 <= index < len(values):
                    values[index] = inj["statistic"]
            _series(f.require_group("statistic"), first, values, stride, "H1L1:STAT",
                    "statistic")
            for ifo in config.ifos:
                t = np.arange(int((end - start - 1) * rate)) / rate
                clean = (rng.normal(0, 1e-21, t.size)).astype(np.float32)
                noise = (3e-20 * np.sin(2 * np.pi * LINE_HZ * t)).astype(np.float32)
                channel = f"{ifo}:GDS-CALIB_STRAIN"
                _series(f.require_group(f"clean/{ifo}"), start + 1, clean, 1 / rate,
                        f"{channel}_CLEAN", "clean", "strain")
                _series(f.require_group(f"noise/{ifo}"), start + 1, noise, 1 / rate,
                        f"{channel}_DEEPCLEAN_NOISE", "noise", "strain")
        triggers = np.array([(START + 40.0, 9.0), (START + 70.5, 3.2), (START + 170.0, 2.5)],
                            dtype=[("time", "f8"), ("statistic", "f4")])
        f.create_dataset("triggers", data=triggers)
    summary = {
        "complete": True, "wall_seconds": 12.5, "cpu_seconds": 11.0, "peak_rss_mb": 310.0,
        "sha256": "ab" * 32, "bytes": 1, "stream_hash": config.stream_hash(),
        "merge_hash": config.merge_hash(), "mode": config.model.mode,
        "deepclean": {ifo: {"line_hz": LINE_HZ, "ratio_at_line": 0.03,
                            "max_deviation_outside_band": 0.01, "guard_hz": 2.0,
                            "fftlength": 4.0, "max_ratio_in_band": 1.0,
                            "min_ratio_outside_band": 0.99, "max_ratio_outside_band": 1.01,
                            "max_deviation_at_band_edges": 0.02,
                            "held_out_gps": [START, START + 192]} for ifo in config.ifos},
        "bbhnet": {"triggers": 3, "cluster_seconds": 1.0, "found": 1, "missed": 1,
                   "threshold": 5.0, "background_seconds": 150.0, "injections": injections},
    }
    records.write(records.build(CampaignSummary, summary), run_dir / "output" / "campaign.json")
    return summary


def local_state(t0: float) -> dict:
    """Two servers, four clients (client1 failed once, then done), the merge."""
    def attempt(n: int, start: float, end: float, status: str, code: int | None = 0) -> dict:
        return {"attempt": n, "started": _iso(t0 + start), "ended": _iso(t0 + end),
                "exit_code": code, "status": status}

    nodes = {}
    for i in range(2):
        nodes[f"server{i}"] = {"kind": "SERVICE", "status": "stopped", "attempts": 1,
                               "history": [attempt(1, 0, 60, "stopped", -15)]}
    for i in range(4):
        history = [attempt(1, 4, 30 + i, "done")]
        if i == 1:
            history = [attempt(1, 4, 10, "failed", 1), attempt(2, 11, 35, "done")]
        nodes[f"client{i}"] = {"kind": "JOB", "status": "done", "attempts": len(history),
                               "history": history}
    nodes["merge"] = {"kind": "JOB", "status": "done", "attempts": 1,
                      "history": [attempt(1, 36, 45, "done")]}
    return {"updated": _iso(t0 + 60), "aborted": None, "nodes": nodes}


def write_monitor(path: Path, t0: float, polls: int = 30) -> None:
    """Cumulative counters of two models, 200 inferences per 1 s poll, 2 ms queue each."""
    lines = [",".join(CSV_HEADER)]
    for k in range(polls):
        for model in ("offline-iaas", "snapshotter"):
            n = 200 * k
            lines.append(f"{t0 + k},{model},{n},{n // 16},{n // 16},{n // 16 * 2_000_000},"
                         f"0,{n * 1000},0,{n * 3000}")
    path.write_text("\n".join(lines) + "\n")


def make_fixture_run(root: Path, mode: str = "e2e") -> Path:
    """A finished run directory of ``mode`` (outputs only in e2e), without frames or servers."""
    config = fixture_config(root, mode)
    run_dir = root / "run"
    (run_dir / "jobs").mkdir(parents=True)
    write_config(config, run_dir / "campaign.toml")
    repo = config.model.repository
    repo.mkdir(parents=True)
    records.write(Manifest(
        ensemble="offline-iaas", flavor="cpu", served="fused", models=("offline-iaas",),
        mode=mode, channels=config.stream_channels, sample_rate=config.data.sample_rate,
        shape=ManifestShape(len(config.stream_channels), config.kernel_samples,
                            config.stride_samples),
        sequence_slots=8, outputs=config.mode.outputs, time_slides=(0, 0), whitening="fixed",
        versions={"bbhnet": 3, "deepclean": 2}, networks={}), repo / "manifest.json")
    shares = client_shares(config, make_stretches(config.geometry, STRETCHES),
                           sequence_base=1 << 20)
    for share in shares:
        write_client_job(RunDir(run_dir), share)
    records.write(RunInfo(
        run_id="0123456789abcdef", stream_hash=config.stream_hash(),
        merge_hash=config.merge_hash(), sequence_base=1 << 20, servers=("server0", "server1"),
        clients=tuple(s.node for s in shares), created="2025-01-01T00:00:00+00:00"),
        run_dir / "run.json")
    t0 = time.time() - 3600
    (run_dir / "local-state.json").write_text(json.dumps(local_state(t0)))
    if mode == "e2e":
        write_output(config, run_dir, np.random.default_rng(7))
        (run_dir / "monitor").mkdir()
        write_monitor(run_dir / "monitor" / "server0.csv", t0)
    return run_dir


# ---- the pure parts ---------------------------------------------------------------------
def test_gaps_are_the_span_outside_the_stretches() -> None:
    assert span_gaps((0, 256), [(128, 192), (0, 96)]) == [(96, 128), (192, 256)]
    assert span_gaps((0, 10), [(0, 10)]) == []
    assert span_gaps((0, 10), [(0, 4), (3, 6)]) == [(6, 10)]


def test_coverage_colours_each_clients_pieces_by_its_server(tmp_path: Path) -> None:
    config = fixture_config(tmp_path)
    shares = client_shares(config, make_stretches(config.geometry, STRETCHES), sequence_base=0)
    cov = coverage((START, START + 256), shares)
    assert cov.stretches == STRETCHES  # taken from the pieces when not given
    assert cov.gaps == [(START + 96, START + 128), (START + 192, START + 256)]
    assert {(bar.row, bar.group) for bar in cov.pieces} == {
        ("client0", "server0"), ("client1", "server0"), ("client2", "server1"),
        ("client3", "server1")}
    # a client whose share crosses the gap has one piece per stretch
    assert len(cov.pieces) == sum(len(s.pieces) for s in shares) > len(shares)
    for bar in cov.pieces:
        assert any(a <= bar.start < bar.end <= b for a, b in STRETCHES)


def test_node_timeline_has_one_bar_per_attempt_retries_included() -> None:
    t0 = 1.7e9
    bars = node_attempts(records.build(LocalState, local_state(t0)))
    client1 = [b for b in bars if b.row == "client1"]
    assert [(b.group, b.label) for b in client1] == [("failed", "attempt 1"),
                                                      ("done", "attempt 2")]
    # absolute: t0 ~ 1.7e9, where a relative 1e-6 is +-1700 s
    assert client1[0].start == pytest.approx(t0 + 4, rel=0, abs=1e-6)
    assert client1[1].end == pytest.approx(t0 + 35, rel=0, abs=1e-6)
    assert client1[1].end != pytest.approx(t0 + 36, rel=0, abs=1e-6)  # control: 1 s off
    assert [b.row for b in bars][:3] == ["server0", "server1", "client0"]


def test_node_timeline_without_history_and_while_running() -> None:
    t0 = 1.7e9
    state = {"updated": _iso(t0 + 20), "nodes": {
        "old": {"status": "done", "attempts": 1, "started": _iso(t0), "ended": _iso(t0 + 5)},
        "live": {"status": "running", "attempts": 2, "started": _iso(t0 + 8), "ended": None,
                 "history": [{"attempt": 1, "started": _iso(t0 + 1), "ended": _iso(t0 + 7),
                              "status": "failed"}]},
        "waiting": {"status": "pending", "attempts": 0, "started": None, "ended": None}}}
    bars = node_attempts(records.build(LocalState, state))
    assert [(b.row, b.group) for b in bars] == [("old", "done"), ("live", "failed"),
                                                ("live", "running")]
    # still running: ends at the update (absolute: t0 ~ 1.7e9)
    assert bars[-1].end == pytest.approx(t0 + 20, rel=0, abs=1e-6)
    assert bars[-1].end != pytest.approx(t0 + 21, rel=0, abs=1e-6)  # control: 1 s off


def test_node_timeline_shows_a_node_whose_process_is_gone_as_interrupted() -> None:
    """run-local killed: its state still says running; the bar says interrupted, as status
    does, while a recorded process that still runs (this one) stays running."""
    t0 = 1.7e9
    dead = subprocess.Popen(["true"])
    dead.wait()
    state = {"updated": _iso(t0 + 20), "nodes": {
        "gone": {"status": "running", "attempts": 1, "started": _iso(t0), "ended": None,
                 "pid": dead.pid, "pid_start": start_ticks(os.getpid())},
        "alive": {"status": "running", "attempts": 1, "started": _iso(t0), "ended": None,
                  "pid": os.getpid(), "pid_start": start_ticks(os.getpid())}}}
    bars = node_attempts(records.build(LocalState, state))
    assert [(b.row, b.group) for b in bars] == [("gone", "interrupted"), ("alive", "running")]


def test_monitor_rates_difference_consecutive_polls(tmp_path: Path) -> None:
    write_monitor(tmp_path / "server0.csv", 1000.0, polls=5)
    models = read_monitor_csv(tmp_path / "server0.csv")
    assert sorted(models) == ["offline-iaas", "snapshotter"]
    rates = monitor_rates(models["offline-iaas"])
    assert rates.time.tolist() == [1001.0, 1002.0, 1003.0, 1004.0]
    assert rates.throughput.tolist() == [200.0] * 4
    assert rates.queue_ms == pytest.approx([2.0] * 4, rel=0.05)


def test_long_monitor_series_are_averaged_over_several_polls(tmp_path: Path) -> None:
    write_monitor(tmp_path / "server0.csv", 1000.0, polls=101)
    rates = monitor_rates(read_monitor_csv(tmp_path / "server0.csv")["offline-iaas"], max_points=10)
    assert rates.time.tolist() == [1000.0 + 10 * k for k in range(1, 11)]
    assert rates.throughput.tolist() == [200.0] * 10


def test_monitor_rates_skip_a_counter_reset_and_idle_polls() -> None:
    columns = {k: np.zeros(4) for k in CSV_HEADER if k != "model"}
    columns["unix_time"] = np.array([0.0, 2.0, 4.0, 6.0])
    columns["inference_count"] = np.array([0.0, 100.0, 10.0, 10.0])  # server restarted at 4
    columns["success_count"] = np.array([0.0, 10.0, 1.0, 1.0])
    columns["queue_ns"] = np.array([0.0, 1e7, 1e6, 1e6])
    rates = monitor_rates(columns)
    assert rates.time.tolist() == [2.0, 6.0]
    assert rates.throughput.tolist() == [50.0, 0.0]
    assert rates.queue_ms[0] == pytest.approx(1.0) and np.isnan(rates.queue_ms[1])


def test_monitor_csv_with_another_header_is_refused(tmp_path: Path) -> None:
    (tmp_path / "x.csv").write_text("time,model,count\n1,m,2\n")
    with pytest.raises(RunError, match="not a monitor CSV"):
        read_monitor_csv(tmp_path / "x.csv")


def test_block_maxima_keep_every_peak() -> None:
    values = np.array([0, 5, 1, 0, 0, 7, 2], dtype=np.float32)
    assert block_maxima(values, 3).tolist() == [5, 7, 2]
    assert block_maxima(values, 1) is values


def test_long_statistic_is_reduced_to_about_max_points(tmp_path: Path) -> None:
    path = tmp_path / "c.h5"
    with h5py.File(path, "w") as f:
        values = np.zeros(10_000, np.float32)
        values[7777] = 42.0
        _series(f.create_group("statistic"), 1000.0, values, 0.125, "X:S", "statistic")
    (trace,) = statistic_traces(path, max_points=1000)
    assert trace.block == 10 and len(trace.value) == 1000
    assert trace.value.max() == 42.0
    assert trace.time[np.argmax(trace.value)] == pytest.approx(1000.0 + 7770 * 0.125)


def test_loudest_triggers_are_kept(tmp_path: Path) -> None:
    path = tmp_path / "c.h5"
    triggers = np.array([(float(t), float(t % 7)) for t in range(100)],
                        dtype=[("time", "f8"), ("statistic", "f4")])
    with h5py.File(path, "w") as f:
        f.create_dataset("triggers", data=triggers)
    kept = read_triggers(path, max_count=10)
    assert len(kept) == 10 and (kept["statistic"] == 6).all()
    assert np.all(np.diff(kept["time"]) > 0)


def test_the_ifar_threshold_marks_from_every_trigger_not_only_those_drawn(
        tmp_path: Path) -> None:
    from offline_iaas.science.bbhnet.report import LOUDEST_TRIGGERS, ifar_threshold_statistic
    from offline_iaas.science.bbhnet.summary import SearchNumbers

    count = 3 * LOUDEST_TRIGGERS  # the louder, the larger the IFAR
    statistic = np.arange(count, dtype=np.float32)
    triggers = np.array(list(zip(1000.0 + statistic, statistic, statistic / count, strict=True)),
                        dtype=[("time", "f8"), ("statistic", "f4"), ("ifar", "f8")])
    path = tmp_path / "c.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("triggers", data=triggers)
    search = SearchNumbers(triggers=count, cluster_seconds=1.0, ifar_threshold_years=0.25)
    passing = int(np.sum(triggers["ifar"] >= 0.25))
    assert passing > LOUDEST_TRIGGERS
    every = read_triggers(path, None)
    assert ifar_threshold_statistic(search, every) == count - passing
    # control: the loudest drawn alone would mark from a louder statistic
    assert ifar_threshold_statistic(search, read_triggers(path, LOUDEST_TRIGGERS)) > (
        count - passing)


def test_raw_strain_is_clean_plus_noise_and_the_line_is_gone(tmp_path: Path) -> None:
    run_dir = make_fixture_run(tmp_path)
    spectra = strain_spectra(run_dir / "output" / "campaign.h5", "H1", fftlength=4.0)
    assert spectra is not None and spectra.raw is not None
    assert spectra.seconds == pytest.approx(95 + 63)  # both stretches, one second short each
    line = np.argmin(abs(spectra.frequencies - LINE_HZ))
    assert spectra.raw[line] / spectra.clean[line] > 1e3
    away = (spectra.frequencies > 100) & (spectra.frequencies < 400)
    assert spectra.raw[away] / spectra.clean[away] == pytest.approx(1.0, rel=1e-3)
    limited = strain_spectra(run_dir / "output" / "campaign.h5", "H1", 4.0, max_seconds=32)
    assert limited is not None and limited.seconds == pytest.approx(32)


def welch_in_blocks_by_hand(path: Path, ifo: str, fftlength: float, block_seconds: float,
                            blocks: int | None = None) -> tuple[dict[str, np.ndarray], float]:
    """The spectra ``strain_spectra`` documents, computed here from the file read with h5py:
    each stretch (``clean/<ifo>/<gps>``; raw = clean + ``noise/<ifo>/<gps>``) cut into blocks
    of ``block_seconds`` (a whole number of FFTs), each block's mean Welch (scipy, Hann,
    half-overlapping ``fftlength`` segments) weighted by the segments in it, i.e. the mean of
    every segment's periodogram; and the seconds of data averaged. ``blocks``: only the first
    few blocks of each stretch (the controls)."""
    from scipy import signal

    sums, weight, samples, rate = {"clean": 0.0, "raw": 0.0}, 0, 0, None
    with h5py.File(path, "r") as f:
        for name in f[f"clean/{ifo}"]:
            clean = f[f"clean/{ifo}/{name}"]
            rate = 1.0 / float(clean.attrs["dx"])
            series = {"clean": clean[()].astype(np.float64)}
            series["raw"] = series["clean"] + f[f"noise/{ifo}/{name}"][()].astype(np.float64)
            n, step = int(fftlength * rate), int(block_seconds * rate)
            assert step % n == 0 and len(series["clean"]) % n != 0  # a shorter last block
            for a in range(0, len(series["clean"]), step)[:blocks]:
                count = len(range(a, min(a + step, len(series["clean"])) - n + 1, n // 2))
                for key, values in series.items():
                    psd = signal.welch(values[a : a + step], fs=rate, window="hann",
                                       nperseg=n, noverlap=n // 2, average="mean")[1]
                    sums[key] = sums[key] + count * psd
                weight += count
                samples += len(values[a : a + step])
    return {key: total / weight for key, total in sums.items()}, samples / rate


def same_spectra(spectra, expected: dict[str, np.ndarray], rel: float) -> bool:
    """Every bin of the clean and raw PSDs within ``rel`` of ``expected`` (NaN fails)."""
    return all(np.all(np.abs(getattr(spectra, key) - psd) <= rel * np.abs(psd))
               for key, psd in expected.items())


def test_spectra_read_in_blocks_match_a_whole_read(tmp_path: Path, monkeypatch) -> None:
    """Whole stretches (blocks of 256 s) and 16 s blocks against the segment-weighted mean
    of scipy's Welch per block computed here, every bin of both PSDs to 1e-12 (observed 0:
    the same sums in the same order) and the seconds (95 + 63) to the sample. Controls, each
    5-116 % off somewhere: the first 16 s block of each stretch alone, 32 s blocks, or the
    other read's expectation (the segments across a block's end differ) fail the same
    comparison."""
    from offline_iaas.science.deepclean import products as module

    path = make_fixture_run(tmp_path) / "output" / "campaign.h5"
    whole = strain_spectra(path, "L1", fftlength=2.0)
    monkeypatch.setattr(module, "BLOCK_SECONDS", 16.0)
    blocked = strain_spectra(path, "L1", fftlength=2.0)
    assert whole is not None and blocked is not None
    expected = {b: welch_in_blocks_by_hand(path, "L1", 2.0, b) for b in (256.0, 16.0, 32.0)}
    for spectra, block in ((whole, 256.0), (blocked, 16.0)):
        psd, seconds = expected[block]
        assert seconds == 95 + 63 and spectra.seconds == pytest.approx(seconds, rel=0,
                                                                       abs=0.5 / 1024)
        assert same_spectra(spectra, psd, rel=1e-12)
    # controls
    first, first_seconds = welch_in_blocks_by_hand(path, "L1", 2.0, 16.0, blocks=1)
    assert first_seconds == 32 != blocked.seconds and not same_spectra(blocked, first, 1e-12)
    assert not same_spectra(blocked, expected[32.0][0], rel=1e-12)
    assert not same_spectra(blocked, expected[256.0][0], rel=1e-12)
    assert not same_spectra(whole, expected[16.0][0], rel=1e-12)


def test_inspiral_range_reads_a_strain_psd_in_mpc() -> None:
    frequencies = np.arange(0, 512.25, 0.25)
    psd = np.full(frequencies.size, (4e-23) ** 2)
    near = inspiral_range(frequencies, psd)
    # aLIGO-like noise floor: tens of Mpc; twice the noise power: range / sqrt(2)
    assert 10 < near < 200
    assert inspiral_range(frequencies, 2 * psd) == pytest.approx(near / np.sqrt(2), rel=1e-6)


def test_manifest_is_flattened_with_the_versions_of_every_model() -> None:
    manifest = {"ensemble": "offline-iaas", "channels": ["H1:A", "L1:A"],
                "shape": {"channels": 2}, "versions": {"deepclean": 1, "bbhnet": 3}}
    assert manifest_rows(manifest) == [
        ("ensemble", "offline-iaas"), ("channels", "H1:A, L1:A"), ("shape.channels", "2"),
        ("versions.deepclean", "1"), ("versions.bbhnet", "3")]


def test_table_numbers_are_short_and_gps_times_keep_milliseconds() -> None:
    html = table(["a", "b", "c", "d"], [[1262304044.5833333, 0.021937661277, 7, True]])
    assert ('<td class="num">1262304044.583</td><td class="num">0.0219377</td>'
            '<td class="num">7</td><td>True</td>') in html


def test_figures_keep_matplotlibs_axes_and_style_after_gwpy_is_imported() -> None:
    import gwpy.plot  # noqa: F401  (registers its Axes as "rectilinear", changes rcParams)
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from offline_iaas.report.plots import subplots

    assert type(subplots(Figure())) is Axes
    png = plots.statistic_figure([StatisticTrace(np.arange(8.0), np.zeros(8), 1)], None, [],
                                 None, 0.0)
    assert png[:8] == b"\x89PNG\r\n\x1a\n"


# ---- the page -------------------------------------------------------------------------------
def test_report_of_a_classifier_campaign_says_what_is_absent(tmp_path: Path) -> None:
    run_dir = make_fixture_run(tmp_path, mode="classifier")
    with captured_log() as lines:
        path = write_report(RunDir(run_dir))
    text = path.read_text()
    assert path == run_dir / "report" / "index.html"
    assert lines == []  # nothing failed
    # the classifier's package draws its statistic (none in this fixture's output); the
    # DeepClean and BBHnet sections are those modes' packages', not drawn for it
    assert '<section id="statistic">' in text
    assert "Statistic: not in this campaign (mode classifier)." in text
    assert '<section id="deepclean">' not in text and '<section id="bbhnet">' not in text
    assert "No monitor CSVs" in text
    assert text.count("<img ") == 2  # coverage map and node timeline
    assert fixture_config(tmp_path, "classifier").merge_hash() in text


def test_report_command_writes_the_page(tmp_path: Path, capsys) -> None:
    run_dir = make_fixture_run(tmp_path, mode="classifier")
    (run_dir / "offline.dag").write_text("JOB client0 client.sub\n")  # status's: a DAG by hand
    assert main(["report", str(run_dir)]) == 0
    assert capsys.readouterr().out.strip() == f"report: {run_dir / 'report' / 'index.html'}"


@contextmanager
def read_only(directory: Path) -> Iterator[None]:
    """``directory`` read-only for real: a read-only bind mount as root (who writes through a
    mode), else its mode."""
    if os.geteuid() != 0:
        directory.chmod(0o555)
        try:
            yield
        finally:
            directory.chmod(0o755)
        return
    bound = subprocess.run(["mount", "--bind", str(directory), str(directory)],
                           capture_output=True, text=True)
    if bound.returncode != 0:
        pytest.skip(f"cannot bind-mount here: {bound.stderr.strip()}")
    try:
        subprocess.run(["mount", "-o", "remount,ro,bind", str(directory)], check=True)
        yield
    finally:
        subprocess.run(["umount", str(directory)], check=True)


def test_report_in_a_read_only_run_directory_names_the_page_not_its_temporary_file(
        tmp_path: Path) -> None:
    run_dir = make_fixture_run(tmp_path, mode="classifier")
    page = write_report(RunDir(run_dir))
    before = page.read_bytes()
    with read_only(run_dir):
        result = subprocess.run([sys.executable, "-m", "offline_iaas.cli", "report",
                                 str(run_dir)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 6 and "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and ".tmp" not in lines[0], lines
    prefix = "offline-iaas report: error: "
    documented("report-read-only", lines[0].removeprefix(prefix), {tmp_path: "<ws>"},
               exit_code=6)
    assert page.read_bytes() == before  # the old page kept
    assert not [p for p in page.parent.iterdir() if p.name.endswith(".tmp")]


def test_an_unreadable_monitor_csv_is_named_and_costs_only_its_plot(tmp_path: Path) -> None:
    """A monitor CSV that cannot be read is named on the page; the rest of its section is
    drawn (before: the whole Campaign section was not drawn)."""
    run_dir = make_fixture_run(tmp_path, mode="classifier")
    (run_dir / "monitor").mkdir()
    (run_dir / "monitor" / "server0.csv").write_text("not,a,monitor\n")
    with captured_log() as lines:
        text = write_report(RunDir(run_dir)).read_text()
    assert lines == [] and "Not drawn" not in text and "Provenance" in text
    assert "server0.csv: not a monitor CSV" in text and "Coverage" in text


def test_report_renders_in_headless_chromium(tmp_path: Path) -> None:
    why = missing_browser()
    if why is not None:
        pytest.skip(why)
    run_dir = make_fixture_run(tmp_path)
    with captured_log() as lines:
        report = write_report(RunDir(run_dir))
    assert lines == []
    text = report.read_text()
    for expected in ("BNS range, raw [Mpc]", "ratio_at_line", "network SNR",
                     "GPS time", "0123456789abcdef", "tritonclient", "versions.bbhnet",
                     "Triggers marked: at or above the threshold (5)"):
        assert expected in text
    assert "src=\"http" not in text and "src=\"file" not in text  # self-contained

    screenshot = tmp_path / "report.png"
    with headless_chromium() as driver:
        page = check_page(driver, report, screenshot)
    assert page.console == []
    assert page.title == "offline-iaas campaign report"
    # ASDs of H1 and L1, statistic, coverage, node timeline, monitor
    assert [i["alt"] for i in page.images] == ["H1 ASD", "L1 ASD", "statistic against time",
                                              "coverage map", "node timeline",
                                              "server throughput"]
    assert all(i["complete"] and i["naturalWidth"] > 0 and i["naturalHeight"] > 0
               for i in page.images)
    assert screenshot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_browser_check_sees_a_broken_image_and_a_console_error(tmp_path: Path) -> None:
    why = missing_browser()
    if why is not None:
        pytest.skip(why)
    bad = tmp_path / "bad.html"
    bad.write_text('<!DOCTYPE html><html><head><link rel="icon" href="data:,"></head><body>'
                   '<img alt="broken" src="data:image/png;base64,AAAA">'
                   "<script>console.error('boom')</script></body></html>")
    with headless_chromium() as driver:
        page = check_page(driver, bad)
    assert [i["naturalWidth"] for i in page.images] == [0]
    assert any("boom" in e["message"] for e in page.console)
