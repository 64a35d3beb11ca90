"""The bench's gpu flavor: the same workloads as ONNX graphs on Triton's onnxruntime backend.

Used by ``benchmarks/gpu_bench.py`` on a GPU node. The repository is built from
``repository/gpu_flavor.py``'s graphs and configurations::

    snapshotter  update [1, C, n*S] ─► windows [1, n, C, K]  (ONNX, implicit state, KIND_GPU)
    network      windows [1, n, C, K] ─► [1, n, ...]          (the workload's graph, batched)
    gpu-pipeline snapshotter ─► network                        (the ensemble clients stream to)

The naive path sends whole windows to ``network``; the limit runs the workload's graph with
onnxruntime's CUDA provider in-process (``limit.measure_limit(..., providers=CUDA)``).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from offline_iaas.bench.repository import NETWORK, SEQUENCE_IDLE_SECONDS
from offline_iaas.bench.workloads import INPUT_NAME, Workload, build_network
from offline_iaas.errors import ServerError
from offline_iaas.models.weights import export_onnx
from offline_iaas.repository import model_configs as mcfg

GPU_PIPELINE = "gpu-pipeline"
SNAPSHOTTER = "snapshotter"
CUDA = ("CUDAExecutionProvider", "CPUExecutionProvider")


def gpu_names() -> list[str]:
    """Names of the GPUs ``nvidia-smi`` lists (empty when there is none or no driver)."""
    if shutil.which("nvidia-smi") is None:
        return []
    done = subprocess.run(
        ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
        capture_output=True, text=True, check=False,
    )
    return [line.strip() for line in done.stdout.splitlines() if line.strip()]


def cuda_available() -> bool:
    """onnxruntime here has the CUDA execution provider (the onnxruntime-gpu wheel)."""
    import onnxruntime

    return "CUDAExecutionProvider" in onnxruntime.get_available_providers()


def triton_with_onnxruntime_backend() -> Path | None:
    """A ``tritonserver`` on PATH whose installation has the onnxruntime backend, else None.

    Triton containers keep their backends in ``/opt/tritonserver/backends``.
    """
    binary = shutil.which("tritonserver")
    if binary is None:
        return None
    backends = Path(binary).resolve().parent.parent / "backends"
    return Path(binary) if (backends / "onnxruntime").is_dir() else None


def write_gpu_repository(
    load: Workload, root: Path, instances: int = 1, max_sequences: int = 8, seed: int = 0
) -> Path:
    """Write the gpu-flavor bench repository for ``load`` into ``root`` (replaced)."""
    import onnx

    from offline_iaas.repository import gpu_flavor

    if root.exists():
        shutil.rmtree(root)
    flat = root / "network.onnx"
    example = (2, load.channels, load.kernel_samples)
    export_onnx(build_network(load, seed), flat, INPUT_NAME, load.output_name, example)
    c, k = load.channels, load.kernel_samples
    options = gpu_flavor.GpuOptions(instances=instances)

    (root / SNAPSHOTTER / "1").mkdir(parents=True)
    onnx.save(gpu_flavor.snapshotter_onnx(c, k, load.stride_samples),
              str(root / SNAPSHOTTER / "1" / "model.onnx"))
    snap = gpu_flavor.snapshotter_config(
        SNAPSHOTTER, c, k, max_sequences, SEQUENCE_IDLE_SECONDS, options
    )
    (root / SNAPSHOTTER / "config.pbtxt").write_text(mcfg.to_pbtxt(snap))

    (root / NETWORK / "1").mkdir(parents=True)
    batched = gpu_flavor.batched_network_onnx(onnx.load(str(flat)), INPUT_NAME, load.output_name)
    onnx.save(batched, str(root / NETWORK / "1" / "model.onnx"))
    output_dims = [-1, *load.output_dims]
    net = gpu_flavor.network_config(
        NETWORK, INPUT_NAME, [-1, c, k], load.output_name, output_dims, options
    )
    (root / NETWORK / "config.pbtxt").write_text(mcfg.to_pbtxt(net))

    (root / GPU_PIPELINE / "1").mkdir(parents=True)
    pipeline = mcfg.pipeline_config(
        GPU_PIPELINE,
        (("update", (c, -1)),),
        ((load.output_name, tuple(output_dims)),),
        [(SNAPSHOTTER, {"update": "update"}, {"windows": "windows"}),
         (NETWORK, {INPUT_NAME: "windows"}, {load.output_name: load.output_name})],
    )
    (root / GPU_PIPELINE / "config.pbtxt").write_text(mcfg.to_pbtxt(pipeline))
    return root


def require_gpu() -> str:
    """The first GPU's name; ServerError when this node has none or onnxruntime lacks CUDA."""
    names = gpu_names()
    if not names:
        raise ServerError("no GPU on this node (nvidia-smi lists none): nothing to measure")
    if not cuda_available():
        raise ServerError(
            "onnxruntime has no CUDAExecutionProvider: pip install onnxruntime-gpu (matching "
            "this node's CUDA) to measure the GPU limit"
        )
    return names[0]
