"""Tests of frame discovery, checks and reading (offline_iaas.data.frames)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import gwpy
import numpy as np
import pytest
from gwpy.timeseries import TimeSeries, TimeSeriesDict

from offline_iaas.config import CampaignConfig, config_from_dict
from offline_iaas.data.discovery import FrameFile, find_frames
from offline_iaas.data.frames import DECIMATION_HALF, iter_reads, read_span
from offline_iaas.data.gwf_reader import read_channels, span_lie, table_of_contents
from offline_iaas.data.preflight import frame_problems, preflight, problem_report
from offline_iaas.data.synth import write_synthetic_dataset
from offline_iaas.errors import DataError, exit_code
from tests.error_catalogue import documented

START = 1262304000
END = START + 24
SPAN = (START, END)
STRAIN = ["H1:GDS-CALIB_STRAIN", "L1:GDS-CALIB_STRAIN"]
CHANNELS = STRAIN + ["H1:PEM-SYNTH_WITNESS_1"]
S6_FRAME = Path(gwpy.__file__).parent / "testing" / "data" / "HLV-HW100916-968654552-1.gwf"


def frame_report(frames: list[FrameFile], channels: list[str], gps_start: float,
                 gps_end: float, sample_rate: float) -> str:
    """What ``check`` says of ``frames`` over one span (``preflight``'s message; "" when
    there is no problem)."""
    problems = frame_problems(frames, channels, [(gps_start, gps_end)], sample_rate)
    return problem_report(problems, gps_start, gps_end, "test frames") if problems else ""


def make_config(tmp_path: Path, sample_rate: float = 256, frames: str = "frames") -> CampaignConfig:
    """3 files x 8 s at 256 Hz per interferometer; model rate ``sample_rate``."""
    raw = {
        "data": {
            "frames": frames,
            "channels": STRAIN,
            "start": START,
            "duration": 24,
            "sample_rate": sample_rate,
        },
        "model": {"repository": "repo"},
        # a nearby population: to z 3 its heaviest waveforms last up to 8.7 s, and synth
        # spaces its injections for the longest the population can draw
        "synth": {"file_duration": 8, "frame_sample_rate": 256, "injections": 2, "seed": 3,
                  "redshift_max": 0.4},
    }
    return config_from_dict(raw, tmp_path / "c.toml")


@pytest.fixture(scope="module")
def frames_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("frames")
    write_synthetic_dataset(make_config(tmp))
    return tmp / "frames"


@pytest.fixture(scope="module")
def frames(frames_dir: Path) -> list[FrameFile]:
    return find_frames(frames_dir)


def gwpy_read(frames_dir: Path, ifo: str, channel: str) -> np.ndarray:
    paths = sorted(str(p) for p in frames_dir.glob(f"{ifo[0]}-*.gwf"))
    return TimeSeriesDict.read(paths, [channel], start=START, end=END, format="gwf")[channel].value


# ---- find_frames -----------------------------------------------------------------------------


def test_find_frames_from_dir_lcf_and_ffl_agree(frames_dir: Path, tmp_path: Path) -> None:
    from_dir = find_frames(frames_dir)
    assert len(from_dir) == 6
    assert [(f.observatory, f.gps_start) for f in from_dir] == [
        (obs, START + 8 * i) for obs in ("H", "L") for i in range(3)
    ]
    first = from_dir[0]
    assert first.description == "H1_SYNTH" and first.duration == 8 and first.gps_end == START + 8
    assert first.path == (frames_dir / f"H-H1_SYNTH-{START}-8.gwf").resolve()
    assert find_frames(frames_dir / "frames.lcf") == from_dir
    ffl = tmp_path / "frames.ffl"
    ffl.write_text("".join(f"{f.path} {f.gps_start:.0f} {f.duration:.0f} 0 0\n" for f in from_dir))
    assert find_frames(ffl) == from_dir


LIST_FRAMES = """
import sys
from offline_iaas.data.discovery import find_frames
from offline_iaas.errors import DataError
try:
    print(sum(f.observatory == "L" for f in find_frames(sys.argv[1])))
except DataError as err:
    print(err)
"""


def test_a_frame_directory_that_cannot_be_listed_is_named_not_reported_empty(
        tmp_path: Path, frames_dir: Path) -> None:
    """L1's frames in a subdirectory its reader may not list, for real (as root: without the
    capabilities that read through a mode): the directory and the reason are named."""
    frames = tmp_path / "frames"
    shutil.copytree(frames_dir, frames, ignore=shutil.ignore_patterns("*.lcf"))
    locked = frames / "L"
    locked.mkdir()
    for gwf in frames.glob("L-*.gwf"):
        gwf.rename(locked / gwf.name)
    moved = len(list(locked.iterdir()))
    assert moved
    unprivileged = (["setpriv", "--bounding-set=-dac_override,-dac_read_search"]
                    if os.geteuid() == 0 else [])

    def listed() -> str:
        return subprocess.run([*unprivileged, sys.executable, "-c", LIST_FRAMES, str(frames)],
                              capture_output=True, text=True, timeout=60, check=True
                              ).stdout.strip()

    locked.chmod(0)
    try:
        refused = listed()
    finally:
        locked.chmod(0o755)
    assert refused == f"cannot list frame directory {locked}: Permission denied", refused
    assert listed() == str(moved)  # the control: listed, L1's files are found


def test_a_frame_link_whose_target_has_gone_is_named_not_reported_as_a_gap(
        tmp_path: Path, frames_dir: Path) -> None:
    """A frame file that is a symbolic link into a store that has moved is named with its
    target (``check`` said "no frame data ... between" its neighbours); read through while
    the target is there (the control)."""
    frames, store = tmp_path / "frames", tmp_path / "store"
    shutil.copytree(frames_dir, frames, ignore=shutil.ignore_patterns("*.lcf", "*.ffl"))
    store.mkdir()
    link = sorted(frames.glob("H-*.gwf"))[1]
    link.rename(store / link.name)
    link.symlink_to(store / link.name)
    assert len(find_frames(frames)) == len(list(frames.glob("*.gwf")))
    store.rename(tmp_path / "moved")
    with pytest.raises(DataError) as refused:
        find_frames(frames)
    message = str(refused.value)
    assert message == (f"frame file is a symbolic link to a file that does not exist: "
                       f"{link} -> {store / link.name}")
    documented("frame-link-to-nothing", message, {tmp_path: "<ws>"},
               exit_code=exit_code(refused.value))


def test_a_directory_named_as_a_frame_file_is_named_not_reported_as_a_gap(
        tmp_path: Path, frames_dir: Path) -> None:
    """A directory where a frame file should be (``check`` said "no frame data ... between"
    its neighbours); the files themselves are found (the control)."""
    frames = tmp_path / "frames"
    shutil.copytree(frames_dir, frames, ignore=shutil.ignore_patterns("*.lcf", "*.ffl"))
    assert len(find_frames(frames)) == len(list(frames.glob("*.gwf")))
    file = sorted(frames.glob("H-*.gwf"))[1]
    file.unlink()
    file.mkdir()
    with pytest.raises(DataError) as refused:
        find_frames(frames)
    message = str(refused.value)
    assert message == f"frame file {file} is a directory, not a frame file's data"
    documented("frame-file-is-a-directory", message, {tmp_path: "<ws>"},
               exit_code=exit_code(refused.value))


def test_find_frames_errors_name_the_source(tmp_path: Path, frames_dir: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(DataError, match=f"no .gwf frame files under {empty}"):
        find_frames(empty)
    with pytest.raises(DataError, match="does not exist"):
        find_frames(tmp_path / "nowhere")
    lines = (frames_dir / "frames.lcf").read_text().splitlines()
    bad = tmp_path / "bad.lcf"
    bad.write_text(lines[0] + "\nH H1_SYNTH 1262304008 file://localhost/x.gwf\n")
    with pytest.raises(DataError, match=r"bad\.lcf, line 2: malformed"):
        find_frames(bad)
    gone = tmp_path / "gone.lcf"
    gone.write_text(lines[0] + "\n\nH H1_SYNTH 1262304008 8 file://localhost/no/such.gwf\n")
    listed = find_frames(gone)  # a listed file that does not exist is left to preflight
    assert [f.path for f in listed] == [(frames_dir / f"H-H1_SYNTH-{START}-8.gwf").resolve(),
                                        Path("/no/such.gwf")]
    assert frame_report(listed, STRAIN[:1], START, START + 16, 256) == (
        f"the frame data for [{START}, {START + 16}) (frames: test frames): frame file "
        "/no/such.gwf [1262304008, 1262304016) does not exist")


# ---- what check says of the frames ----------------------------------------------------------


def test_check_accepts_the_dataset(frames: list[FrameFile], tmp_path: Path) -> None:
    assert frame_report(frames, CHANNELS, START, END, 256) == ""
    assert frame_report(frames, CHANNELS, START, END, 64) == ""
    assert frame_report(frames, CHANNELS, START, END, 100) != ""  # negative control
    span = preflight(make_config(tmp_path, 64, str(frames[0].path.parent / "frames.lcf")))
    assert span.stretches == [(START, END)] and span.dropped == []


def test_check_names_a_missing_channel(frames: list[FrameFile]) -> None:
    message = frame_report(frames, ["H1:GDS-CALIB_STRAIN", "H1:FOO"], START, END, 256)
    assert f"channel H1:FOO not found in {frames[0].path}" in message
    assert "channels there: H1:GDS-CALIB_STRAIN, H1:PEM-SYNTH_WITNESS_0" in message
    assert "\n" not in message  # a single problem stays on one line


def test_check_reports_a_hole(frames_dir: Path, tmp_path: Path) -> None:
    holed = tmp_path / "holed"
    shutil.copytree(frames_dir, holed)
    (holed / f"H-H1_SYNTH-{START + 8}-8.gwf").unlink()
    frames = find_frames(holed)
    message = frame_report(frames, STRAIN, START, END, 256)
    assert (
        f": no frame data for observatory H (H1:GDS-CALIB_STRAIN) in [{START + 8}, {START + 16}) "
        f"(between H-H1_SYNTH-{START}-8.gwf and H-H1_SYNTH-{START + 16}-8.gwf)"
    ) in message
    assert "L1:" not in message
    # a read that needs only the first file still works, one that needs the hole does not
    read_span(frames, STRAIN, START, START + 4, 64, SPAN)
    with pytest.raises(DataError, match=rf"H1:GDS-CALIB_STRAIN.*\[{START + 8}, {START + 10}\.5\)"):
        read_span(frames, STRAIN, START + 6, START + 10, 64, SPAN)


def test_check_reports_rates_and_missing_observatories(frames: list[FrameFile]) -> None:
    message = frame_report(frames, ["H1:GDS-CALIB_STRAIN", "V1:STRAIN"], START, END, 100)
    assert "2 problems" in message
    assert "sample rate 256 Hz, not a whole multiple of the model sample rate 100 Hz" in message
    assert (
        f"no frame data for observatory V (V1:STRAIN) in [{START}, {END}) "
        "(no frame files of observatory 'V')"
    ) in message


# ---- read_span / iter_reads -----------------------------------------------------------------


def test_read_span_passes_through_at_the_frame_rate(
    frames: list[FrameFile], frames_dir: Path
) -> None:
    data = read_span(frames, CHANNELS, START, END, 256, SPAN)
    assert data.dtype == np.float32 and data.shape == (3, 24 * 256)
    for row, channel in enumerate(CHANNELS):
        expected = gwpy_read(frames_dir, channel[:2], channel).astype(np.float32)
        np.testing.assert_array_equal(data[row], expected)


@pytest.mark.parametrize("sample_rate", [256, 64])
@pytest.mark.parametrize("read_seconds", [1.0, 5.0, 7.3, 0.7, 100.0])
def test_reads_equal_the_whole_span(
    frames: list[FrameFile], sample_rate: float, read_seconds: float
) -> None:
    whole = read_span(frames, CHANNELS, START, END, sample_rate, SPAN)
    reads = list(iter_reads(frames, CHANNELS, START, END, sample_rate, read_seconds, SPAN))
    step = int(read_seconds * sample_rate)
    assert all(c.shape[1] == step for c in reads[:-1])
    assert all(c.dtype == np.float32 for c in reads)
    np.testing.assert_array_equal(np.concatenate(reads, axis=1), whole)


@pytest.mark.parametrize("sample_rate", [256, 64])
def test_sub_ranges_equal_slices_of_the_whole_span(
    frames: list[FrameFile], sample_rate: float
) -> None:
    whole = read_span(frames, CHANNELS, START, END, sample_rate, SPAN)
    rng = np.random.default_rng(0)
    bounds = [(0, 5), (0, 24 * sample_rate), (24 * sample_rate - 3, 24 * sample_rate)]
    bounds += [tuple(sorted(rng.integers(0, 24 * sample_rate, 2))) for _ in range(6)]
    for k0, k1 in bounds:
        part = read_span(
            frames, CHANNELS, START + k0 / sample_rate, START + k1 / sample_rate, sample_rate, SPAN
        )
        np.testing.assert_array_equal(part, whole[:, k0:k1])
    # a sub-range read through iter_reads too
    k0, k1 = 3 * sample_rate + 7, 17 * sample_rate + 1
    reads = iter_reads(
        frames, CHANNELS, START + k0 / sample_rate, START + k1 / sample_rate, sample_rate, 2.3, SPAN
    )
    np.testing.assert_array_equal(np.concatenate(list(reads), axis=1), whole[:, k0:k1])


def test_decimation_keeps_the_band_and_the_timing(
    frames: list[FrameFile], frames_dir: Path
) -> None:
    """The slow witness (< ~5 Hz) decimated 4x matches the 256 Hz samples at every 4th sample
    to 1e-3 of its std (observed 1.3e-4); control: every 4th sample from the next one
    (1/256 s later, 0.11 of its std off) fails the same comparison."""
    channel = "H1:PEM-SYNTH_WITNESS_1"
    full = gwpy_read(frames_dir, "H1", channel)
    low = read_span(frames, [channel], START, END, 64, SPAN)[0]
    inner = slice(DECIMATION_HALF, -DECIMATION_HALF)
    np.testing.assert_allclose(low[inner], full[::4][inner], rtol=0, atol=1e-3 * np.std(full))
    assert not np.allclose(low[inner], full[1::4][inner], rtol=0, atol=1e-3 * np.std(full))


def test_read_span_errors(frames: list[FrameFile]) -> None:
    with pytest.raises(DataError, match=f"channel H1:FOO not found in {frames[0].path}"):
        read_span(frames, ["H1:FOO"], START, START + 1, 256, SPAN)
    with pytest.raises(DataError, match="not a whole multiple"):
        read_span(frames, STRAIN, START, START + 1, 100, SPAN)
    with pytest.raises(ValueError, match="not on the model sample grid"):
        read_span(frames, STRAIN, START + 0.001, START + 1, 256, SPAN)


def test_s6_frame_matches_gwpy_resample() -> None:
    """``H1:LDAS-STRAIN`` (16384 Hz, 1 s) read at 4096 Hz agrees with gwpy's ``resample``.

    gwpy decimates with a 81-tap Hamming FIR cut at the new Nyquist frequency, ours with a
    Kaiser FIR cut at 0.9 of it: they differ only near 1.8-2 kHz, where this strain has
    ~1e-22/sqrt(Hz), while its RMS (~5e-17) comes from the lowest frequencies. The measured
    difference is ~2e-4 RMS; a one-input-sample (61 us) timing error would give ~1.5e-2 RMS,
    so 2e-3 RMS checks values and alignment. 0.05 s at each end are skipped (both filters
    see the span edges there).
    """
    t0 = 968654552
    frames = find_frames(S6_FRAME)
    assert frames == [FrameFile("HLV", "HW100916", t0, 1.0, S6_FRAME.resolve())]
    ours = read_span(frames, ["H1:LDAS-STRAIN"], t0, t0 + 1, 4096, (t0, t0 + 1))[0]
    theirs = TimeSeries.read(S6_FRAME, "H1:LDAS-STRAIN", start=t0, end=t0 + 1).resample(4096)
    assert len(ours) == len(theirs) == 4096
    rms = np.sqrt(np.mean(theirs.value**2))
    inner = slice(205, -205)
    assert np.max(np.abs(ours[inner] - theirs.value[inner])) < 2e-3 * rms
    late = slice(204, -206)  # the control: gwpy's samples one (output) sample late
    assert np.max(np.abs(ours[inner] - theirs.value[late])) > 2e-3 * rms


def _typed_frame(path: Path) -> dict[str, np.ndarray]:
    """A 16 s GWF at 100 Hz (a step LAL cannot hold exactly) with one channel of each sample
    type real frames carry, written by gwpy; its samples by channel."""
    rng = np.random.default_rng(7)
    samples = {f"X1:TYPED-{np.dtype(t).name.upper()}": (rng.normal(size=1600) * 1e3).astype(t)
               for t in (np.float64, np.float32, np.int16, np.int32, np.int64)}
    samples["X1:TYPED-UINT32"] = rng.integers(0, 2**31, 1600).astype(np.uint32)
    TimeSeriesDict({name: TimeSeries(values, t0=START, sample_rate=100, name=name,
                                     channel=name) for name, values in samples.items()}
                   ).write(path, format="gwf")
    return samples


def test_reader_gives_every_sample_type_as_gwpy_reads_it(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The reader's LALFrame calls against gwpy's reader, for every type and range, and when
    LALFrame stops one sample short (lalsuite issue 710) on the first read of a channel."""
    path = tmp_path / f"X-TYPED-{START}-16.gwf"
    samples = _typed_frame(path)
    names, frames = table_of_contents(str(path))
    assert sorted(names) == sorted(samples)
    assert frames == (START, START + 16)
    for first, last in [(0, 1600), (0, 1), (1599, 1600), (357, 1211)]:
        a, b = START + first / 100 - 1e-6, START + last / 100 + 1e-6
        ours = read_channels(str(path), list(samples), a, b, frames)
        theirs = TimeSeriesDict.read(path, list(samples), start=max(a, START),
                                     end=min(b, START + 16), format="gwf")
        for name, values in samples.items():
            t0, rate, read = ours[name]
            assert (t0, rate) == (float(theirs[name].t0.value), 100.0), name
            assert np.array_equal(read, theirs[name].value.astype(np.float64)), name
            assert np.array_equal(read, values[first:last].astype(np.float64)), name
            if last - first > 1:  # the control: one sample late
                assert not np.array_equal(read[1:], values[first:last - 1]), name

    import lalframe

    full = lalframe.FrStreamReadREAL8TimeSeries
    calls = []

    def one_short(stream, name, start, seconds, limit):
        calls.append(seconds)
        return full(stream, name, start, seconds - (0.01 if len(calls) == 1 else 0), limit)

    monkeypatch.setattr(lalframe, "FrStreamReadREAL8TimeSeries", one_short)
    name = "X1:TYPED-FLOAT64"
    t0, _, read = read_channels(str(path), [name], START, START + 16, frames)[name]
    assert len(calls) == 2 and t0 == START
    assert np.array_equal(read, samples[name])


def _frames_in_one_file(path: Path, gps_start: float, frame_seconds: float, count: int) -> None:
    """``count`` frames of one 16 Hz channel (``X1:MULTI``), back to back, in one file."""
    import lal
    import lalframe

    out = lalframe.FrameUFrFileOpen(str(path), "w")
    for index in range(count):
        epoch = lal.LIGOTimeGPS(gps_start + index * frame_seconds)
        frame = lalframe.FrameNew(epoch, frame_seconds, "test", 0, index, 0)
        series = lal.CreateREAL8TimeSeries("X1:MULTI", epoch, 0, 1 / 16, lal.DimensionlessUnit,
                                           int(frame_seconds * 16))
        series.data.data[:] = np.arange(len(series.data.data)) + 1.0
        lalframe.FrameAddREAL8TimeSeriesProcData(frame, series)
        lalframe.FrameUFrameHWrite(out, frame)
    del out  # closes the file


def test_table_of_contents_spans_every_frame_of_a_file_as_gwpy_finds(tmp_path: Path) -> None:
    """A file of three 4 s frames: the names and the first frame's start to the last frame's
    end, as gwpy's ``data_segments`` finds them; one sample late (the control) is told apart."""
    from gwpy.io.gwf import data_segments

    for index, late_seconds in enumerate((0.0, 1 / 16)):
        path = tmp_path / f"X-MULTI{index}-{START}-12.gwf"
        _frames_in_one_file(path, START + 0.5 + late_seconds, 4.0, 3)
        names, frames = table_of_contents(str(path))
        theirs = data_segments([str(path)], "X1:MULTI")
        assert names == ["X1:MULTI"] and len(theirs) == 1
        assert frames == (float(theirs[0][0]), float(theirs[0][1]))
        lie = span_lie(frames, (START + 0.5, START + 12.5))
        assert (lie == "") == (late_seconds == 0), lie


# ---- many rates, many files ------------------------------------------------------------------

MIXED_SPAN = (START, START + 16)
WITNESSES = ["H1:PEM-SYNTH_WITNESS_0", "H1:PEM-SYNTH_WITNESS_1", "L1:PEM-SYNTH_WITNESS_1"]
MIXED = STRAIN + WITNESSES


def mixed_config(tmp: Path, file_duration: float, witness_rate: float) -> CampaignConfig:
    """16 s of strain at 1024 Hz, witnesses at ``witness_rate``; model rate 128 Hz."""
    raw = {
        "data": {
            "frames": "frames",
            "channels": STRAIN,
            "start": START,
            "duration": 16,
            "sample_rate": 128,
        },
        "model": {"repository": "repo"},
        "synth": {
            "file_duration": file_duration,
            "frame_sample_rate": 1024,
            "witness_sample_rate": witness_rate,
            "injections": 1,
            "seed": 7,
        },
    }
    return config_from_dict(raw, tmp / "c.toml")


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[FrameFile]]:
    """The same data as 8 files x 2 s and as 1 file x 16 s (witnesses at 256 Hz), and as
    2 files x 8 s with every channel at 1024 Hz."""
    out = {}
    for name, file_duration, witness_rate in (
        ("small", 2, 256),
        ("big", 16, 256),
        ("full", 8, 0),
    ):
        tmp = tmp_path_factory.mktemp(f"mixed-{name}")
        write_synthetic_dataset(mixed_config(tmp, file_duration, witness_rate))
        out[name] = find_frames(tmp / "frames")
    return out


def test_mixed_rates_are_stored_and_decimated_from_one_stream(
    mixed: dict[str, list[FrameFile]],
) -> None:
    paths = [str(f.path) for f in mixed["small"] if f.observatory == "H"]
    stored = TimeSeriesDict.read(paths, STRAIN[:1] + WITNESSES[:2], format="gwf")
    assert stored["H1:GDS-CALIB_STRAIN"].sample_rate.value == 1024
    assert stored["H1:PEM-SYNTH_WITNESS_0"].sample_rate.value == 256
    full_paths = [str(f.path) for f in mixed["full"] if f.observatory == "H"]
    full = TimeSeriesDict.read(full_paths, STRAIN[:1] + WITNESSES[:2], format="gwf")
    for name in STRAIN[:1]:
        np.testing.assert_array_equal(stored[name].value, full[name].value)
    for name in WITNESSES[:2]:  # every 4th sample of the witness generated at 1024 Hz
        np.testing.assert_array_equal(stored[name].value, full[name].value[::4])
    assert frame_report(mixed["small"], MIXED, *MIXED_SPAN, 128) == ""
    message = frame_report(mixed["small"], MIXED, *MIXED_SPAN, 512)
    assert message.startswith("3 problems")
    assert "channel H1:PEM-SYNTH_WITNESS_0 in" in message and "has sample rate 256 Hz" in message
    assert "GDS-CALIB_STRAIN" not in message


@pytest.mark.parametrize("sample_rate", [128, 256])
def test_mixed_rates_many_files_equal_one_file_and_reads(
    mixed: dict[str, list[FrameFile]], sample_rate: float
) -> None:
    """Strain decimated by 8 (4) and witnesses by 2 (1) at once; no seam at file boundaries."""
    whole = read_span(mixed["big"], MIXED, *MIXED_SPAN, sample_rate, MIXED_SPAN)
    assert whole.shape == (len(MIXED), 16 * sample_rate)
    np.testing.assert_array_equal(
        read_span(mixed["small"], MIXED, *MIXED_SPAN, sample_rate, MIXED_SPAN), whole
    )
    for read_seconds in (0.7, 1.3, 5.0):
        reads = iter_reads(
            mixed["small"], MIXED, *MIXED_SPAN, sample_rate, read_seconds, MIXED_SPAN
        )
        np.testing.assert_array_equal(np.concatenate(list(reads), axis=1), whole)
    # the witness read at its own rate is passed through; decimated, it keeps its band
    if sample_rate == 256:
        raw = TimeSeriesDict.read(
            [str(f.path) for f in mixed["big"] if f.observatory == "L"],
            ["L1:PEM-SYNTH_WITNESS_1"],
            format="gwf",
        )["L1:PEM-SYNTH_WITNESS_1"].value
        np.testing.assert_array_equal(whole[-1], raw.astype(np.float32))


def test_reads_open_only_the_files_they_need(
    mixed: dict[str, list[FrameFile]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bounded memory: a 1 s read of 2 s files reads at most 2 files per observatory (the
    requests to the frame reader process)."""
    from offline_iaas.data.gwf_reader import GwfReader

    opened: list[list[str]] = []
    original = GwfReader.read

    def recording(self, items, names):  # type: ignore[no-untyped-def]
        opened.append([item.path for item in items])
        return original(self, items, names)

    monkeypatch.setattr(GwfReader, "read", recording)
    reads = list(iter_reads(mixed["small"], MIXED, *MIXED_SPAN, 128, 1.0, MIXED_SPAN))
    assert len(reads) == 16
    assert len(opened) == 2 * 16  # one reader call per observatory per read
    assert max(len(r) for r in opened) == 2
    assert all(len(r) <= 2 for r in opened)
