"""DeepClean's sections of the campaign summary (``campaign.json``), as types: the cleaned/raw
ASD numbers per interferometer (and its canary's), and what the GWF gate flagged."""

from __future__ import annotations

from typing import Any

from offline_iaas.gps import gps_span_text
from offline_iaas.summary_physics import Numbers


class AsdNumbers(Numbers):
    """Cleaned/raw ASD ratio of one interferometer over its held-out data
    (``physics.asd_ratio``)."""

    fftlength: float
    guard_hz: float
    line_hz: float
    ratio_at_line: float
    max_ratio_in_band: float
    min_ratio_outside_band: float
    max_ratio_outside_band: float
    max_deviation_outside_band: float
    """Largest ``|ratio - 1|`` outside the band beyond ``guard_hz``."""
    max_deviation_at_band_edges: float
    """Largest ``|ratio - 1|`` outside the band within ``guard_hz`` of its edges (no guard: the
    bin next to each edge). A summary written before this meaning took every frequency
    outside the band."""
    held_out_gps: tuple[float, float]
    training_gps: tuple[float, float] | None = None
    """DeepClean's training span (None: the weights record none)."""


class GateNumbers(Numbers):
    """The cleaned-strain GWF files of one interferometer and what the gate flagged
    (``science/deepclean/frames.publish_frames``)."""

    valid_seconds: float
    flagged_seconds: float
    files_flagged: int
    files: int


CLEANING_SECTIONS = {
    "deepclean": dict[str, AsdNumbers],
    "deepclean_canary": dict[str, AsdNumbers],
    "deepclean_gate": dict[str, GateNumbers],
}
"""The sections of ``campaign.json`` that cleaning writes (``BuiltInParts.summary_sections``),
each per interferometer: the ASD numbers, the canary network's, the GWF gate's."""


def cleaning_lines(physics: Any) -> list[str]:
    """One line per interferometer of the summary's ``deepclean`` section (``physics``:
    ``summary_physics.physics_type`` of a mode with these sections)."""
    lines = []
    for ifo, numbers in (physics.deepclean or {}).items():
        start, end = numbers.held_out_gps
        training = numbers.training_gps
        data = (f"held-out GPS {gps_span_text(start, end)}, after training on GPS "
                f"{gps_span_text(training[0], training[1])}" if training else
                f"GPS {gps_span_text(start, end)}, training span unknown")
        lines.append(
            f"DeepClean {ifo}: cleaned/raw ASD {numbers.ratio_at_line:.3f} at the "
            f"{numbers.line_hz:.2f} Hz line, within "
            f"{100 * numbers.max_deviation_outside_band:.2f} % of 1 outside the band "
            f"(+- {numbers.guard_hz:g} Hz guard; {data})"
        )
    return lines
