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
    assert f"frame files {other} and {frames / FIRST} both hold observatory H's data for " \
           f"[{START}, {START + 16}), and the reader would mix them: two frame types, " \
           "H1_OTHER and H1_SYNTH; keep one per observatory" in err
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
    odd.rename(frames / FIRST)  # renamed, it passes
    code, err = check(ws, capsys)
    assert code == 0, err
