"""``offline-iaas merge``: check every client part, trim warm-ups, stitch, write the campaign.

The merge refuses to write anything when a part is missing, incomplete, from another campaign,
altered after it was written, or when the pieces do not tile every stretch exactly; the message
names every such part. Parts are copied in blocks, so memory does not grow with the span.
``output/campaign.json``, written last, records the output file's SHA-256 and the campaign's
config hash (the parts' sidecars ``parts/<node>.json`` record theirs).
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

from offline_iaas import hooks
from offline_iaas.atomic import write_text_atomic
from offline_iaas.client.part import (
    file_sha256,
    part_paths,
    peak_rss_mb,
    read_piece_rows,
    read_sidecar,
)
from offline_iaas.client.stream import load_job
from offline_iaas.config import CampaignConfig, load_config
from offline_iaas.data.discovery import discover_frames
from offline_iaas.errors import RunError
from offline_iaas.merge.output import CampaignWriter
from offline_iaas.merge.postprocess import physics_lines
from offline_iaas.repository.pipeline import ensemble_outputs
from offline_iaas.rundir import RunDir
from offline_iaas.stretches import ClientSegment, Stretch
from offline_iaas.terminal import NO_PROGRESS, NullProgress

logger = logging.getLogger(__name__)

BLOCK_ROWS = 1 << 12
"""Rows copied from a part at a time."""


def campaign_paths(run_dir: Path) -> tuple[Path, Path]:
    """The merge's output file and summary (``RunDir.output``)."""
    return RunDir(run_dir).output


def stretches_of(segments: list[ClientSegment]) -> list[Stretch]:
    """The stretches the segments' pieces cover, in order."""
    bounds = {}
    for seg in segments:
        for piece in seg.pieces:
            bounds[piece.stretch] = (piece.stretch_gps_start, piece.stretch_gps_end)
    return [Stretch(i, *bounds[i]) for i in sorted(bounds)]


def check_parts(
    run_dir: Path, config: CampaignConfig, segments: list[ClientSegment],
    read: set[str] | None = None,
) -> list[str]:
    """Every problem with the parts, one line each (empty when they tile every stretch).

    ``read``: the clients whose parts are checked (a chunk merge's parents); None: all. The
    tiling is checked on every client's job spec.
    """
    problems = []
    config_hash = config.config_hash()
    for seg in segments:
        if read is not None and seg.node not in read:
            continue
        h5_path, json_path = part_paths(run_dir, seg.node)
        sidecar = read_sidecar(run_dir, seg.node)
        if sidecar is None or not h5_path.exists():
            problems.append(f"{seg.node}: part missing ({h5_path})")
        elif not sidecar.get("complete"):
            problems.append(f"{seg.node}: part incomplete ({json_path})")
        elif sidecar.get("config_hash") != config_hash:
            problems.append(
                f"{seg.node}: part is from another campaign (config hash "
                f"{sidecar.get('config_hash')}, this campaign {config_hash})"
            )
        elif sidecar.get("sha256") != file_sha256(h5_path):
            problems.append(f"{seg.node}: {h5_path} changed after it was written (checksum)")
        elif ClientSegment.from_dict(sidecar) != seg:
            problems.append(f"{seg.node}: part covers other windows than its job spec")
    for stretch in stretches_of(segments):
        pieces = sorted(
            ((p.output_start, p.output_stop, s.node) for s in segments for p in s.pieces
             if p.stretch == stretch.index),
        )
        expected = config.warmup_windows
        for start, stop, node in pieces:
            if start != expected:
                kind = "gap" if start > expected else "overlap"
                problems.append(f"{node}: {kind} before window {start} of stretch {stretch.index}")
            expected = stop
        if expected != stretch.windows(config):
            problems.append(
                f"stretch {stretch.index} (GPS {stretch.gps_start}-{stretch.gps_end}): pieces end "
                f"at window {expected} of {stretch.windows(config)}"
            )
    return problems


def stage_parts(run_dir: Path, config: CampaignConfig, segments: list[ClientSegment],
                writer: CampaignWriter, progress: NullProgress = NO_PROGRESS) -> None:
    """Copy the kept rows of the parts that ``writer`` stages into it, block by block."""
    needed = []
    for seg in segments:
        for number, piece in enumerate(seg.pieces):
            kept_start = piece.output_start - config.warmup_windows
            lo, hi = writer.wanted(piece.stretch, kept_start, piece.output_stop
                                   - piece.output_start)
            if hi > lo:
                needed.append((seg, number, piece, lo - kept_start, hi - kept_start))
    progress.start(sum(hi - lo for *_, lo, hi in needed))
    for part, (seg, number, piece, lo, hi) in enumerate(needed, 1):
        progress.note(f"part {part}/{len(needed)} ({seg.node})")
        for start in range(piece.warmup_windows + lo, piece.warmup_windows + hi, BLOCK_ROWS):
            stop = min(start + BLOCK_ROWS, piece.warmup_windows + hi)
            kept_offset = piece.first_window + start - config.warmup_windows
            for output in ensemble_outputs(config):
                rows = read_piece_rows(run_dir, seg.node, output, number, start, stop)
                writer.write(output, piece.stretch, kept_offset, rows)
            progress.advance(stop - start)
        hooks.reached(run_dir, "merge", "mid-write")


def merge(run_dir: Path, progress: NullProgress = NO_PROGRESS) -> Path:
    """Merge the parts of ``run_dir`` into ``output/campaign.h5``; return its path.

    With chunk merges in the DAG (``merge.chunk_seconds``) the chunks are merged already and
    this writes their index (``merge/index.py``). ``progress`` counts the windows merged and
    notes the part being copied.
    """
    run_dir = run_dir.resolve()
    config = load_config(RunDir(run_dir).config)
    run_info = RunDir(run_dir).read_run_info()
    if run_info.get("chunks"):
        from offline_iaas.merge.index import write_index

        return write_index(run_dir, config, run_info)
    nodes = run_info["clients"]
    segments = [load_job(run_dir, node) for node in nodes]
    problems = check_parts(run_dir, config, segments)
    if problems:
        raise RunError(f"cannot merge {run_dir}: " + "; ".join(problems))
    started, cpu = time.monotonic(), time.process_time()
    out_path, status_path = campaign_paths(run_dir)
    status_path.unlink(missing_ok=True)
    frames = discover_frames(config) if "noise" in ensemble_outputs(config) else None
    writer = CampaignWriter(out_path, config, stretches_of(segments), out_path.parent / "frames",
                            run_info.get("training"), run_info.get("model"))
    try:
        stage_parts(run_dir, config, segments, writer, progress)
        summary = writer.commit(
            {"clients": len(segments), "servers": config.layout.servers, "producer": "merge"},
            frames,
        )
    except BaseException:
        writer.discard()
        raise
    wall = time.monotonic() - started
    write_text_atomic(
        status_path,
        json.dumps(
            {
                "complete": True,
                "wall_seconds": wall,
                "cpu_seconds": time.process_time() - cpu,
                "peak_rss_mb": peak_rss_mb(),
                "sha256": file_sha256(out_path),
                "config_hash": config.config_hash(),
                "mode": config.model.mode,
                **summary,
            },
            indent=2,
        ),
    )
    kept = sum(seg.kept_windows for seg in segments)
    logger.info(f"merge: {len(segments)} parts, {kept} windows -> {out_path} in {wall:.1f} s")
    log_summary(summary, out_path)
    report_quietly(run_dir)
    return out_path


def log_summary(summary: dict, out_path: Path) -> None:
    """The merge's physics lines in the log."""
    for line in physics_lines(summary):
        logger.info(f"merge: {line}")
    if "deepclean" in summary:
        logger.info(f"merge: GWF frames of the cleaned strain in {out_path.parent / 'frames'}")


def report_quietly(run_dir: Path) -> None:
    """Write the campaign report; a report that cannot be drawn does not fail the merge."""
    from offline_iaas.report import write_report

    try:
        logger.info(f"merge: report: {write_report(run_dir)}")
    except Exception as err:  # the output is complete and checked; the pictures are extra
        logger.warning(f"merge: warning: the report could not be written ({type(err).__name__}: "
                       f"{err}); run offline-iaas report {run_dir} to retry")
