"""The bench's model repository, built from the project's own building blocks.

One repository per workload and server layout holds every model the three measurements call::

    fused      update [1, C, n*S] ─► windows + network (+ average) in one python model;
               for the toy CNN no windows: its layers run on the stream (streaming_conv.py)
    pipeline   the cpu flavor's ensemble: snapshotter ─► pipeline_network (─► averager)
    classifier the network alone (python backend): the naive path sends it whole windows

The ensemble's network has one instance when an averager follows it: with two, a sequence's
requests can finish the network step out of order and reach the (stateful) averager
swapped — Triton then refuses a sequence whose first request lost its START, and silently
averages in the wrong order otherwise (seen here with 2 instances and 4 requests in flight).

``fused`` uses ``backend/fused.py`` (bench-only); ``snapshotter``, ``classifier``,
``averager`` and ``pipeline`` are the configurations and backend sources of
``offline_iaas.repository``, with the network's output named and shaped for the workload.
Averaging workloads (DeepClean) answer with the online average ``noise [1, 1, n*S]``.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from tritonclient.grpc import model_config_pb2 as mc

from offline_iaas.bench.streaming import export_streaming_graphs
from offline_iaas.bench.workloads import INPUT_NAME, Workload, build_network
from offline_iaas.models.weights import export_onnx
from offline_iaas.repository import model_configs as mcfg
from offline_iaas.repository.export import backend_source

FUSED = "fused"
PIPELINE = "pipeline"
NETWORK = mcfg.CLASSIFIER
AVERAGER = "averager"
PIPELINE_NETWORK = "pipeline_network"
SEQUENCE_IDLE_SECONDS = 60.0


@dataclass(frozen=True)
class ServerLayout:
    """How the server runs the network.

    Parameters
    ----------
    instances
        Instances of the network models (``fused`` and ``classifier``).
    intra_op_threads
        onnxruntime threads per instance.
    max_sequences
        Sequence slots per instance of the stateful models.
    """

    instances: int = 1
    intra_op_threads: int = 1
    max_sequences: int = 8

    @property
    def threads(self) -> int:
        """onnxruntime threads of the whole server: what the limit gets too."""
        return self.instances * self.intra_op_threads


def bench_backend_source(name: str) -> str:
    """Source text of a python-backend model shipped in ``bench/backend``."""
    return resources.files("offline_iaas.bench.backend").joinpath(name).read_text()


def _shape(load: Workload, layout: ServerLayout) -> mcfg.EnsembleShape:
    return mcfg.EnsembleShape(
        channels=load.channels,
        kernel_samples=load.kernel_samples,
        stride_samples=load.stride_samples,
        sequence_idle_seconds=SEQUENCE_IDLE_SECONDS,
        max_sequences=layout.max_sequences,
        instances=layout.instances,
        intra_op_threads=layout.intra_op_threads,
    )


def _set_output(config: mc.ModelConfig, name: str, dims: list[int]) -> None:
    """Rename the first output and give it ``dims`` (without Triton's batch axis)."""
    output = config.output[0]
    output.name = name
    del output.dims[:]
    output.dims.extend(dims)


def _network_dims(load: Workload) -> list[int]:
    return [-1, *load.output_dims]


def _averaged_dims(load: Workload) -> list[int]:
    """``[c, -1]``: the averaged samples of the ``c`` outputs per window."""
    return [load.output_dims[0], -1]


def _served_dims(load: Workload) -> list[int]:
    return _averaged_dims(load) if load.averaged else _network_dims(load)


def fused_config(load: Workload, layout: ServerLayout) -> mc.ModelConfig:
    """The snapshotter's sequence batching with the served output and the instances."""
    config = mcfg.snapshotter_config(_shape(load, layout))
    config.name = FUSED
    _set_output(config, load.served_output, _served_dims(load))
    del config.instance_group[:]
    config.instance_group.add(count=layout.instances, kind=mc.ModelInstanceGroup.KIND_CPU)
    config.parameters["intra_op_threads"].string_value = str(layout.intra_op_threads)
    config.parameters["output_dims"].string_value = json.dumps(load.output_dims)
    config.parameters["average"].string_value = "1" if load.averaged else "0"
    config.parameters["streaming"].string_value = "1" if load.streaming else "0"
    return config


def averager_config(load: Workload, layout: ServerLayout) -> mc.ModelConfig:
    """The cpu flavor's online averager (``stateful.py``, kind ``average``)."""
    outputs = load.output_dims[0]
    tensors = ((load.output_name, _network_dims(load)), (load.served_output, _served_dims(load)))
    return mcfg.stateful_config(AVERAGER, "average", tensors, _shape(load, layout), outputs)


def network_config(
    load: Workload, layout: ServerLayout, name: str = NETWORK
) -> mc.ModelConfig:
    """The cpu flavor's network model, output as the workload's network gives it."""
    config = mcfg.classifier_config(_shape(load, layout))
    config.name = name
    _set_output(config, load.output_name, _network_dims(load))
    return config


def pipeline_layout(load: Workload, layout: ServerLayout) -> ServerLayout:
    """The ensemble network's layout: one instance when a stateful averager follows it."""
    if not load.averaged:
        return layout
    return ServerLayout(1, layout.intra_op_threads, layout.max_sequences)


def pipeline_config(load: Workload, layout: ServerLayout) -> mc.ModelConfig:
    """The cpu flavor's ensemble: snapshotter, network, and the averager if the load has one."""
    out = load.output_name
    steps = [
        (mcfg.SNAPSHOTTER, {"update": "update"}, {"windows": "windows"}),
        (PIPELINE_NETWORK, {INPUT_NAME: "windows"}, {out: out}),
    ]
    if load.averaged:
        steps.append((AVERAGER, {out: out}, {load.served_output: load.served_output}))
    return mcfg.pipeline_config(
        PIPELINE,
        (("update", (load.channels, -1)),),
        ((load.served_output, tuple(_served_dims(load))),),
        steps,
    )


def write_repository(load: Workload, layout: ServerLayout, root: Path, seed: int = 0) -> Path:
    """Write the bench repository for ``load`` into ``root`` (replaced); return ``root``."""
    if root.exists():
        shutil.rmtree(root)
    network_onnx = root / "network.onnx"
    example = (2, load.channels, load.kernel_samples)
    network = build_network(load, seed)
    export_onnx(network, network_onnx, INPUT_NAME, load.output_name, example)
    models = {
        FUSED: (fused_config(load, layout), bench_backend_source("fused.py"), True),
        NETWORK: (network_config(load, layout), backend_source("onnx_network.py"), True),
        PIPELINE_NETWORK: (
            network_config(load, pipeline_layout(load, layout), PIPELINE_NETWORK),
            backend_source("onnx_network.py"), True,
        ),
        mcfg.SNAPSHOTTER: (
            mcfg.snapshotter_config(_shape(load, layout)), backend_source("stateful.py"), False,
        ),
    }
    if load.averaged:
        models[AVERAGER] = (averager_config(load, layout), backend_source("stateful.py"), False)
    for name, (config, source, with_graph) in models.items():
        version = root / name / "1"
        version.mkdir(parents=True)
        (root / name / "config.pbtxt").write_text(mcfg.to_pbtxt(config))
        (version / "model.py").write_text(source)
        if with_graph:
            shutil.copyfile(network_onnx, version / "model.onnx")
    # the fused model loads OnlineAverage from the repository's own stateful.py
    (root / FUSED / "1" / "stateful.py").write_text(backend_source("stateful.py"))
    if load.streaming:
        export_streaming_graphs(network, load.channels, streaming_path(root))
        (root / FUSED / "1" / "streaming_conv.py").write_text(
            bench_backend_source("streaming_conv.py")
        )
    (root / PIPELINE / "1").mkdir(parents=True)
    (root / PIPELINE / "config.pbtxt").write_text(mcfg.to_pbtxt(pipeline_config(load, layout)))
    return root


def network_path(root: Path) -> Path:
    """The whole-window ONNX graph of the repository's models (the limit runs it too)."""
    return root / "network.onnx"


def streaming_path(root: Path) -> Path:
    """The directory of the fused model's streaming graphs (a streaming workload's limit
    runs them too)."""
    return root / FUSED / "1"


def limit_graphs(load: Workload, root: Path) -> Path:
    """What the limit runs: the fused model's own graphs (streaming or whole-window)."""
    return streaming_path(root) if load.streaming else network_path(root)
