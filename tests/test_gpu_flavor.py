"""gpu flavor: Triton configs parse as ModelConfig; the stateful ONNX graphs equal the cpu code."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
import torch
from tritonclient.grpc import model_config_pb2 as mc

from offline_iaas.models.weights import export_onnx
from offline_iaas.repository import gpu_flavor as gpu
from offline_iaas.repository.backend.stateful import SnapshotState
from offline_iaas.repository.model_configs import to_pbtxt
from offline_iaas.science.bbhnet.network import BBHnet
from offline_iaas.science.deepclean.network import DeepClean
from tests.helpers import parse_pbtxt


def session(model: onnx.ModelProto) -> onnxruntime.InferenceSession:
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3
    return onnxruntime.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )


def controls(batch: int, start: bool) -> dict[str, np.ndarray]:
    return {
        "START": np.full((batch, 1), int(start), np.int32),
        "END": np.zeros((batch, 1), np.int32),
        "CORRID": np.arange(1, batch + 1, dtype=np.uint64)[:, None],
    }


def roundtrip(config: mc.ModelConfig) -> mc.ModelConfig:
    parsed = parse_pbtxt(to_pbtxt(config))
    assert parsed == config
    return parsed


# ---- configurations -------------------------------------------------------------------------


def test_snapshotter_config_parses_with_implicit_state() -> None:
    config = roundtrip(gpu.snapshotter_config("snapshotter", 2, 1024, 8, 60.0))
    assert config.backend == "onnxruntime" and config.max_batch_size == 8
    assert config.default_model_filename == "model.onnx"
    assert [(g.kind, g.count) for g in config.instance_group] == [
        (mc.ModelInstanceGroup.KIND_GPU, 1)
    ]
    batching = config.sequence_batching
    assert batching.HasField("direct")
    assert batching.max_sequence_idle_microseconds == 60_000_000
    kinds = mc.ModelSequenceBatching.Control
    assert {c.name: c.control[0].kind for c in batching.control_input} == {
        "START": kinds.CONTROL_SEQUENCE_START,
        "END": kinds.CONTROL_SEQUENCE_END,
        "CORRID": kinds.CONTROL_SEQUENCE_CORRID,
    }
    (state,) = batching.state
    assert (state.input_name, state.output_name) == ("INPUT_STATE", "OUTPUT_STATE")
    assert list(state.dims) == [2, 1024] and state.data_type == mc.TYPE_FP32
    (initial,) = state.initial_state
    assert initial.zero_data and list(initial.dims) == [2, 1024]
    assert [(i.name, list(i.dims)) for i in config.input] == [("update", [2, -1])]
    assert [(o.name, list(o.dims)) for o in config.output] == [("windows", [-1, 2, 1024])]


@pytest.mark.parametrize("tensorrt", [False, True])
def test_network_config_parses(tensorrt: bool) -> None:
    options = gpu.GpuOptions(instances=2, gpus=(0, 1), tensorrt=tensorrt,
                             tensorrt_precision="FP16", max_queue_delay_microseconds=100)
    config = roundtrip(
        gpu.network_config("bbhnet", "windows", [-1, 2, 1024], "statistic", [-1], options)
    )
    assert config.backend == "onnxruntime"
    (group,) = config.instance_group
    assert group.kind == mc.ModelInstanceGroup.KIND_GPU and group.count == 2
    assert list(group.gpus) == [0, 1]
    assert config.dynamic_batching.max_queue_delay_microseconds == 100
    accelerators = config.optimization.execution_accelerators.gpu_execution_accelerator
    if tensorrt:
        (trt,) = accelerators
        assert trt.name == "tensorrt"
        assert dict(trt.parameters) == {
            "precision_mode": "FP16",
            "max_workspace_size_bytes": str(2**30),
        }
    else:
        assert not accelerators
    with pytest.raises(ValueError, match="FP32 or FP16"):
        gpu.network_config("x", "a", [1], "b", [1], gpu.GpuOptions(tensorrt=True,
                                                                  tensorrt_precision="INT8"))


def test_configs_match_their_graphs() -> None:
    """Every config input/output/state/control is a graph input/output of the right type."""
    onnx_types = {mc.TYPE_FP32: onnx.TensorProto.FLOAT, mc.TYPE_INT32: onnx.TensorProto.INT32,
                  mc.TYPE_UINT64: onnx.TensorProto.UINT64}
    pairs = [
        (gpu.snapshotter_config("s", 3, 64, 8, 1.0), gpu.snapshotter_onnx(3, 64, 16)),
    ]
    for config, model in pairs:
        graph_in = {i.name: i.type.tensor_type for i in model.graph.input}
        graph_out = {o.name: o.type.tensor_type for o in model.graph.output}
        for tensor in config.input:
            assert onnx_types[tensor.data_type] == graph_in[tensor.name].elem_type
            assert len(graph_in[tensor.name].shape.dim) == len(tensor.dims) + 1  # + batch
        for tensor in config.output:
            assert len(graph_out[tensor.name].shape.dim) == len(tensor.dims) + 1
        for control in config.sequence_batching.control_input:
            kind = control.control[0]
            data_type = kind.data_type if kind.data_type else mc.TYPE_INT32
            assert onnx_types[data_type] == graph_in[control.name].elem_type
        for state in config.sequence_batching.state:
            dims = [d.dim_value for d in graph_in[state.input_name].shape.dim[1:]]
            assert dims == list(state.dims)
            assert state.output_name in graph_out


# ---- snapshotter graph ----------------------------------------------------------------------


def stream_through_graph(
    data: np.ndarray, sizes: list[int], kernel: int, stride: int
) -> tuple[list[np.ndarray], np.ndarray]:
    """Feed [B, C, T] in updates of sizes[i] windows, carrying the state by hand."""
    run = session(gpu.snapshotter_onnx(data.shape[1], kernel, stride))
    state = np.zeros((data.shape[0], data.shape[1], kernel), np.float32)
    outputs, offset = [], 0
    for i, n in enumerate(sizes):
        update = data[:, :, offset : offset + n * stride]
        offset += n * stride
        windows, state = run.run(
            ["windows", "OUTPUT_STATE"],
            {"update": update, "INPUT_STATE": state, **controls(data.shape[0], i == 0)},
        )
        outputs.append(windows)
    return outputs, state


@pytest.mark.parametrize(
    ("kernel", "stride", "sizes"),
    [(40, 16, [1, 3, 2, 4]), (64, 8, [8, 8, 8, 3]), (32, 32, [2, 1, 5]), (100, 7, [20, 1, 9])],
)
def test_snapshotter_graph_equals_snapshot_state(
    kernel: int, stride: int, sizes: list[int]
) -> None:
    rng = np.random.default_rng(kernel + stride)
    data = rng.standard_normal((2, 3, sum(sizes) * stride)).astype(np.float32)
    outputs, state = stream_through_graph(data, sizes, kernel, stride)
    for slot in range(2):  # two sequences in the batch slots, each its own state
        reference = SnapshotState(3, kernel, stride)
        offset = 0
        for n, got in zip(sizes, outputs, strict=True):
            want = reference.update(data[slot, :, offset : offset + n * stride])
            offset += n * stride
            assert got.shape == (2, n, 3, kernel)
            np.testing.assert_array_equal(got[slot], want)
        np.testing.assert_array_equal(state[slot], reference.state)


def test_snapshotter_graph_start_zeroes_the_state_and_empty_updates_work() -> None:
    run = session(gpu.snapshotter_onnx(1, 8, 4))
    stale = np.full((1, 1, 8), 7.0, np.float32)
    update = np.arange(4, dtype=np.float32)[None, None]
    windows, state = run.run(None, {"update": update, "INPUT_STATE": stale, **controls(1, True)})
    np.testing.assert_array_equal(windows[0, 0, 0], [0, 0, 0, 0, 0, 1, 2, 3])
    windows, state = run.run(None, {"update": update, "INPUT_STATE": stale, **controls(1, False)})
    np.testing.assert_array_equal(windows[0, 0, 0], [7, 7, 7, 7, 0, 1, 2, 3])
    empty = np.zeros((1, 1, 0), np.float32)
    windows, after = run.run(None, {"update": empty, "INPUT_STATE": state, **controls(1, False)})
    assert windows.shape == (1, 0, 1, 8)
    np.testing.assert_array_equal(after, state)


# ---- networks -------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["deepclean", "bbhnet"])
def test_batched_network_equals_the_flat_one(kind: str, tmp_path: Path) -> None:
    torch.manual_seed(0)
    if kind == "deepclean":
        model, output, shape = DeepClean(2, [0, 0], [1, 1], 0.0, 1.0), "prediction", (2, 64)
    else:
        model = BBHnet(2, np.ones((2, 9)) / 9, 1.0, width=4, depth=2)
        output, shape = "statistic", (2, 128)
    path = export_onnx(model.eval(), tmp_path / "flat.onnx", "windows", output, (1, *shape))
    flat = onnx.load(str(path))
    wrapped = gpu.batched_network_onnx(flat, "windows", output)
    x = np.random.default_rng(1).standard_normal((3, 5, *shape)).astype(np.float32)
    got = session(wrapped).run([output], {"windows": x})[0]
    want = session(flat).run([output], {"windows": x.reshape(15, *shape)})[0]
    assert got.shape == (3, 5, *want.shape[1:])
    np.testing.assert_array_equal(got.reshape(want.shape), want)
    with pytest.raises(ValueError, match="expected 'strain'"):
        gpu.batched_network_onnx(flat, "strain", output)
