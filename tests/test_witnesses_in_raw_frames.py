"""An observatory's channels kept in several frame types, as DeepClean's production data are:
the witnesses in the raw frames (``H1_R``), the strain in h(t) (``H1_HOFT``). The small
campaign's frames are rewritten so (real GWF files, with gwpy), and what the reader gives
must be what it gives from the frames that hold everything, bit for bit: every campaign
path (clients, reference, training, evaluation) reads through it. ``check`` and make-dag plan
from what each frame type holds; a channel two frame types hold over one time is still
refused, an unrelated frame type beside them is not read.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from offline_iaas.cli import main
from offline_iaas.config import load_config
from offline_iaas.data.discovery import discover_frames, find_frames
from offline_iaas.data.frames import iter_reads, read_span
from offline_iaas.data.preflight import preflight
from offline_iaas.errors import DataError
from tests.datafind_server import running_datafind_server
from tests.error_catalogue import cli_error, documented
from tests.helpers import TOLERANCE, WITNESSES, run_local_stopping_all, untrained_weights
from tests.oracle import run_problems

START = 1262304000
FILE_SECONDS = 16
IFOS = ("H1", "L1")
STRAIN = "{}:GDS-CALIB_STRAIN"
RATE = 256
NO_REPO = 'model.repository="none"'
DEEPCLEAN = ['model.mode="deepclean"', f"data.witnesses={WITNESSES}"]
TYPES = 'data.frametypes=["H1_HOFT", "H1_R", "L1_HOFT", "L1_R"]'
"""What make-dag --no-check, which opens no file, needs to be told."""


@pytest.fixture(scope="module")
def dataset(small_campaign_dir) -> Path:
    """The small campaign's frames: 4 files of 16 s per detector holding strain and witnesses."""
    return small_campaign_dir(export=False)


def channels_of(ifo: str) -> list[str]:
    return [STRAIN.format(ifo)] + [w for w in json.loads(WITNESSES) if w.startswith(ifo)]


def all_channels() -> list[str]:
    return [c for ifo in IFOS for c in channels_of(ifo)]


def write(target: Path, source: Path, names: list[str], change=None) -> None:
    """``target``: ``names`` of the GWF file ``source``, read and written with gwpy
    (``change`` applied to each series first)."""
    from gwpy.timeseries import TimeSeriesDict

    data = TimeSeriesDict.read(str(source), names)
    if change is not None:
        for name in names:
            data[name] = change(data[name])
    target.parent.mkdir(parents=True, exist_ok=True)
    data.write(str(target))


def split(dataset: Path, root: Path, witness_change=None) -> Path:
    """``root/frames``: each of the dataset's files as ``<O>-<IFO>_HOFT-...`` (the strain)
    and ``<O>-<IFO>_R-...`` (the witnesses), in subdirectories by type; and the campaign."""
    for ifo in IFOS:
        for source in sorted((dataset / "frames").glob(f"{ifo[0]}-*.gwf")):
            gps = source.name.split("-")[2]
            write(root / "frames" / "hoft" / f"{ifo[0]}-{ifo}_HOFT-{gps}-{FILE_SECONDS}.gwf",
                  source, channels_of(ifo)[:1])
            write(root / "frames" / "raw" / f"{ifo[0]}-{ifo}_R-{gps}-{FILE_SECONDS}.gwf",
                  source, channels_of(ifo)[1:], witness_change)
    shutil.copyfile(dataset / "campaign.toml", root / "campaign.toml")
    return root


def check(root: Path, capsys, *sets: str) -> tuple[int, str]:
    capsys.readouterr()
    code = main(["check", str(root / "campaign.toml"),
                 *[a for s in (NO_REPO, *DEEPCLEAN, *sets) for a in ("--set", s)]])
    return code, capsys.readouterr().err


def test_witnesses_in_raw_frames_read_as_from_one_frame_type(
        dataset: Path, tmp_path: Path, capsys, caplog) -> None:
    root = split(dataset, tmp_path)
    joined = find_frames(dataset / "frames")
    apart = find_frames(root / "frames")
    assert {f.description for f in apart} == {"H1_HOFT", "H1_R", "L1_HOFT", "L1_R"}
    channels = all_channels()
    whole = read_span(joined, channels, START, START + 64, RATE)
    assert np.isfinite(whole).all() and (np.abs(whole).min(axis=1) > 0).all()
    # across file boundaries and in reads of 5 s (a client's), as one read of every channel
    np.testing.assert_array_equal(read_span(apart, channels, START, START + 64, RATE), whole)
    pieces = np.concatenate(list(iter_reads(apart, channels, START + 4, START + 60, RATE, 5.0,
                                            (START, START + 64))), axis=1)
    np.testing.assert_array_equal(pieces, whole[:, 4 * RATE:60 * RATE])
    # the negative control: the raw frames' witnesses one sample late
    late = split(dataset, tmp_path / "late", lambda series: np.roll(series, 1))
    moved = read_span(find_frames(late / "frames"), channels, START, START + 64, RATE)
    strain = [i for i, c in enumerate(channels) if c.endswith("CALIB_STRAIN")]
    np.testing.assert_array_equal(moved[strain], whole[strain])
    assert not np.array_equal(moved, whole)
    # check passes, and plans what the joined frames give, opening the files or not
    code, err = check(root, capsys)
    assert code == 0, err
    assert "16 frame file(s) (H1_HOFT: 4, H1_R: 4, L1_HOFT: 4, L1_R: 4)" in caplog.text
    config = load_config(root / "campaign.toml", DEEPCLEAN)
    assert preflight(config).stretches == [(START, START + 64)]
    # opening no file (make-dag --no-check) it cannot tell which type holds which channel:
    # it asks for data.frametypes, and is then told every listed type is needed
    capsys.readouterr()
    code = main(["make-dag", str(root / "campaign.toml"), "--no-check", "--out",
                 str(root / "run"), *[a for s in (NO_REPO, *DEEPCLEAN) for a in ("--set", s)]])
    err = capsys.readouterr().err
    assert code == 3 and not (root / "run").exists()
    documented("frame-types-untold", cli_error(err), {root: "<ws>"}, exit_code=code)
    assert ("observatory H has frame files of 2 frame types (H1_HOFT, H1_R), and which holds "
            "which channel is read from the files, which --no-check does not open: list the "
            "frame types to read in data.frametypes") in err
    told = load_config(root / "campaign.toml", [*DEEPCLEAN, TYPES])
    assert preflight(told, open_files=False).stretches == [(START, START + 64)]


def test_a_hole_in_the_raw_frames_is_named_with_its_frame_type(
        dataset: Path, tmp_path: Path, capsys) -> None:
    root = split(dataset, tmp_path)
    (root / "frames" / "raw" / f"H-H1_R-{START + 16}-16.gwf").unlink()
    code, err = check(root, capsys)
    assert code == 3
    assert (f"no frame data for observatory H (H1:PEM-SYNTH_WITNESS_0, "
            f"H1:PEM-SYNTH_WITNESS_1; frame type H1_R) in [{START + 16}, {START + 32}) "
            f"(between H-H1_R-{START}-16.gwf and H-H1_R-{START + 32}-16.gwf)") in err
    # make-dag plans around it (holes in science segments end stretches), and so does a
    # plan that opens no file (make-dag --no-check): it needs every frame type
    science = root / "science.txt"
    science.write_text(f"{START} {START + 64}\n")
    config = load_config(root / "campaign.toml",
                         [*DEEPCLEAN, TYPES, f'data.segments="{science}"'])
    for open_files in (True, False):
        planned = preflight(config, open_files=open_files, allow_holes_in_science=True)
        assert planned.stretches == [(START, START + 16), (START + 32, START + 64)]
    # the strain alone does not need the raw frames
    code, err = check(root, capsys, 'model.mode="bbhnet"', "data.witnesses=[]")
    assert code == 0, err
    assert read_span(find_frames(root / "frames"), [STRAIN.format("H1")], START + 16,
                     START + 32, RATE).shape == (1, 16 * RATE)
    # a read of the witnesses there (no plan would ask for it) names the raw frames' hole,
    # across its edge or inside it
    with pytest.raises(DataError, match=rf"missing frame data for channel\(s\) "
                       rf"H1:PEM-SYNTH_WITNESS_0, H1:PEM-SYNTH_WITNESS_1 .*\[{START + 16}, "
                       rf"{START + 20}\) \(after H-H1_R-{START}-16.gwf"):
        read_span(find_frames(root / "frames"), channels_of("H1"), START + 8, START + 20, RATE)
    with pytest.raises(DataError, match=r"no frame files hold channel\(s\) "
                       r"H1:PEM-SYNTH_WITNESS_0, H1:PEM-SYNTH_WITNESS_1 for"):
        read_span(find_frames(root / "frames"), channels_of("H1"), START + 17, START + 20,
                  RATE)


def test_a_channel_two_frame_types_hold_at_one_time_is_refused_naming_it(
        dataset: Path, tmp_path: Path, capsys) -> None:
    root = split(dataset, tmp_path)
    frames = root / "frames"
    source = dataset / "frames" / f"H-H1_SYNTH-{START}-16.gwf"
    other = frames / "c01" / f"H-H1_HOFT_C01-{START}-16.gwf"  # a second calibration's strain
    write(other, source, channels_of("H1")[:1], lambda series: series * 2)
    code, err = check(root, capsys)
    assert code == 3
    documented("frame-types-overlap-channel", cli_error(err), {root: "<ws>"}, exit_code=code)
    assert (f"frame files {other} and {frames}/hoft/H-H1_HOFT-{START}-16.gwf both hold "
            f"H1:GDS-CALIB_STRAIN (frame type H1_HOFT, H1_HOFT_C01) for [{START}, "
            f"{START + 16}), and the reader would mix them: two frame types, H1_HOFT and "
            "H1_HOFT_C01; keep one of them") in err
    with pytest.raises(DataError, match="both hold H1:GDS-CALIB_STRAIN"):
        read_span(find_frames(frames), channels_of("H1"), START, START + 8, RATE)
    # data.frametypes chooses among the directory's files: without C01 it passes
    types = '["H1_HOFT", "H1_R", "L1_HOFT", "L1_R"]'
    code, err = check(root, capsys, f"data.frametypes={types}")
    assert code == 0, err
    # a frame type it names that the directory does not hold is named
    code, err = check(root, capsys, 'data.frametypes=["H1_HOFT", "H1_R", "L1_HOFT", "L1_RDS"]')
    assert code == 3
    documented("frametypes-not-in-frames", cli_error(err), {root: "<ws>"}, exit_code=code)
    assert (f"data.frametypes: no frame file of type 'L1_RDS' in {frames} (frame types there: "
            "H1_HOFT, H1_HOFT_C01, H1_R, L1_HOFT, L1_R)") in err


def test_a_frame_type_holding_none_of_the_channels_is_not_read(
        dataset: Path, tmp_path: Path, capsys) -> None:
    root = split(dataset, tmp_path)
    frames = root / "frames"
    from gwpy.timeseries import TimeSeries

    # trends of another channel over the same time, the first file unreadable (cut short)
    (frames / "trend").mkdir()
    for gps in range(START, START + 64, 16):
        series = TimeSeries.read(str(dataset / "frames" / f"H-H1_SYNTH-{gps}-16.gwf"),
                                 "H1:PEM-SYNTH_WITNESS_1")
        series.name = series.channel = "H1:PEM-OTHER"
        series.write(str(frames / "trend" / f"H-H1_M-{gps}-16.gwf"))
    first = frames / "trend" / f"H-H1_M-{START}-16.gwf"
    first.write_bytes(first.read_bytes()[:1000])
    code, err = check(root, capsys)
    assert code == 0, err
    config = load_config(root / "campaign.toml", DEEPCLEAN)
    assert preflight(config).stretches == [(START, START + 64)]
    whole = read_span(find_frames(dataset / "frames"), all_channels(), START, START + 64, RATE)
    np.testing.assert_array_equal(
        read_span(discover_frames(config.data), all_channels(), START, START + 64, RATE),
        whole)
    # read by read too (a client's): the first read meets only the cut trend file's time
    pieces = iter_reads(discover_frames(config.data), all_channels(), START, START + 64, RATE,
                        8.0)
    np.testing.assert_array_equal(np.concatenate(list(pieces), axis=1), whole)


def test_a_datafind_server_serves_the_raw_frames_beside_hoft(
        dataset: Path, tmp_path: Path) -> None:
    root = split(dataset, tmp_path)
    whole = read_span(find_frames(dataset / "frames"), all_channels(), START, START + 64, RATE)
    toml = root / "datafind.toml"  # the campaign without data.frames
    toml.write_text((root / "campaign.toml").read_text().replace('frames = "frames"\n', ""))
    with running_datafind_server(root / "frames") as url:
        config = load_config(toml, [*DEEPCLEAN, f'data.datafind_server="{url}"',
                                    'data.frametypes=["H1_HOFT", "H1_R", "L1_HOFT", "L1_R"]'])
        frames = discover_frames(config.data)
        assert len(frames) == 16 and all(f.listed_by_datafind for f in frames)
        assert preflight(config, frames).stretches == [(START, START + 64)]
    np.testing.assert_array_equal(
        read_span(frames, all_channels(), START, START + 64, RATE), whole)


@pytest.mark.slow
def test_a_deepclean_campaign_on_raw_frames_beside_hoft_equals_one_frame_types_reference(
        dataset: Path, tmp_path: Path) -> None:
    from offline_iaas.merge.output import compare_outputs
    from offline_iaas.merge.reference import run_reference
    from offline_iaas.repository.export import export_repository
    from offline_iaas.rundir import RunDir
    from offline_iaas.workflow.make_dag import make_dag

    root = split(dataset, tmp_path / "apart")
    repository = f'model.repository="{tmp_path / "model-repository"}"'
    config = load_config(root / "campaign.toml", [*DEEPCLEAN, repository])
    export_repository(config, untrained_weights(tmp_path / "weights"))
    make_dag(config, RunDir(root / "run"))
    run_local_stopping_all(root / "run")
    assert run_problems(root / "run") == []  # right, by the oracle's own whole windows
    # equal to the reference of the frames that hold every channel in one frame type
    joined = load_config(dataset / "campaign.toml", [*DEEPCLEAN, repository])
    reference, _ = run_reference(joined, tmp_path / "reference.h5")
    output = root / "run" / "output" / "campaign.h5"
    assert compare_outputs(output, reference).passes(TOLERANCE)
    # the negative control: the reference of raw frames whose witnesses are one sample late
    late = split(dataset, tmp_path / "late", lambda series: np.roll(series, 1))
    moved, _ = run_reference(load_config(late / "campaign.toml", [*DEEPCLEAN, repository]),
                             tmp_path / "late.h5")
    assert not compare_outputs(output, moved).passes(TOLERANCE)


def test_a_witness_no_frame_type_holds_is_named_with_the_types(
        dataset: Path, tmp_path: Path, capsys) -> None:
    root = split(dataset, tmp_path)
    witnesses = '["H1:PEM-SYNTH_WITNESS_0", "H1:PEM-SYNTH_WITNESS_9", "L1:PEM-SYNTH_WITNESS_0"]'
    code, err = check(root, capsys, f"data.witnesses={witnesses}")
    assert code == 3
    documented("channel-in-no-frame-type", cli_error(err), {root: "<ws>"}, exit_code=code)
    frames = root / "frames"
    assert ("channel H1:PEM-SYNTH_WITNESS_9 is listed by none of observatory H's frame types "
            "(what a type holds is what its first readable file lists: H1_HOFT "
            f"{frames}/hoft/H-H1_HOFT-{START}-16.gwf, H1_R {frames}/raw/H-H1_R-{START}-16.gwf)"
            ) in err
    with pytest.raises(DataError, match=r"no frame files hold channel\(s\) "
                       "H1:PEM-SYNTH_WITNESS_9 for"):
        read_span(find_frames(root / "frames"), ["H1:PEM-SYNTH_WITNESS_9"], START, START + 8,
                  RATE)


def test_check_and_the_reader_judge_a_frame_type_by_the_same_file(
        dataset: Path, tmp_path: Path, capsys) -> None:
    root = split(dataset, tmp_path)
    def earlier(series):
        moved = series.copy()
        moved.t0 = series.t0.value - 16
        return moved

    # an earlier raw file, before the campaign's span, holding one of H1's two witnesses
    write(root / "frames" / "raw" / f"H-H1_R-{START - 16}-16.gwf",
          dataset / "frames" / f"H-H1_SYNTH-{START}-16.gwf", ["H1:PEM-SYNTH_WITNESS_0"],
          earlier)
    code, err = check(root, capsys)
    assert code == 3 and "channel H1:PEM-SYNTH_WITNESS_1 is listed by none of observatory " \
        f"H's frame types (what a type holds is what its first readable file lists: H1_HOFT " \
        f"{root}/frames/hoft/H-H1_HOFT-{START}-16.gwf, H1_R {root}/frames/raw/" \
        f"H-H1_R-{START - 16}-16.gwf)" in err
    # what a client or the reference would meet: the same verdict, not a pass then a failure
    with pytest.raises(DataError, match=r"no frame files hold channel\(s\) "
                       "H1:PEM-SYNTH_WITNESS_1 for"):
        read_span(find_frames(root / "frames"), channels_of("H1"), START, START + 8, RATE)
    # the control: without it both pass
    (root / "frames" / "raw" / f"H-H1_R-{START - 16}-16.gwf").unlink()
    assert check(root, capsys)[0] == 0
    assert read_span(find_frames(root / "frames"), channels_of("H1"), START, START + 8,
                     RATE).shape == (3, 8 * RATE)


def test_a_frame_type_whose_first_files_cannot_be_read_is_named(
        dataset: Path, tmp_path: Path, capsys) -> None:
    root = split(dataset, tmp_path)
    junk = root / "frames" / "junk"
    junk.mkdir()
    for gps in range(START, START + 64, 16):  # a partial copy of each h(t) file
        hoft = (root / "frames" / "hoft" / f"H-H1_HOFT-{gps}-16.gwf").read_bytes()
        (junk / f"H-H1_JUNK-{gps}-16.gwf").write_bytes(hoft[:2000])
    message = (f"the first 3 frame file(s) of type H1_JUNK cannot be read ({junk}/H-H1_JUNK-"
               f"{START}-16.gwf first), so which channels it holds is not known: remove them, "
               "or list the frame types to read in data.frametypes")
    code, err = check(root, capsys)
    assert code == 3 and message in err and "both hold" not in err and "no frame data" not in err
    documented("frame-type-unreadable", cli_error(err), {root: "<ws>"}, exit_code=code)
    # make-dag with bad files as gaps refuses it too (its files might hold a channel)
    config = load_config(root / "campaign.toml", [*DEEPCLEAN, 'data.on_bad_file="gap"'])
    with pytest.raises(DataError, match="the first 3 frame file"):
        preflight(config, allow_bad_files=True)
    # so does a read that meets its files (a client of a plan made without the check)
    with pytest.raises(DataError) as caught:
        read_span(find_frames(root / "frames"), all_channels(), START + 40, START + 48, RATE)
    assert str(caught.value) == message
    # the controls: listing the types to read passes, and reads as one frame type does
    assert check(root, capsys, TYPES)[0] == 0
    told = load_config(root / "campaign.toml", [*DEEPCLEAN, TYPES])
    whole = read_span(find_frames(dataset / "frames"), all_channels(), START, START + 64, RATE)
    np.testing.assert_array_equal(
        read_span(discover_frames(told.data), all_channels(), START, START + 64, RATE), whole)


def test_a_first_raw_file_with_a_bad_sample_still_says_what_its_type_holds(
        dataset: Path, tmp_path: Path, capsys) -> None:
    def with_a_nan(series):
        bad = series.copy()
        bad.value[10] = np.nan
        return bad

    root = split(dataset, tmp_path)
    first = root / "frames" / "raw" / f"H-H1_R-{START}-16.gwf"
    write(first, dataset / "frames" / f"H-H1_SYNTH-{START}-16.gwf", channels_of("H1")[1:],
          with_a_nan)
    code, err = check(root, capsys)
    # the file's own problem, named as before; not "listed by none" for its witnesses
    assert code == 3 and "non-finite sample" in err and "listed by none" not in err
    assert f"{first}" in err
