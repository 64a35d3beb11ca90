"""``offline-iaas export``: build the Triton model repository from the campaign config.

Layout of the cpu flavor (standard Triton; the stages of each mode in ``repository/pipeline.py``)::

    <repository>/manifest.json                 what the repository was built for
    <repository>/<name>/config.pbtxt           the fused model clients call (model.name)
                       + <version>/model.py (backend/fused.py), stateful.py, <network>.onnx

The gpu flavor is the same fused model with its networks on CUDA (``KIND_GPU``, parameter
``device = "cuda"``). With ``--ensemble`` (per-step statistics; in the gpu flavor the native
layout: ONNX graphs with Triton implicit state, ``gpu_flavor.py``), every stage is a model::

    <repository>/<stateful model>/config.pbtxt + 1/model.py (snapshotter, averager, ...)
    <repository>/<network>/config.pbtxt        + <version>/model.py, <version>/model.onnx
    <repository>/<ensemble>/config.pbtxt       + 1/ (empty, as Triton wants)

Re-exporting adds a version to every network (earlier versions are kept; Triton serves the
latest). A repository is read back (checked against a campaign, its graphs opened, its record
for products) in ``served.py``.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import tempfile
from importlib import resources
from pathlib import Path
from typing import Any

from offline_iaas import records
from offline_iaas.atomic import write_text_atomic
from offline_iaas.config import CampaignConfig
from offline_iaas.errors import ConfigError, ModelError, RunError, names_text
from offline_iaas.manifest import MANIFEST_FILE, Manifest, read_manifest
from offline_iaas.mode_packages import find_mode
from offline_iaas.models.training_summary import weights_training_spans
from offline_iaas.modes import BUILT_IN_MODES, per_sample
from offline_iaas.network_streaming import served_as
from offline_iaas.repository import model_configs as mcfg
from offline_iaas.repository import pipeline
from offline_iaas.repository.backend.layer_stream import runner_modules
from offline_iaas.repository.readable import latest_version, served_files
from offline_iaas.repository.rollback import (
    STAGING_PREFIX,
    cannot_write,
    is_staging_directory,
    named_for_repository,
    remove_stale_staging,
    restored_on_failure,
    staging_place,
)
from offline_iaas.repository.streamed_export import streamed_networks

FLAVORS = ("cpu", "gpu")
FLAVOR_DEVICE = {"cpu": "cpu", "gpu": "cuda"}
"""Where each flavor's fused model runs its networks (``stateful.open_session``)."""


def ensemble_shape(config: CampaignConfig, fused: bool = True) -> mcfg.EnsembleShape:
    """The model shapes a campaign needs (``fused``: the cpu flavor's one model)."""
    # A stateful averager after the network needs each sequence's requests in order; several
    # network instances can overtake one another, so the ensemble of these modes gets one,
    # with as many onnxruntime threads as the config's instances (the same cores).
    one_instance = not fused and config.averaging_delay_windows > 0
    return mcfg.EnsembleShape(
        channels=len(config.stream_channels),
        kernel_samples=config.kernel_samples,
        stride_samples=config.stride_samples,
        sequence_idle_seconds=config.server.sequence_idle_seconds,
        max_sequences=max(8, config.layout.clients_per_server),
        instances=1 if one_instance else config.server.instances,
        intra_op_threads=config.server.instances if one_instance else 1,
    )


def backend_source(name: str) -> str:
    """Source text of a python-backend model shipped in ``repository/backend``."""
    return resources.files("offline_iaas.repository.backend").joinpath(name).read_text()


def export_repository(
    config: CampaignConfig, weights: Path | None = None, flavor: str = "cpu",
    ensemble: bool = False, canary_weights: Path | None = None,
) -> Path:
    """Write (or add a version to) the campaign's model repository; return its path.

    Parameters
    ----------
    weights
        Trained weights (``repository/networks.weight_file``: a directory of
        ``deepclean-<IFO>.*`` and ``bbhnet.*``, or one file for a single-network mode); the
        classifier mode takes an optional state_dict, default initial weights seeded by
        ``model.seed``.
    flavor
        ``cpu``: the fused python-backend model running the ONNX graphs with onnxruntime on
        the CPU (the embedded server). ``gpu``: the same model, its networks on the GPU
        (onnxruntime's CUDA provider; a Triton container on GPU nodes).
    ensemble
        Serve every stage as its own model behind an ensemble instead of the fused model (the
        default, faster): cpu flavor, python-backend models (Triton's per-model statistics for
        each step); gpu flavor, the native layout (onnxruntime-backend models on KIND_GPU, the
        snapshotter an ONNX graph with Triton implicit state), single-network modes only.
    canary_weights
        With ``deepclean.canary``: the canary DeepClean per detector (like ``weights``).
    """
    from offline_iaas.repository import networks

    _check_export_request(config, flavor, ensemble)
    repo = config.model.repository
    served = "ensemble" if ensemble else "fused"
    shape = ensemble_shape(config, fused=served == "fused")
    _check_repository_takes(repo, config.model.mode, flavor, served, shape)
    training = weights_training_spans(weights)
    # The networks are exported (and bad weights refused) before the repository is touched;
    # a failure once it is leaves it as it was (no new version for Triton to serve).
    with _staging_directory(repo) as tmp_name, named_for_repository(repo, Path(tmp_name)), \
            restored_on_failure(repo):
        tmp = Path(tmp_name)
        graphs = networks.build_graphs(config, weights, tmp, canary_weights)
        streamed = streamed_networks(config, weights, canary_weights, tmp, ensemble)
        config = served_as(config, bool(streamed))  # what auto chose
        if served == "fused":
            versions, networks_served = _write_fused(config, graphs, shape, flavor, tmp, streamed)
            models = [config.model.name]
        else:
            versions, networks_served = _write_networks(repo, graphs, shape, flavor, tmp)
            models = _write_ensemble_models(config, shape, flavor)
        repo.mkdir(parents=True, exist_ok=True)
        _write_manifest(config, flavor, served, shape, models, {
            "versions": versions,
            "networks": networks_served,
            **({"streamed": {name: f"{config.model.name}/{versions[name]}/{path.name}"
                             for name, path in streamed.items()}} if streamed else {}),
            "training": training,
        })
    return repo


def _check_export_request(config: CampaignConfig, flavor: str, ensemble: bool) -> None:
    """ConfigError or ModelError where the flavor or the layout cannot serve the campaign."""
    if flavor not in FLAVORS:
        raise ConfigError(f"unknown repository flavor {flavor!r} (known: {', '.join(FLAVORS)})")
    if flavor == "gpu" and ensemble and not config.mode.native_gpu:
        native = ", ".join(name for name in BUILT_IN_MODES if find_mode(name).native_gpu)
        raise ModelError(
            f"the native gpu layout (--flavor gpu --ensemble) is written for modes {native}, "
            f"not {config.model.mode!r} (it has no per-detector averager graph); the default "
            "gpu flavor (the fused model on CUDA) serves every mode")
    if ensemble and (config.has_slides or config.rolling_whitening):
        key = "slides" if config.has_slides else "whitening"
        raise ModelError(
            f"search.{key}: the time slides and the rolling whitening are steps of the fused "
            "model; export without --ensemble (the default, in either flavor)")
    if config.model.streamed is True and ensemble:
        raise ModelError("model.streamed = true is served by the fused model (either flavor), "
                         "not the --ensemble layout: export without --ensemble")
    steps = [s.model for s in pipeline.stages(served_as(config, False))] if ensemble else []
    if config.model.name in steps:  # each step a model beside the ensemble (whole windows)
        raise ConfigError(
            f"model.name {config.model.name!r} is the name of a step of the --ensemble layout "
            f"({', '.join(dict.fromkeys(steps))}): the ensemble would be written over it; "
            "choose another model.name")


def _check_repository_takes(repo: Path, mode: str, flavor: str, served: str,
                            shape: mcfg.EnsembleShape) -> None:
    """RunError or ModelError unless ``repo`` is absent, empty, or export's repository of the
    same mode, flavor, layout (``served``) and shape."""
    if repo.exists() and not repo.is_dir():  # (repo / MANIFEST_FILE) would name a made-up path
        raise RunError(f"{repo} is a file, not a directory (model.repository)")
    manifest = read_manifest(repo) if (repo / MANIFEST_FILE).exists() else None
    if manifest is not None:
        built_for = (manifest.mode, manifest.flavor, manifest.served,
                     dataclasses.asdict(manifest.shape))
        wanted = (mode, flavor, served, _shape_dict(shape))
        if built_for != wanted:
            raise ModelError(
                f"{repo}: repository holds mode {built_for[0]!r}, the {built_for[1]} flavor "
                f"({built_for[2]}), shape {built_for[3]}; the config asks for mode "
                f"{wanted[0]!r}, the {wanted[1]} flavor ({wanted[2]}), shape {wanted[3]}: "
                "export to a new model.repository")
    elif foreign := _foreign_entries(repo):
        raise RunError(
            f"{repo} is not a model repository of export and not empty (it holds "
            f"{names_text(foreign, 3)}): "
            "export would write into it; set model.repository to a new or empty directory")


def _staging_directory(repo: Path) -> tempfile.TemporaryDirectory:
    """A new staging directory for an export to ``repo`` (``rollback.staging_place``; stale
    ones removed); an OS error named for the repository."""
    with named_for_repository(repo):
        repo.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_staging(repo)
        place = staging_place(repo)  # a mount point: inside it (os.replace: one filesystem)
    try:
        return tempfile.TemporaryDirectory(prefix=STAGING_PREFIX, dir=place)
    except OSError as err:  # named for the repository, not the staging directory
        raise cannot_write(repo, f"a staging directory in {place}", err) from None


def _write_ensemble_models(config: CampaignConfig, shape: mcfg.EnsembleShape, flavor: str
                           ) -> list[str]:
    """Write the ``--ensemble`` layout's stateful models and the ensemble; its models."""
    repo = config.model.repository
    for stage in pipeline.stages(config):
        if stage.stateful:
            _write_stateful(repo, stage, shape, flavor)
    ens_dir = repo / config.model.name
    (ens_dir / "1").mkdir(parents=True, exist_ok=True)
    _write(ens_dir / "config.pbtxt", mcfg.to_pbtxt(ensemble_pipeline(config)))
    return [*dict.fromkeys(s.model for s in pipeline.stages(config)), config.model.name]


def _write_manifest(config: CampaignConfig, flavor: str, served: str, shape: mcfg.EnsembleShape,
                    models: list[str], written: dict[str, Any]) -> None:
    """Write ``manifest.json``: what the repository was built for, what was ``written``."""
    repo = config.model.repository
    records.write(records.build(Manifest, {
        "ensemble": config.model.name,
        "flavor": flavor,
        "served": served,
        **({"device": FLAVOR_DEVICE[flavor]} if served == "fused" else {}),
        "models": models,
        "mode": config.model.mode,
        "channels": list(config.stream_channels),
        "sample_rate": config.data.sample_rate,
        "shape": _shape_dict(shape),
        # sequence slots per served model: at most this many clients per server
        "sequence_slots": shape.max_sequences,
        "outputs": list(config.outputs.names),
        "time_slides": list(repository_slides(config)),
        "whitening": whitening_record(config),
        **written,
        "files": served_files(repo, models),
    }), repo / MANIFEST_FILE)


def _foreign_entries(repo: Path) -> list[str]:
    """What a directory without a manifest holds besides model directories and staging
    directories (those of an export cut short): its names, sorted (empty: none, or no
    directory)."""
    if not repo.is_dir():
        return []
    return sorted(p.name for p in repo.iterdir()
                  if not (p / "config.pbtxt").is_file()
                  and not is_staging_directory(p))


def _write_networks(
    repo: Path, graphs: list, shape: mcfg.EnsembleShape, flavor: str, tmp: Path
) -> tuple[dict[str, int], dict[str, dict[str, Any]]]:
    """Write a new version of each network as its own model (the ensemble layout) into the
    repository ``repo``; return the networks' versions and manifest entries."""
    versions: dict[str, int] = {}
    served: dict[str, dict[str, Any]] = {}
    for graph in graphs:
        version = latest_version(repo / graph.name) + 1
        staged = tmp / graph.name / str(version)
        staged.mkdir(parents=True)
        if flavor == "cpu":
            os.replace(graph.path, staged / "model.onnx")
            _write_python_model(staged, "onnx_network.py")
            net_config = mcfg.network_config(graph.name, graph.inputs, graph.outputs, shape)
        else:
            from offline_iaas.repository.gpu_flavor import write_network

            net_config = write_network(graph, staged / "model.onnx", shape)
        (repo / graph.name).mkdir(parents=True, exist_ok=True)
        os.replace(staged, repo / graph.name / str(version))
        _write(repo / graph.name / "config.pbtxt", mcfg.to_pbtxt(net_config))
        versions[graph.name] = version
        served[graph.name] = {
            "path": f"{graph.name}/{version}/model.onnx",
            "inputs": [name for name, _ in graph.inputs],
            "outputs": [name for name, _ in graph.outputs],
            "batched": flavor == "gpu" or graph.batched,
            "weights_sha256": graph.weights_sha256,
        }
    return versions, served


def _write_fused(
    config: CampaignConfig, graphs: list, shape: mcfg.EnsembleShape, flavor: str, tmp: Path,
    streamed: dict[str, Path],
) -> tuple[dict[str, int], dict[str, dict[str, Any]]]:
    """Write a new version of the fused model (``backend/fused.py`` beside ``stateful.py`` and
    the graphs; its networks on ``flavor``'s device; ``streamed``: network → its streamed
    graphs' directory, moved in beside the runners, ``backend/layer_stream.RUNNERS``); return
    the networks' versions and manifest entries."""
    name = config.model.name
    model_dir = config.model.repository / name
    version = latest_version(model_dir) + 1
    staged = tmp / "fused" / str(version)
    staged.mkdir(parents=True)
    _write_python_model(staged, "fused.py")
    (staged / "stateful.py").write_text(backend_source("stateful.py"))
    if streamed:  # layer_stream.py and every runner, this folder's and the mode packages'
        (staged / "layer_stream.py").write_text(backend_source("layer_stream.py"))
        for module, dotted in runner_modules().items():
            source = importlib.util.find_spec(dotted).origin
            (staged / f"{module}.py").write_text(Path(source).read_text())
    for directory in streamed.values():
        os.replace(directory, staged / directory.name)
    served = {}
    for graph in graphs:
        os.replace(graph.path, staged / f"{graph.name}.onnx")
        served[graph.name] = {
            "path": f"{name}/{version}/{graph.name}.onnx",
            "inputs": [n for n, _ in graph.inputs],
            "outputs": [n for n, _ in graph.outputs],
            "batched": graph.batched,
            "weights_sha256": graph.weights_sha256,
        }
    counts = len(config.stream_channels), len(config.ifos)
    outputs = tuple((n, list(_tensor_dims(n, *counts))) for n in config.outputs.names)
    params = {
        "stages": json.dumps([stage.to_dict() for stage in pipeline.stages(config)]),
        "outputs": json.dumps(list(config.outputs.names)),
        "ifos": len(config.ifos),
        "time_shifts": repository_slides(config)[0],
    }
    optional = (((pipeline.PSD_UPDATE, [len(config.ifos), -1]),)
                if pipeline.takes_psd_update(config) else ())
    fused = mcfg.fused_config(name, shape, ("update", list(_tensor_dims("update", *counts))),
                              outputs, params, FLAVOR_DEVICE[flavor], optional)
    model_dir.mkdir(parents=True, exist_ok=True)
    os.replace(staged, model_dir / str(version))
    _write(model_dir / "config.pbtxt", mcfg.to_pbtxt(fused))
    return {graph.name: version for graph in graphs}, served


def _tensor_dims(name: str, stream_channels: int, ifos: int) -> tuple[int, ...]:
    """Dims (without the batch axis) of an ensemble input or output: the update carries
    ``stream_channels`` rows, a per-sample output one per interferometer."""
    if name == "update":
        return (stream_channels, -1)
    if per_sample(name):
        return (ifos, -1)
    return (-1,)


def ensemble_pipeline(config: CampaignConfig):
    """The ensemble clients call: the mode's stages in order."""
    steps = [(s.model, s.inputs, s.outputs) for s in pipeline.stages(config)]
    counts = len(config.stream_channels), len(config.ifos)
    outputs = tuple((n, _tensor_dims(n, *counts)) for n in config.outputs.names)
    return mcfg.pipeline_config(
        config.model.name, (("update", _tensor_dims("update", *counts)),), outputs, steps
    )


def _write_stateful(repository: Path, stage: pipeline.Stage, shape: mcfg.EnsembleShape,
                    flavor: str) -> None:
    """A snapshotter or averager model (cpu: the python backend; gpu: an ONNX graph)."""
    model_dir = repository / stage.model
    k = shape.kernel_samples
    (in_name, _), (out_name, _) = next(iter(stage.inputs.items())), next(
        iter(stage.outputs.items())
    )
    if stage.kind == "snapshot":
        dims = ([stage.channels, -1], [-1, stage.channels, k])
    else:
        dims = ([-1, stage.channels, k], [stage.channels, -1])
    if flavor == "cpu":
        _write_python_model(model_dir / "1", "stateful.py")
        model_config = mcfg.stateful_config(
            stage.model, stage.kind, ((in_name, dims[0]), (out_name, dims[1])), shape,
            stage.channels,
        )
    else:
        from offline_iaas.repository.gpu_flavor import write_snapshotter

        model_config = write_snapshotter(stage, shape, model_dir)
    _write(model_dir / "config.pbtxt", mcfg.to_pbtxt(model_config))


def _shape_dict(shape: mcfg.EnsembleShape) -> dict[str, Any]:
    return {"channels": shape.channels, "kernel_samples": shape.kernel_samples,
            "stride_samples": shape.stride_samples}


def repository_slides(config: CampaignConfig) -> tuple[int, ...]:
    """``(slides, samples between them, first window a slide may reach)`` the fused model
    forms; ``(0, 0)`` without. (A repository exported before slides were formed only inside
    the stretch records two numbers and is refused.)"""
    if not config.has_slides:
        return (0, 0)
    return (config.search.slides, config.slide_samples, config.stretch_warmup_windows)


def whitening_record(config: CampaignConfig) -> str | dict[str, float | str]:
    """How the search network's windows are whitened (``search.whitening``): ``fixed`` (the
    graph's FIR), or the rolling whitening's parameters."""
    if not config.rolling_whitening:
        return "fixed"
    b = config.search
    return {"psd_seconds": b.psd_seconds, "psd_fftlength": b.psd_fftlength,
            "whitening_crop_seconds": b.whitening_crop_seconds,
            **({FOREGROUND_PSD: "background"} if pipeline.takes_psd_update(config) else {})}


FOREGROUND_PSD = "foreground_psd"
"""The whitening record's key for a fused model that whitens a foreground's requests with the
PSD of their ``psd_update`` (the background's strain); a repository exported without it
cannot serve injections on the fly with the rolling whitening."""


def _write_python_model(version_dir: Path, source: str) -> None:
    """A python-backend model: ``model.py`` (``backend/<source>``) and, beside it,
    ``server_watch.py``, which ends its stub when tritonserver exits without unloading it."""
    _write(version_dir / "model.py", backend_source(source))
    _write(version_dir / "server_watch.py", backend_source("server_watch.py"))


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, text)
