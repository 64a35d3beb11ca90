"""The trained demo networks in the e2e demo (real servers): physics you can see.

DeepClean removes the coupled 60 Hz line (cleaned/raw ASD <= 0.1 at the line) and leaves the
rest of the spectrum alone (within 2 % of 1 beyond a 2 Hz guard outside the band); BBHnet on the
cleaned strain finds at least 80 % of the injections of network SNR >= 12 at the demo's IFAR
threshold; VT counts the held-out injections, with the population beside it, and the drawn
volume does not bound it; the campaign equals the reference.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from offline_iaas.demo import run_demo
from tests.helpers import processes_mentioning

pytestmark = pytest.mark.slow

LOUD_FOUND_FRACTION_MIN = 0.8
"""The held-out check (tests/test_training.py) missed up to 2 of 40 loud injections over 5 seeds
x 2 thread counts (docs/networks.md); the demo (96 injections drawn to z 3) has 11 in its
analysed time, so 2 misses must not fail it."""


def test_e2e_demo_cleans_the_line_and_finds_loud_injections(
    tmp_path: Path, log_lines: list[str]
) -> None:
    lines = log_lines
    try:
        worst = run_demo(tmp_path / "demo", mode="e2e")
    finally:
        assert processes_mentioning(str(tmp_path)) == []
    assert worst <= 1e-5
    summary = json.loads((tmp_path / "demo" / "run" / "output" / "campaign.json").read_text())
    for ifo in ("H1", "L1"):
        numbers = summary["deepclean"][ifo]
        assert numbers["line_hz"] == pytest.approx(60.0, abs=0.5)
        assert numbers["ratio_at_line"] <= 0.1
        assert numbers["max_deviation_outside_band"] <= 0.02
    for ifo in ("H1", "L1"):  # the trained DeepClean passes the gate in every GWF file
        gate = summary["deepclean_gate"][ifo]
        assert gate["files"] >= 30 and gate["files_flagged"] == 0, gate
    bbhnet = summary["bbhnet"]
    # every injection in the analysed time, the training span's too: a test of detection
    loud = [r for r in bbhnet["injections"] if r["network_snr"] >= 12]
    found = sum(r["found"] for r in loud)
    assert len(loud) >= 8 and found >= LOUD_FOUND_FRACTION_MIN * len(loud), loud
    sensitivity = bbhnet["sensitivity"]
    counts = sensitivity["counts"]
    assert counts["in_training"] > 0 and counts["held_out"] == sensitivity["injections"] > 0
    assert sensitivity["population"]["redshift_max"] == 3.0
    assert sensitivity["population"]["drawn"] > sensitivity["population"]["injected"]
    reach = sensitivity["at_reach"]
    low, high = reach["vt_interval_gpc3_years"]
    assert 0 < low < reach["vt_gpc3_years"] < high
    assert sensitivity["at"]["1 year"]["vt_gpc3_years"] is None  # not measurable: null
    # z_max 3 lies beyond the horizon (z 2.79): nothing is found near it. (The SNR cut's
    # check is not asserted: the quietest found injection, SNR 5.3 at 34094bb against a bound
    # of 5.0, depends on the training, which differs between CPUs.)
    assert bbhnet["volume_bound"]["found_near_edge"] == 0
    assert any(line.startswith("BBHnet: ") and "SNR >= 12" in line for line in lines)
    assert any(line.startswith("BBHnet: injections: ") and "held out" in line for line in lines)
    assert any(line.startswith("BBHnet: population: IMRPhenomD") for line in lines)
    assert any(line.startswith("DeepClean H1: cleaned/raw ASD") for line in lines)
