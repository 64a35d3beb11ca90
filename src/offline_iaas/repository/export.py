"""``offline-iaas export``: build the Triton model repository from the campaign config.

Layout (standard Triton)::

    <repository>/manifest.json                 what the repository was built for
    <repository>/snapshotter/config.pbtxt      + 1/model.py
    <repository>/classifier/config.pbtxt       + <version>/model.py, <version>/model.onnx
    <repository>/<ensemble>/config.pbtxt       + 1/ (empty, as Triton wants)

Re-exporting adds a classifier version (earlier versions are kept; Triton serves the latest).
"""

from __future__ import annotations

import json
import os
import tempfile
import warnings
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from offline_iaas.atomic import write_text_atomic
from offline_iaas.config import CampaignConfig
from offline_iaas.errors import ConfigError, ModelError
from offline_iaas.repository import model_configs as mcfg

MANIFEST = "manifest.json"
FLAVORS = ("cpu", "gpu")


def ensemble_shape(config: CampaignConfig) -> mcfg.EnsembleShape:
    """The model shapes a campaign needs."""
    return mcfg.EnsembleShape(
        channels=len(config.data.channels),
        kernel_samples=config.kernel_samples,
        stride_samples=config.stride_samples,
        sequence_idle_seconds=config.server.sequence_idle_seconds,
        max_sequences=max(8, config.layout.clients_per_server),
        instances=config.server.instances,
    )


def backend_source(name: str) -> str:
    """Source text of a python-backend model shipped in ``repository/backend``."""
    return resources.files("offline_iaas.repository.backend").joinpath(name).read_text()


def latest_version(model_dir: Path) -> int:
    """Highest numeric version directory of a model (0 when none)."""
    versions = [int(p.name) for p in model_dir.glob("*") if p.is_dir() and p.name.isdigit()]
    return max(versions, default=0)


def export_classifier_onnx(config: CampaignConfig, path: Path, weights: Path | None) -> None:
    """Export the classifier (initial weights from ``model.seed``, or a state_dict file)."""
    try:
        import torch

        from offline_iaas.models.classifier import Classifier
    except ImportError:
        raise ModelError(
            "export needs torch: pip install 'offline-iaas[export]' -c constraints.txt"
        ) from None
    torch.manual_seed(config.model.seed)
    model = Classifier(len(config.data.channels), input_scale=config.model.input_scale)
    if weights is not None:
        try:
            state = torch.load(weights, map_location="cpu", weights_only=True)
            model.load_state_dict(state)
        except FileNotFoundError:
            raise ModelError(f"{weights}: weight file not found") from None
        except Exception as err:  # torch raises many types for a bad file
            raise ModelError(f"{weights}: not a classifier state_dict: {err}") from None
    model.eval()
    example = torch.zeros(2, len(config.data.channels), config.kernel_samples)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model,
            (example,),
            str(path),
            input_names=["windows"],
            output_names=["statistic"],
            dynamic_axes={"windows": {0: "batch"}, "statistic": {0: "batch"}},
            dynamo=False,
        )


def export_repository(
    config: CampaignConfig, weights: Path | None = None, flavor: str = "cpu"
) -> Path:
    """Write (or add a version to) the campaign's model repository; return its path.

    Parameters
    ----------
    weights
        Classifier state_dict; default: initial weights seeded by ``model.seed``.
    flavor
        ``cpu``: python-backend models running the ONNX graphs with onnxruntime (the embedded
        server). ``gpu``: onnxruntime-backend models on KIND_GPU, the snapshotter an ONNX graph
        with Triton implicit state (a Triton container on GPU nodes).
    """
    if flavor not in FLAVORS:
        raise ConfigError(f"unknown repository flavor {flavor!r} (known: {', '.join(FLAVORS)})")
    repo = config.model.repository
    shape = ensemble_shape(config)
    manifest = read_manifest(repo) if (repo / MANIFEST).exists() else None
    if manifest is not None and manifest["shape"] != _shape_dict(shape):
        raise ModelError(
            f"{repo}: repository was exported for {manifest['shape']}, the config asks for "
            f"{_shape_dict(shape)}: export to a new model.repository"
        )
    if manifest is not None and manifest.get("flavor", "cpu") != flavor:
        raise ModelError(
            f"{repo}: repository holds the {manifest.get('flavor', 'cpu')} flavor, not {flavor}: "
            "export to a new model.repository"
        )
    repo.parent.mkdir(parents=True, exist_ok=True)
    net_dir = repo / mcfg.CLASSIFIER
    version = latest_version(net_dir) + 1
    # The network is exported (and a bad weight file refused) before the repository is touched.
    with tempfile.TemporaryDirectory(dir=repo.parent) as tmp:
        staged = Path(tmp) / str(version)
        staged.mkdir()
        export_classifier_onnx(config, staged / "model.onnx", weights)
        if flavor == "cpu":
            (staged / "model.py").write_text(backend_source("onnx_network.py"))
        else:
            import onnx

            from offline_iaas.repository import gpu_flavor

            flat = onnx.load(str(staged / "model.onnx"))
            batched = gpu_flavor.batched_network_onnx(flat, "windows", "statistic")
            onnx.save(batched, str(staged / "model.onnx"))
        net_dir.mkdir(parents=True, exist_ok=True)
        os.replace(staged, net_dir / str(version))

    snap_dir = repo / mcfg.SNAPSHOTTER
    if flavor == "cpu":
        _write(snap_dir / "1" / "model.py", backend_source("snapshotter.py"))
        snap_config = mcfg.snapshotter_config(shape)
        net_config = mcfg.classifier_config(shape)
    else:
        snap_config, net_config = _gpu_models(config, shape, snap_dir)
    _write(snap_dir / "config.pbtxt", mcfg.to_pbtxt(snap_config))
    _write(net_dir / "config.pbtxt", mcfg.to_pbtxt(net_config))

    ens_dir = repo / config.model.name
    (ens_dir / "1").mkdir(parents=True, exist_ok=True)
    _write(ens_dir / "config.pbtxt", mcfg.to_pbtxt(mcfg.ensemble_config(config.model.name, shape)))

    _write(
        repo / MANIFEST,
        json.dumps(
            {
                "ensemble": config.model.name,
                "flavor": flavor,
                "channels": list(config.data.channels),
                "sample_rate": config.data.sample_rate,
                "shape": _shape_dict(shape),
                "outputs": ["statistic"],
                "classifier_version": version,
            },
            indent=2,
        ),
    )
    return repo


def _gpu_models(config: CampaignConfig, shape: mcfg.EnsembleShape, snap_dir: Path) -> tuple:
    """Write the gpu flavor's snapshotter graph; return the snapshotter and network configs."""
    import onnx

    from offline_iaas.repository import gpu_flavor

    graph = gpu_flavor.snapshotter_onnx(
        shape.channels, shape.kernel_samples, shape.stride_samples
    )
    (snap_dir / "1").mkdir(parents=True, exist_ok=True)
    onnx.save(graph, str(snap_dir / "1" / "model.onnx"))
    options = gpu_flavor.GpuOptions(instances=shape.instances)
    snap_config = gpu_flavor.snapshotter_config(
        mcfg.SNAPSHOTTER, shape.channels, shape.kernel_samples, shape.max_sequences,
        shape.sequence_idle_seconds, options,
    )
    net_config = gpu_flavor.network_config(
        mcfg.CLASSIFIER, "windows", [-1, shape.channels, shape.kernel_samples],
        "statistic", [-1], options,
    )
    return snap_config, net_config


def _shape_dict(shape: mcfg.EnsembleShape) -> dict[str, Any]:
    return {
        "channels": shape.channels,
        "kernel_samples": shape.kernel_samples,
        "stride_samples": shape.stride_samples,
    }


def read_manifest(repo: Path) -> dict[str, Any]:
    """The repository's manifest; ModelError when it is missing or unreadable."""
    path = repo / MANIFEST
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise ModelError(
            f"{repo}: not a model repository written by offline-iaas export (no {MANIFEST})"
        ) from None
    except json.JSONDecodeError as err:
        raise ModelError(f"{path}: unreadable manifest: {err}") from None


def check_repository(config: CampaignConfig) -> dict[str, Any]:
    """Check the repository matches the campaign (channels, rate, kernel, stride)."""
    repo = config.model.repository
    manifest = read_manifest(repo)
    expected = _shape_dict(ensemble_shape(config))
    if manifest["shape"] != expected or manifest["channels"] != list(config.data.channels):
        raise ModelError(
            f"{repo}: exported for channels {manifest['channels']} and {manifest['shape']}, "
            f"the campaign has channels {list(config.data.channels)} and {expected}"
        )
    if manifest["ensemble"] != config.model.name:
        raise ModelError(
            f"{repo}: holds ensemble {manifest['ensemble']!r}, the campaign calls "
            f"{config.model.name!r}"
        )
    return manifest


def classifier_onnx_path(repo: Path) -> Path:
    """The ONNX graph Triton serves: the classifier's latest version."""
    version = latest_version(repo / mcfg.CLASSIFIER)
    path = repo / mcfg.CLASSIFIER / str(version) / "model.onnx"
    if not path.exists():
        raise ModelError(f"{repo}: no classifier model.onnx (looked for {path})")
    return path


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, text)


def onnx_session(path: Path, threads: int = 1):
    """An onnxruntime session configured like the server's python-backend model."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    return onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def run_network(session, windows: np.ndarray) -> np.ndarray:
    """Run the classifier graph on [n, channels, kernel] windows → [n] statistics.

    The gpu flavor's graph takes Triton's batch axis too ([1, n, channels, kernel])."""
    if len(session.get_inputs()[0].shape) == 4:
        return session.run(["statistic"], {"windows": windows[None]})[0][0]
    return session.run(["statistic"], {"windows": windows})[0]
