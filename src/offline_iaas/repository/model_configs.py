"""Triton model configurations of the exported repository (pure logic, no I/O).

Each configuration is built as Triton's own ``ModelConfig`` protobuf (shipped with
tritonclient) and written in its text format, so a ``config.pbtxt`` is valid by construction.

The ensemble of each mode is a chain of these models (``repository/pipeline.py``); for the
classifier mode, with ``C`` channels, ``K`` kernel samples and ``S`` stride samples::

    update [1, C, n*S] ─► snapshotter (stateful) ─► windows [1, n, C, K]
                       ─► classifier ─► statistic [1, n]

Every model has ``max_batch_size >= 1`` because Triton's sequence batcher needs a batch
dimension; clients send a batch of one request, whose ``n`` windows are the real batch.
"""

from __future__ import annotations

from dataclasses import dataclass

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

SNAPSHOTTER = "snapshotter"


@dataclass(frozen=True)
class EnsembleShape:
    """What the exported models are built for."""

    channels: int
    kernel_samples: int
    stride_samples: int
    sequence_idle_seconds: float
    max_sequences: int
    """Concurrent sequences (client streams) one server holds: the snapshotter's batch slots."""
    instances: int = 1
    intra_op_threads: int = 1


def _tensor(name: str, dims: list[int], io: type) -> object:
    return io(name=name, data_type=mc.TYPE_FP32, dims=dims)


def _model_config(name: str, inputs: tuple[tuple[str, tuple[int, ...]], ...],
                  outputs: tuple[tuple[str, tuple[int, ...]], ...], **fields: object
                  ) -> mc.ModelConfig:
    """A model's configuration with its FP32 ``inputs`` and ``outputs`` ((name, dims) each)."""
    config = mc.ModelConfig(name=name, **fields)
    config.input.extend(_tensor(n, list(dims), mc.ModelInput) for n, dims in inputs)
    config.output.extend(_tensor(n, list(dims), mc.ModelOutput) for n, dims in outputs)
    return config


def stateful_config(
    name: str,
    kind: str,
    tensors: tuple[tuple[str, list[int]], tuple[str, list[int]]],
    shape: EnsembleShape,
    channels: int,
) -> mc.ModelConfig:
    """Stateful python model (``backend/stateful.py``, ``kind`` snapshot or average).

    ``direct`` sequence batching with START/END/CORRID controls and ``max_sequences`` slots,
    so every client of a server streams at once; ``tensors`` is ((input, dims), (output, dims)).
    """
    config = _model_config(name, tensors[:1], tensors[1:], backend="python",
                           max_batch_size=shape.max_sequences)
    _sequence_batching(config, shape)
    # One instance: a sequence's state lives in the process that holds it.
    config.instance_group.add(count=1, kind=mc.ModelInstanceGroup.KIND_CPU)
    _parameters(config, {
        "kind": kind,
        "channels": channels,
        "kernel_samples": shape.kernel_samples,
        "stride_samples": shape.stride_samples,
        "idle_seconds": 2 * shape.sequence_idle_seconds,
    })
    return config


def _sequence_batching(config: mc.ModelConfig, shape: EnsembleShape) -> None:
    """``direct`` sequence batching with START/END/CORRID controls."""
    batching = config.sequence_batching
    batching.max_sequence_idle_microseconds = int(shape.sequence_idle_seconds * 1e6)
    batching.direct.SetInParent()
    kinds = mc.ModelSequenceBatching.Control
    flags = (("START", kinds.CONTROL_SEQUENCE_START), ("END", kinds.CONTROL_SEQUENCE_END))
    for flag, control_kind in flags:
        control = batching.control_input.add(name=flag).control.add(kind=control_kind)
        control.int32_false_true.extend([0, 1])
    batching.control_input.add(name="CORRID").control.add(
        kind=kinds.CONTROL_SEQUENCE_CORRID, data_type=mc.TYPE_UINT64
    )


def _parameters(config: mc.ModelConfig, params: dict) -> None:
    for key, value in params.items():
        config.parameters[key].string_value = str(value)


def fused_config(
    name: str,
    shape: EnsembleShape,
    update: tuple[str, list[int]],
    outputs: tuple[tuple[str, list[int]], ...],
    params: dict,
    device: str = "cpu",
    optional: tuple[tuple[str, list[int]], ...] = (),
) -> mc.ModelConfig:
    """The fused model (``backend/fused.py``): a mode's whole chain, one state per sequence.

    Sequence batching as the stateful models'; ``shape.instances`` instances (each holds the
    sequences of its own slots, whole, so instances cannot reorder a sequence's steps).
    ``device`` ``cuda`` (the gpu flavor): ``KIND_GPU`` instances (``instances`` on each GPU
    the server sees), whose networks run on their GPU; the rest is identical. ``optional``:
    inputs a request may leave out (``psd_update``).
    """
    config = _model_config(name, (update,), outputs, backend="python",
                           max_batch_size=shape.max_sequences)
    for input_name, dims in optional:
        config.input.add(name=input_name, data_type=mc.TYPE_FP32, dims=dims, optional=True)
    _sequence_batching(config, shape)
    kind = mc.ModelInstanceGroup.KIND_GPU if device == "cuda" else mc.ModelInstanceGroup.KIND_CPU
    config.instance_group.add(count=shape.instances, kind=kind)
    _parameters(config, {
        **params,
        "kernel_samples": shape.kernel_samples,
        "stride_samples": shape.stride_samples,
        "idle_seconds": 2 * shape.sequence_idle_seconds,
        "intra_op_threads": shape.intra_op_threads,
        "device": device,
    })
    return config


def snapshotter_config(shape: EnsembleShape) -> mc.ModelConfig:
    """The snapshotter of the streamed channels: ``update`` [C, -1] → ``windows`` [-1, C, K]."""
    c, k = shape.channels, shape.kernel_samples
    return stateful_config(
        SNAPSHOTTER, "snapshot", (("update", [c, -1]), ("windows", [-1, c, k])), shape, c
    )


def network_config(
    name: str,
    inputs: tuple[tuple[str, tuple[int, ...]], ...],
    outputs: tuple[tuple[str, tuple[int, ...]], ...],
    shape: EnsembleShape,
) -> mc.ModelConfig:
    """Python model running an ONNX graph with onnxruntime (``backend/onnx_network.py``)."""
    config = _model_config(name, inputs, outputs, backend="python", max_batch_size=1)
    config.instance_group.add(count=shape.instances, kind=mc.ModelInstanceGroup.KIND_CPU)
    config.parameters["intra_op_threads"].string_value = str(shape.intra_op_threads)
    return config


def pipeline_config(
    name: str,
    inputs: tuple[tuple[str, tuple[int, ...]], ...],
    outputs: tuple[tuple[str, tuple[int, ...]], ...],
    steps: list[tuple[str, dict[str, str], dict[str, str]]],
) -> mc.ModelConfig:
    """The ensemble clients call: ``steps`` are (model, input map, output map) in order."""
    config = _model_config(name, inputs, outputs, platform="ensemble", max_batch_size=1)
    for model, input_map, output_map in steps:
        step = config.ensemble_scheduling.step.add(model_name=model, model_version=-1)
        for key, value in input_map.items():
            step.input_map[key] = value
        for key, value in output_map.items():
            step.output_map[key] = value
    return config


def to_pbtxt(config: mc.ModelConfig) -> str:
    """Triton's ``config.pbtxt`` text of a configuration."""
    return text_format.MessageToString(config)
