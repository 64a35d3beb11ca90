"""What every merge node does with the parts: check them, stage the rows it needs into a
``CampaignWriter`` block by block (memory does not grow with the span), and report afterwards.
``merge/merge.py`` (the single merge) and ``merge/chunk_merge.py`` (a chunk merge) use it."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from offline_iaas import hooks
from offline_iaas.client.part import (
    file_sha256,
    peak_rss_mb,
    read_piece_rows,
    read_sidecar,
)
from offline_iaas.config import CampaignConfig
from offline_iaas.jobspec import ClientSegment
from offline_iaas.logs import NO_PROGRESS, NullProgress
from offline_iaas.merge.output import CampaignWriter
from offline_iaas.merge.postprocess import physics_lines
from offline_iaas.repository.pipeline import ensemble_outputs
from offline_iaas.rundir import RunDir
from offline_iaas.stretches import stretches_of

logger = logging.getLogger(__name__)

BLOCK_ROWS = 1 << 12
"""Rows copied from a part at a time."""


def check_parts(
    run: RunDir, config: CampaignConfig, segments: list[ClientSegment],
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
        h5_path, json_path = run.part(seg.node)
        sidecar = read_sidecar(run, seg.node)
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


def stage_parts(run: RunDir, config: CampaignConfig, segments: list[ClientSegment],
                writer: CampaignWriter, node: str, progress: NullProgress = NO_PROGRESS
                ) -> None:
    """Copy the kept rows of the parts that ``writer`` stages into it, block by block
    (``node``: the merge node doing it, for the test hooks)."""
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
                rows = read_piece_rows(run, seg.node, output, number, start, stop)
                writer.write(output, piece.stretch, kept_offset, rows)
            progress.advance(stop - start)
        hooks.reached(run, node, "mid-write")


def merge_record(out_path: Path, config: CampaignConfig, wall_seconds: float,
                 cpu_seconds: float) -> dict[str, Any]:
    """What a merge node's summary (``output/campaign.json``) records about its own run and
    file, before the physics numbers."""
    return {"complete": True, "wall_seconds": wall_seconds, "cpu_seconds": cpu_seconds,
            "peak_rss_mb": peak_rss_mb(), "sha256": file_sha256(out_path),
            "config_hash": config.config_hash(), "mode": config.model.mode}


def log_summary(summary: dict, run: RunDir) -> None:
    """The merge's physics lines in the log."""
    for line in physics_lines(summary):
        logger.info(f"merge: {line}")
    if summary.get("deepclean"):
        logger.info(f"merge: GWF frames of the cleaned strain in {run.output_frames}")


def report_quietly(run: RunDir) -> None:
    """Write the campaign report; a report that cannot be drawn does not fail the merge."""
    from offline_iaas.report import write_report

    try:
        logger.info(f"merge: report: {write_report(run)}")
    except Exception as err:  # the output is complete and checked; the pictures are extra
        logger.warning(f"merge: warning: the report could not be written ({type(err).__name__}: "
                       f"{err}); run offline-iaas report {run.path} to retry")
