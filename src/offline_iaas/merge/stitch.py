"""What every merge node does with the parts: check them, stage the rows it needs into a
``CampaignWriter`` block by block (memory does not grow with the span), and report afterwards.
``merge/merge.py`` (the single merge) and ``merge/chunk_merge.py`` (a chunk merge) use it."""

from __future__ import annotations

import bisect
import json
import logging
from typing import Any

import numpy as np

from offline_iaas import hooks
from offline_iaas.atomic import write_text_atomic
from offline_iaas.client.part import (
    file_sha256,
    peak_rss_mb,
    read_piece_rows,
    read_sidecar,
)
from offline_iaas.config import CampaignConfig
from offline_iaas.data.segments import coalesce, subtract, without_bad_files
from offline_iaas.errors import DataError, RunError
from offline_iaas.jobspec import ClientSegment, Piece
from offline_iaas.logs import NO_PROGRESS, NullProgress
from offline_iaas.merge.output import CampaignWriter
from offline_iaas.merge.postprocess import physics_lines
from offline_iaas.repository.pipeline import ensemble_outputs
from offline_iaas.rundir import RunDir
from offline_iaas.stretches import (
    Stretch,
    part_offset,
    slides_formed,
    stretches_of,
    sub_pieces,
)

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
        expected = config.stretch_warmup_windows
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


def bad_files(run: RunDir, segments: list[ClientSegment], read: set[str] | None = None
              ) -> list[dict[str, Any]]:
    """The bad frame files left out as gaps (``data.on_bad_file = "gap"``), each once, in GPS
    order: make-dag's (``run.json``) and those the parts' sidecars record (``read``: of these
    clients only; None: all)."""
    found: dict[str, dict[str, Any]] = {}
    for entry in run.read_run_info().get("bad_frame_files", []):
        found.setdefault(str(entry["path"]), entry)
    for seg in segments:
        if read is None or seg.node in read:
            for entry in (read_sidecar(run, seg.node) or {}).get("bad_files", []):
                found.setdefault(str(entry["path"]), entry)
    return sorted(found.values(), key=lambda e: (e["gps_start"], e["path"]))


def campaign_stretches(config: CampaignConfig, segments: list[ClientSegment],
                       bad: list[dict[str, Any]]) -> list[Stretch]:
    """The stretches the output has: the planned ones (the job specs') less the spans of the
    bad frame files met while streaming (``segments.without_bad_files``)."""
    spans = [(float(e["gps_start"]), float(e["gps_end"])) for e in bad]
    return without_bad_files(config, stretches_of(segments), spans)


def analysed_windows(config: CampaignConfig, segments: list[ClientSegment],
                     stretches: list[Stretch]) -> dict[str, int]:
    """Windows of output each client's part holds data for (what the merge stages from it):
    its kept windows less those that the bad frame files' gaps leave out (``stretches``: the
    campaign's, ``campaign_stretches``, in time order)."""
    starts = [s.gps_start for s in stretches]

    def near(piece: Piece) -> list[Stretch]:  # the stretches within the piece's planned one
        first = max(0, bisect.bisect_right(starts, piece.stretch_gps_start) - 1)
        return stretches[first:bisect.bisect_left(starts, piece.stretch_gps_end)]

    return {seg.node: sum(sub.output_stop - sub.output_start for piece in seg.pieces
                          for sub in sub_pieces(config, piece, near(piece)))
            for seg in segments}


def analysed_seconds(config: CampaignConfig, stretches: list[Stretch]) -> float:
    """Seconds of data the output of ``stretches`` holds (kept windows times the stride)."""
    return sum(s.kept_windows(config) for s in stretches) * config.stride_seconds


def no_data_analysed(run: RunDir, config: CampaignConfig, segments: list[ClientSegment],
                     bad: list[dict[str, Any]]) -> DataError:
    """What a merge says when the bad frame files leave no data to analyse: it records so in
    ``output/campaign.json`` (``"complete": false``, zero analysed seconds, the files), so
    that nothing takes the run for done, and returns the one-line error naming that file."""
    planned = stretches_of(segments)
    summary_path = run.output[1]
    write_text_atomic(summary_path, json.dumps({
        "complete": False, "analysed_seconds": 0.0,
        "planned_seconds": analysed_seconds(config, planned),
        "config_hash": config.config_hash(), "mode": config.model.mode,
        "bad_frame_files": bad}, indent=2))
    spans = [(float(e["gps_start"]), float(e["gps_end"])) for e in bad]
    every = all(not subtract([(s.gps_start, s.gps_end)], coalesce(spans)) for s in planned)
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


def stage_parts(run: RunDir, config: CampaignConfig, segments: list[ClientSegment],
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
    stretches = stretches_of(segments) if stretches is None else stretches
    index = {s.gps_start: s.index for s in stretches}
    warmup = config.stretch_warmup_windows
    needed = []
    for seg in segments:
        for number, piece in enumerate(seg.pieces):
            for sub in sub_pieces(config, piece, stretches):
                stretch = index[sub.stretch_gps_start]
                kept = sub.output_start - part_offset(config, sub) - warmup
                lo, hi = writer.wanted(stretch, kept, sub.output_stop - sub.output_start)
                if hi > lo:
                    row = sub.output_start - piece.first_window + lo - kept
                    needed.append((seg, number, stretch, lo, row, row + hi - lo))
    progress.start(sum(b - a for *_, a, b in needed))
    for part, (seg, number, stretch, kept, first, end) in enumerate(needed, 1):
        progress.note(f"part {part}/{len(needed)} ({seg.node})")
        for start in range(first, end, BLOCK_ROWS):
            stop = min(start + BLOCK_ROWS, end)
            for output in ensemble_outputs(config):
                rows = read_piece_rows(run, seg.node, output, number, start, stop)
                formed = (slides_formed(config, kept + start - first, stop - start)
                          if output == "background" else True)
                if not np.array_equal(np.isfinite(rows), np.broadcast_to(formed, rows.shape)):
                    raise RunError(
                        f"{seg.node}: its part holds no finite {output} for some of rows "
                        f"{start}-{stop} of piece {number} (a window its client left in a gap "
                        "of a bad frame file, or a network that returned NaN)"
                        + (", or values where a slide is not formed (a repository of "
                           "another version)" if output == "background" else ""))
                writer.write(output, stretch, kept + start - first, rows)
            progress.advance(stop - start)
        hooks.reached(run, node, "mid-write")


def merge_record(run: RunDir, config: CampaignConfig, stretches: list[Stretch],
                 wall_seconds: float, cpu_seconds: float) -> dict[str, Any]:
    """What a merge node's summary (``output/campaign.json``) records about its own run and
    file, before the physics numbers: complete only over analysed data (``stretches``: the
    output's), and the run directory it was written in (its output names that directory's
    files: the index its chunks, the LAL cache its frames; see ``workflow/relocation.py``)."""
    analysed = analysed_seconds(config, stretches)
    return {"complete": analysed > 0, "analysed_seconds": analysed,
            "wall_seconds": wall_seconds, "cpu_seconds": cpu_seconds,
            "peak_rss_mb": peak_rss_mb(), "sha256": file_sha256(run.output[0]),
            "config_hash": config.config_hash(), "mode": config.model.mode,
            "run_dir": str(run.path)}


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
