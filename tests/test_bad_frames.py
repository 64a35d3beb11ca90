"""Bad frame files (issue #30): a truncated or corrupt file, or one whose name lies about its
span, never crashes a process; ``data.on_bad_file`` says what the campaign does with it.

Reading: every read runs in the frame reader process (``data/gwf_reader.py``), so LALFrame's
SIGSEGV on a truncated file is a ``BadFrameFile`` naming the file (exit code 3), and the
process reads on. ``check`` compares every file's frames with its name and refuses a liar.
Campaigns (real tritonservers, run-local): with ``fail`` the client that meets the file fails
with it named in its ``.err`` and in ``status``; with ``gap`` the file's span (a truncated
file's, or one made a FIFO after make-dag) becomes a gap
(met by the clients after make-dag, or by make-dag's own check), the rest is processed, the
output's provenance and the report name the file, and the output equals the in-process
reference over the same frames (which leaves the same file out). The oracle reads the frames
with gwpy itself, so it is not run on a truncated file.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

import pytest

from offline_iaas.cli import main
from offline_iaas.config import load_config, override_config
from offline_iaas.data.discovery import find_frames
from offline_iaas.data.frames import read_span
from offline_iaas.data.gwf_reader import BadFrameFile
from offline_iaas.errors import DataError, RunError, exit_code
from offline_iaas.merge.output import compare_outputs, read_campaign
from offline_iaas.merge.provenance import read_provenance
from offline_iaas.merge.reference import run_reference
from offline_iaas.repository.export import export_repository
from offline_iaas.rundir import RunDir
from offline_iaas.workflow.local import run_local
from offline_iaas.workflow.make_dag import make_dag
from offline_iaas.workflow.status import read_status
from tests.error_catalogue import cli_error, documented
from tests.helpers import SMALL_CAMPAIGN, WITNESSES, processes_mentioning, untrained_weights
from tests.test_own_files_not_regular import within_seconds

START = 1262304000
STRAIN = ["H1:GDS-CALIB_STRAIN", "L1:GDS-CALIB_STRAIN"]
BAD = f"H-H1_SYNTH-{START + 16}-16.gwf"
"""The file made bad: the second of H1's four 16 s files, inside client0's piece; client1's
warm-up reads it too."""


def truncate(path: Path) -> None:
    """What a partial copy leaves: the first 60 % of the file."""
    data = path.read_bytes()
    path.write_bytes(data[: len(data) * 6 // 10])


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """SMALL_CAMPAIGN's frames (64 s, 4 files of 16 s per detector) and an e2e repository."""
    from offline_iaas.data.synth import write_synthetic_dataset

    root = tmp_path_factory.mktemp("bad-frames")
    (root / "campaign.toml").write_text(SMALL_CAMPAIGN)
    config = load_config(root / "campaign.toml", [f"data.witnesses={WITNESSES}",
                                                  'model.mode="e2e"'])
    write_synthetic_dataset(config)
    export_repository(config, untrained_weights(root / "weights"))
    return root


def copy_of(dataset: Path, name: str) -> Path:
    """A workspace with its own copy of the frames (the repository shared)."""
    ws = dataset / name
    shutil.copytree(dataset / "frames", ws / "frames")
    (ws / "campaign.toml").write_text(SMALL_CAMPAIGN)
    return ws


def config_of(dataset: Path, ws: Path, policy: str):
    return load_config(ws / "campaign.toml", [
        f"data.witnesses={WITNESSES}", 'model.mode="e2e"', f'data.on_bad_file="{policy}"',
        f'model.repository="{dataset / "model-repository"}"'])


# ---- reading ----------------------------------------------------------------------------------


def test_a_truncated_file_is_an_error_naming_it_and_the_process_reads_on(dataset: Path) -> None:
    ws = copy_of(dataset, "truncated-read")
    truncate(ws / "frames" / BAD)
    frames = find_frames(ws / "frames")
    with pytest.raises(BadFrameFile) as caught:
        read_span(frames, STRAIN, START, START + 64, 256)
    err = caught.value
    assert isinstance(err, DataError) and exit_code(err) == 3
    assert str(err) == (f"frame file {ws / 'frames' / BAD}: the frame library crashed "
                        "(SIGSEGV) reading it (truncated or corrupt?)")
    assert (err.path, err.gps_start, err.gps_end) == (ws / "frames" / BAD, START + 16, START + 32)
    # this process lives on, and reads what is not in the bad file
    assert read_span(frames, STRAIN, START + 32, START + 64, 256).shape == (2, 8192)


@pytest.mark.parametrize(("name", "read_from"), [
    (f"L-L1_SYNTH-{START + 16}-32.gwf", START),  # 16 s named 32 s
    (f"L-L1_SYNTH-{START + 24}-16.gwf", START + 24),  # holding data 8 s earlier than named
])
def test_a_file_that_lies_about_its_span_is_refused_by_name(dataset: Path, name: str,
                                                            read_from: int) -> None:
    ws = copy_of(dataset, f"liar-{name}")
    (ws / "frames" / f"L-L1_SYNTH-{START + 16}-16.gwf").rename(ws / "frames" / name)
    frames = find_frames(ws / "frames")
    lie = f"frame file {ws / 'frames' / name}: its name says GPS"
    holds = f"GPS {START + 16}-{START + 32}"
    with pytest.raises(BadFrameFile, match="lies about its span") as caught:
        read_span(frames, STRAIN, read_from, START + 48, 256, (read_from, START + 64))
    assert str(caught.value).startswith(lie) and f"its frames hold {holds}" in str(caught.value)
    if read_from == START:
        documented("frame-file-lies-read", str(caught.value), {ws / "frames" / name: "F"},
                   exit_code=exit_code(caught.value))


def test_check_refuses_a_liar_and_a_truncated_file_by_name(dataset: Path, capsys) -> None:
    ws = copy_of(dataset, "check")
    liar = ws / "frames" / f"L-L1_SYNTH-{START + 40}-16.gwf"
    (ws / "frames" / f"L-L1_SYNTH-{START + 32}-16.gwf").rename(liar)
    truncate(ws / "frames" / BAD)
    code = main(["check", str(ws / "campaign.toml"), "--set", f"data.witnesses={WITNESSES}"])
    err = capsys.readouterr().err
    assert code == 3
    documented("frame-file-lies-about-its-span", cli_error(err), {ws: "<ws>"}, exit_code=code)
    assert (f"frame file {liar} [{START + 40}, {START + 56}) : its name says GPS {START + 40}-"
            f"{START + 56}, its frames hold GPS {START + 32}-{START + 48}") in err
    assert (f"frame file {ws / 'frames' / BAD} [{START + 16}, {START + 32}) is unreadable: the "
            "frame library crashed (SIGSEGV)") in err
    # the same files, named for what they hold and whole, pass
    liar.rename(ws / "frames" / f"L-L1_SYNTH-{START + 32}-16.gwf")
    shutil.copyfile(dataset / "frames" / BAD, ws / "frames" / BAD)
    assert main(["check", str(ws / "campaign.toml"), "--set", f"data.witnesses={WITNESSES}",
                 "--set", f'model.repository="{dataset / "model-repository"}"',
                 "--set", 'model.mode="e2e"']) == 0


# ---- campaigns ----------------------------------------------------------------------------------


@pytest.mark.slow
def test_with_fail_the_client_that_meets_a_truncated_file_fails_naming_it(
        dataset: Path) -> None:
    ws = copy_of(dataset, "fail")
    config = config_of(dataset, ws, "fail")
    run = RunDir(ws / "run")
    make_dag(config, run)
    truncate(ws / "frames" / BAD)  # after planning: a partial copy on a shared disk
    with pytest.raises(RunError, match="client0 .exit code 3 after 3 attempts"):
        run_local(run)
    assert processes_mentioning(str(run.path)) == []
    message = (run.logs / "client0.err").read_text()
    assert (f"offline-iaas client: error: frame file {ws / 'frames' / BAD}: the frame library "
            "crashed (SIGSEGV) reading it (truncated or corrupt?)") in message
    documented("bad-frame-file-fail", cli_error(message), {ws / "frames" / BAD: "F"},
               exit_code=exit_code(DataError))
    assert "Traceback" not in message
    client0 = next(n for n in read_status(run).nodes if n.name == "client0")
    assert client0.state == "failed" and BAD in client0.detail
    assert not run.output[0].exists() and not run.part("client0")[1].exists()


@pytest.mark.slow
@pytest.mark.parametrize("when", ["after make-dag", "before make-dag"])
def test_with_gap_the_bad_files_span_is_a_gap_and_the_rest_equals_the_reference(
        dataset: Path, when: str) -> None:
    ws = copy_of(dataset, f"gap-{when.replace(' ', '-')}")
    config = config_of(dataset, ws, "gap")
    run = RunDir(ws / "run")
    if when == "before make-dag":
        truncate(ws / "frames" / BAD)
    make_dag(config, run)
    if when == "after make-dag":
        truncate(ws / "frames" / BAD)
    run_local(run)
    assert processes_mentioning(str(run.path)) == []
    reference, _ = run_reference(config, ws / "reference.h5")  # the same frames, the same gap
    comparison = compare_outputs(run.output[0], reference)
    assert comparison.passes(1e-5), comparison.describe()
    # the stretch is cut at the file: [0, 16) and [32, 64) s
    (first, second) = read_campaign(run.output[0], "statistic")
    assert first.span[1] <= START + 16 and second.span[0] >= START + 32
    assert first.span[0] < START + 16 - 8 and second.span[1] > START + 64 - 1
    # the reference without the gap differs: it has one stretch where the campaign has two
    plain, _ = run_reference(config_of(dataset, copy_of(dataset, f"plain-{when}"), "gap"),
                             ws / "plain.h5")
    without_gap = compare_outputs(run.output[0], plain)
    assert not without_gap.passes(1e-5)
    assert any(problem.startswith("statistic/") for problem in without_gap.problems), \
        without_gap.describe()
    summary = json.loads(run.output[1].read_text())
    (bad,) = summary["bad_frame_files"]
    assert bad["path"] == str(ws / "frames" / BAD)
    assert (bad["gps_start"], bad["gps_end"]) == (START + 16, START + 32)
    report = (run.path / "report" / "index.html").read_text()
    assert "bad frame file(s) left out as gaps" in report and BAD in report
    if when == "after make-dag":
        sidecars = [json.loads(run.part(n)[1].read_text()) for n in ("client0", "client1")]
        assert all(s["bad_files"][0]["path"] == bad["path"] for s in sidecars)
        warnings = [line for log in sorted(run.logs.glob("client0.*"))
                    for line in log.read_text().splitlines() if "becomes a gap" in line]
        assert warnings, "client0 logged no warning about the bad file"
        documented("bad-frame-file-gap", warnings[0], {ws / "frames" / BAD: "F"})


@pytest.mark.slow
def test_with_gap_a_run_whose_every_file_is_bad_fails_saying_so(
        dataset: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Every frame file truncated after planning: the clients stream around all of them, the
    shard merge owns nothing, and the index fails the run with one line saying every file was
    bad and where the list is; campaign.json is not complete, status counts 0 analysed s."""
    ws = copy_of(dataset, "all-bad")
    config = config_of(dataset, ws, "gap")
    run = RunDir(ws / "run")
    make_dag(config, run)
    for path in sorted((ws / "frames").glob("*.gwf")):
        truncate(path)
    capsys.readouterr()
    assert main(["run-local", str(run.path)]) == exit_code(RunError)
    assert processes_mentioning(str(run.path)) == []
    (line,) = [x for x in capsys.readouterr().err.splitlines()
               if x.startswith("offline-iaas run-local: error: ")]
    assert "merge (exit code 3 after " in line
    assert "no data analysed: every frame file of the span was bad (" in line
    assert f"the list is in {run.output[1]} (bad_frame_files)" in line
    record = json.loads(run.output[1].read_text())
    assert record["complete"] is False and record["analysed_seconds"] == 0
    assert {Path(e["path"]).parent for e in record["bad_frame_files"]} == {ws / "frames"}
    assert not run.output[0].exists()
    shard = json.loads(run.shard_output("shard0")[1].read_text())
    assert shard["analysed_seconds"] == 0 < shard["data_seconds"]
    assert "0 of its " in (run.logs / "shard0.out").read_text()
    status = read_status(run)
    assert (status.data_seconds_done, status.data_seconds_total) == (0, 0)
    assert status.data_seconds_lost > 0 and not status.output_complete


@pytest.mark.slow
@pytest.mark.parametrize("source", ["frame cache", "frame directory"])
def test_with_gap_a_frame_file_made_a_fifo_after_make_dag_is_a_gap_named_with_its_reason(
        dataset: Path, source: str) -> None:
    """A frame file replaced by a FIFO after planning: the clients' frame reader refuses it
    before opening it (``errors.not_a_regular_file``, a ``BadFrameFile``), so with ``gap`` its
    span is a gap as a truncated file's is: run-local finishes, the output equals the reference
    over the same frames with that file truncated (the same gap), and the provenance lists the
    file with the reason. ``data.frames`` a LAL cache listing the files, or their directory
    (the clients' discovery of it lists the FIFO). Under SIGALRM: an open that waits for a
    writer fails the test."""
    ws = copy_of(dataset, f"gap-fifo-{source.split()[1]}")
    config = config_of(dataset, ws, "gap")
    if source == "frame cache":
        cache = ws / "frames" / "frames.lcf"
        cache.write_text(cache.read_text().replace(str(dataset / "frames"), str(ws / "frames")))
        config = override_config(config, [f'data.frames="{cache}"'])
    run = RunDir(ws / "run")
    make_dag(config, run)
    frame = ws / "frames" / BAD
    frame.unlink()
    os.mkfifo(frame)
    try:
        with within_seconds(600):
            run_local(run)
    finally:
        assert processes_mentioning(str(run.path)) == []
    truncated = copy_of(dataset, f"gap-fifo-{source.split()[1]}-reference")
    truncate(truncated / "frames" / BAD)
    reference, _ = run_reference(config_of(dataset, truncated, "gap"), ws / "reference.h5")
    comparison = compare_outputs(run.output[0], reference)
    assert comparison.passes(1e-5), comparison.describe()
    (first, second) = read_campaign(run.output[0], "statistic")  # cut at the file
    assert first.span[1] <= START + 16 and second.span[0] >= START + 32
    summary = json.loads(run.output[1].read_text())
    assert summary["complete"] is True
    (bad,) = summary["bad_frame_files"]
    assert bad == {"path": str(frame), "gps_start": START + 16, "gps_end": START + 32,
                   "error": f"frame file {frame} is a FIFO (named pipe), not a regular file"}
    assert read_provenance(run.output[0])["bad_frame_files"] == [bad]  # what inspect shows
    assert stat.S_ISFIFO(frame.stat().st_mode)  # left as it was
