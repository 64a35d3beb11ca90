"""A repository ``export`` wrote, read back: whether it fits the campaign
(``repository_problems``, ``check_repository``), the graphs it serves opened in onnxruntime
(``network_sessions``, for the reference and benchmarks) and the served model as products
record it (``model_record``).

What the campaign asks of a repository is what ``export`` would record for it
(``export.ensemble_shape``, ``repository_slides``, ``whitening_record``); each check compares
the manifest's record with that.
"""

from __future__ import annotations

from pathlib import Path

from offline_iaas.config import CampaignConfig
from offline_iaas.errors import ModelError
from offline_iaas.manifest import Manifest, read_manifest
from offline_iaas.modes import RAW
from offline_iaas.network_streaming import AUTO, whole_window_reason
from offline_iaas.records import NetworkGraph, ServedModel
from offline_iaas.repository import pipeline
from offline_iaas.repository.backend.layer_stream import STREAM_SPEC, open_streamed
from offline_iaas.repository.export import (
    FOREGROUND_PSD,
    ensemble_shape,
    repository_slides,
    whitening_record,
)
from offline_iaas.repository.pipeline import onnx_session
from offline_iaas.repository.readable import (
    graph_problems,
    graph_sha256,
    latest_version,
    served_file_problems,
    unreadable,
    unreadable_in,
)


def repository_problems(config: CampaignConfig, load_graphs: bool = True
                        ) -> tuple[Manifest | None, list[str]]:
    """Every way the repository does not fit the campaign, one line each naming the config
    key or the file, and its manifest (None when it has none).

    Checked: its mode, channels, sample rate, window and stride, sequence slots against the
    clients per server, time slides, BBHnet whitening, networks streamed or not, e2e's
    raw-strain search and the model name; with ``load_graphs``, that onnxruntime loads every
    network graph it serves (a half-copied file does not).
    """
    repo = config.model.repository
    try:
        manifest = read_manifest(repo)
    except ModelError as err:
        return None, [str(err)]
    where = f"model repository {repo}"
    problems = [*_stream_problems(where, config, manifest),
                *_window_problems(where, config, manifest),
                *_slide_problems(where, config, manifest.time_slides),
                *_whitening_problems(where, config, manifest.whitening),
                *_served_problems(where, config, manifest)]
    if load_graphs:
        # the served files once the graphs load: a missing version has one line, the graph's
        problems += graph_problems(repo, manifest) or served_file_problems(repo, manifest)
    return manifest, problems


def _stream_problems(where: str, config: CampaignConfig, manifest: Manifest) -> list[str]:
    """The repository's mode, channels and sample rate against the campaign's streams."""
    problems = []
    mode = manifest.mode
    if mode != config.model.mode:
        problems.append(f"{where}: exported for mode {mode!r}, the campaign runs mode "
                        f"{config.model.mode!r} (model.mode)")
    if manifest.channels != config.stream_channels:
        problems.append(f"{where}: exported for channels {list(manifest.channels)}, the "
                        f"campaign streams {list(config.stream_channels)} (data.channels, "
                        "data.witnesses)")
    rate = manifest.sample_rate
    if rate != config.data.sample_rate:
        problems.append(f"{where}: exported for {rate:g} Hz, the campaign reads "
                        f"{config.data.sample_rate:g} Hz (data.sample_rate)")
    return problems


def _window_problems(where: str, config: CampaignConfig, manifest: Manifest) -> list[str]:
    """The repository's window and stride (samples) and its sequence slots against the
    campaign's windows and clients per server."""
    problems = []
    expected = ensemble_shape(config)
    for key, config_key in (("kernel_samples", "model.kernel_seconds"),
                            ("stride_samples", "model.inference_rate")):
        found, wanted = getattr(manifest.shape, key), getattr(expected, key)
        if found != wanted:
            problems.append(f"{where}: exported for windows of {found} samples "
                            f"({key}), the campaign's are {wanted} ({config_key})")
    slots = manifest.sequence_slots
    if slots < config.layout.clients_per_server:
        problems.append(
            f"{where}: exported with {slots} sequence slots, the campaign runs "
            f"{config.layout.clients_per_server} clients per server "
            "(layout.clients_per_server; the others' sequences would wait for a slot and "
            "time out): export again for this layout")
    return problems


def _slide_problems(where: str, config: CampaignConfig, slides: tuple[int, ...]) -> list[str]:
    """The repository's time slides (its manifest's ``slides``) against the campaign's
    (``repository_slides``): one line when they differ."""
    wanted = repository_slides(config)
    if slides != wanted and slides[:2] == wanted[:2]:
        return [
            f"{where}: its time slides are formed from window {list(slides[2:])}, the "
            f"campaign's from window {wanted[2]} of each stream (exported by another version, "
            "or for another warm-up): export again"]
    if slides != wanted:
        return [
            f"{where}: exported with {slides[0]} time slides of {slides[1]} samples, the campaign "
            f"asks for {wanted[0]} of {wanted[1]} (search.slides, search.slide_seconds): "
            "export again"]
    return []


def _whitening_problems(where: str, config: CampaignConfig, found: str | dict) -> list[str]:
    """The repository's whitening (its manifest's record) against the campaign's: one line
    when they differ; a repository whose rolling whitening cannot whiten a foreground with
    the background's PSD (exported before it could) only for a campaign that injects."""
    wanted = whitening_record(config)

    def params(record: str | dict) -> str | dict:
        return ({k: v for k, v in record.items() if k != FOREGROUND_PSD}
                if isinstance(record, dict) else record)

    if params(found) != params(wanted):
        return [f"{where}: exported with the search's whitening {params(found)}, the campaign asks "
                f"for {params(wanted)} (search.whitening, psd_seconds, psd_fftlength, "
                "whitening_crop_seconds): export again"]
    if config.search.inject and found != wanted:
        return [f"{where}: its rolling whitening cannot whiten the foreground of search.inject "
                "with the background's PSD (exported by an earlier version): export again"]
    return []


def _served_problems(where: str, config: CampaignConfig, manifest: Manifest) -> list[str]:
    """How the repository serves against how the campaign calls it: its networks streamed
    or on whole windows (``model.streamed``), the outputs its clients request and the model
    name."""
    problems = []
    keeps_whole = whole_window_reason(config)
    if config.model.streamed == AUTO and manifest.streamed and keeps_whole is not None:
        problems.append(f"{where}: exported with its networks streamed, the campaign serves "
                        f"them on whole windows (model.streamed = \"auto\": "
                        f"{keeps_whole[1]}): export again")
    elif config.model.streamed != AUTO and bool(manifest.streamed) != config.model.streamed:
        problems.append(f"{where}: exported with model.streamed = "
                        f"{str(bool(manifest.streamed)).lower()}, the campaign has "
                        f"{str(config.model.streamed).lower()}: export again")
    # e2e's raw-strain search, served only where exported with search.inject (the other
    # outputs follow from the mode, time slides and canary, checked on their own)
    missing = [n for n in config.outputs.names if n.endswith(RAW) and n not in manifest.outputs]
    if missing:
        problems.append(f"{where}: serves {', '.join(manifest.outputs)}, not the "
                        f"{', '.join(missing)} the campaign's clients request (search.inject "
                        "in mode e2e searches the raw strain too): export again")
    if manifest.ensemble != config.model.name:
        problems.append(f"{where}: holds model {manifest.ensemble!r}, the campaign "
                        f"calls {config.model.name!r} (model.name)")
    return problems


def check_repository(config: CampaignConfig, load_graphs: bool = False) -> Manifest:
    """The repository's manifest once it fits the campaign (``repository_problems``); else
    ModelError listing every problem."""
    manifest, problems = repository_problems(config, load_graphs)
    if len(problems) == 1:
        raise ModelError(problems[0])
    if problems:
        raise ModelError("\n".join([f"{len(problems)} problems with the model repository "
                                    f"{config.model.repository}:",
                                    *(f"  - {p}" for p in problems)]))
    assert manifest is not None
    return manifest


def network_onnx_path(repo: Path, name: str) -> Path:
    """The ONNX graph Triton serves for network ``name`` (the latest version, as the manifest
    records it)."""
    entry = read_manifest(repo).networks.get(name)
    path = repo / entry.path if entry else repo / name / str(latest_version(repo / name)) / \
        "model.onnx"
    if refused := unreadable(path):
        raise ModelError(refused)
    if not path.exists():
        raise ModelError(f"{repo}: no {name} graph (looked for {path})")
    return path


def model_record(repository: Path, manifest: Manifest) -> ServedModel:
    """The served model as products record it: name, flavor, each network's version, the
    SHA-256 of the graph served and of the weight files it was exported from."""
    graphs = {}
    for name, entry in manifest.networks.items():
        digest = graph_sha256(repository / entry.path, name)
        graphs[name] = NetworkGraph(manifest.versions.get(name), digest,
                                    dict(entry.weights_sha256))
    return ServedModel(manifest.ensemble, manifest.flavor, graphs)


def network_sessions(
    config: CampaignConfig, threads: int = 1, device: str = "cpu"
) -> dict[str, object]:
    """An onnxruntime session per network stage of the mode, on the graphs Triton serves
    (``threads`` intra-op threads each, on ``device``), and per ``streamed`` stage the
    ``StreamedNetwork`` the fused model opens (``model.streamed``)."""
    repo = config.model.repository
    stages = pipeline.stages(config)
    sessions: dict[str, object] = {
        stage.model: onnx_session(network_onnx_path(repo, stage.model), threads, device)
        for stage in stages if stage.kind == "network"}
    networks = {stage.params["network"] for stage in stages
                if stage.kind in ("streamed", "streamed_timeslide")}
    streamed = read_manifest(repo).streamed if networks else {}
    for network in networks:
        if network not in streamed:
            raise ModelError(f"{repo}: no streamed {network} graphs (model.streamed = true): "
                             "export again")
        directory = repo / streamed[network]
        if refused := unreadable_in(directory):
            raise ModelError(refused)
        if not (directory / STREAM_SPEC).is_file():
            raise ModelError(f"{repo}: no {network} graph (looked for {directory})")
        sessions[network] = open_streamed(directory, threads, device)
    return sessions
