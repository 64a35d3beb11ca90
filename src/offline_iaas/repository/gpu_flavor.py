"""Builders of the gpu repository flavor: every model an ONNX graph on Triton's onnxruntime backend.

The cpu flavor runs the snapshotter as a python-backend model keeping its own state per
correlation ID. A stock Triton container's onnxruntime backend instead keeps a sequence's
state itself (*implicit state*, ``sequence_batching.state``): the graph gets the previous
state as an input and returns the next one as an output, and Triton carries it from one
request of a sequence to the next, starting from zeros (``initial_state { zero_data }``).

Snapshotter graph (``snapshotter_onnx``), for ``C`` channels, kernel ``K``, stride ``S``::

    inputs   update        [B, C, L]   FP32, L = n * S new samples per channel
             INPUT_STATE   [B, C, K]   FP32, the last K samples of the stream (Triton's)
             START, END    [B, 1]      INT32 (sequence controls; START zeroes the state)
             CORRID        [B, 1]      UINT64 (unused; listed so the config may declare it)
    outputs  windows       [B, n, C, K]
             OUTPUT_STATE  [B, C, K]

    full     = Concat(state, update)                 [B, C, K + L]
    n        = L / S                                 (from Shape, in the graph)
    index    = (Range(n) + 1) * S  ⊕  Range(K)       [n, K]  (outer sum)
    windows  = Transpose(Gather(full, index, axis=2), [0, 2, 1, 3])
    OUTPUT_STATE = Slice(full, starts=L, axis=2)     [B, C, K]

Window ``j`` is ``full[:, :, (j+1)S : (j+1)S + K]``, exactly ``SnapshotState.update``. The
batch axis ``B`` holds the sequence slots of one execution (``max_batch_size``); requests of
different ``n`` cannot share an execution.

Networks (``batched_network_onnx``): the exported graphs take ``[N, C, K]`` windows; in the
ensemble they receive the snapshotter's ``[B, n, C, K]``, so the gpu flavor wraps each graph
in a Reshape to ``[B * n, C, K]`` and back (``[B, n]`` statistics, ``[B, n, K]``
predictions).

Configurations are Triton ``ModelConfig`` protobufs (``tritonclient.grpc.model_config_pb2``),
written with ``model_configs.to_pbtxt``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import onnx
from onnx import TensorProto, helper
from tritonclient.grpc import model_config_pb2 as mc

from offline_iaas.atomic import replaced_atomically

if TYPE_CHECKING:
    from offline_iaas.repository.model_configs import EnsembleShape
    from offline_iaas.repository.networks import Graph
    from offline_iaas.repository.pipeline import Stage

OPSET = 17
"""ONNX opset of the graphs built here (onnxruntime >= 1.13, TensorRT 8.6+)."""
UPDATE = "update"
WINDOWS = "windows"
INPUT_STATE = "INPUT_STATE"
OUTPUT_STATE = "OUTPUT_STATE"
START, END, CORRID = "START", "END", "CORRID"
_INT64_MAX = np.iinfo(np.int64).max


@dataclass(frozen=True)
class GpuOptions:
    """How the gpu flavor's models are placed and accelerated."""

    instances: int = 1
    """Instances of each network per GPU (``instance_group.count``)."""
    gpus: tuple[int, ...] = ()
    """GPU indices of the instance groups; empty: every GPU Triton sees."""
    tensorrt: bool = False
    """Ask onnxruntime to run the networks through TensorRT (``gpu_execution_accelerator``)."""
    tensorrt_precision: str = "FP32"
    """``FP32`` or ``FP16`` (TensorRT ``precision_mode``)."""
    tensorrt_workspace_mb: int = 1024
    """TensorRT ``max_workspace_size_bytes``, in MiB."""
    max_queue_delay_microseconds: int = 0
    """Dynamic batcher delay of the networks (0: no dynamic batching)."""


def _int64(name: str, values: list[int]) -> onnx.TensorProto:
    return helper.make_tensor(name, TensorProto.INT64, [len(values)], values)


def snapshotter_onnx(channels: int, kernel_samples: int, stride_samples: int) -> onnx.ModelProto:
    """The snapshotter as an ONNX graph with implicit state (see the module docstring).

    Parameters
    ----------
    channels, kernel_samples, stride_samples
        ``C``, ``K`` and ``S`` (samples at the model rate).
    """
    if min(channels, kernel_samples, stride_samples) < 1:
        raise ValueError("channels, kernel and stride must be positive")
    c, k, s = channels, kernel_samples, stride_samples
    inputs = [
        helper.make_tensor_value_info(UPDATE, TensorProto.FLOAT, ["batch", c, "samples"]),
        helper.make_tensor_value_info(INPUT_STATE, TensorProto.FLOAT, ["batch", c, k]),
        helper.make_tensor_value_info(START, TensorProto.INT32, ["batch", 1]),
        helper.make_tensor_value_info(END, TensorProto.INT32, ["batch", 1]),
        helper.make_tensor_value_info(CORRID, TensorProto.UINT64, ["batch", 1]),
    ]
    outputs = [
        helper.make_tensor_value_info(WINDOWS, TensorProto.FLOAT, ["batch", "windows", c, k]),
        helper.make_tensor_value_info(OUTPUT_STATE, TensorProto.FLOAT, ["batch", c, k]),
    ]
    constants = [
        _int64("stride", [s]),
        _int64("axis2", [2]),
        _int64("zero", [0]),
        _int64("one", [1]),
        _int64("end_max", [_INT64_MAX]),
        helper.make_tensor("zero_s", TensorProto.INT64, [], [0]),
        helper.make_tensor("one_s", TensorProto.INT64, [], [1]),
        helper.make_tensor("stride_s", TensorProto.INT64, [], [s]),
        helper.make_tensor("kernel_s", TensorProto.INT64, [], [k]),
        helper.make_tensor("zero_f", TensorProto.FLOAT, [], [0.0]),
    ]
    node = helper.make_node
    nodes = [
        # START = 1 zeroes that slot's state (Triton also resets it to initial_state)
        node("Cast", [START], ["start_bool"], to=TensorProto.BOOL),
        node("Unsqueeze", ["start_bool", "one"], ["start_b11"]),  # [B, 1, 1]
        node("Where", ["start_b11", "zero_f", INPUT_STATE], ["state"]),
        node("Concat", ["state", UPDATE], ["full"], axis=2),  # [B, C, K + L]
        # n = L / S, L from the update's shape
        node("Shape", [UPDATE], ["update_shape"]),
        node("Gather", ["update_shape", "axis2"], ["length_1"], axis=0),  # [1]
        node("Div", ["length_1", "stride"], ["n_1"]),
        node("Squeeze", ["n_1", "zero"], ["n"]),  # scalar
        # index[j, t] = (j + 1) * S + t
        node("Range", ["zero_s", "n", "one_s"], ["j"]),
        node("Add", ["j", "one_s"], ["j1"]),
        node("Mul", ["j1", "stride_s"], ["window_starts"]),
        node("Unsqueeze", ["window_starts", "one"], ["window_starts_col"]),  # [n, 1]
        node("Range", ["zero_s", "kernel_s", "one_s"], ["t"]),  # [K]
        node("Add", ["window_starts_col", "t"], ["index"]),  # [n, K]
        node("Gather", ["full", "index"], ["gathered"], axis=2),  # [B, C, n, K]
        node("Transpose", ["gathered"], [WINDOWS], perm=[0, 2, 1, 3]),
        # the new state: the last K samples
        node("Slice", ["full", "length_1", "end_max", "axis2"], [OUTPUT_STATE]),
    ]
    graph = helper.make_graph(nodes, "snapshotter", inputs, outputs, initializer=constants)
    model = helper.make_model(
        graph,
        producer_name="offline-iaas",
        opset_imports=[helper.make_operatorsetid("", OPSET)],
    )
    model.ir_version = 8  # readable by onnxruntime >= 1.10 (Triton containers since 22.02)
    onnx.checker.check_model(model, full_check=True)
    return model


def batched_network_onnx(
    network: onnx.ModelProto, input_name: str, output_name: str
) -> onnx.ModelProto:
    """Wrap a ``[N, C, K] → [N, ...]`` graph to take ``[B, n, C, K]`` and give ``[B, n, ...]``.

    The wrapped graph keeps the input and output names; its nodes are the original's between
    a Reshape to ``[B * n, C, K]`` and a Reshape back.
    """
    graph = network.graph
    initializers = {i.name for i in graph.initializer}
    inputs = [i for i in graph.input if i.name not in initializers]
    if [i.name for i in inputs] != [input_name] or output_name not in [
        o.name for o in graph.output
    ]:
        raise ValueError(
            f"the network graph has inputs {[i.name for i in inputs]} and outputs "
            f"{[o.name for o in graph.output]}, expected {input_name!r} → {output_name!r}"
        )
    opset = max((o.version for o in network.opset_import if o.domain in ("", "ai.onnx")),
                default=OPSET)
    if opset < 13:
        raise ValueError(f"the network graph's opset {opset} is older than 13")
    flat_in, flat_out = f"{input_name}__flat", f"{output_name}__flat"
    old_in = inputs[0]
    old_out = next(o for o in graph.output if o.name == output_name)
    in_dims = _dims(old_in)
    out_dims = _dims(old_out)
    elem_in = old_in.type.tensor_type.elem_type
    elem_out = old_out.type.tensor_type.elem_type

    def rename(names: list[str]) -> list[str]:
        return [flat_in if n == input_name else flat_out if n == output_name else n
                for n in names]

    body = []
    for n in graph.node:
        copy = onnx.NodeProto()
        copy.CopyFrom(n)
        del copy.input[:]
        copy.input.extend(rename(list(n.input)))
        del copy.output[:]
        copy.output.extend(rename(list(n.output)))
        body.append(copy)
    node = helper.make_node
    pre = [
        node("Shape", [input_name], ["wrap_in_shape"]),
        node("Slice", ["wrap_in_shape", "wrap_0", "wrap_2"], ["wrap_lead"]),  # [B, n]
        node("Slice", ["wrap_in_shape", "wrap_2", "wrap_max"], ["wrap_rest"]),  # [C, K]
        node("Concat", ["wrap_minus1", "wrap_rest"], ["wrap_flat_shape"], axis=0),
        node("Reshape", [input_name, "wrap_flat_shape"], [flat_in]),
    ]
    post = [
        node("Shape", [flat_out], ["wrap_out_shape"]),
        node("Slice", ["wrap_out_shape", "wrap_1", "wrap_max"], ["wrap_out_rest"]),
        node("Concat", ["wrap_lead", "wrap_out_rest"], ["wrap_out_full"], axis=0),
        node("Reshape", [flat_out, "wrap_out_full"], [output_name]),
    ]
    constants = [
        _int64("wrap_0", [0]),
        _int64("wrap_1", [1]),
        _int64("wrap_2", [2]),
        _int64("wrap_max", [_INT64_MAX]),
        _int64("wrap_minus1", [-1]),
    ]
    new_in = helper.make_tensor_value_info(input_name, elem_in, ["batch", "windows", *in_dims[1:]])
    new_out = helper.make_tensor_value_info(
        output_name, elem_out, ["batch", "windows", *out_dims[1:]]
    )
    other_outputs = [o for o in graph.output if o.name != output_name]
    wrapped = helper.make_graph(
        pre + body + post,
        graph.name or "network",
        [new_in],
        [new_out, *other_outputs],
        initializer=[*graph.initializer, *constants],
    )
    model = helper.make_model(
        wrapped, producer_name="offline-iaas", opset_imports=list(network.opset_import)
    )
    model.ir_version = network.ir_version
    onnx.checker.check_model(model)
    return model


def _dims(value_info: onnx.ValueInfoProto) -> list[int | str]:
    out: list[int | str] = []
    for dim in value_info.type.tensor_type.shape.dim:
        out.append(int(dim.dim_value) if dim.HasField("dim_value") else (dim.dim_param or "?"))
    return out


# ---- Triton configurations ------------------------------------------------------------------


def _tensor(name: str, dims: list[int], io: type, data_type: int = mc.TYPE_FP32) -> object:
    return io(name=name, data_type=data_type, dims=dims)


def _gpu_group(config: mc.ModelConfig, count: int, gpus: tuple[int, ...]) -> None:
    group = config.instance_group.add(count=count, kind=mc.ModelInstanceGroup.KIND_GPU)
    group.gpus.extend(gpus)


def snapshotter_config(
    name: str,
    channels: int,
    kernel_samples: int,
    max_sequences: int,
    sequence_idle_seconds: float,
    options: GpuOptions = GpuOptions(),
) -> mc.ModelConfig:
    """onnxruntime-backend snapshotter (``snapshotter_onnx``) with implicit state and
    ``direct`` sequence batching."""
    config = _stateful_config(
        name, max_sequences, sequence_idle_seconds, [channels, kernel_samples], options
    )
    config.input.append(_tensor(UPDATE, [channels, -1], mc.ModelInput))
    config.output.append(_tensor(WINDOWS, [-1, channels, kernel_samples], mc.ModelOutput))
    return config


def _stateful_config(
    name: str,
    max_sequences: int,
    sequence_idle_seconds: float,
    state_dims: list[int],
    options: GpuOptions,
) -> mc.ModelConfig:
    """onnxruntime model, ``direct`` sequence batching, START/END/CORRID, zero-initialised
    implicit state ``INPUT_STATE`` → ``OUTPUT_STATE`` of ``state_dims``, one KIND_GPU instance.
    """
    config = mc.ModelConfig(
        name=name,
        backend="onnxruntime",
        max_batch_size=max_sequences,
        default_model_filename="model.onnx",
    )
    batching = config.sequence_batching
    batching.max_sequence_idle_microseconds = int(sequence_idle_seconds * 1e6)
    batching.direct.SetInParent()
    kinds = mc.ModelSequenceBatching.Control
    for control_name, kind in ((START, kinds.CONTROL_SEQUENCE_START),
                               (END, kinds.CONTROL_SEQUENCE_END)):
        control = batching.control_input.add(name=control_name).control.add(kind=kind)
        control.int32_false_true.extend([0, 1])
    batching.control_input.add(name=CORRID).control.add(
        kind=kinds.CONTROL_SEQUENCE_CORRID, data_type=mc.TYPE_UINT64
    )
    state = batching.state.add(
        input_name=INPUT_STATE, output_name=OUTPUT_STATE, data_type=mc.TYPE_FP32, dims=state_dims
    )
    state.initial_state.add(
        data_type=mc.TYPE_FP32, dims=state_dims, zero_data=True, name="zeros"
    )
    # One instance: Triton keeps a sequence's state with the instance (and batch slot) that
    # holds the sequence; more instances would only add slots.
    _gpu_group(config, 1, options.gpus[:1])
    return config


def network_config(
    name: str,
    input_name: str,
    input_dims: list[int],
    output_name: str,
    output_dims: list[int],
    options: GpuOptions = GpuOptions(),
    max_batch_size: int = 1,
) -> mc.ModelConfig:
    """onnxruntime-backend network (KIND_GPU), optionally accelerated by TensorRT.

    ``input_dims``/``output_dims`` exclude Triton's batch axis (e.g. ``[-1, C, K]`` and
    ``[-1]`` for ``[n, C, K]`` windows → ``[n]`` statistics per request).
    """
    config = mc.ModelConfig(
        name=name,
        backend="onnxruntime",
        max_batch_size=max_batch_size,
        default_model_filename="model.onnx",
    )
    config.input.append(_tensor(input_name, input_dims, mc.ModelInput))
    config.output.append(_tensor(output_name, output_dims, mc.ModelOutput))
    _gpu_group(config, options.instances, options.gpus)
    if options.max_queue_delay_microseconds > 0:
        config.dynamic_batching.max_queue_delay_microseconds = (
            options.max_queue_delay_microseconds
        )
    if options.tensorrt:
        if options.tensorrt_precision not in ("FP32", "FP16"):
            raise ValueError(
                f"TensorRT precision must be FP32 or FP16, got {options.tensorrt_precision!r}"
            )
        accelerator = config.optimization.execution_accelerators.gpu_execution_accelerator.add(
            name="tensorrt"
        )
        params: Mapping[str, str] = {
            "precision_mode": options.tensorrt_precision,
            "max_workspace_size_bytes": str(options.tensorrt_workspace_mb * 2**20),
        }
        for key, value in params.items():
            accelerator.parameters[key] = value
    return config


def write_snapshotter(stage: Stage, shape: EnsembleShape, model_dir: Path) -> mc.ModelConfig:
    """Write the snapshotter graph (implicit state) of the ensemble's ``stage`` as
    ``model_dir/1``'s model, atomically; return its config."""
    graph = snapshotter_onnx(stage.channels, shape.kernel_samples, shape.stride_samples)
    (model_dir / "1").mkdir(parents=True, exist_ok=True)
    with replaced_atomically(model_dir / "1" / "model.onnx") as tmp:
        onnx.save(graph, str(tmp))
    options = GpuOptions(instances=shape.instances)
    return snapshotter_config(stage.model, stage.channels, shape.kernel_samples,
                              shape.max_sequences, shape.sequence_idle_seconds, options)


def write_network(graph: Graph, path: Path, shape: EnsembleShape) -> mc.ModelConfig:
    """Write the network ``graph`` batched over Triton's batch axis (``batched_network_onnx``)
    to ``path``, atomically; return its config."""
    (in_name, in_dims), (out_name, out_dims) = graph.inputs[0], graph.outputs[0]
    batched = batched_network_onnx(onnx.load(str(graph.path)), in_name, out_name)
    with replaced_atomically(path) as tmp:
        onnx.save(batched, str(tmp))
    options = GpuOptions(instances=shape.instances)
    return network_config(graph.name, in_name, list(in_dims), out_name, list(out_dims),
                          options)
