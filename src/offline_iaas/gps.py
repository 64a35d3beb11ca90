"""GPS times as text, to the microsecond: in the data layer's messages (a frame file's span, a
hole in the coverage, the analysable span's stretches and durations) and as the names of
``campaign.h5``'s datasets."""

from __future__ import annotations


def gps_text(gps: float) -> str:
    """A GPS time to the microsecond, without trailing zeros (``1262304001``,
    ``1262304000.125``)."""
    return f"{gps:.6f}".rstrip("0").rstrip(".")


def gps_range_text(gps_start: float, gps_end: float) -> str:
    """A half-open GPS range: ``[1262304000, 1262304064)``."""
    return f"[{gps_text(gps_start)}, {gps_text(gps_end)})"
