"""``offline-iaas bench`` and ``plan``: the fused model's windows, the limit, the capacity
arithmetic, and the regression check of service/limit on a real server (tiny workload)."""

from __future__ import annotations

import json
import math
from importlib import resources
from pathlib import Path

import numpy as np
import pytest

from offline_iaas.bench.capacity import HEADROOM, plan_capacity
from offline_iaas.bench.regression import measure_regression_ratios, read_recorded
from offline_iaas.bench.results import Measurement, read_results, write_results
from offline_iaas.bench.workloads import DEEPCLEAN, TINY, split_strides
from offline_iaas.cli import main
from offline_iaas.config import load_config
from offline_iaas.errors import ConfigError
from offline_iaas.repository.backend.stateful import SnapshotState
from tests.helpers import processes_mentioning

REGRESSION_FILE = Path(__file__).resolve().parents[1] / "benchmarks" / "regression.json"
O3_CONFIG = resources.files("offline_iaas").joinpath("configs", "o3-month-deepclean.toml")


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


def _conv_stack(padding: int, channels: int = 2):
    """A toy-like network: ``features`` (Conv1d + ReLU, stride 2), mean, ``head``."""
    import torch
    from torch import nn

    torch.manual_seed(1)

    class Stack(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.features = nn.Sequential(
                nn.Conv1d(channels, 4, 7, stride=2, padding=padding), nn.ReLU(),
                nn.Conv1d(4, 8, 5, stride=2, padding=padding), nn.ReLU(),
                nn.Conv1d(8, 8, 3, stride=2, padding=padding), nn.ReLU(),
            )
            self.head = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))

        def forward(self, windows: torch.Tensor) -> torch.Tensor:
            return self.head(self.features(windows).mean(dim=-1))[:, 0]

    return Stack().eval()


@pytest.mark.parametrize("padding", [0, 3])
def test_conv_stream_equals_the_network_window_by_window(tmp_path: Path, padding: int) -> None:
    """Streamed layer by layer (padded stacks with their edges recomputed), every window's
    output equals the whole-window graph's on the snapshotter's windows."""
    from offline_iaas.bench.backend.streaming_conv import ConvStream, open_graphs
    from offline_iaas.bench.limit import onnx_session
    from offline_iaas.bench.streaming import export_streaming_graphs
    from offline_iaas.models.weights import export_onnx

    channels, kernel, stride = 2, 512, 64
    network = _conv_stack(padding, channels)
    export_streaming_graphs(network, channels, tmp_path / "stream")
    export_onnx(network, tmp_path / "net.onnx", "windows", "out", (2, channels, kernel))
    whole = onnx_session(tmp_path / "net.onnx", 1)
    graphs = open_graphs(str(tmp_path / "stream"), lambda path: onnx_session(Path(path), 1))
    stream = ConvStream(*graphs, channels, kernel, stride)
    windows = SnapshotState(channels, kernel, stride)
    data = np.random.default_rng(4).standard_normal((channels, 60 * stride)).astype(np.float32)
    first = 0
    for n in (1, 7, 20, 2, 30):
        update = data[:, first : first + n * stride]
        first += n * stride
        batch = np.empty((n, channels, kernel), np.float32)
        windows.windows_into(update, batch)
        expected = whole.run(None, {"windows": batch})[0]
        np.testing.assert_allclose(stream.update(update), expected, rtol=1e-5, atol=1e-6)


def test_conv_stream_refuses_windows_off_the_strides_grid() -> None:
    from offline_iaas.bench.backend.streaming_conv import ConvLayer, ConvStream, edge_plan

    layers = [ConvLayer(7, 2, 0)] * 5  # strides' product 32
    assert edge_plan(layers, 8192).top_length == 251
    with pytest.raises(ValueError, match="32"):
        edge_plan(layers, 8200)
    with pytest.raises(ValueError, match="not a multiple of 32"):
        ConvStream(layers, [], None, None, 2, 8192, 48)


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
    capacity = plan_capacity(config, hours, results)
    # the campaign's windows are twice the bench's (4096 Hz, 1 s) at the same rate and
    # channel count, so one server does half the bench's data seconds per second
    per_server = 100.0 * DEEPCLEAN.kernel_samples / config.kernel_samples
    needed = config.data.duration / (hours * 3600)
    assert capacity.servers == math.ceil(needed * HEADROOM / per_server)
    assert (capacity.batch_size, capacity.clients_per_server) == (32, 4)
    assert capacity.hours <= hours
    assert plan_capacity(config, hours / 2, results).servers > capacity.servers
    text = "\n".join(capacity.explanation)
    assert f"{needed:,.2f} data-s/s" in text and f"{per_server:,.2f}" in text


def test_plan_refuses_a_bench_without_the_campaigns_workload(tmp_path: Path) -> None:
    results = write_results(tmp_path / "results.json", {}, [
        Measurement("service", "toy", 32, 2, 2, 100.0, 1.0, 1.0, 1.0)
    ])
    with resources.as_file(O3_CONFIG) as path:
        config = load_config(path)
    with pytest.raises(ConfigError, match="deepclean"):
        plan_capacity(config, 24.0, results)
    with pytest.raises(ConfigError, match="target-hours"):
        plan_capacity(config, 0.0, results)


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
        "--out", str(out), "--work-dir", str(tmp_path / "work"),
    ])
    assert code == 0
    header, measurements = read_results(out / "results.json")
    assert {m.path for m in measurements} == {
        "limit", "window-limit", "service", "naive", "ensemble"
    }
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


def test_gpu_repository_computes_what_the_limit_computes(tmp_path: Path) -> None:
    """The gpu flavor's snapshotter and batched network (run here on CPU onnxruntime) give
    the limit's outputs for the same stream."""
    import onnxruntime

    from offline_iaas.bench.gpu import GPU_PIPELINE, write_gpu_repository
    from offline_iaas.bench.limit import onnx_session
    from offline_iaas.bench.repository import NETWORK
    from offline_iaas.repository.model_configs import parse_pbtxt

    root = write_gpu_repository(TINY, tmp_path / "gpu")
    for name in ("snapshotter", NETWORK, GPU_PIPELINE):
        assert parse_pbtxt((root / name / "config.pbtxt").read_text()).name == name
    snap = onnxruntime.InferenceSession(str(root / "snapshotter" / "1" / "model.onnx"))
    net = onnxruntime.InferenceSession(str(root / NETWORK / "1" / "model.onnx"))
    flat = onnx_session(root / "network.onnx", 1)
    data = np.random.default_rng(5).standard_normal((TINY.channels, 12 * TINY.stride_samples))
    data = data.astype(np.float32)
    state = np.zeros((1, TINY.channels, TINY.kernel_samples), np.float32)
    stream = SnapshotState(TINY.channels, TINY.kernel_samples, TINY.stride_samples)
    for index, n in enumerate((5, 7)):
        first = 5 * TINY.stride_samples * index
        update = data[:, first : first + n * TINY.stride_samples]
        flags = {"START": np.array([[int(index == 0)]], np.int32),
                 "END": np.array([[0]], np.int32), "CORRID": np.array([[1]], np.uint64)}
        windows, state = snap.run(None, {"update": update[None], "INPUT_STATE": state, **flags})
        served = net.run(None, {"windows": windows})[0][0]
        expected_windows = np.empty((n, TINY.channels, TINY.kernel_samples), np.float32)
        stream.windows_into(update, expected_windows)
        expected = flat.run(None, {"windows": expected_windows})[0]
        np.testing.assert_allclose(served, expected, rtol=1e-5, atol=1e-6)


def test_gpu_bench_refuses_to_run_without_a_gpu(monkeypatch) -> None:
    from offline_iaas.bench import gpu
    from offline_iaas.errors import ServerError

    monkeypatch.setattr(gpu, "gpu_names", lambda: [])
    with pytest.raises(ServerError, match="no GPU"):
        gpu.require_gpu()


@pytest.mark.slow
def test_served_fused_model_equals_the_reference_steps(tmp_path: Path) -> None:
    """Through a real server, the fused model's averaged DeepClean output equals the
    repository's own steps (SnapshotState, the graph, OnlineAverage) run in-process."""
    import tritonclient.grpc as grpcclient

    from offline_iaas.bench.limit import onnx_session
    from offline_iaas.bench.repository import FUSED, ServerLayout, network_path
    from offline_iaas.bench.repository import write_repository as write_bench_repository
    from offline_iaas.bench.server import bench_server
    from offline_iaas.bench.workloads import Workload
    from offline_iaas.repository.backend.stateful import OnlineAverage

    load = Workload("tiny-deepclean", "deepclean", 2, 256.0, 1.0, 8.0, "prediction", True)
    repo = write_bench_repository(load, ServerLayout(instances=2), tmp_path / "repo")
    data = np.random.default_rng(7).standard_normal((2, 40 * load.stride_samples))
    data = data.astype(np.float32)
    sizes = [16, 8, 13, 3]  # windows per request
    session = onnx_session(network_path(repo), 1)
    snap = SnapshotState(load.channels, load.kernel_samples, load.stride_samples)
    average = OnlineAverage(load.kernel_samples, load.stride_samples, 1)
    expected, served, first = [], [], 0
    with bench_server(repo, tmp_path / "run", [FUSED]) as server:
        client = grpcclient.InferenceServerClient(server.url)
        try:
            for index, n in enumerate(sizes):
                update = data[:, first : first + n * load.stride_samples]
                first += n * load.stride_samples
                prediction = session.run(None, {"windows": snap.update(update)})[0]
                expected.append(average.update(prediction))
                tensor = grpcclient.InferInput("update", [1, *update.shape], "FP32")
                tensor.set_data_from_numpy(update[None])
                result = client.infer(
                    FUSED, [tensor], sequence_id=77, sequence_start=index == 0,
                    sequence_end=index == len(sizes) - 1, headers=server.headers,
                )
                served.append(result.as_numpy(load.served_output)[0])
        finally:
            client.close()
    np.testing.assert_allclose(
        np.concatenate(served, axis=-1), np.concatenate(expected, axis=-1), rtol=1e-5,
        atol=1e-6,
    )
    assert processes_mentioning(str(repo)) == []


def test_served_streaming_model_equals_the_whole_window_network(tmp_path: Path) -> None:
    """Through a real server (two instances, two interleaved sequences), the fused model that
    streams the toy CNN answers what the whole-window graph gives on the same windows."""
    import tritonclient.grpc as grpcclient

    from offline_iaas.bench.limit import onnx_session
    from offline_iaas.bench.repository import FUSED, ServerLayout, network_path
    from offline_iaas.bench.repository import write_repository as write_bench_repository
    from offline_iaas.bench.server import bench_server

    load = TINY
    repo = write_bench_repository(load, ServerLayout(instances=2), tmp_path / "repo")
    session = onnx_session(network_path(repo), 1)
    rng = np.random.default_rng(8)
    sizes = [16, 8, 13, 3]
    data = {seq: rng.standard_normal((2, sum(sizes) * load.stride_samples)).astype(np.float32)
            for seq in (11, 12)}
    windows = {seq: SnapshotState(load.channels, load.kernel_samples, load.stride_samples)
               for seq in data}
    expected: dict[int, list] = {seq: [] for seq in data}
    served: dict[int, list] = {seq: [] for seq in data}
    with bench_server(repo, tmp_path / "run", [FUSED]) as server:
        client = grpcclient.InferenceServerClient(server.url)
        try:
            first = 0
            for index, n in enumerate(sizes):
                for seq, samples in data.items():
                    update = samples[:, first : first + n * load.stride_samples]
                    batch = np.empty((n, load.channels, load.kernel_samples), np.float32)
                    windows[seq].windows_into(update, batch)
                    expected[seq].append(session.run(None, {"windows": batch})[0])
                    tensor = grpcclient.InferInput("update", [1, *update.shape], "FP32")
                    tensor.set_data_from_numpy(update[None])
                    result = client.infer(
                        FUSED, [tensor], sequence_id=seq, sequence_start=index == 0,
                        sequence_end=index == len(sizes) - 1, headers=server.headers,
                    )
                    served[seq].append(result.as_numpy(load.served_output)[0])
                first += n * load.stride_samples
        finally:
            client.close()
    for seq in data:
        np.testing.assert_allclose(
            np.concatenate(served[seq]), np.concatenate(expected[seq]), rtol=1e-5, atol=1e-6
        )
    assert processes_mentioning(str(repo)) == []
