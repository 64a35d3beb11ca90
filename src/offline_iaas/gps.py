"""GPS times as text, to the microsecond: in every message and log line that names one (a frame
file's span, a hole in the coverage, a piece, a stretch, a shard, a training span) and as the
names of ``campaign.h5``'s datasets. A window boundary (``k / inference_rate`` s) is written
exactly for rates up to 64 Hz, where a fixed number of decimals would round or pad it."""

from __future__ import annotations


def gps_text(gps: float) -> str:
    """A GPS time to the microsecond, without trailing zeros (``1262304001``,
    ``1262304000.125``)."""
    return f"{gps:.6f}".rstrip("0").rstrip(".")


def gps_range_text(gps_start: float, gps_end: float) -> str:
    """A half-open GPS range: ``[1262304000, 1262304064)``."""
    return f"[{gps_text(gps_start)}, {gps_text(gps_end)})"


def gps_span_text(gps_start: float, gps_end: float) -> str:
    """A span in running text, after "GPS ": ``1262304000-1262304064``."""
    return f"{gps_text(gps_start)}-{gps_text(gps_end)}"
