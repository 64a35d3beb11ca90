"""``offline-iaas demo``: synth → train-demo → export → make-dag → run-local → reference → compare.

``--mode`` picks the campaign mode (default the packaged config's, ``e2e``); the DeepClean and
BBHnet modes train the demo networks first (``train-demo``) unless
``--weights`` names trained ones.
"""

from __future__ import annotations

import dataclasses
import logging
import resource
import shutil
import time
from importlib import resources
from pathlib import Path

from offline_iaas import records
from offline_iaas.config import CampaignConfig, load_config
from offline_iaas.config_checks import current_name, parse_override
from offline_iaas.data.gwf_reader import reader
from offline_iaas.errors import MismatchError
from offline_iaas.mode_packages import find_mode
from offline_iaas.rundir import RunDir
from offline_iaas.summaries import CampaignSummary

logger = logging.getLogger(__name__)

TOLERANCE = 1e-5
"""Largest relative difference allowed between campaign and reference (float32 round-off)."""


def _overridden(overrides: list[str], section: str, key: str) -> bool:
    """Whether ``overrides`` set ``section.key``, by its name or an old one
    (``config_checks.current_name``)."""
    for text in overrides:
        given, name, _ = parse_override(text)
        if current_name(given, name) == (section, key):
            return True
    return False


def packaged_config(name: str = "demo.toml") -> Path:
    return Path(str(resources.files("offline_iaas.campaigns").joinpath(name)))


def demo_config(
    workdir: Path, config_path: Path | None, overrides: list[str], mode: str | None = None
) -> CampaignConfig:
    """The demo campaign with its data and repository inside ``workdir``; with
    ``search.inject``, on clean frames (``frames-clean``) with synth's population
    (``frames/injections.h5``) added on the fly."""
    placed = [
        f'data.frames="{workdir / "frames"}"',
        f'model.repository="{workdir / "model-repository"}"',
        f'search.injections="{workdir / "frames" / "synth.json"}"',
    ]
    if mode is not None:
        placed.append(f'model.mode="{mode}"')
        # the packaged demo's time slides need BBHnet (unless the user sets them, by any name)
        if not find_mode(mode).triggers and not _overridden(overrides, "search", "slides"):
            placed.append("search.slides=0")
    config = load_config(config_path or packaged_config(), placed + list(overrides))
    if config.search.inject:
        placed += [f'data.frames="{workdir / "frames-clean"}"',
                   f'search.injections="{workdir / "frames" / "injections.h5"}"']
        config = load_config(config_path or packaged_config(), placed + list(overrides))
    return config


def run_demo(
    workdir: Path,
    config_path: Path | None = None,
    overrides: list[str] | tuple[str, ...] = (),
    mode: str | None = None,
    weights: Path | None = None,
) -> float:
    """Run the whole demo; return the largest relative difference to the reference."""
    from offline_iaas.merge.output import TIME_TOLERANCE_SECONDS, compare_outputs
    from offline_iaas.repository.export import export_repository
    from offline_iaas.workflow.make_dag import make_dag

    workdir = workdir.resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    config = demo_config(workdir, config_path, list(overrides), mode)
    run = RunDir(workdir / "run")
    _remove_previous_demo(workdir, run, weights)
    weights = _write_frames_and_weights(workdir, config_path, overrides, mode, config, weights)
    logger.info(f"demo: exporting the {config.model.mode} repository to {config.model.repository}")
    export_repository(config, weights)
    shares = make_dag(config, run)
    logger.info(
        f"demo: wrote {run.dag} ({config.layout.servers} servers, {len(shares)} clients)"
    )
    reader().close()  # its CPU so far is make-dag's (counted by neither side)
    wall, campaign_cpu = _timed_run_local(run)
    reference_path, reference_wall, timings = _timed_reference(config, workdir)
    output, summary = run.output
    comparison = compare_outputs(output, reference_path)
    worst = comparison.worst
    _log_results(run, config, wall, campaign_cpu, reference_wall, timings)
    logger.info(f"campaign output: {output}")
    logger.info(f"reference: {reference_path}")
    _log_physics(summary)
    logger.info(f"max relative difference: {worst:.3g}")
    # written again now that every node has ended (the merge's own shows it still running)
    from offline_iaas.report import write_report

    report = write_report(run)
    if not comparison.passes(TOLERANCE):
        raise MismatchError(
            f"campaign output differs from the reference by {worst:.3g} (allowed {TOLERANCE:g}, "
            f"times within {TIME_TOLERANCE_SECONDS:g} s): {comparison.describe()}"
        )
    logger.info(f"report: {report}")
    return worst


def _remove_previous_demo(workdir: Path, run: RunDir, weights: Path | None) -> None:
    """Remove an earlier demo's run directory, frames and repository from ``workdir`` (and
    its trained weights unless ``weights`` are given)."""
    if run.run_info.exists():
        logger.info(f"demo: removing the previous demo run {run.path}")
        shutil.rmtree(run.path)
    stale_dirs = (("frames", "frames-clean", "model-repository")
                  + (("weights",) if weights is None else ()))
    for stale in stale_dirs:
        if (workdir / stale).exists():
            shutil.rmtree(workdir / stale)


def _write_frames_and_weights(
    workdir: Path, config_path: Path | None, overrides: list[str] | tuple[str, ...],
    mode: str | None, config: CampaignConfig, weights: Path | None,
) -> Path | None:
    """Synthesise the demo's frames (and, with ``search.inject``, the same noise without
    injections for the campaign) and train the demo networks where the mode needs weights and
    none are given; the weights to export."""
    from offline_iaas.data.synth import write_synthetic_dataset

    # with injections on the fly: synth's frames with them baked in give the population and
    # the training data; the campaign reads the same seed's clean frames
    population = (demo_config(workdir, config_path, [*overrides, "search.inject=false"], mode)
                  if config.search.inject else config)
    logger.info(f"demo: writing synthetic frames to {population.data.frames}")
    write_synthetic_dataset(population)
    if config.search.inject:
        logger.info(f"demo: writing the same noise without injections to {config.data.frames}; "
                    f"the campaign adds {config.search.injections} on the fly")
        write_synthetic_dataset(dataclasses.replace(
            config, synth=dataclasses.replace(config.synth, injections=0)))
    if config.mode.needs_weights and weights is None:
        from offline_iaas.models.training import train_demo

        weights = workdir / "weights"
        logger.info(f"demo: training the demo networks into {weights}")
        train_demo(population, weights)
    return weights


def _timed_run_local(run: RunDir) -> tuple[float, float]:
    """Run the campaign with ``run-local``; its wall seconds and CPU seconds."""
    from offline_iaas.workflow.local import run_local

    cpu = cpu_seconds_so_far()
    started = time.monotonic()
    run_local(run)
    wall = time.monotonic() - started
    return wall, cpu_seconds_so_far() - cpu


def _timed_reference(config: CampaignConfig, workdir: Path
                     ) -> tuple[Path, float, dict[str, float]]:
    """Run the reference into ``workdir/reference.h5``; its path, wall seconds, and its
    timings (``run_reference``'s, with ``cpu_seconds``)."""
    from offline_iaas.merge.reference import run_reference

    timings: dict[str, float] = {}
    cpu = cpu_seconds_so_far()
    reference_path, reference_wall = run_reference(config, workdir / "reference.h5",
                                                   timings=timings)
    reader().close()  # reaped: the reference's frame reading is counted
    timings["cpu_seconds"] = cpu_seconds_so_far() - cpu
    return reference_path, reference_wall, timings


def _log_results(run: RunDir, config: CampaignConfig, wall_seconds: float,
                 campaign_cpu_seconds: float, reference_wall_seconds: float,
                 timings: dict[str, float]) -> None:
    """Log the data seconds processed, the wall times, the throughput and the bytes sent."""
    from offline_iaas.manifest import read_manifest

    data_seconds = config.total_windows * config.stride_seconds
    logger.info(f"data seconds processed: {data_seconds:.1f}")
    logger.info(f"wall time: {wall_seconds:.1f} s (campaign), {reference_wall_seconds:.1f} s "
                "(reference)")
    logger.info(f"data-seconds per second: {data_seconds / wall_seconds:.1f}")
    logger.info(streaming_line(run, campaign_cpu_seconds, timings,
                               bool(read_manifest(config.model.repository).streamed)))
    logger.info(bytes_line(run, config))


def _log_physics(summary: Path) -> None:
    """Log the physics lines of the campaign's summary (``merge/postprocess.physics_lines``)."""
    from offline_iaas.merge.postprocess import physics_lines

    for line in physics_lines(records.read(CampaignSummary, summary).physics):
        logger.info(line)


def cpu_seconds_so_far() -> float:
    """CPU seconds of this process (every thread) and of its children that have ended."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def streaming_line(run: RunDir, campaign_cpu_seconds: float, reference: dict[str, float],
                   streamed: bool = False) -> str:
    """The campaign's and the reference's throughput over the same analysed data seconds
    (warm-up windows excluded on both sides), per wall second of streaming and per CPU second;
    ``streamed``: the networks ran streamed layer by layer (the repository's manifest).

    Streaming time: from the first client's first request to the last client's last response
    (the parts' sidecars, ``sizing/pilot.py``), and the reference's reading and streaming (no
    discovery, no post-processing). CPU seconds: every process of each, from start to output
    (the campaign's nodes, tritonservers and their stubs, reaped by ``run-local``; the
    reference's process and its frame reader).
    """
    from offline_iaas.sizing.pilot import read_pilot

    pilot = read_pilot(run)
    analysed = reference["data_seconds"]
    if abs(pilot.analysed_seconds - analysed) > 1e-6 * max(analysed, 1.0):
        raise MismatchError(f"the campaign analysed {pilot.analysed_seconds:g} data seconds, "
                            f"the reference {analysed:g}")
    campaign = analysed / pilot.streaming_seconds
    ours = analysed / reference["streaming_seconds"]
    campaign_cpu = analysed / campaign_cpu_seconds
    ours_cpu = analysed / reference["cpu_seconds"]
    return (
        f"streaming: the same {analysed:,.1f} analysed data seconds (warm-ups excluded; the "
        f"campaign's clients streamed {pilot.streamed_seconds:,.1f} with theirs): campaign "
        f"{campaign:.1f} data-s/s ({pilot.config.layout.servers} server(s) x "
        f"{pilot.config.layout.clients_per_server} client(s)), reference {ours:.1f} data-s/s "
        f"(one process): {campaign / ours:.2f} x per "
        f"wall second; per CPU second (every process, start to output): campaign "
        f"{campaign_cpu:.1f} data-s ({campaign_cpu_seconds:.1f} CPU-s), reference "
        f"{ours_cpu:.1f} data-s ({reference['cpu_seconds']:.1f} CPU-s): "
        f"{campaign_cpu / ours_cpu:.2f} x; networks "
        f"{'streamed layer by layer' if streamed else 'on whole windows'} (model.streamed)")


def bytes_line(run: RunDir, config: CampaignConfig) -> str:
    """What the clients sent per streamed and per analysed data second, beside the streamed
    channels' own bytes per second (every sample once, float32)."""
    from offline_iaas.sizing.pilot import read_pilot

    pilot = read_pilot(run)
    channels, sample_rate = len(config.stream_channels), config.data.sample_rate
    raw = channels * sample_rate * 4
    again = ("the warm-ups and the time slides' history" if config.has_slides
             else "the warm-ups")
    return (f"sent: {pilot.tensor_bytes_sent / 1e6:,.2f} MB of tensors: "
            f"{pilot.tensor_bytes_sent / pilot.streamed_seconds:,.0f} B per streamed data "
            f"second (the channels' own: {channels} x "
            f"{sample_rate:g} Hz x 4 B = {raw:,.0f}), "
            f"{pilot.tensor_bytes_sent / pilot.analysed_seconds:,.0f} B per analysed data second "
            f"(x {pilot.streamed_seconds / pilot.analysed_seconds:.3f}: {again} streamed "
            "again)")
