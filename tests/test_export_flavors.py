"""``export --flavor gpu --ensemble`` (the native gpu layout): a repository a stock Triton
container loads, equal to the cpu flavor. The default gpu flavor: ``test_gpu_fused.py``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from offline_iaas.config import load_config
from offline_iaas.errors import ConfigError, ModelError, ServerError
from offline_iaas.manifest import read_manifest
from offline_iaas.repository.backend.stateful import SnapshotState, run_graph
from offline_iaas.repository.export import export_repository
from offline_iaas.repository.pipeline import onnx_session
from offline_iaas.repository.served import network_onnx_path
from offline_iaas.serve.startup_checks import check_flavor_runnable
from tests.helpers import parse_pbtxt, relative_difference

pytest.importorskip("torch")


def test_native_gpu_configs_parse_as_triton_model_config(small_config_file: Path) -> None:
    config = load_config(small_config_file, ['model.repository="gpu-repo"'])
    repo = export_repository(config, flavor="gpu", ensemble=True)
    assert (read_manifest(repo).flavor, read_manifest(repo).served) == ("gpu", "ensemble")
    parsed = {
        model: parse_pbtxt((repo / model / "config.pbtxt").read_text())
        for model in ("snapshotter", "classifier", config.model.name)
    }
    snap, net, ensemble = parsed["snapshotter"], parsed["classifier"], parsed[config.model.name]
    assert snap.backend == net.backend == "onnxruntime"
    assert [s.input_name for s in snap.sequence_batching.state] == ["INPUT_STATE"]
    assert snap.sequence_batching.HasField("direct")
    assert all(g.kind == g.KIND_GPU for m in (snap, net) for g in m.instance_group)
    assert ensemble.platform == "ensemble"
    assert (repo / "snapshotter" / "1" / "model.onnx").exists()
    assert not list(repo.rglob("model.py"))  # no python backend in the native layout


def test_native_gpu_graphs_equal_the_cpu_flavor_over_a_split_stream(
    small_config_file: Path
) -> None:
    cpu = load_config(small_config_file, ['model.repository="cpu-repo"'])
    gpu = load_config(small_config_file, ['model.repository="gpu-repo"'])
    export_repository(cpu)
    export_repository(gpu, flavor="gpu", ensemble=True)
    channels, kernel, stride = 2, cpu.kernel_samples, cpu.stride_samples
    rng = np.random.default_rng(3)
    stream = (rng.standard_normal((channels, 40 * stride)) * 1e-21).astype(np.float32)
    splits = [8 * stride, 3 * stride, 16 * stride, 13 * stride]  # the last request is shorter

    state = SnapshotState(channels, kernel, stride)
    cpu_net = onnx_session(network_onnx_path(cpu.model.repository, "classifier"))
    snapshotter = onnx_session(gpu.model.repository / "snapshotter" / "1" / "model.onnx")
    gpu_net = onnx_session(network_onnx_path(gpu.model.repository, "classifier"))

    def gpu_statistic(samples: np.ndarray) -> np.ndarray:
        """The native layout's statistic: snapshotter (implicit state carried) → network."""
        carried = np.zeros((1, channels, kernel), np.float32)
        offset, got = 0, []
        for number, size in enumerate(splits):
            update = samples[:, offset : offset + size]
            offset += size
            windows, carried = snapshotter.run(
                ["windows", "OUTPUT_STATE"],
                {
                    "update": update[None],
                    "INPUT_STATE": carried,
                    "START": np.array([[int(number == 0)]], np.int32),
                    "END": np.array([[int(number == len(splits) - 1)]], np.int32),
                    "CORRID": np.array([[7]], np.uint64),
                },
            )
            got.append(gpu_net.run(["statistic"], {"windows": windows})[0][0])
        return np.concatenate(got)

    offset, expected = 0, []
    for size in splits:
        update = stream[:, offset : offset + size]
        offset += size
        expected.append(run_graph(cpu_net, {"windows": state.update(update)})["statistic"])
    expected = np.concatenate(expected)
    got = gpu_statistic(stream)
    assert np.isfinite(got).all() and np.isfinite(expected).all()
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    # negative control: the stream one sample late gives another statistic
    late = gpu_statistic(np.roll(stream, 1, axis=1))
    assert relative_difference(late, expected) > 1e-3


def test_flavors_are_not_mixed_and_unknown_flavors_refused(small_config_file: Path) -> None:
    config = load_config(small_config_file)
    export_repository(config)
    mixed = "holds mode .classifier., the cpu flavor.*asks for .*the gpu flavor"
    with pytest.raises(ModelError, match=mixed):
        export_repository(config, flavor="gpu")
    with pytest.raises(ConfigError, match="unknown repository flavor 'tpu'"):
        export_repository(config, flavor="tpu")


def test_embedded_server_refuses_the_native_gpu_layout(tmp_path: Path) -> None:
    (tmp_path / "python").mkdir()
    with pytest.raises(ServerError, match="needs Triton's onnxruntime backend"):
        check_flavor_runnable("gpu", "ensemble", tmp_path, gpus=1)
    check_flavor_runnable("cpu", "ensemble", tmp_path, gpus=0)
    check_flavor_runnable("gpu", "ensemble", None, gpus=0)  # a container's own backends
    (tmp_path / "onnxruntime").mkdir()
    check_flavor_runnable("gpu", "ensemble", tmp_path, gpus=1)


def test_a_repository_with_fewer_sequence_slots_than_clients_is_refused(
    small_config_file: Path,
) -> None:
    from offline_iaas.repository.served import check_repository

    config = load_config(small_config_file, ["layout.clients_per_server=2"])
    export_repository(config)  # max(8, 2) slots
    check_repository(config)
    crowded = load_config(small_config_file, ["layout.clients_per_server=16"])
    with pytest.raises(ModelError, match="8 sequence slots, the campaign runs 16 clients"):
        check_repository(crowded)
