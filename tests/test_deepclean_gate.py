"""DeepClean's validity gate recomputed from the GWF files it publishes (no server).

Constructed raw strain (white noise and a 60 Hz line) and a "cleaned" strain that, per
16 s file, removes the line, only lowers it, raises it, adds a 100 Hz line or raises the noise
3 %, go through ``CleanedFrames`` and ``publish_frames``. The files are read back with gwpy
and each file's verdict is recomputed by the documented definition (user guide, "The validity
gate"), with nothing of the project's: cleaned/raw ASD ratio of median Welch estimates
(``scipy.signal.welch``, Hann segments of ``deepclean.asd_fftlength`` overlapping by half,
as gwpy's ``TimeSeries.asd(fftlength, method="median")`` that ``physics.asd_ratio`` calls),
below ``1 + gate_tolerance`` at every frequency outside the band beyond ``guard_hz``, below
``gate_line_ratio`` at the band's strongest raw line; shorter than two FFTs: flagged. The
segment lists (segwizard and LIGO_LW, read back with gwpy) and the gate's numbers (as
``campaign.json`` reads them) must follow from those verdicts.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from gwpy.segments import DataQualityFlag, Segment, SegmentList
from gwpy.timeseries import TimeSeries
from scipy import signal

from offline_iaas.config import load_config
from offline_iaas.science.deepclean.frames import CleanedFrames, publish_frames
from offline_iaas.summary_physics import physics_type
from tests.helpers import SMALL_CAMPAIGN, WITNESSES

RATE = 256  # SMALL_CAMPAIGN's data.sample_rate
START = 1262304000
FRAME_SECONDS = 16
FFT_SECONDS = 2
BAND_HZ = (55.0, 65.0)  # deepclean's defaults
GUARD_HZ = 2.0
TOLERANCE = 0.05
LINE_RATIO = 0.5
STRAIN = {"H1": "H1:GDS-CALIB_STRAIN", "L1": "L1:GDS-CALIB_STRAIN"}
CHUNK = 10 * RATE  # fed in 10 s pieces: the files are cut on the 16 s grid by the writer
NOISE = 1e-20
LINE = 3e-19

# H1, one 16 s file each from START: (what the cleaning does, the verdict it is built to get)
H1_FILES = [
    ("removes the line", True),
    ("lowers the line to 0.7", False),  # not below gate_line_ratio 0.5
    ("removes the line, raises the noise 3 %", True),  # below 1.05 (a 1 % tolerance: not)
    ("removes the line, adds a 100 Hz line", False),
    ("lowers the line to 0.3", True),
    ("raises the line to 1.5", False),
]
GAP_START = START + 101  # after a 5 s gap: 11 s removing the line (valid), then, past the
GAP_END = START + 115    # grid at START + 112, 3 s, shorter than two FFTs (flagged)


def cleaning(what: str, noise: np.ndarray, line: np.ndarray, t: np.ndarray) -> np.ndarray:
    line_factor = {"lowers the line to 0.7": 0.7, "lowers the line to 0.3": 0.3,
                   "raises the line to 1.5": 1.5}.get(what, 0.0)
    noise_factor = 1.03 if "noise" in what else 1.0
    added = NOISE * np.sin(2 * np.pi * 100.0 * t) if "100 Hz" in what else 0.0
    return noise_factor * noise + line_factor * line + added


def inputs() -> dict[str, list[tuple[int, np.ndarray, np.ndarray]]]:
    """Per interferometer, contiguous runs ``(gps, raw, cleaned)`` (float32, as written)."""
    runs: dict[str, list[tuple[int, np.ndarray, np.ndarray]]] = {"H1": [], "L1": []}
    plans = {"H1": [(START, [w for w, _ in H1_FILES]),
                    (GAP_START, ["removes the line"] * 2)],
             "L1": [(START, ["removes the line"] * 4)]}
    for seed, (ifo, plan) in enumerate(plans.items()):
        rng = np.random.default_rng(seed + 11)
        for gps, whats in plan:
            n = (len(whats) * FRAME_SECONDS if gps == START else GAP_END - GAP_START) * RATE
            t = gps - START + np.arange(n) / RATE
            noise, line = NOISE * rng.normal(size=n), LINE * np.sin(2 * np.pi * 60.0 * t)
            cleaned = np.empty(n)
            for k in range(0, n, FRAME_SECONDS * RATE):
                part = slice(k, k + FRAME_SECONDS * RATE)
                cleaned[part] = cleaning(whats[k // (FRAME_SECONDS * RATE)], noise[part],
                                         line[part], t[part])
            runs[ifo].append((gps, (noise + line).astype(np.float32),
                              cleaned.astype(np.float32)))
    return runs


INPUTS = inputs()


def publish(root: Path, gate: str) -> tuple[Path, dict]:
    """The inputs through the gate into ``root/frames``; the numbers ``publish_frames``
    returns (``campaign.json``'s ``deepclean_gate``)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "campaign.toml").write_text(SMALL_CAMPAIGN)
    config = load_config(root / "campaign.toml", [
        'model.mode="deepclean"', f"data.witnesses={WITNESSES}",
        f"deepclean.frame_seconds={FRAME_SECONDS}", f"deepclean.asd_fftlength={FFT_SECONDS}",
        f"deepclean.gate_tolerance={TOLERANCE}", f"deepclean.gate_line_ratio={LINE_RATIO}",
        f'deepclean.gate="{gate}"'])
    assert config.data.sample_rate == RATE
    assert (config.mode_section.band_low_hz, config.mode_section.band_high_hz,
            config.mode_section.guard_hz) == (*BAND_HZ, GUARD_HZ)
    frames = root / "frames"
    writer = CleanedFrames(frames, frames, config, {"test": gate})
    for ifo, runs in INPUTS.items():
        for gps, raw, cleaned in runs:
            for k in range(0, len(raw), CHUNK):
                writer.add(ifo, STRAIN[ifo], gps + k / RATE, raw[k:k + CHUNK],
                           cleaned[k:k + CHUNK])
    files, spans = writer.finish()
    return frames, publish_frames(frames, config.mode_section, files, spans)


# ---- the oracle: numpy, scipy and gwpy only ---------------------------------------------------
def raw_of(ifo: str, start: float, end: float, which: int = 1) -> np.ndarray:
    """The raw (``which`` 2: cleaned) input of ``ifo`` over a GPS span."""
    for run in INPUTS[ifo]:
        gps, raw = run[0], run[1]
        if gps <= start and end <= gps + len(raw) / RATE:
            return run[which][round((start - gps) * RATE):round((end - gps) * RATE)]
    raise AssertionError(f"{ifo} {start}-{end} is no span of the input")


def median_asd(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    n = FFT_SECONDS * RATE
    freqs, psd = signal.welch(x.astype(np.float64), fs=RATE, window="hann", nperseg=n,
                              noverlap=n // 2, average="median")
    return freqs, np.sqrt(psd)


def oracle_verdict(raw: np.ndarray, cleaned: np.ndarray, tolerance: float,
                   line_ratio: float) -> tuple[bool, dict[str, float]]:
    """(valid, the numbers it was judged on) of one file, by the documented definition."""
    if len(raw) < 2 * FFT_SECONDS * RATE:
        return False, {}
    freqs, raw_asd = median_asd(raw)
    ratio = median_asd(cleaned)[1] / raw_asd
    inside = (freqs >= BAND_HZ[0]) & (freqs <= BAND_HZ[1])
    outside = (freqs > 0) & ((freqs < BAND_HZ[0] - GUARD_HZ) | (freqs > BAND_HZ[1] + GUARD_HZ))
    line = np.flatnonzero(inside)[np.argmax(raw_asd[inside])]
    numbers = {"line_hz": freqs[line], "at_line": ratio[line],
               "outside": ratio[outside].max()}
    valid = bool(np.isfinite([numbers["at_line"], numbers["outside"]]).all()
                 and numbers["outside"] < 1 + tolerance and numbers["at_line"] < line_ratio)
    return valid, numbers


def published_files(frames: Path, ifo: str) -> list[TimeSeries]:
    return [TimeSeries.read(str(p), f"{STRAIN[ifo]}_DC", format="gwf")
            for p in sorted((frames / ifo).glob("*.gwf"))]


def oracle_verdicts(frames: Path, tolerance: float = TOLERANCE, line_ratio: float = LINE_RATIO
                    ) -> dict[str, list[tuple[Segment, bool, dict[str, float]]]]:
    """Per interferometer, each published file's span and recomputed verdict."""
    found = {}
    for ifo in INPUTS:
        found[ifo] = []
        for series in published_files(frames, ifo):
            span = Segment(float(series.span[0]), float(series.span[1]))
            valid, numbers = oracle_verdict(raw_of(ifo, *span), series.value, tolerance,
                                            line_ratio)
            found[ifo].append((span, valid, numbers))
    return found


def gate_disagreements(frames: Path, summary: dict, verdicts: dict) -> list[str]:
    """Where the written segment lists and numbers differ from ``verdicts``."""
    problems = []
    gate = physics_type("deepclean").model_validate_json(
        json.dumps({"deepclean_gate": summary})).deepclean_gate  # as campaign.json reads it
    for ifo, files in verdicts.items():
        valid = SegmentList(s for s, ok, _ in files if ok).coalesce()
        flagged = SegmentList(s for s, ok, _ in files if not ok).coalesce()
        segments = frames / "segments"
        read = {kind: SegmentList.read(str(segments / f"{ifo}_HOFT_DC_{kind}.txt"),
                                       format="segwizard") for kind in ("VALID", "FLAGGED")}
        flag = DataQualityFlag.read(str(segments / f"{ifo}_HOFT_DC.xml"),
                                    f"{ifo}:DEEPCLEAN-DC_VALID:1", format="ligolw")
        expected = {"VALID": valid, "FLAGGED": flagged, "xml active": valid,
                    "xml known": (valid | flagged).coalesce()}
        written = {**read, "xml active": flag.active, "xml known": flag.known}
        problems += [f"{ifo} {kind}: written {written[kind]}, recomputed {expected[kind]}"
                     for kind in expected if written[kind] != expected[kind]]
        numbers = {"valid_seconds": abs(valid), "flagged_seconds": abs(flagged),
                   "files_flagged": sum(not ok for _, ok, _ in files), "files": len(files)}
        got = gate[ifo].model_dump()
        problems += [f"{ifo} {key}: written {got[key]}, recomputed {value}"
                     for key, value in numbers.items() if got[key] != pytest.approx(value)]
    return problems


# ---- the tests --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def flagged_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    return publish(tmp_path_factory.mktemp("gate") / "flag", "flag")


def test_each_gwf_files_gate_verdict_follows_from_its_own_asd_ratio(flagged_run) -> None:
    frames, summary = flagged_run
    verdicts = oracle_verdicts(frames)
    # the files cover the input, each on its own span, and were built to get both verdicts
    for ifo, files in verdicts.items():
        covered = SegmentList(s for s, _, _ in files)
        assert abs(covered) == sum(len(raw) for _, raw, _ in INPUTS[ifo]) / RATE
        assert covered.coalesce() == SegmentList(
            Segment(gps, gps + len(raw) / RATE) for gps, raw, _ in INPUTS[ifo])
    h1 = verdicts["H1"]
    assert [ok for _, ok, _ in h1] == [ok for _, ok in H1_FILES] + [True, False]
    assert [abs(s) for s, _, _ in h1[-2:]] == [11, 3]  # after the gap; the last too short
    assert all(ok for _, ok, _ in verdicts["L1"]) and len(verdicts["L1"]) == 4
    for _, _, numbers in h1[:-1]:
        assert numbers["line_hz"] == 60.0
    at_line = [n["at_line"] for _, _, n in h1[:6]]
    outside = [n["outside"] for _, _, n in h1[:6]]
    assert at_line == pytest.approx([0, 0.7, 0, 0, 0.3, 1.5], abs=0.01)
    assert outside[2] == pytest.approx(1.03, abs=1e-4) and outside[3] > 2
    assert max(outside[:2] + outside[4:]) == pytest.approx(1, abs=1e-4)
    # the segment lists and numbers written are the recomputed verdicts'
    assert gate_disagreements(frames, summary, verdicts) == []
    assert (summary["H1"]["files_flagged"], summary["H1"]["files"]) == (4, 8)
    assert summary["H1"]["valid_seconds"] == pytest.approx(59)
    assert summary["L1"]["flagged_seconds"] == 0


@pytest.mark.parametrize(("tolerance", "line_ratio", "flips"), [
    (0.01, LINE_RATIO, 2),   # the 3 % noise rise is then too much
    (TOLERANCE, 1.0, 1),     # the line lowered to 0.7 is then lowered enough
])
def test_a_stricter_or_looser_oracle_disagrees_with_the_written_gate(
        flagged_run, tolerance: float, line_ratio: float, flips: int) -> None:
    frames, summary = flagged_run
    verdicts = oracle_verdicts(frames, tolerance, line_ratio)
    truth = oracle_verdicts(frames)
    changed = [i for i, (a, b) in enumerate(zip(verdicts["H1"], truth["H1"], strict=True))
               if a[1] != b[1]]
    assert changed == [flips]
    problems = gate_disagreements(frames, summary, verdicts)
    assert any(p.startswith("H1 VALID") for p in problems)
    assert any(p.startswith("H1 files_flagged") for p in problems)


def test_replace_publishes_the_raw_strain_in_exactly_the_flagged_files(
        flagged_run, tmp_path: Path) -> None:
    frames, summary = publish(tmp_path / "replace", "replace")
    flag_frames, flag_summary = flagged_run
    assert summary == flag_summary
    verdicts = oracle_verdicts(flag_frames)  # judged on the cleaned strain of the flag run
    assert gate_disagreements(frames, summary, verdicts) == []
    for ifo in INPUTS:
        for series, kept, (span, ok, _) in zip(published_files(frames, ifo),
                                               published_files(flag_frames, ifo),
                                               verdicts[ifo], strict=True):
            raw, cleaned = raw_of(ifo, *span), raw_of(ifo, *span, which=2)
            np.testing.assert_array_equal(kept.value, cleaned)  # the flag run: the cleaned
            assert series.span == span and len(series) == len(raw)
            expected = cleaned if ok else raw
            np.testing.assert_array_equal(series.value, expected)
            # controls: the raw strain differs from the cleaned, and one sample late is not it
            assert not np.array_equal(raw, cleaned)
            assert not np.array_equal(series.value[1:], expected[:-1])
    assert sum(not ok for files in verdicts.values() for _, ok, _ in files) == 4
