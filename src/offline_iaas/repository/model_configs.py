"""Triton model configurations of the exported repository (pure logic, no I/O).

Each configuration is built as Triton's own ``ModelConfig`` protobuf (shipped with
tritonclient) and written in its text format, so a ``config.pbtxt`` is valid by construction.

The ensemble, for ``C`` channels, ``K`` kernel samples and ``S`` stride samples::

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
CLASSIFIER = "classifier"


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


def snapshotter_config(shape: EnsembleShape) -> mc.ModelConfig:
    """Stateful python model: ``direct`` sequence batching with START/END/CORRID controls."""
    config = mc.ModelConfig(name=SNAPSHOTTER, backend="python", max_batch_size=shape.max_sequences)
    config.input.append(_tensor("update", [shape.channels, -1], mc.ModelInput))
    config.output.append(
        _tensor("windows", [-1, shape.channels, shape.kernel_samples], mc.ModelOutput)
    )
    batching = config.sequence_batching
    batching.max_sequence_idle_microseconds = int(shape.sequence_idle_seconds * 1e6)
    batching.direct.SetInParent()
    kinds = mc.ModelSequenceBatching.Control
    flags = (("START", kinds.CONTROL_SEQUENCE_START), ("END", kinds.CONTROL_SEQUENCE_END))
    for name, kind in flags:
        control = batching.control_input.add(name=name).control.add(kind=kind)
        control.int32_false_true.extend([0, 1])
    batching.control_input.add(name="CORRID").control.add(
        kind=kinds.CONTROL_SEQUENCE_CORRID, data_type=mc.TYPE_UINT64
    )
    # One instance: a sequence's state lives in the process that holds it.
    config.instance_group.add(count=1, kind=mc.ModelInstanceGroup.KIND_CPU)
    params = {
        "channels": shape.channels,
        "kernel_samples": shape.kernel_samples,
        "stride_samples": shape.stride_samples,
        "idle_seconds": 2 * shape.sequence_idle_seconds,
    }
    for key, value in params.items():
        config.parameters[key].string_value = str(value)
    return config


def classifier_config(shape: EnsembleShape) -> mc.ModelConfig:
    """Python model running the classifier's ONNX graph with onnxruntime."""
    config = mc.ModelConfig(name=CLASSIFIER, backend="python", max_batch_size=1)
    config.input.append(
        _tensor("windows", [-1, shape.channels, shape.kernel_samples], mc.ModelInput)
    )
    config.output.append(_tensor("statistic", [-1], mc.ModelOutput))
    config.instance_group.add(count=shape.instances, kind=mc.ModelInstanceGroup.KIND_CPU)
    config.parameters["intra_op_threads"].string_value = str(shape.intra_op_threads)
    return config


def ensemble_config(name: str, shape: EnsembleShape) -> mc.ModelConfig:
    """The model clients call: snapshotter then classifier."""
    config = mc.ModelConfig(name=name, platform="ensemble", max_batch_size=1)
    config.input.append(_tensor("update", [shape.channels, -1], mc.ModelInput))
    config.output.append(_tensor("statistic", [-1], mc.ModelOutput))
    steps = config.ensemble_scheduling.step
    snap = steps.add(model_name=SNAPSHOTTER, model_version=-1)
    snap.input_map["update"] = "update"
    snap.output_map["windows"] = "windows"
    net = steps.add(model_name=CLASSIFIER, model_version=-1)
    net.input_map["windows"] = "windows"
    net.output_map["statistic"] = "statistic"
    return config


def to_pbtxt(config: mc.ModelConfig) -> str:
    """Triton's ``config.pbtxt`` text of a configuration."""
    return text_format.MessageToString(config)


def parse_pbtxt(text: str) -> mc.ModelConfig:
    """Parse a ``config.pbtxt`` as Triton's ``ModelConfig``."""
    return text_format.Parse(text, mc.ModelConfig())
