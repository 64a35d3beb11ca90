"""Science segments, coverage and the analysable span (offline_iaas.data.segments)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from gwpy.segments import DataQualityDict, DataQualityFlag, Segment, SegmentList

from offline_iaas.config import CampaignConfig, config_from_dict
from offline_iaas.data.discovery import find_frames
from offline_iaas.data.preflight import preflight
from offline_iaas.data.segments import (
    GPS_TOLERANCE_SECONDS,
    REASON_GRID,
    REASON_OUTSIDE_SCIENCE,
    AnalysableSpan,
    compute_stretches,
    gps_segments,
    no_data_reason,
    read_segment_file,
    short_reason,
    without_bad_files,
)
from offline_iaas.data.synth import write_synthetic_dataset
from offline_iaas.errors import DataError

S = 1262304000


def conserved(result: AnalysableSpan) -> None:
    """Every second of the span is either analysable or dropped, never both."""
    assert result.analysable_seconds + result.dropped_seconds == pytest.approx(
        result.total_seconds, abs=1e-6
    )
    pieces = sorted([(a, b) for a, b in result.stretches] + [(a, b) for a, b, _ in result.dropped])
    for (_, b), (a, _) in zip(pieces, pieces[1:], strict=False):
        assert a == pytest.approx(b, abs=1e-6)


# ---- interval arithmetic -------------------------------------------------------------------


def test_gps_segments_are_the_union_of_half_open_intervals() -> None:
    assert gps_segments([(5, 6), (0, 2), (2, 3), (1, 1.5), (7, 7)]) == [(0, 3), (5, 6)]
    both = gps_segments([(0, 10), (20, 30)])
    assert gps_segments(both & gps_segments([(5, 25)])) == [(5, 10), (20, 25)]
    assert gps_segments(both - gps_segments([(5, 25), (28, 40)])) == [(0, 5), (25, 28)]
    assert gps_segments(both - gps_segments([])) == both
    assert gps_segments(both & gps_segments([])) == []
    # half-open: intervals that only touch share nothing, and subtracting one leaves the other
    assert gps_segments(gps_segments([(0, 10)]) & gps_segments([(10, 20)])) == []
    assert gps_segments(gps_segments([(0, 10)]) - gps_segments([(10, 20)])) == [(0, 10)]
    assert all(isinstance(x, float) for s in gps_segments([(0, 10)]) for x in s)


def test_gps_round_off_is_closed_and_slivers_dropped_at_one_microsecond() -> None:
    tol, at = GPS_TOLERANCE_SECONDS, float(S)
    # a gap up to the tolerance is round-off (closed); a longer one is a gap
    assert gps_segments([(at, at + 4), (at + 4 + tol / 2, at + 8)]) == [(at, at + 8)]
    assert gps_segments([(at, at + 4), (at + 4 + 4 * tol, at + 8)]) == [
        (at, at + 4), (at + 4 + 4 * tol, at + 8)]
    # a piece up to the tolerance long is dropped, a longer one kept
    assert gps_segments([(at, at + tol / 2)]) == []
    assert gps_segments([(at, at + 4 * tol)]) == [(at, at + 4 * tol)]
    # what a subtraction leaves of a stretch whose end is a float step off a file's end
    stretch = gps_segments([(at, at + 16.0000001)])
    assert gps_segments(stretch - gps_segments([(at + 16, at + 32)])) == [(at, at + 16)]


# ---- compute_stretches (pure) --------------------------------------------------------------


def test_coverage_holes_split_the_span() -> None:
    result = compute_stretches(
        (0, 100), {"H": [(0, 40), (50, 100)], "L": [(0, 100)]}, None, 0, 0.25, 1.0
    )
    assert result.stretches == [(0, 40), (50, 100)]
    assert result.dropped == [(40, 50, no_data_reason("H"))]
    assert result.analysable_seconds == 90 and result.dropped_seconds == 10
    conserved(result)


def test_stretches_are_rounded_onto_the_stride_grid() -> None:
    result = compute_stretches((0, 100), {"H": [(0.1, 40.3)]}, None, 0, 0.25, 1.0)
    assert result.stretches == [(0.25, 40.25)]
    assert result.dropped == [
        (0, 0.1, "no data for H"),
        (0.1, 0.25, REASON_GRID),
        (40.25, 40.3, REASON_GRID),
        (40.3, 100, "no data for H"),
    ]
    conserved(result)
    # the grid starts at the span start, not at GPS 0
    shifted = compute_stretches((0.1, 10.1), {"H": [(0, 20)]}, None, 0.1, 0.25, 1.0)
    assert shifted.stretches == [(0.1, 10.1)] and shifted.dropped == []


def test_short_stretches_are_dropped_with_the_reason() -> None:
    cover = {"H": [(0, 10), (10.5, 11.4), (12, 20)], "L": [(0, 20)]}
    result = compute_stretches((0, 20), cover, None, 0, 0.25, 1.0)
    assert result.stretches == [(0, 10), (12, 20)]
    assert (10.5, 11.4, short_reason(1.0)) in result.dropped
    assert short_reason(1.0) == "shorter than warm-up + one stride (1 s)"
    by_reason = result.dropped_by_reason()
    assert by_reason[short_reason(1.0)] == pytest.approx(0.9)
    assert by_reason["no data for H"] == pytest.approx(1.1)
    conserved(result)
    # exactly the minimum is kept
    assert compute_stretches((0, 1), {"H": [(0, 1)]}, None, 0, 0.25, 1.0).stretches == [(0, 1)]


def test_bad_files_cut_stretches_into_numbered_pieces(small_config_file: Path) -> None:
    from offline_iaas.config import load_config
    from offline_iaas.stretches import Stretch

    config = load_config(small_config_file)  # 1 s windows at 4 Hz from S
    planned = [Stretch(0, S, S + 40.0), Stretch(1, S + 48.0, S + 64.0)]
    # two bad files in the first stretch, one in the second: five pieces, numbered in order
    cut = without_bad_files(config, planned, [(S + 10, S + 16), (S + 20, S + 26),
                                              (S + 52, S + 56)])
    assert [(s.index, s.gps_start - S, s.gps_end - S) for s in cut] == [
        (0, 0, 10), (1, 16, 20), (2, 26, 40), (3, 48, 52), (4, 56, 64)]
    assert without_bad_files(config, planned, []) == planned


def test_science_segments_come_first() -> None:
    result = compute_stretches(
        (0, 100),
        {"H": [(0, 30), (35, 100)], "L": [(0, 100)]},
        [(10, 20), (25, 60), (90, 200)],
        0,
        0.25,
        1.0,
    )
    assert result.stretches == [(10, 20), (25, 30), (35, 60), (90, 100)]
    assert result.dropped == [
        (0, 10, REASON_OUTSIDE_SCIENCE),
        (20, 25, REASON_OUTSIDE_SCIENCE),
        (30, 35, "no data for H"),
        (60, 90, REASON_OUTSIDE_SCIENCE),
    ]
    conserved(result)
    lines = result.summary_lines()
    assert lines[0] == "span: 100 s; analysable: 50 s in 4 stretch(es); dropped: 50 s"
    assert "  dropped 45 s: outside science segments" in lines
    assert "  dropped 5 s: no data for H" in lines


def test_nothing_analysable() -> None:
    result = compute_stretches((0, 10), {"H": [(0, 10)]}, [], 0, 0.25, 1.0)
    assert result.stretches == [] and result.dropped == [(0, 10, REASON_OUTSIDE_SCIENCE)]


# ---- segment files -------------------------------------------------------------------------


def test_text_segment_files(tmp_path: Path) -> None:
    path = tmp_path / "science.txt"
    path.write_text("# science\n\n100 200\n150 250.5  # overlaps\n 300 400\n")
    assert read_segment_file(path) == SegmentList([Segment(100, 250.5), Segment(300, 400)])
    segwizard = tmp_path / "segwizard.txt"
    segwizard.write_text("# seg start stop duration\n0 100 200 100\n1 300 400 100\n")
    assert read_segment_file(segwizard) == SegmentList([Segment(100, 200), Segment(300, 400)])


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("100 200\n300\n", r"bad\.txt, line 2: expected 'start end'"),
        ("100 200\n\n# c\n300 x\n", r"bad\.txt, line 4: '300 x' is not numbers"),
        ("200 100\n", r"bad\.txt, line 1: segment \[200.0, 100.0\) is empty"),
        ("# nothing\n", r"bad\.txt lists no segments"),
    ],
)
def test_bad_text_segment_files_name_the_line(tmp_path: Path, text: str, match: str) -> None:
    path = tmp_path / "bad.txt"
    path.write_text(text)
    with pytest.raises(DataError, match=match):
        read_segment_file(path)


def test_ligolw_segment_files(tmp_path: Path) -> None:
    flag = DataQualityFlag(
        "H1:DMT-ANALYSIS_READY:1", known=[(0, 1000)], active=[(100, 200), (300.5, 400)]
    )
    one = tmp_path / "one.xml"
    flag.write(str(one), format="ligolw")
    assert read_segment_file(one) == SegmentList([Segment(100, 200), Segment(300.5, 400)])
    other = DataQualityFlag("L1:DMT-ANALYSIS_READY:1", known=[(0, 1000)], active=[(150, 350)])
    both = tmp_path / "both.xml.gz"
    DataQualityDict({flag.name: flag, other.name: other}).write(str(both), format="ligolw")
    # several flags: the time when all are active
    assert read_segment_file(both) == SegmentList([Segment(150, 200), Segment(300.5, 350)])
    bad = tmp_path / "bad.xml"
    bad.write_text("<?xml version='1.0'?><LIGO_LW></LIGO_LW")
    with pytest.raises(DataError, match=r"cannot read LIGO_LW segment file .*bad\.xml"):
        read_segment_file(bad)
    with pytest.raises(DataError, match="segment file .*none.txt does not exist"):
        read_segment_file(tmp_path / "none.txt")
    (tmp_path / "folder.txt").mkdir()
    with pytest.raises(DataError,
                       match="segment file .*folder.txt is a directory, not a regular file"):
        read_segment_file(tmp_path / "folder.txt")


# ---- a dataset with gaps and science segments ----------------------------------------------


def make_config(tmp: Path, **data: Any) -> CampaignConfig:
    """64 s, 16 files x 4 s per interferometer at 256 Hz; model 128 Hz, stride 0.25 s,
    kernel 2 s: 7 warm-up windows, so stretches under 2 s are dropped."""
    raw = {
        "data": {
            "frames": "frames",
            "channels": ["H1:GDS-CALIB_STRAIN", "L1:GDS-CALIB_STRAIN"],
            "start": S,
            "duration": 64,
            "sample_rate": 128,
            **data,
        },
        "model": {"repository": "repo", "kernel_seconds": 2.0, "inference_rate": 4},
        "synth": {"file_duration": 4, "frame_sample_rate": 256, "injections": 0, "seed": 9},
    }
    return config_from_dict(raw, tmp / "campaign.toml")


@pytest.fixture(scope="module")
def gapped(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The dataset without H [S+16, S+20) and L [S+40, S+44)."""
    tmp = tmp_path_factory.mktemp("gapped")
    write_synthetic_dataset(make_config(tmp))
    (tmp / "frames" / f"H-H1_SYNTH-{S + 16}-4.gwf").unlink()
    (tmp / "frames" / f"L-L1_SYNTH-{S + 40}-4.gwf").unlink()
    (tmp / "frames" / "frames.lcf").unlink()
    return tmp / "frames"


def test_two_gaps_and_three_science_segments(gapped: Path, tmp_path: Path) -> None:
    science = tmp_path / "science.txt"
    science.write_text(f"{S + 2.1} {S + 14}\n{S + 18} {S + 30.6}\n{S + 38.5} {S + 60}\n")
    config = make_config(tmp_path, frames=str(gapped), segments=str(science))
    # with holes inside science segments allowed, they are dropped time
    result = preflight(config, find_frames(gapped), allow_holes_in_science=True)
    assert result.stretches == [(S + 2.25, S + 14), (S + 20, S + 30.5), (S + 44, S + 60)]
    assert result.dropped == [
        (S, S + 2.1, REASON_OUTSIDE_SCIENCE),
        (S + 2.1, S + 2.25, REASON_GRID),
        (S + 14, S + 18, REASON_OUTSIDE_SCIENCE),
        (S + 18, S + 20, "no data for H"),
        (S + 30.5, S + 30.6, REASON_GRID),
        (S + 30.6, S + 38.5, REASON_OUTSIDE_SCIENCE),
        (S + 38.5, S + 40, "shorter than warm-up + one stride (2 s)"),
        (S + 40, S + 44, "no data for L"),
        (S + 60, S + 64, REASON_OUTSIDE_SCIENCE),
    ]
    conserved(result)
    # by default the holes inside science segments are problems, not explained
    with pytest.raises(DataError) as info:
        preflight(config)
    lines = str(info.value).splitlines()
    assert lines[0].startswith(f"2 problems with the frame data for [{S}, {S + 64})")
    assert lines[1] == (
        f"  - no frame data for observatory H (H1:GDS-CALIB_STRAIN) in [{S + 18}, {S + 20}), "
        f"inside the science segments (between H-H1_SYNTH-{S + 12}-4.gwf and "
        f"H-H1_SYNTH-{S + 20}-4.gwf)"
    )
    assert lines[2].startswith(
        f"  - no frame data for observatory L (L1:GDS-CALIB_STRAIN) in [{S + 40}, {S + 44}), "
        "inside the science segments"
    )
    with pytest.raises(DataError, match="2 problem"):  # no segment file: holes stay problems
        preflight(make_config(tmp_path, frames=str(gapped)), allow_holes_in_science=True)


def test_holes_outside_science_segments_are_explained(gapped: Path, tmp_path: Path) -> None:
    science = tmp_path / "science.xml"
    DataQualityFlag(
        "H1:SCIENCE:1",
        known=[(S, S + 64)],
        active=[(S + 2.1, S + 14), (S + 20, S + 30.6), (S + 44, S + 60)],
    ).write(str(science), format="ligolw")
    config = make_config(tmp_path, frames=str(gapped), segments=str(science))
    result = preflight(config)
    assert result.stretches == [(S + 2.25, S + 14), (S + 20, S + 30.5), (S + 44, S + 60)]
    assert result.analysable_seconds == pytest.approx(38.25)
    assert result.dropped_by_reason() == pytest.approx(
        {REASON_OUTSIDE_SCIENCE: 25.5, REASON_GRID: 0.25}
    )
    conserved(result)


def test_without_segment_file_every_hole_is_a_problem(gapped: Path, tmp_path: Path) -> None:
    with pytest.raises(DataError) as info:
        preflight(make_config(tmp_path, frames=str(gapped)))
    message = str(info.value)
    assert message.startswith("2 problems")
    assert f"observatory H (H1:GDS-CALIB_STRAIN) in [{S + 16}, {S + 20}) (between" in message
    assert f"observatory L (L1:GDS-CALIB_STRAIN) in [{S + 40}, {S + 44}) (between" in message
    assert "science" not in message


def test_span_edges_without_data_are_holes(gapped: Path, tmp_path: Path) -> None:
    edge = tmp_path / "edge"
    shutil.copytree(gapped, edge)
    (edge / f"H-H1_SYNTH-{S}-4.gwf").unlink()
    (edge / f"L-L1_SYNTH-{S + 60}-4.gwf").unlink()
    science = tmp_path / "science.txt"
    science.write_text(f"{S + 4} {S + 14}\n{S + 20} {S + 40}\n{S + 44} {S + 60}\n")
    result = preflight(make_config(tmp_path, frames=str(edge), segments=str(science)))
    assert result.stretches == [(S + 4, S + 14), (S + 20, S + 40), (S + 44, S + 60)]
    with pytest.raises(DataError) as info:
        preflight(make_config(tmp_path, frames=str(edge), start=S, duration=64))
    message = str(info.value)
    assert f"observatory H (H1:GDS-CALIB_STRAIN) in [{S}, {S + 4}) (before H-H1_SYNTH" in message
    assert f"observatory L (L1:GDS-CALIB_STRAIN) in [{S + 60}, {S + 64}) (after L-L1" in message


def test_no_analysable_time_is_a_problem(gapped: Path, tmp_path: Path) -> None:
    science = tmp_path / "science.txt"
    science.write_text(f"{S + 1} {S + 2.5}\n")
    with pytest.raises(DataError) as info:
        preflight(make_config(tmp_path, frames=str(gapped), segments=str(science)))
    assert f"no analysable time in [{S}, {S + 64})" in str(info.value)
    assert "shorter than warm-up + one stride (2 s): 1.5 s" in str(info.value)
