"""Frame files that are each readable but do not belong together: two frame types of one
observatory over one span (C00 and C01 side by side), one file of a channel at another rate
than its others, a file whose path LALFrame cannot take (not UTF-8). Each is named by
``check`` and ``make-dag`` (exit code 3) instead of passing and mixing the data, or failing
later with a misleading message. Real GWF files written with gwpy; the good dataset passes
each check as the control.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from offline_iaas.cli import main
from offline_iaas.data.discovery import find_frames
from offline_iaas.data.frames import read_span
from offline_iaas.errors import DataError, exit_code
from tests.error_catalogue import cli_error, documented

START = 1262304000
STRAIN = "H1:GDS-CALIB_STRAIN"
FIRST = f"H-H1_SYNTH-{START}-16.gwf"
SECOND = f"H-H1_SYNTH-{START + 16}-16.gwf"
NO_REPO = 'model.repository="none"'


@pytest.fixture(scope="module")
def dataset(small_campaign_dir) -> Path:
    """The small campaign's frames (4 files of 16 s per detector, 256 Hz)."""
    return small_campaign_dir(export=False)


def workspace(dataset: Path, tmp_path: Path) -> Path:
    """A copy of the frames (the .gwf files alone) and the campaign, in ``tmp_path``."""
    (tmp_path / "frames").mkdir()
    for path in (dataset / "frames").glob("*.gwf"):
        shutil.copyfile(path, tmp_path / "frames" / path.name)
    shutil.copyfile(dataset / "campaign.toml", tmp_path / "campaign.toml")
    return tmp_path


def rewrite(source: Path, target: Path, change) -> None:
    """``target``: the H1 strain of ``source`` read with gwpy, changed, written with gwpy."""
    from gwpy.timeseries import TimeSeriesDict

    data = TimeSeriesDict.read(str(source), [STRAIN])
    data[STRAIN] = change(data[STRAIN])
    target.unlink(missing_ok=True)
    data.write(str(target))


def segments(ws: Path, *spans: tuple[int, int]) -> str:
    """A ``--set`` giving science segments ``spans`` (seconds after START) in a file."""
    path = ws / "science.txt"
    path.write_text("".join(f"{START + a} {START + b}\n" for a, b in spans))
    return f'data.segments="{path}"'


def check(ws: Path, capsys, *sets: str) -> tuple[int, str]:
    capsys.readouterr()
    code = main(["check", str(ws / "campaign.toml"), "--set", NO_REPO,
                 *[a for s in sets for a in ("--set", s)]])
    return code, capsys.readouterr().err


# ---- two frame types of one span ----------------------------------------------------------


def test_two_frame_types_over_one_span_are_refused_naming_both_files(
        dataset: Path, tmp_path: Path, capsys) -> None:
    ws = workspace(dataset, tmp_path)
    frames = ws / "frames"
    code, err = check(ws, capsys)
    assert code == 0, err  # the control: one frame type passes
    other = frames / f"H-H1_OTHER-{START}-16.gwf"  # another calibration of the same 16 s
    rewrite(frames / FIRST, other, lambda x: x * 2)
    code, err = check(ws, capsys)
    assert code == exit_code(DataError) == 3 and "Traceback" not in err
    documented("frame-types-overlap", cli_error(err), {ws: "<ws>"}, exit_code=code)
    assert f"frame files {other} and {frames / FIRST} both hold {STRAIN} (frame type " \
           f"H1_OTHER, H1_SYNTH) for " \
           f"[{START}, {START + 16}), and the reader would mix them: two frame types, " \
           "H1_OTHER and H1_SYNTH; keep one of them" in err
    # make-dag refuses them too, and writes no run
    code = main(["make-dag", str(ws / "campaign.toml"), "--set", NO_REPO, "--out",
                 str(ws / "run")])
    assert code == 3 and f"{other} and {frames / FIRST}" in capsys.readouterr().err
    assert not (ws / "run").exists() or not any((ws / "run").iterdir())
    # so does a cache listing both; and the reader, given them (a library call, no check)
    cache = ws / "both.lcf"
    cache.write_text("".join(f"H {p.name.split('-')[1]} {p.name.split('-')[2]} 16 "
                             f"file://localhost{p}\n" for p in sorted(frames.glob("H-*.gwf"))))
    code, err = check(ws, capsys, f'data.frames="{cache}"', f"data.channels=[{STRAIN!r}]")
    assert code == 3 and f"frame files {other} and {frames / FIRST} both hold" in err
    with pytest.raises(DataError) as caught:
        read_span(find_frames(frames), [STRAIN], START + 8, START + 24, 256)
    assert cli_error(err).endswith(f"(frames: {cache}): {caught.value}")
    documented("frame-types-overlap-read", str(caught.value), {ws: "<ws>"},
               exit_code=exit_code(caught.value))
    # outside the campaign's span they are not read, and not refused
    code, err = check(ws, capsys, f"data.start={START + 16}", "data.duration=48")
    assert code == 0, err
    assert read_span(find_frames(frames), [STRAIN], START + 16, START + 32, 256).shape == \
        (1, 16 * 256)


def test_two_frame_types_overlapping_only_between_science_segments_pass(
        dataset: Path, tmp_path: Path, capsys) -> None:
    from gwpy.timeseries import TimeSeriesDict

    ws = workspace(dataset, tmp_path)
    frames = ws / "frames"
    # H1_OTHER holds [8, 40) in place of SECOND: it overlaps FIRST in [8, 16) and the third
    # file in [32, 40), each between two science segments; each file reaches a segment
    other = frames / f"H-H1_OTHER-{START + 8}-32.gwf"
    sources = [str(frames / f"H-H1_SYNTH-{START + t}-16.gwf") for t in (0, 16, 32)]
    TimeSeriesDict.read(sources, [STRAIN], start=START + 8, end=START + 40).write(str(other))
    (frames / SECOND).unlink()
    code, err = check(ws, capsys, segments(ws, (0, 8), (16, 32), (40, 64)))
    assert code == 0, err  # each segment is read from one frame type alone
    found = find_frames(frames)
    assert read_span(found, [STRAIN], START + 16, START + 32, 256).shape == (1, 16 * 256)
    # the control: a segment reaching into [8, 16) reads both files there, and is refused
    code, err = check(ws, capsys, segments(ws, (0, 12), (16, 32), (40, 64)))
    assert code == 3 and f"frame files {frames / FIRST} and {other} both hold {STRAIN} " \
        f"(frame type H1_OTHER, H1_SYNTH) for [{START + 8}, {START + 16})" in err \
        and "1 more such" not in err


def test_a_copy_of_a_file_in_a_second_directory_is_refused(
        dataset: Path, tmp_path: Path, capsys) -> None:
    ws = workspace(dataset, tmp_path)
    (ws / "frames" / "again").mkdir()
    copy = ws / "frames" / "again" / SECOND
    shutil.copyfile(ws / "frames" / SECOND, copy)
    code, err = check(ws, capsys)
    assert code == 3
    assert (f"frame files {ws / 'frames' / SECOND} and {copy} both hold observatory H's data "
            f"for [{START + 16}, {START + 32}), and the reader would mix them: frame type "
            "H1_SYNTH twice (a copy, or a misnamed file); keep one") in err
    # the same file twice through a symbolic link is one file: it passes
    copy.unlink()
    copy.symlink_to(ws / "frames" / SECOND)
    code, err = check(ws, capsys)
    assert code == 0, err


# ---- a file at another rate ----------------------------------------------------------------


def test_a_file_at_another_sample_rate_is_named_by_check_and_by_the_reader(
        dataset: Path, tmp_path: Path, capsys) -> None:
    ws = workspace(dataset, tmp_path)
    frames = ws / "frames"
    before = find_frames(frames)
    good = read_span(before, [STRAIN], START, START + 64, 256)  # the control
    assert good.shape == (1, 64 * 256)
    rewrite(frames / SECOND, frames / SECOND, lambda x: x.resample(512))
    code, err = check(ws, capsys)
    assert code == 3 and "Traceback" not in err
    documented("frame-rate-differs-between-files", cli_error(err), {ws: "<ws>"},
               exit_code=code)
    assert (f"channel {STRAIN} in {frames / SECOND} has sample rate 512 Hz, in its other "
            f"files 256 Hz ({frames / FIRST} and 2 more file(s))") in err
    # a read over the files (a client after make-dag --no-check) names the two files too
    with pytest.raises(DataError) as caught:
        read_span(find_frames(frames), [STRAIN], START, START + 64, 256)
    documented("frame-rate-differs-read", str(caught.value), {ws: "<ws>"},
               exit_code=exit_code(caught.value))
    # one file alone at 512 Hz is read (decimated), like any whole multiple
    alone = read_span(find_frames(frames / SECOND), [STRAIN], START + 16, START + 32, 256)
    assert alone.shape == (1, 16 * 256)


def test_a_rate_that_changes_between_science_segments_passes(
        dataset: Path, tmp_path: Path, capsys) -> None:
    ws = workspace(dataset, tmp_path)
    frames = ws / "frames"
    later = [f"H-H1_SYNTH-{START + 32}-16.gwf", f"H-H1_SYNTH-{START + 48}-16.gwf"]
    for name in later:  # a later epoch recorded at 512 Hz
        rewrite(frames / name, frames / name, lambda x: x.resample(512))
    # each science segment holds one rate: each is read (and resampled) alone, and passes
    code, err = check(ws, capsys, segments(ws, (0, 32), (36, 64)))
    assert code == 0, err
    found = find_frames(frames)
    for a, b in ((0, 32), (36, 64)):
        assert read_span(found, [STRAIN], START + a, START + b, 256).shape == (1, (b - a) * 256)
    # the control: a segment across the change holds both rates, and is refused
    code, err = check(ws, capsys, segments(ws, (0, 40), (44, 64)))
    assert code == 3 and (f"channel {STRAIN} in {frames / later[0]} has sample rate 512 Hz, "
                          f"in its other files 256 Hz ({frames / FIRST} and 1 more file(s))"
                          ) in err


# ---- a path that is not UTF-8 --------------------------------------------------------------


def test_a_file_whose_path_is_not_utf8_is_named_with_its_fix(
        dataset: Path, tmp_path: Path, capsys) -> None:
    ws = workspace(dataset, tmp_path)
    frames = ws / "frames"
    odd = Path(os.fsdecode(bytes(frames) + b"/H-H1_SYNTH\xff-" + f"{START}-16.gwf".encode()))
    (frames / FIRST).rename(odd)
    code, err = check(ws, capsys)
    assert code == 3 and "Traceback" not in err
    assert "FrameUFrFileOpen" not in err
    documented("frame-path-not-utf8", cli_error(err), {ws: "<ws>"}, exit_code=code)
    assert f"frame file {frames}/H-H1_SYNTH\\xff-{START}-16.gwf: its path is not valid " \
           "UTF-8" in err
    # a read of its span (a client) meets the same line; outside its span it is not read
    with pytest.raises(DataError) as caught:
        read_span(find_frames(frames), [STRAIN], START, START + 16, 256)
    assert cli_error(err).endswith(f"): {caught.value}")
    documented("frame-path-not-utf8-read", str(caught.value), {ws: "<ws>"},
               exit_code=exit_code(caught.value))
    assert read_span(find_frames(frames), [STRAIN], START + 16, START + 32, 256).shape == \
        (1, 16 * 256)
    # outside the campaign's span (or between its science segments) it is ignored
    code, err = check(ws, capsys, f"data.start={START + 16}", "data.duration=48")
    assert code == 0, err
    code, err = check(ws, capsys, segments(ws, (16, 64)))
    assert code == 0, err
    odd.rename(frames / FIRST)  # renamed, it passes
    code, err = check(ws, capsys)
    assert code == 0, err


def test_overlaps_of_several_observatories_are_listed_in_time_order() -> None:
    from offline_iaas.data.discovery import FrameFile
    from offline_iaas.data.frame_types import file_groups, overlap_problems

    def named(obs: str, kind: str, start: int) -> FrameFile:
        return FrameFile(obs, kind, START + start, 16, Path(f"/f/{obs}-{kind}-{start}.gwf"))

    def first_overlap(h_at: int, l_at: int) -> list[str]:  # the observatories, in order
        frames = [named("H", "H1_SYNTH", t) for t in (0, 16)] + [named("H", "H1_OTHER", h_at)] \
            + [named("L", "L1_SYNTH", t) for t in (0, 16)] + [named("L", "L1_OTHER", l_at)]
        groups = file_groups(frames, [STRAIN, "L1:GDS-CALIB_STRAIN"], lambda f, names: names)
        found = overlap_problems(groups, [(START, START + 32)])
        return [p.split("both hold ")[1][:2] for p in found]

    assert first_overlap(16, 0) == ["L1", "H1"]  # L's overlap at 0, H's at 16
    assert first_overlap(0, 16) == ["H1", "L1"]  # the control: the other way round
