"""GPS times as text (``gps.py``): what every message and ``campaign.h5``'s dataset names use."""

from __future__ import annotations

import pytest

from offline_iaas.gps import gps_range_text, gps_span_text, gps_text

GPS = 1262304000


def test_whole_seconds_have_no_decimals() -> None:
    assert gps_text(GPS) == "1262304000"
    assert gps_text(GPS + 1.0) == "1262304001"
    assert gps_range_text(GPS, GPS + 64) == "[1262304000, 1262304064)"
    assert gps_span_text(GPS, GPS + 64.5) == "1262304000-1262304064.5"


@pytest.mark.parametrize("inference_rate", [4, 16, 32, 64])
def test_every_window_boundary_reads_back_exactly(inference_rate: int) -> None:
    """A piece or stretch starts on a window boundary (k / rate s): its text names that time,
    where three decimals would round 1/32 s to 0.031."""
    for k in range(inference_rate):
        gps = GPS + k / inference_rate
        assert float(gps_text(gps)) == gps
    assert f"{GPS + 1 / 32:.3f}" != gps_text(GPS + 1 / 32) == "1262304000.03125"


def test_times_are_rounded_to_the_microsecond() -> None:
    assert gps_text(GPS + 0.1234564) == "1262304000.123456"
    assert gps_text(GPS + 0.9999996) == "1262304001"
