"""DeepClean's published products: GWF files a datafind server can serve, their provenance,
their validity gate, segment lists and a LAL cache.

Per interferometer the cleaned strain is cut into files on a ``deepclean.frame_seconds`` grid,
named as the frame convention wants (``<O>-<IFO>_<TYPE>-<GPS>-<DUR>.gwf``, ``TYPE`` =
``deepclean.frame_type``), channel ``<strain>_<deepclean.channel_suffix>``. Each file is written
with LALFrame (``lalframe.FrameWrite``) and carries a frame history entry (``FrHistory``, name
``offline-iaas``) whose comment is the provenance as JSON after ``PROVENANCE_MARK``. LALFrame's
Python has no history reader, so ``merge/provenance.read_gwf_provenance`` finds the entry's
text in the file (FrHistory strings are stored uncompressed).

The gate judges each file on its own: the cleaned/raw ASD ratio (``physics.asd_ratio``,
``deepclean.asd_fftlength``) must stay at most ``1 + gate_tolerance`` outside the band (beyond the
guard) and fall below ``gate_line_ratio`` at the line. A file that fails, or is too short for two
FFTs, is **flagged**; with ``deepclean.gate = "replace"`` its channel holds the raw strain
instead. The valid and flagged spans are written per interferometer as segwizard text and as a
LIGO_LW XML ``DataQualityFlag`` (known = every file, active = the valid ones).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from offline_iaas.atomic import write_text_atomic
from offline_iaas.config import CampaignConfig
from offline_iaas.data.discovery import lal_cache_text
from offline_iaas.gps import gps_span_text
from offline_iaas.merge.provenance import PROVENANCE_MARK
from offline_iaas.physics import asd_ratio
from offline_iaas.science.deepclean.settings import (
    CANARY_SUFFIX,
    DeepCleanConfig,
    deepclean_settings,
    output_channel,
)

logger = logging.getLogger(__name__)

CACHE_NAME = "deepclean.lcf"
SEGMENTS_DIR = "segments"


def frame_type(deepclean: DeepCleanConfig, ifo: str) -> str:
    """The frame type of an interferometer's cleaned frames (``H1_HOFT_DC``)."""
    return f"{ifo}_{deepclean.frame_type}"


def frame_file_name(deepclean: DeepCleanConfig, ifo: str, gps_start: int, seconds: int) -> str:
    """``<O>-<IFO>_<TYPE>-<GPS>-<DUR>.gwf``."""
    return f"{ifo[0]}-{frame_type(deepclean, ifo)}-{gps_start}-{seconds}.gwf"


def frame_verdict(numbers: dict[str, float], tolerance: float, line_ratio: float) -> str | None:
    """Why a cleaned frame is flagged (None: valid), from its ``asd_ratio`` numbers."""
    if not all(np.isfinite([numbers["max_ratio_outside_band"], numbers["ratio_at_line"]])):
        return "the ASD ratio is not finite"
    if numbers["max_ratio_outside_band"] > 1 + tolerance:
        return (f"ASD raised {100 * (numbers['max_ratio_outside_band'] - 1):.1f} % outside the "
                f"band (allowed {100 * tolerance:g} %)")
    if numbers["ratio_at_line"] >= line_ratio:
        return (f"line at {numbers['line_hz']:.2f} Hz not lowered (ratio "
                f"{numbers['ratio_at_line']:.3f}, needs < {line_ratio:g})")
    return None


@dataclass
class _Pending:
    channel: str
    gps_start: float
    raw: list[np.ndarray] = field(default_factory=list)
    cleaned: list[np.ndarray] = field(default_factory=list)
    canary: list[np.ndarray] = field(default_factory=list)

    @property
    def samples(self) -> int:
        return sum(len(c) for c in self.cleaned)


class CleanedFrames:
    """Writes the cleaned strain as gated GWF files (see the module's docstring).

    Parameters
    ----------
    out_dir
        Where the files are written now (the merge writes a temporary directory).
    final_dir
        Where they will be (the LAL cache's paths).
    config
        The campaign.
    provenance
        Written into every file's frame history.
    """

    def __init__(self, out_dir: Path, final_dir: Path, config: CampaignConfig,
                 provenance: dict[str, Any]) -> None:
        self.out_dir, self.final_dir, self.config = out_dir, final_dir, config
        self.rate = config.data.sample_rate
        self.settings = deepclean_settings(config)
        self.seconds = self.settings.frame_seconds
        self.comment = PROVENANCE_MARK + json.dumps(provenance, sort_keys=True)
        self.pending: dict[str, _Pending] = {}
        self.files: list[tuple[str, Path, int, int]] = []
        self.spans: dict[str, dict[str, list[tuple[float, float]]]] = {}

    def add(self, ifo: str, strain: str, gps_start: float, raw: np.ndarray,
            cleaned: np.ndarray, canary: np.ndarray | None = None) -> None:
        """Append samples of ``ifo`` starting at ``gps_start``; a gap ends the file.

        ``canary`` (``deepclean.canary``): the canary's cleaned strain of the same samples,
        written beside the production channel (:data:`CANARY_SUFFIX`) and not gated.
        """
        channel = output_channel(self.settings, strain)
        while len(cleaned):
            pending = self.pending.get(ifo)
            if pending is not None and abs(
                    pending.gps_start + pending.samples / self.rate - gps_start) > 1e-6:
                self.flush(ifo)
            pending = self.pending.setdefault(ifo, _Pending(channel, gps_start))
            boundary = (np.floor(gps_start / self.seconds + 1e-9) + 1) * self.seconds
            take = min(len(cleaned), int(round((boundary - gps_start) * self.rate)))
            pending.raw.append(raw[:take])
            pending.cleaned.append(cleaned[:take])
            if canary is not None:
                pending.canary.append(canary[:take])
                canary = canary[take:]
            gps_start, raw, cleaned = gps_start + take / self.rate, raw[take:], cleaned[take:]
            if take and abs(gps_start - boundary) < 1e-6:
                self.flush(ifo)

    def flush(self, ifo: str) -> None:
        """Judge and write ``ifo``'s pending file."""
        pending = self.pending.pop(ifo, None)
        if pending is None or not pending.samples:
            return
        raw = np.concatenate(pending.raw)
        cleaned = np.concatenate(pending.cleaned)
        start, end = pending.gps_start, pending.gps_start + len(cleaned) / self.rate
        why = self._verdict(raw, cleaned)
        spans = self.spans.setdefault(ifo, {"valid": [], "flagged": []})
        spans["valid" if why is None else "flagged"].append((start, end))
        replace = self.settings.gate == "replace"
        if why is not None:
            logger.warning(f"merge: warning: {ifo} GPS {gps_span_text(start, end)} flagged: {why}"
                           + ("; the raw strain is written instead" if replace else ""))
        values = raw if why is not None and replace else cleaned
        first, last = int(np.floor(start)), int(np.ceil(end))
        name = frame_file_name(self.settings, ifo, first, last - first)
        path = self.out_dir / ifo / name
        path.parent.mkdir(parents=True, exist_ok=True)
        channels = {pending.channel: values}
        if pending.canary:
            channels[pending.channel + CANARY_SUFFIX] = np.concatenate(pending.canary)
        _write_gwf(path, channels, start, self.rate, self.comment)
        self.files.append((ifo, self.final_dir / ifo / name, first, last - first))

    def _verdict(self, raw: np.ndarray, cleaned: np.ndarray) -> str | None:
        d = self.settings
        if len(raw) < 2 * d.asd_fftlength * self.rate:
            return f"shorter than two {d.asd_fftlength:g} s FFTs: cannot be judged"
        numbers = asd_ratio(raw.astype(np.float64), cleaned.astype(np.float64), self.rate,
                            d.asd_fftlength, (d.band_low_hz, d.band_high_hz), d.guard_hz)
        return frame_verdict(numbers, d.gate_tolerance, d.gate_line_ratio)

    def finish(self) -> tuple[list[tuple[str, Path, int, int]],
                              dict[str, dict[str, list[tuple[float, float]]]]]:
        """Flush every file; return the files written (interferometer, final path, GPS start,
        seconds) and, per interferometer, their ``valid`` and ``flagged`` spans."""
        for ifo in list(self.pending):
            self.flush(ifo)
        return self.files, self.spans


def publish_frames(out_dir: Path, deepclean: DeepCleanConfig,
                   files: list[tuple[str, Path, int, int]],
                   spans: dict[str, dict[str, list[tuple[float, float]]]]) -> dict[str, Any]:
    """Write the LAL cache of ``files`` (by interferometer, then time) and the segment lists of
    ``spans`` into ``out_dir``; return the gate's numbers per interferometer."""
    out_dir.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out_dir / CACHE_NAME, lal_cache_text(
        (path.name[0], frame_type(deepclean, ifo), gps, seconds, path)
        for ifo, path, gps, seconds in sorted(files)))
    summary = {}
    for ifo, found in spans.items():
        _write_segments(out_dir / SEGMENTS_DIR, deepclean, ifo, found)
        summary[ifo] = {
            "valid_seconds": sum(b - a for a, b in found["valid"]),
            "flagged_seconds": sum(b - a for a, b in found["flagged"]),
            "files_flagged": len(found["flagged"]),
            "files": len(found["valid"]) + len(found["flagged"]),
        }
    return summary


def _write_gwf(path: Path, channels: dict[str, np.ndarray], gps_start: float, rate: float,
               comment: str) -> None:
    """One frame of REAL4 channels (``name → values``, equal lengths) with a history entry,
    through LALFrame."""
    import lal
    import lalframe

    epoch = lal.LIGOTimeGPS(gps_start)
    seconds = len(next(iter(channels.values()))) / rate
    frame = lalframe.FrameNew(epoch, seconds, "offline-iaas", 0, 0, 0)
    for channel, values in channels.items():
        series = lal.CreateREAL4TimeSeries(channel, epoch, 0.0, 1.0 / rate, lal.StrainUnit,
                                           len(values))
        series.data.data[:] = values.astype(np.float32)
        lalframe.FrameAddREAL4TimeSeriesProcData(frame, series)
    lalframe.FrameAddFrHistory(frame, "offline-iaas", comment)
    lalframe.FrameWrite(frame, str(path))


def _write_segments(directory: Path, deepclean: DeepCleanConfig, ifo: str,
                    spans: dict[str, list[tuple[float, float]]]) -> None:
    """``<IFO>_<TYPE>_VALID.txt``, ``..._FLAGGED.txt`` (segwizard) and ``<IFO>_<TYPE>.xml``."""
    from gwpy.segments import DataQualityFlag, Segment, SegmentList

    directory.mkdir(parents=True, exist_ok=True)
    stem = frame_type(deepclean, ifo)
    valid = SegmentList(Segment(a, b) for a, b in spans["valid"]).coalesce()
    flagged = SegmentList(Segment(a, b) for a, b in spans["flagged"]).coalesce()
    valid.write(str(directory / f"{stem}_VALID.txt"), format="segwizard")
    flagged.write(str(directory / f"{stem}_FLAGGED.txt"), format="segwizard")
    flag = DataQualityFlag(f"{ifo}:DEEPCLEAN-{deepclean.channel_suffix}_VALID:1",
                           known=(valid | flagged).coalesce(), active=valid)
    flag.write(str(directory / f"{stem}.xml"), format="ligolw", overwrite=True)
