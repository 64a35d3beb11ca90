"""Science segments, frame coverage and the analysable part of a campaign's span.

The *analysable span* is ``[data.start, data.start + data.duration)`` intersected with

- the science segments of ``data.segments``, if set (text ``start end`` per line, or LIGO_LW
  XML: the intersection of the active segments of every flag in the file), and
- for every observatory of the channels read (``X`` of ``X1:...``; a file's observatory field
  may hold several letters), where its frame files cover every channel: the union of the GPS
  intervals of its files, or, where its channels are in several frame types, the
  intersection over its channels of the union of the files of the types holding each
  (``frame_types.coverage``).

Each resulting stretch then has its start rounded up and its end rounded down onto the
stride grid ``data.start + m * stride_seconds`` (``stride_seconds = stride_samples /
sample_rate``), so every stream starts and ends on a window boundary of the whole-span stream.
Stretches shorter than ``(stretch_warmup_windows + 1) * stride_seconds`` cannot give one
exact window and are dropped. Every second of the span is accounted for: it is either in a stretch
or in ``dropped`` with one of the reasons below (the first that applies, in this order)::

    outside science segments
    no data for <obs>
    shorter than warm-up + one stride (<X> s)
    rounding to the stride grid
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from igwn_segments import segment, segmentlist

from offline_iaas.bounded_read import read_text
from offline_iaas.config import CampaignConfig
from offline_iaas.config_sections import DataConfig
from offline_iaas.errors import DataError, not_a_regular_file
from offline_iaas.geometry import StreamGeometry
from offline_iaas.gps import gps_range_text
from offline_iaas.gps import gps_text as seconds_text
from offline_iaas.records import BadFile
from offline_iaas.stretches import Stretch

if TYPE_CHECKING:
    from gwpy.segments import SegmentList

GPS_TOLERANCE_SECONDS = 1e-6
"""Pieces shorter than this (float round-off) are ignored."""
REASON_OUTSIDE_SCIENCE = "outside science segments"
REASON_GRID = "rounding to the stride grid"
XML_SUFFIXES = (".xml", ".xml.gz")

Interval = tuple[float, float]


# ---- segment files ---------------------------------------------------------------------------


def _is_xml(path: Path) -> bool:
    if path.name.endswith(XML_SUFFIXES):
        return True
    try:
        with open(path, "rb") as f:
            head = f.read(64).lstrip()
    except OSError:
        return False
    return head.startswith(b"<?xml") or head.startswith(b"<LIGO_LW")


def read_segment_file(path: Path) -> SegmentList:
    """Science segments from a text or LIGO_LW XML file.

    Parameters
    ----------
    path
        Text: one segment per line, ``start end`` (GPS seconds, end exclusive) or the
        segwizard ``index start end duration``; blank lines and ``#`` comments are skipped.
        XML (``.xml``/``.xml.gz``, or contents starting with ``<?xml``): a LIGO_LW document
        read with gwpy's ``DataQualityDict`` reader; the result is the intersection of the
        *active* segments of every flag in it.

    Returns
    -------
    gwpy.segments.SegmentList
        Coalesced (sorted, non-overlapping).

    Raises
    ------
    DataError
        Naming the file (and the line, for text) if it is missing, malformed or empty.
    """
    from gwpy.segments import Segment, SegmentList

    path = Path(path)
    if (why := not_a_regular_file(path)) is not None:  # /dev/null "did not exist"
        raise DataError(f"segment file {path} {why}")
    if _is_xml(path):
        return _read_xml(path)
    try:
        text = read_text(path)
    except (OSError, ValueError) as err:  # TooLarge, UnicodeDecodeError
        raise DataError(f"cannot read segment file {path}: {err}") from None
    segments = SegmentList()
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        fields = line.split()
        if len(fields) not in (2, 4):
            raise DataError(
                f"segment file {path}, line {number}: expected 'start end' (or 'index start "
                f"end duration'), got {line!r}"
            )
        values = fields[1:3] if len(fields) == 4 else fields
        try:
            start, end = (float(v) for v in values)
        except ValueError:
            raise DataError(
                f"segment file {path}, line {number}: {line!r} is not numbers"
            ) from None
        if not (math.isfinite(start) and math.isfinite(end)) or end <= start:
            raise DataError(
                f"segment file {path}, line {number}: segment [{start}, {end}) is empty or "
                "not finite"
            )
        segments.append(Segment(start, end))
    if not segments:
        raise DataError(f"segment file {path} lists no segments")
    return segments.coalesce()


def _read_xml(path: Path) -> SegmentList:
    from gwpy.segments import DataQualityDict, SegmentList

    try:
        flags = DataQualityDict.read(str(path), format="ligolw")
    except Exception as err:  # any reader failure (XML syntax, missing tables, ...)
        message = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise DataError(f"cannot read LIGO_LW segment file {path}: {message}") from None
    if not flags:
        raise DataError(f"LIGO_LW segment file {path} holds no segment flags")
    active = None
    for flag in flags.values():
        segs = SegmentList(flag.active).coalesce()
        active = segs if active is None else (active & segs).coalesce()
    return active


# ---- GPS intervals (igwn-segments, with our round-off policy) --------------------------------


def gps_segments(intervals: Iterable[Interval]) -> segmentlist:
    """The union of ``[start, end)`` GPS intervals as a coalesced ``segmentlist``, less the
    float round-off of GPS arithmetic.

    Intervals no longer than ``GPS_TOLERANCE_SECONDS`` are dropped and gaps no longer than it
    closed; the set arithmetic itself (``&``, ``|``, ``-``) is igwn-segments', whose results
    are passed through here again. Ends stay floats (seconds); nothing is rounded.
    """
    segments = segmentlist(segment(float(a), float(b)) for a, b in intervals
                           if float(b) - float(a) > GPS_TOLERANCE_SECONDS).coalesce()
    if len(segments) < 2:
        return segments
    gaps = segmentlist([segments.extent()]) - segments
    return segments | segmentlist(g for g in gaps if g[1] <= g[0] + GPS_TOLERANCE_SECONDS)


# ---- the analysable span ---------------------------------------------------------------------


def short_reason(min_seconds: float) -> str:
    """The drop reason for stretches shorter than ``min_seconds``."""
    return f"shorter than warm-up + one stride ({seconds_text(min_seconds)} s)"


def no_data_reason(observatory: str) -> str:
    """The drop reason for time without frames of ``observatory``."""
    return f"no data for {observatory}"


@dataclass(frozen=True)
class AnalysableSpan:
    """What of a campaign's span can be analysed, and why the rest cannot.

    Attributes
    ----------
    stretches
        ``(gps_start, gps_end)`` of each analysable stretch, sorted, on the stride grid; each
        is one stream (a gap ends a stream).
    dropped
        ``(gps_start, gps_end, reason)`` of each part of the span not analysed, sorted.
    total_seconds
        Length of the configured span.
    bad_files
        The frame files left out as gaps (``data.on_bad_file = "gap"``).
    """

    stretches: list[tuple[float, float]]
    dropped: list[tuple[float, float, str]]
    total_seconds: float
    bad_files: list[BadFile] = field(default_factory=list)

    @property
    def analysable_seconds(self) -> float:
        """Seconds in the stretches."""
        return float(sum(b - a for a, b in self.stretches))

    @property
    def dropped_seconds(self) -> float:
        """Seconds of the span not analysed."""
        return float(sum(b - a for a, b, _ in self.dropped))

    def dropped_by_reason(self) -> dict[str, float]:
        """Dropped seconds per reason, in order of first appearance."""
        out: dict[str, float] = {}
        for a, b, reason in self.dropped:
            out[reason] = out.get(reason, 0.0) + (b - a)
        return out

    def summary_lines(self) -> list[str]:
        """Human-readable summary: total, analysable and dropped time (by reason)."""
        lines = [
            f"span: {seconds_text(self.total_seconds)} s; analysable: "
            f"{seconds_text(self.analysable_seconds)} s in {len(self.stretches)} stretch(es); "
            f"dropped: {seconds_text(self.dropped_seconds)} s"
        ]
        for reason, seconds in self.dropped_by_reason().items():
            lines.append(f"  dropped {seconds_text(seconds)} s: {reason}")
        for bad in self.bad_files:
            lines.append(f"  bad frame file left out as a gap (data.on_bad_file = \"gap\"): "
                         f"{bad.error}")
        for a, b in self.stretches:
            lines.append(f"  stretch {gps_range_text(a, b)} {seconds_text(b - a)} s")
        return lines


def compute_stretches(
    span: Interval,
    coverage: Mapping[str, Sequence[Interval]],
    science: Sequence[Interval] | None,
    grid_start: float,
    stride_seconds: float,
    min_seconds: float,
) -> AnalysableSpan:
    """The analysable stretches of ``span`` (pure; see the module docstring).

    Parameters
    ----------
    span
        ``(gps_start, gps_end)`` of the configured span.
    coverage
        Per observatory, the GPS intervals its frame files cover (every channel of it).
    science
        Science segments, or None for "all of the span".
    grid_start
        Origin of the stride grid (GPS seconds).
    stride_seconds
        Grid step (seconds).
    min_seconds
        Stretches shorter than this after rounding are dropped.
    """
    dropped: list[tuple[float, float, str]] = []
    available = gps_segments([span])
    if science is not None:
        inside = gps_segments(available & gps_segments(science))
        dropped += [(a, b, REASON_OUTSIDE_SCIENCE) for a, b in gps_segments(available - inside)]
        available = inside
    for observatory in sorted(coverage):
        inside = gps_segments(available & gps_segments(coverage[observatory]))
        reason = no_data_reason(observatory)
        dropped += [(a, b, reason) for a, b in gps_segments(available - inside)]
        available = inside
    stretches: list[tuple[float, float]] = []
    short = short_reason(min_seconds)
    for a, b in available:
        m0 = math.ceil((a - grid_start) / stride_seconds - 1e-9)
        m1 = math.floor((b - grid_start) / stride_seconds + 1e-9)
        ga, gb = grid_start + m0 * stride_seconds, grid_start + m1 * stride_seconds
        if m1 <= m0 or gb - ga < min_seconds - 1e-9:
            dropped.append((a, b, short))
            continue
        if ga - a > GPS_TOLERANCE_SECONDS:
            dropped.append((a, ga, REASON_GRID))
        if b - gb > GPS_TOLERANCE_SECONDS:
            dropped.append((gb, b, REASON_GRID))
        stretches.append((ga, gb))
    dropped.sort()
    return AnalysableSpan(stretches, dropped, float(span[1] - span[0]))


def observatory_of(channel: str) -> str:
    """The observatory letter of a channel (``H`` of ``H1:GDS-CALIB_STRAIN``)."""
    return channel[:1]


def observatories(channels: Iterable[str]) -> list[str]:
    """The observatory letters of ``channels`` (``H1:X`` -> ``H``), in order of appearance."""
    out: list[str] = []
    for observatory in map(observatory_of, channels):
        if observatory not in out:
            out.append(observatory)
    return out


def science_segments(data: DataConfig) -> list[Interval] | None:
    """``data.segments`` read as intervals, or None when the config has no segment file."""
    if data.segments is None:
        return None
    return [(float(s[0]), float(s[1])) for s in read_segment_file(data.segments)]


def min_stretch_seconds(geometry: StreamGeometry) -> float:
    """Shortest useful stretch: warm-up plus one stride (s)."""
    return (geometry.stretch_warmup_windows + 1) * geometry.stride_seconds


def without_bad_files(config: CampaignConfig, stretches: Sequence[Stretch],
                      bad: Sequence[Interval]) -> list[Stretch]:
    """The stretches left when the spans of bad frame files are gaps (``data.on_bad_file =
    "gap"``), numbered afresh in order.

    Each stretch less the bad spans is rounded inward onto the stride grid and its pieces
    shorter than warm-up plus one stride are dropped, by ``compute_stretches``: what
    ``preflight`` makes of the same frames with the bad files left out. Without bad spans the
    stretches come back as they are.
    """
    found: list[Stretch] = []
    holes = gps_segments(bad)
    for stretch in stretches:
        span = (stretch.gps_start, stretch.gps_end)
        left = compute_stretches(span, {"": gps_segments(gps_segments([span]) - holes)}, None,
                                 config.data.start, config.stride_seconds,
                                 min_stretch_seconds(config.geometry))
        for a, b in left.stretches:
            found.append(Stretch(len(found), a, b))
    return found
