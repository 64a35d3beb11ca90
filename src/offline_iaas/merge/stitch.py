"""What every merge node does with the parts: check them, stage the rows it needs into a
``CampaignWriter`` block by block (memory does not grow with the span), and report afterwards.
``merge/merge.py`` (the single merge) and ``merge/shard_merge.py`` (a shard merge) use it."""

from __future__ import annotations

import bisect
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from offline_iaas import hooks, records
from offline_iaas.client.part import read_piece_rows
from offline_iaas.completeness import Hashes, part_problem, part_sidecar, set_aside
from offline_iaas.config import CampaignConfig
from offline_iaas.data.segments import gps_segments, without_bad_files
from offline_iaas.digests import file_sha256
from offline_iaas.errors import DataError, RunError
from offline_iaas.geometry import StreamGeometry
from offline_iaas.logs import NO_PROGRESS, NullProgress
from offline_iaas.merge.output import CampaignWriter
from offline_iaas.merge.postprocess import physics_lines
from offline_iaas.modes import output_kind
from offline_iaas.records import BadFile, ClientShare, PartRecord, Piece, RunInfo
from offline_iaas.resources import peak_rss_mb
from offline_iaas.rundir import RunDir
from offline_iaas.stretches import (
    Stretch,
    part_offset,
    slides_formed,
    stretches_of,
    sub_pieces,
)
from offline_iaas.summaries import CampaignSummary

logger = logging.getLogger(__name__)

BLOCK_ROWS = 1 << 12
"""Rows copied from a part at a time."""


def check_parts(
    run: RunDir, config: CampaignConfig, shares: list[ClientShare],
    read: set[str] | None = None,
) -> list[str]:
    """Every problem with the parts, one line each (empty when they tile every stretch).

    ``read``: the clients whose parts are checked (a shard merge's parents); None: all. Each is
    checked by ``completeness.part_problem`` with its checksum verified (the merge reads it
    next; a part that fails it is set aside, ``completeness.set_aside``, so that its client
    runs again); the tiling is checked on every client's job spec.
    """
    problems = []
    hashes = Hashes.of(config)
    for share in shares:
        if read is not None and share.node not in read:
            continue
        problem = part_problem(run, share.node, hashes, share, verify=True)
        if problem is not None:
            problems.append(f"{share.node}: {set_aside(run, problem)}")
    for stretch in stretches_of(shares):
        pieces = sorted(
            ((p.output_start, p.output_stop, s.node) for s in shares for p in s.pieces
             if p.stretch == stretch.index),
        )
        expected = config.stretch_warmup_windows
        for start, stop, node in pieces:
            if start != expected:
                kind = "gap" if start > expected else "overlap"
                problems.append(f"{node}: {kind} before window {start} of stretch {stretch.index}")
            expected = stop
        if expected != stretch.windows(config.geometry):
            problems.append(
                f"stretch {stretch.index} (GPS {stretch.gps_start}-{stretch.gps_end}): pieces end "
                f"at window {expected} of {stretch.windows(config.geometry)}"
            )
    return problems


def bad_files(run: RunDir, shares: list[ClientShare], read: set[str] | None = None,
              info: RunInfo | None = None,
              sidecars: Mapping[str, PartRecord | None] | None = None) -> list[BadFile]:
    """The bad frame files left out as gaps (``data.on_bad_file = "gap"``), each once, in GPS
    order: make-dag's (``run.json``) and those the parts' sidecars record (``read``: of these
    clients only; None: all). ``info`` and ``sidecars``: run.json and the sidecars, read
    already (a client's absent from ``sidecars``, or ``sidecars`` None: read here,
    ``completeness.part_sidecar``; RunError where it is unreadable)."""
    found = list((info if info is not None else records.read_run_info(run)).bad_frame_files)
    for share in shares:
        if read is None or share.node in read:
            sidecar = part_sidecar(run, share.node, sidecars)
            if isinstance(sidecar, RunError):
                raise sidecar
            found += sidecar.bad_files if sidecar is not None else ()
    return records.bad_files_of(found)


def campaign_stretches(config: CampaignConfig, shares: list[ClientShare],
                       bad: list[BadFile]) -> list[Stretch]:
    """The stretches the output has: the planned ones (the job specs') less the spans of the
    bad frame files met while streaming (``segments.without_bad_files``)."""
    return without_bad_files(config, stretches_of(shares), [e.span for e in bad])


def analysed_windows(geometry: StreamGeometry, shares: list[ClientShare],
                     stretches: list[Stretch]) -> dict[str, int]:
    """Windows of output each client's part holds data for (what the merge stages from it):
    its kept windows less those that the bad frame files' gaps leave out (``stretches``: the
    campaign's, ``campaign_stretches``, in time order)."""
    starts = [s.gps_start for s in stretches]

    def near(piece: Piece) -> list[Stretch]:  # the stretches within the piece's planned one
        first = max(0, bisect.bisect_right(starts, piece.stretch_gps_start) - 1)
        return stretches[first:bisect.bisect_left(starts, piece.stretch_gps_end)]

    return {share.node: sum(sub.output_stop - sub.output_start for piece in share.pieces
                          for sub in sub_pieces(geometry, piece, near(piece)))
            for share in shares}


def analysed_seconds(geometry: StreamGeometry, stretches: list[Stretch]) -> float:
    """Seconds of data the output of ``stretches`` holds (kept windows times the stride)."""
    return sum(s.kept_windows(geometry) for s in stretches) * geometry.stride_seconds


def no_data_analysed(run: RunDir, config: CampaignConfig, shares: list[ClientShare],
                     bad: list[BadFile]) -> DataError:
    """What a merge says when the bad frame files leave no data to analyse: it records so in
    ``output/campaign.json`` (``"complete": false``, zero analysed seconds, the files), so
    that nothing takes the run for done, and returns the one-line error naming that file."""
    planned = stretches_of(shares)
    summary_path = run.output[1]
    write_summary(summary_path, {
        "complete": False, "analysed_seconds": 0.0,
        "planned_seconds": analysed_seconds(config.geometry, planned),
        "wall_seconds": 0.0, "cpu_seconds": 0.0, "peak_rss_mb": peak_rss_mb(),
        "sha256": "", "bytes": None, "stream_hash": config.stream_hash(),
        "merge_hash": config.merge_hash(), "mode": config.model.mode,
        "run_dir": str(run.path), "bad_frame_files": bad})
    gaps = gps_segments(e.span for e in bad)
    every = not gps_segments(gps_segments((s.gps_start, s.gps_end) for s in planned) - gaps)
    if bad and every:
        why = (f"every frame file of the span was bad ({len(bad)} found bad, each a gap with "
               'data.on_bad_file = "gap")')
    elif bad:
        why = (f'the {len(bad)} bad frame files (gaps with data.on_bad_file = "gap") leave '
               "no stretch long enough to analyse")
    else:
        why = "the span has no stretch to analyse"
    return DataError(f"no data analysed: {why}; the list is in {summary_path} "
                     "(bad_frame_files)")


def clear_output(run: RunDir, problems: list[str], refusal: str) -> tuple[Path, Path]:
    """The campaign output's paths (``run.output``), its record removed so that nothing takes
    the run for done while the merge writes; RunError (``refusal``, then every one of the
    parts' or shards' ``problems``) where there are any, with nothing removed."""
    if problems:
        raise RunError(f"{refusal}: " + "; ".join(problems))
    out_path, status_path = run.output
    status_path.unlink(missing_ok=True)
    return out_path, status_path


def analysed_stretches(run: RunDir, config: CampaignConfig, shares: list[ClientShare]
                       ) -> tuple[list[BadFile], list[Stretch]]:
    """The bad frame files the clients met and the campaign's stretches less their gaps
    (``campaign_stretches``), for the single merge and the index; where no stretch is left,
    the DataError of ``no_data_analysed`` (recorded in ``output/campaign.json``)."""
    bad = bad_files(run, shares)
    stretches = campaign_stretches(config, shares, bad)
    if not stretches:
        raise no_data_analysed(run, config, shares, bad)
    return bad, stretches


def stage_parts(run: RunDir, config: CampaignConfig, shares: list[ClientShare],
                writer: CampaignWriter, node: str, progress: NullProgress = NO_PROGRESS,
                stretches: list[Stretch] | None = None) -> None:
    """Copy the kept rows of the parts that ``writer`` stages into it, block by block
    (``node``: the merge node doing it, for the test hooks; ``stretches``: the writer's,
    ``campaign_stretches``, by default the planned ones).

    Raises
    ------
    RunError
        A part without finite values where the output needs some (a window its client left
        in a gap, or a network that returned NaN), or with time slides not NaN exactly where
        a slide is not formed (``stretches.slides_formed``).
    """
    stretches = stretches_of(shares) if stretches is None else stretches
    index = {s.gps_start: s.index for s in stretches}
    warmup = config.stretch_warmup_windows
    needed = []
    for share in shares:
        for number, piece in enumerate(share.pieces):
            for sub in sub_pieces(config.geometry, piece, stretches):
                stretch = index[sub.stretch_gps_start]
                kept = sub.output_start - part_offset(config.geometry, sub) - warmup
                lo, hi = writer.wanted(stretch, kept, sub.output_stop - sub.output_start)
                if hi > lo:
                    row = sub.output_start - piece.first_window + lo - kept
                    needed.append((share, number, stretch, lo, row, row + hi - lo))
    progress.start(sum(b - a for *_, a, b in needed))
    for part, (share, number, stretch, kept, first, end) in enumerate(needed, 1):
        progress.note(f"part {part}/{len(needed)} ({share.node})")
        for start in range(first, end, BLOCK_ROWS):
            stop = min(start + BLOCK_ROWS, end)
            for output in config.outputs.names:
                rows = read_piece_rows(run, share.node, output, number, start, stop)
                formed = (slides_formed(config.geometry, kept + start - first, stop - start)
                          if output_kind(output) == "background" else True)
                if not np.array_equal(np.isfinite(rows), np.broadcast_to(formed, rows.shape)):
                    raise RunError(
                        f"{share.node}: its part holds no finite {output} for some of rows "
                        f"{start}-{stop} of piece {number} (a window its client left in a gap "
                        "of a bad frame file, or a network that returned NaN)"
                        + (", or values where a slide is not formed (a repository of "
                           "another version)" if output_kind(output) == "background" else ""))
                writer.write(output, stretch, kept + start - first, rows)
            progress.advance(stop - start)
        hooks.reached(run, node, "mid-write")


def merge_record(run: RunDir, config: CampaignConfig, stretches: list[Stretch],
                 wall_seconds: float, cpu_seconds: float) -> dict[str, Any]:
    """What a merge node's summary (``output/campaign.json``, a ``summaries.CampaignSummary``)
    records about its own run and file, before the physics numbers: complete only over
    analysed data (``stretches``: the output's), and the run directory it was written in (its
    output names that directory's files: the index its shards, the LAL cache its frames; see
    ``completeness.written_elsewhere``)."""
    out_path = run.output[0]
    analysed = analysed_seconds(config.geometry, stretches)
    return {"complete": analysed > 0, "analysed_seconds": analysed,
            "wall_seconds": wall_seconds, "cpu_seconds": cpu_seconds,
            "peak_rss_mb": peak_rss_mb(), "sha256": file_sha256(out_path),
            "bytes": out_path.stat().st_size, "stream_hash": config.stream_hash(),
            "merge_hash": config.merge_hash(), "mode": config.model.mode,
            "run_dir": str(run.path)}


def write_summary(path: Path, fields: dict[str, Any]) -> CampaignSummary:
    """Write the merge's summary (``merge_record``'s fields, the index's, the physics
    sections) as a ``summaries.CampaignSummary``; return it."""
    summary = records.build(CampaignSummary, fields)
    records.write(summary, path)
    return summary


def log_summary(summary: CampaignSummary, run: RunDir) -> None:
    """The merge's physics lines in the log."""
    for line in physics_lines(summary.physics):
        logger.info(f"merge: {line}")
    if any(run.output_frames.rglob("*.gwf")):
        logger.info(f"merge: GWF frames in {run.output_frames}")


def report_quietly(run: RunDir) -> None:
    """Write the campaign report; a report that cannot be drawn does not fail the merge."""
    from offline_iaas.report import write_report

    try:
        logger.info(f"merge: report: {write_report(run)}")
    except Exception as err:  # the output is complete and checked; the pictures are extra
        logger.warning(f"merge: warning: the report could not be written ({type(err).__name__}: "
                       f"{err}); run offline-iaas report {run.path} to retry")
