"""``offline-iaas bench`` and ``plan``: the snapshot windows, the capacity arithmetic, the
bench command on the campaign's repository, and the regression check of service/limit on a
real server (tiny workload)."""

from __future__ import annotations

import json
import math
from importlib import resources
from pathlib import Path

import numpy as np
import pytest

from offline_iaas.bench.regression import measure_regression_ratios, read_recorded
from offline_iaas.bench.results import Measurement, read_results, write_results
from offline_iaas.bench.workloads import DEEPCLEAN, TINY, split_strides
from offline_iaas.cli import main
from offline_iaas.config import load_config
from offline_iaas.errors import ConfigError
from offline_iaas.repository.backend.stateful import SnapshotState
from offline_iaas.serve.node import visible_gpus
from offline_iaas.sizing.plan import HEADROOM, plan_from_bench
from tests.helpers import processes_mentioning

REGRESSION_FILE = Path(__file__).resolve().parents[1] / "benchmarks" / "regression.json"
O3_CONFIG = resources.files("offline_iaas.campaigns").joinpath("o3-month-deepclean.toml")


@pytest.mark.parametrize("splits", [[4], [1, 3], [2, 1, 1]])
def test_snapshot_windows_into_a_batch_are_the_streams_windows(splits: list[int]) -> None:
    """``SnapshotState.windows_into`` (the fused model's and the limit's windowing) writes,
    whatever the split into updates, the windows of the stream preceded by a zero window."""
    channels, kernel, stride = 3, 16, 4
    data = np.random.default_rng(3).standard_normal((channels, sum(splits) * stride))
    data = data.astype(np.float32)
    stream = np.concatenate([np.zeros((channels, kernel), np.float32), data], axis=1)
    snap = SnapshotState(channels, kernel, stride)
    first = 0
    for n in splits:
        out = np.full((n, channels, kernel), np.nan, np.float32)
        snap.windows_into(data[:, first : first + n * stride], out)
        for j in range(n):
            end = kernel + first + (j + 1) * stride
            np.testing.assert_array_equal(out[j], stream[:, end - kernel : end])
        first += n * stride


def test_shares_cover_the_span_and_differ_by_at_most_one() -> None:
    shares = split_strides(103, 4)
    assert sum(shares) == 103
    assert max(shares) - min(shares) <= 1


def _results(path: Path, service_rates: dict[tuple[int, int], float]) -> Path:
    """A results.json holding deepclean service measurements at (batch, clients) points."""
    measurements = [
        Measurement("service", "deepclean", b, k, 2, data_seconds=100.0,
                    wall_seconds=100.0 / rate, client_cpu_seconds=1.0, server_cpu_seconds=1.0)
        for (b, k), rate in service_rates.items()
    ]
    return write_results(path, {"device": "cpu", "machine": {"cpu": "test"}}, measurements)


def test_plan_scales_the_best_measured_point_to_the_campaign(tmp_path: Path) -> None:
    results = _results(tmp_path / "results.json", {(8, 2): 60.0, (32, 4): 100.0, (128, 2): 80.0})
    with resources.as_file(O3_CONFIG) as path:
        config = load_config(path)
    hours = 2.0
    capacity = plan_from_bench(config, hours, results)
    # the campaign's windows are twice the bench's (4096 Hz, 1 s) at the same rate and
    # channel count, so one server does half the bench's data seconds per second
    per_server = 100.0 * DEEPCLEAN.kernel_samples / config.kernel_samples
    needed = config.data.duration / (hours * 3600)
    assert capacity.servers == math.ceil(needed * HEADROOM / per_server)
    assert (capacity.batch_size, capacity.clients_per_server) == (32, 4)
    assert capacity.hours <= hours
    assert plan_from_bench(config, hours / 2, results).servers > capacity.servers
    text = "\n".join(capacity.explanation)
    assert f"{needed:,.2f} data-s/s" in text and f"{per_server:,.2f}" in text


def test_plan_refuses_a_bench_without_the_campaigns_workload(tmp_path: Path) -> None:
    results = write_results(tmp_path / "results.json", {}, [
        Measurement("service", "toy", 32, 2, 2, 100.0, 1.0, 1.0, 1.0)
    ])
    with resources.as_file(O3_CONFIG) as path:
        config = load_config(path)
    with pytest.raises(ConfigError, match="deepclean"):
        plan_from_bench(config, 24.0, results)
    with pytest.raises(ConfigError, match="target-hours"):
        plan_from_bench(config, 0.0, results)


def test_plan_command_prints_its_arithmetic(tmp_path: Path, capsys) -> None:
    results = _results(tmp_path / "results.json", {(32, 2): 50.0})
    with resources.as_file(O3_CONFIG) as path:
        code = main(["plan", str(path), "--target-hours", "24", "--from-bench", str(results)])
    out = capsys.readouterr().out
    assert code == 0
    assert "plan: needed: 2,592,000 data-s" in out
    assert "--set layout.servers=" in out and "--set model.batch_size=32" in out
    assert main(["plan", str(path), "--target-hours", "24", "--from-bench",
                 str(tmp_path / "missing.json")]) == ConfigError.exit_code


def test_results_file_round_trips(tmp_path: Path) -> None:
    m = Measurement("naive", "toy", 8, 1, 2, 10.0, 2.0, 0.5, 1.5, 1000, 20, 0.1, {"x": 1})
    header, back = read_results(write_results(tmp_path / "r.json", {"k": 1}, [m]))
    assert header == {"k": 1} and back == [m]
    assert json.loads((tmp_path / "r.json").read_text())["measurements"][0][
        "data_seconds_per_second"] == 5.0


def test_tiny_service_to_limit_ratio_has_not_halved(tmp_path: Path) -> None:
    """Real server, tiny workload: fails if service/limit drops below half the recorded one."""
    recorded = read_recorded(REGRESSION_FILE)
    measured = measure_regression_ratios(tmp_path)
    assert processes_mentioning(str(tmp_path)) == []
    assert measured.cpu >= recorded.cpu / 2, (measured, recorded)
    assert measured.wall >= recorded.wall / 2, (measured, recorded)


@pytest.mark.slow
def test_bench_command_writes_results_tables_and_plots(tmp_path: Path) -> None:
    out = tmp_path / "out"
    code = main([
        "bench", "--workloads", "tiny", "--batch-sizes", "16", "--clients", "1",
        "--batch-size", "16", "-k", "1", "--repeats", "1", "--data-scale", "0.5",
        "--out", str(out), "--work-dir", str(tmp_path / "work"), "--device", "cpu",
    ])
    assert code == 0
    header, measurements = read_results(out / "results.json")
    # the GPU bench's own steps (benchmarks/GPU.md) on onnxruntime's CPU provider
    assert header["device"] == "cpu" and header["machine"]["gpu"] == "none"
    assert {m.path for m in measurements} == {"limit", "service", "naive"}
    # the limit in both layouts of the server's two threads: two processes, one process
    assert sorted(m.extra["processes"] for m in measurements if m.path == "limit") == [1, 2]
    service = next(m for m in measurements if m.path == "service")
    # the service sends each sample once; the naive path every window whole (K/S = 8 times)
    naive = next(m for m in measurements if m.path == "naive")
    assert service.bytes_sent_per_data_second < 1.1 * TINY.input_bytes_per_data_second
    assert naive.bytes_sent_per_data_second > 7 * TINY.input_bytes_per_data_second
    assert service.server_cpu_seconds > 0 and service.client_cpu_seconds > 0
    text = (out / "RESULTS.md").read_text()
    assert header["command"] in text and "| tiny | 16 | 1 |" in text
    for name in ("throughput.png", "monitor.png", "monitor/tiny.csv"):
        assert (out / name).stat().st_size > 0
    assert processes_mentioning(str(tmp_path / "work")) == []
    (out / "RESULTS.md").unlink()
    assert main(["bench", "--report-only", "--out", str(out)]) == 0  # measures nothing
    assert (out / "RESULTS.md").read_text() == text


def test_gpu_bench_without_a_gpu_says_so_and_measures_nothing(tmp_path: Path, capsys) -> None:
    if visible_gpus() > 0:
        pytest.skip("this machine has a GPU: bench --device cuda would measure it")
    code = main(["bench", "--workloads", "tiny", "--device", "cuda", "--out", str(tmp_path)])
    assert code == 2
    assert "nvidia-smi -L lists none" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []
