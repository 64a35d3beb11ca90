"""The trained demo networks in the e2e demo (real servers): physics you can see.

DeepClean removes the coupled 60 Hz line (cleaned/raw ASD <= 0.1 at the line) and leaves the
rest of the spectrum alone (within 2 % of 1 beyond a 2 Hz guard outside the band); BBHnet on the
cleaned strain finds every injection of network SNR >= 12 above the largest trigger of the
injection-free data; the campaign equals the reference.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from offline_iaas.demo import run_demo
from tests.helpers import processes_mentioning

pytestmark = pytest.mark.slow


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
    loud = [r for r in summary["bbhnet"]["injections"] if r["network_snr"] >= 12]
    assert len(loud) >= 10 and all(r["found"] for r in loud)
    assert any(line.startswith("BBHnet: ") and "SNR >= 12" in line for line in lines)
    assert any(line.startswith("DeepClean H1: cleaned/raw ASD") for line in lines)
