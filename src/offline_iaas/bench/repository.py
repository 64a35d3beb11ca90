"""The bench's model repository, built from the project's own building blocks.

One repository per workload and server layout holds every model the three measurements call::

    fused      update [1, C, n*S] ─► windows + network in one python model ─► [1, n, ...]
    pipeline   the cpu flavor's ensemble: snapshotter ─► classifier (two python models)
    classifier the network alone (python backend): the naive path sends it whole windows

``fused`` uses ``backend/fused.py`` (bench-only); ``snapshotter``, ``classifier`` and
``pipeline`` are the configurations and backend sources of ``offline_iaas.repository``,
with the network's output renamed and reshaped for DeepClean.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from tritonclient.grpc import model_config_pb2 as mc

from offline_iaas.bench.workloads import INPUT_NAME, Workload, build_network
from offline_iaas.models.weights import export_onnx
from offline_iaas.repository import model_configs as mcfg
from offline_iaas.repository.export import backend_source

FUSED = "fused"
PIPELINE = "pipeline"
NETWORK = mcfg.CLASSIFIER
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


def _set_output(config: mc.ModelConfig, load: Workload) -> None:
    """Name the first output after the network's and give it ``[-1, *output_dims]``."""
    output = config.output[0]
    output.name = load.output_name
    del output.dims[:]
    output.dims.extend([-1, *load.output_dims])


def fused_config(load: Workload, layout: ServerLayout) -> mc.ModelConfig:
    """The snapshotter's sequence batching with the network's output and instances."""
    config = mcfg.snapshotter_config(_shape(load, layout))
    config.name = FUSED
    _set_output(config, load)
    del config.instance_group[:]
    config.instance_group.add(count=layout.instances, kind=mc.ModelInstanceGroup.KIND_CPU)
    config.parameters["intra_op_threads"].string_value = str(layout.intra_op_threads)
    config.parameters["output_dims"].string_value = json.dumps(load.output_dims)
    return config


def network_config(load: Workload, layout: ServerLayout) -> mc.ModelConfig:
    """The cpu flavor's network model, output as the workload's network gives it."""
    config = mcfg.classifier_config(_shape(load, layout))
    _set_output(config, load)
    return config


def pipeline_config(load: Workload, layout: ServerLayout) -> mc.ModelConfig:
    """The cpu flavor's ensemble (snapshotter then network), output renamed."""
    config = mcfg.ensemble_config(PIPELINE, _shape(load, layout))
    _set_output(config, load)
    step = config.ensemble_scheduling.step[1]
    del step.output_map["statistic"]
    step.output_map[load.output_name] = load.output_name
    return config


def write_repository(load: Workload, layout: ServerLayout, root: Path, seed: int = 0) -> Path:
    """Write the bench repository for ``load`` into ``root`` (replaced); return ``root``."""
    if root.exists():
        shutil.rmtree(root)
    network_onnx = root / "network.onnx"
    example = (2, load.channels, load.kernel_samples)
    export_onnx(build_network(load, seed), network_onnx, INPUT_NAME, load.output_name, example)
    models = {
        FUSED: (fused_config(load, layout), bench_backend_source("fused.py"), True),
        NETWORK: (network_config(load, layout), backend_source("onnx_network.py"), True),
        mcfg.SNAPSHOTTER: (
            mcfg.snapshotter_config(_shape(load, layout)), backend_source("stateful.py"), False,
        ),
    }
    for name, (config, source, with_graph) in models.items():
        version = root / name / "1"
        version.mkdir(parents=True)
        (root / name / "config.pbtxt").write_text(mcfg.to_pbtxt(config))
        (version / "model.py").write_text(source)
        if with_graph:
            shutil.copyfile(network_onnx, version / "model.onnx")
    (root / PIPELINE / "1").mkdir(parents=True)
    (root / PIPELINE / "config.pbtxt").write_text(mcfg.to_pbtxt(pipeline_config(load, layout)))
    return root


def network_path(root: Path) -> Path:
    """The ONNX graph every model of the repository serves (the limit runs it too)."""
    return root / "network.onnx"
