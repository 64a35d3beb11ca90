"""A path that is no regular file where the project reads a file (``bounded_read``): a FIFO,
whose ``open`` waits for a writer that never comes, an endless device (``/dev/zero``) or a
directory, as the campaign config, a frame cache or a frame file it lists, a segment file, an
injection file or list, aframe's rejected draws beside its set, a repository's manifest (also
where a run checks its pinned model), a run directory's ``run.json``, DAG or job spec, or a
bench's results.
Each is refused before it is opened, in one line naming it with its reader's exit code (the
code for that reader's other errors), instead of hanging or reading into memory until a
``MemoryError``. The controls: the same commands with the regular files, read as before.

A command that would hang runs in a process of its own session with a timeout, killed with
everything it started if it runs past it: a regression fails instead of hanging the suite.
Nothing writes to a FIFO here, so no process is left waiting on one.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from importlib import resources
from pathlib import Path

import pytest

from offline_iaas.bounded_read import (
    MAX_TEXT_BYTES,
    NotRegularFile,
    TooLarge,
    read_bytes,
    read_text,
    refuse_unless_regular,
)
from offline_iaas.cli import main
from offline_iaas.client.requests import piece_samples
from offline_iaas.config import load_config
from offline_iaas.data.discovery import discover_frames, find_frames
from offline_iaas.data.gwf_reader import BadFrameFile, reader
from offline_iaas.errors import ConfigError, DataError, ModelError, RunError, exit_code
from offline_iaas.job_specs import read_client_job
from offline_iaas.rundir import RunDir
from offline_iaas.workflow.make_dag import make_dag
from tests.error_catalogue import cli_error, documented
from tests.test_own_files_not_regular import within_seconds

ENDLESS = Path("/dev/zero")
TIMEOUT_SECONDS = 60
FIFO = "a FIFO (named pipe), not a regular file"
NO_REPO = 'model.repository="none"'
"""``check`` skips a repository that is not there (bbhnet's mode here: the export is
DeepClean's)."""


@pytest.fixture(scope="module")
def base(small_campaign_dir: Callable[..., Path]) -> Path:
    """The small campaign: config, frames (with ``frames.lcf``, ``injections.h5`` and
    ``synth.json``) and its exported repository, copied by each test."""
    return small_campaign_dir()


@pytest.fixture
def ws(base: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(base, tmp_path / "ws", symlinks=True))


def offline_iaas(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``offline-iaas <args>`` in ``cwd``; a test failure (its process group killed) if it
    runs past ``TIMEOUT_SECONDS``: it waits on a FIFO."""
    process = subprocess.Popen([sys.executable, "-m", "offline_iaas.cli", *args], cwd=cwd,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)
    try:
        out, err = process.communicate(timeout=TIMEOUT_SECONDS)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)  # its group: the frame reader's too
        process.communicate()
        pytest.fail(f"offline-iaas {' '.join(args)}: still running after {TIMEOUT_SECONDS} s")
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)


def refusal(cwd: Path, *args: str, code: int) -> str:
    """The one line ``offline-iaas <args>`` refuses with, after checking it exits ``code``."""
    done = offline_iaas(cwd, *args)
    assert done.returncode == code, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "Traceback" not in done.stderr and "MemoryError" not in done.stderr
    return cli_error(done.stderr)


def fifo(path: Path) -> Path:
    """``path`` made a FIFO (what was there removed)."""
    path.unlink(missing_ok=True)
    os.mkfifo(path)
    return path


def passes(cwd: Path, *args: str) -> str:
    """``offline-iaas <args>`` in ``cwd``, which must exit 0 (a control: its files are regular,
    nothing to wait on, so it runs in this process); what it printed."""
    printed = io.StringIO()
    with contextlib.chdir(cwd), contextlib.redirect_stdout(printed), \
            contextlib.redirect_stderr(printed):
        code = main(list(args))
    assert code == 0, printed.getvalue()
    return printed.getvalue()


# ---- the helper itself ------------------------------------------------------------------------


def test_only_a_regular_file_is_opened_and_each_other_kind_is_named(tmp_path: Path) -> None:
    pipe = fifo(tmp_path / "pipe")
    (tmp_path / "to-zero").symlink_to(ENDLESS)  # links are followed to what they name
    refused = {pipe: FIFO, ENDLESS: "a character device, not a regular file",
               tmp_path / "to-zero": "a character device, not a regular file",
               tmp_path: "a directory, not a regular file"}
    for path, message in refused.items():
        for read in (refuse_unless_regular, read_bytes, read_text):
            with pytest.raises(NotRegularFile) as caught:  # a FIFO: raised, not waited on
                read(path)
            assert str(caught.value) == message
    with pytest.raises(FileNotFoundError):
        refuse_unless_regular(tmp_path / "nowhere")
    (tmp_path / "text").write_text("é\n")  # the control
    refuse_unless_regular(tmp_path / "text")
    assert read_text(tmp_path / "text") == "é\n" and read_bytes(tmp_path / "text") == (
        "é\n".encode())


def test_a_file_at_the_bound_is_read_and_one_byte_more_is_not(tmp_path: Path) -> None:
    at = tmp_path / "at.txt"
    at.write_bytes(b"x" * MAX_TEXT_BYTES)
    assert len(read_text(at)) == MAX_TEXT_BYTES
    at.write_bytes(b"x" * (MAX_TEXT_BYTES + 1))
    with pytest.raises(TooLarge, match="larger than 64 MiB"):
        read_text(at)
    # a file that grows with the campaign (a frame cache, a monitor CSV) is read whole
    assert len(read_text(at, limit_bytes=None)) == MAX_TEXT_BYTES + 1


def test_a_frame_cache_beyond_the_bound_of_small_files_is_read(ws: Path) -> None:
    """A year of frames is a cache of about 100 MB: read whole, where the small files' bound
    would have refused it (a control: the same cache within it lists the same files)."""
    lines = (ws / "frames" / "frames.lcf").read_text()
    big = ws / "big.lcf"
    big.write_text(lines + "#" * MAX_TEXT_BYTES + "\n")  # a comment past the bound
    assert [f.path for f in find_frames(big)] == [
        f.path for f in find_frames(ws / "frames" / "frames.lcf")]


# ---- each reader, through the command line ----------------------------------------------------


def test_a_config_that_is_no_regular_file_is_one_line(ws: Path, capsys) -> None:
    pipe = fifo(ws / "pipe.toml")
    for command in (["check", str(pipe)], ["make-dag", str(pipe), "--out", str(ws / "run")]):
        line = refusal(ws, *command, code=exit_code(ConfigError))
        assert line == f"{pipe}: cannot read the config file: {FIFO}"
    documented("config-file-not-regular", line, {ws: "<ws>"}, exit_code=exit_code(ConfigError))
    assert not (ws / "run").exists()
    code = main(["check", str(ENDLESS)])  # not read to its end (in-process: it cannot hang)
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err and "MemoryError" not in err
    documented("config-file-endless", cli_error(err), {}, exit_code=code)
    assert cli_error(err) == ("/dev/zero: cannot read the config file: a character device, not "
                              "a regular file")
    passes(ws, "check", str(ws / "campaign.toml"))  # the control


def test_a_frame_cache_that_is_no_regular_file_is_one_line(ws: Path) -> None:
    pipe = fifo(ws / "pipe.lcf")
    line = refusal(ws, "check", str(ws / "campaign.toml"), "--set", f"data.frames={pipe}",
                   code=exit_code(DataError))
    assert line == f"cannot read frame cache {pipe}: {FIFO}"
    documented("frame-cache-not-regular", line, {ws: "<ws>"}, exit_code=exit_code(DataError))
    (ws / "zero.lcf").symlink_to(ENDLESS)
    assert refusal(ws, "check", str(ws / "campaign.toml"), "--set",
                   f"data.frames={ws / 'zero.lcf'}", code=exit_code(DataError)) == (
        f"cannot read frame cache {ws / 'zero.lcf'}: a character device, not a regular file")
    passes(ws, "check", str(ws / "campaign.toml"), "--set",  # the control
           f"data.frames={ws / 'frames' / 'frames.lcf'}")


def test_a_frame_file_listed_in_a_cache_that_is_a_fifo_is_named_as_one(base: Path, ws: Path
                                                                      ) -> None:
    """A FIFO listed in a frame cache as a frame file: named as what it is, not opened (before:
    "does not exist", which it does). The control: the same cache with the regular file."""
    cache = ws / "listed.lcf"
    cache.write_text((base / "frames" / "frames.lcf").read_text().replace(str(base), str(ws)))
    frame = ws / "frames" / "H-H1_SYNTH-1262304016-16.gwf"
    saved = frame.read_bytes()
    fifo(frame)
    check = ["check", str(ws / "campaign.toml"), "--set", f"data.frames={cache}"]
    line = refusal(ws, *check, code=exit_code(DataError))
    assert line == (f"the frame data for [1262304000, 1262304064) (frames: {cache}): frame file "
                    f"{frame} [1262304016, 1262304032) is {FIFO}")
    documented("frame-file-listed-not-regular", line, {ws: "<ws>"},
               exit_code=exit_code(DataError))
    frame.unlink()
    frame.write_bytes(saved)
    passes(ws, *check)


def test_a_fifo_in_a_frame_directory_is_named_by_check_as_a_caches_is(ws: Path) -> None:
    """A FIFO named as a frame file in the campaign's frame directory: listed by discovery and
    named by check, never opened, in the words of a cache's listed FIFO (before: discovery
    refused it itself, so a client meeting it after make-dag failed even with
    ``data.on_bad_file = "gap"``). The control: the regular file is read."""
    frame = ws / "frames" / "H-H1_SYNTH-1262304016-16.gwf"
    saved = frame.read_bytes()
    frame.unlink()
    fifo(frame)
    check = ["check", str(ws / "campaign.toml")]
    line = refusal(ws, *check, code=exit_code(DataError))
    assert line == (f"the frame data for [1262304000, 1262304064) (frames: {ws / 'frames'}): "
                    f"frame file {frame} [1262304016, 1262304032) is {FIFO}")
    frame.unlink()
    frame.write_bytes(saved)
    passes(ws, *check)


def test_a_frame_file_that_became_a_fifo_after_make_dag_is_named_by_the_clients_read(
        base: Path, ws: Path) -> None:
    """A frame file of a client's share made a FIFO after make-dag: the client's read
    (``requests.piece_samples``, the frame reader) names it before opening it, a
    ``BadFrameFile`` (exit 3; ``data.on_bad_file = "gap"`` streams around it). Before, the
    reader's LALFrame open waited for a writer: the read hung (600 s, then each file alone
    again). Under SIGALRM in this process; the reader is closed after, whatever it waits on.
    The control: the regular file, read again."""
    cache = ws / "listed.lcf"
    cache.write_text((base / "frames" / "frames.lcf").read_text().replace(str(base), str(ws)))
    run = RunDir(ws / "run")
    make_dag(load_config(ws / "campaign.toml", [f"data.frames={cache}"]), run)
    config = load_config(run.config)
    job = read_client_job(run, "client0")
    frames = discover_frames(config.data)

    def read_share() -> None:
        for piece in job.pieces:
            for _ in piece_samples(config, frames, piece):
                pass

    frame = next(f.path for f in frames if f.observatory == "H"
                 and f.gps_start < job.pieces[0].gps_end and f.gps_start > job.pieces[0].gps_start)
    saved = frame.read_bytes()
    fifo(frame)
    try:
        with within_seconds(30), pytest.raises(BadFrameFile) as caught:
            read_share()
    finally:
        reader().close()  # the old code's reader, waiting in the FIFO's open
    assert str(caught.value) == f"frame file {frame} is {FIFO}"
    assert exit_code(caught.value) == exit_code(DataError)
    documented("client-frame-file-not-regular", str(caught.value), {ws: "<ws>"},
               exit_code=exit_code(DataError))
    frame.unlink()
    frame.write_bytes(saved)
    with within_seconds(30):
        read_share()


def test_a_segment_file_that_is_no_regular_file_is_one_line(ws: Path) -> None:
    pipe = fifo(ws / "segments.txt")
    line = refusal(ws, "check", str(ws / "campaign.toml"), "--set", f"data.segments={pipe}",
                   code=exit_code(DataError))
    assert line == f"segment file {pipe} is {FIFO}"
    documented("segment-file-fifo", line, {ws: "<ws>"}, exit_code=exit_code(DataError))
    (ws / "good.txt").write_text("1262304000 1262304064\n")  # the control
    passes(ws, "check", str(ws / "campaign.toml"), "--set", f"data.segments={ws / 'good.txt'}")


def test_an_injection_file_that_is_no_regular_file_is_one_line(ws: Path) -> None:
    for name, target in (("pipe.h5", "out.xml"), ("pipe.xml", "out.h5")):
        pipe = fifo(ws / name)
        line = refusal(ws, "convert-injections", str(pipe), str(ws / target),
                       code=exit_code(ConfigError))  # as a missing one
        assert line == f"injection file {pipe} is {FIFO}"  # errors.not_a_regular_file
        assert not (ws / target).exists()
    documented("injection-file-not-regular", line, {ws: "<ws>"},
               exit_code=exit_code(ConfigError))
    passes(ws, "convert-injections", str(ws / "frames" / "injections.h5"),  # the control
           str(ws / "out.xml"))


def test_a_fifo_as_the_rejected_draws_beside_an_aframe_set_is_refused(tmp_path: Path) -> None:
    """aframe's rejected-parameters.hdf5 beside its injected set, a FIFO: refused as an
    unreadable one is, naming it and its kind, never opened (before: passed over, so the draws
    were counted from num_injections without a word). The control: the same set with nothing
    beside it is converted."""
    from tests.test_injections_aframe import aframe_file

    aframe_file(tmp_path / "waveforms.hdf5")
    pipe = fifo(tmp_path / "rejected-parameters.hdf5")
    convert = ["convert-injections", str(tmp_path / "waveforms.hdf5"), str(tmp_path / "out.xml"),
               "--approximant", "IMRPhenomPv2", "--f-lower-hz", "20"]
    line = refusal(tmp_path, *convert, code=exit_code(DataError))
    assert line == (f"{pipe} is {FIFO}: aframe's rejected draws beside waveforms.hdf5 count "
                    "its draws; give the file aframe wrote, or none")
    documented("injection-aframe-rejected-not-regular", line, {tmp_path: "<ws>"},
               exit_code=exit_code(DataError))
    assert not (tmp_path / "out.xml").exists()
    pipe.unlink()
    passes(tmp_path, *convert)


def test_an_injection_list_that_is_no_regular_file_is_one_line(ws: Path) -> None:
    pipe = fifo(ws / "injections.json")
    check = ["check", str(ws / "campaign.toml"), "--set", "model.mode=bbhnet", "--set", NO_REPO,
             "--set"]
    line = refusal(ws, *check, f"search.injections={pipe}", code=exit_code(ConfigError))
    assert line == f"search.injections: injection file {pipe} is {FIFO}"
    documented("injection-list-not-regular", line, {ws: "<ws>"},
               exit_code=exit_code(ConfigError))
    printed = passes(ws, *check, f"search.injections={ws / 'frames' / 'synth.json'}")
    assert "injection list" in printed  # the control: read and placed


def test_a_manifest_that_is_no_regular_file_is_one_line(ws: Path) -> None:
    pipe = fifo(ws / "model-repository" / "manifest.json")
    line = refusal(ws, "check", str(ws / "campaign.toml"), code=exit_code(ModelError))
    assert line == f"{pipe}: cannot read: {FIFO}"
    documented("repository-manifest-not-regular", line, {ws: "<ws>"},
               exit_code=exit_code(ModelError))


def test_a_run_whose_repository_manifest_is_no_regular_file_is_refused_by_its_pin(ws: Path
                                                                                 ) -> None:
    """The check that a run's repository still serves the model make-dag recorded (``status``,
    ``run-local``: ``repository/pinning.py``) refuses a FIFO manifest as every other reader
    of it does, not opened (before: passed over; status exited 0 and run-local started the
    servers, which refused it). The control: the regular manifest, before and after."""
    run = ws / "run"
    make_dag(load_config(ws / "campaign.toml"), RunDir(run))
    passes(ws, "status", str(run))
    manifest = ws / "model-repository" / "manifest.json"
    saved = manifest.read_bytes()
    pipe = fifo(manifest)
    line = refusal(ws, "status", str(run), code=exit_code(ModelError))
    assert line == f"{pipe}: cannot read: {FIFO}"
    documented("run-repository-manifest-not-regular", line, {ws: "<ws>"},
               exit_code=exit_code(ModelError))
    manifest.unlink()
    manifest.write_bytes(saved)
    passes(ws, "status", str(run))


def test_run_directory_records_that_are_no_regular_files_are_one_line(ws: Path) -> None:
    run = ws / "run"
    make_dag(load_config(ws / "campaign.toml"), RunDir(run))
    passes(ws, "status", str(run))  # the control, before each record is replaced
    info = run / "run.json"
    saved = info.read_bytes()
    fifo(info)
    line = refusal(ws, "status", str(run), code=exit_code(ConfigError))  # as a damaged one
    assert line.startswith(f"{info} is unreadable ({FIFO}), so nothing can check what "
                           "make-dag planned: restore it with")
    documented("run-record-not-regular", line, {ws: "<ws>"}, exit_code=exit_code(ConfigError))
    info.unlink()
    info.write_bytes(saved)
    dag = fifo(run / "offline.dag")
    line = refusal(ws, "status", str(run), code=exit_code(RunError))
    assert line == f"{dag}: cannot read: {FIFO}"
    documented("run-dag-not-regular", line, {ws: "<ws>"}, exit_code=exit_code(RunError))
    node = json.loads(saved)["clients"][0]
    job = fifo(run / "jobs" / f"{node}.json")
    line = refusal(ws, "client", "--run-dir", str(run), "--node", node,
                   code=exit_code(RunError))
    assert line == f"{job}: cannot read: {FIFO}"
    documented("job-spec-not-regular", line, {ws: "<ws>"},
               exit_code=exit_code(RunError))


def test_bench_results_that_are_no_regular_file_are_one_line(tmp_path: Path, capsys) -> None:
    config = resources.files("offline_iaas.campaigns").joinpath("o3-month-deepclean.toml")
    plan = ["plan", str(config), "--target-hours", "24", "--from-bench"]
    code = main([*plan, str(ENDLESS)])  # in-process: it cannot hang
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err and "MemoryError" not in err
    documented("bench-results-endless", cli_error(err), {}, exit_code=code)
    assert cli_error(err) == ("/dev/zero: not a bench results file (offline-iaas bench's "
                              "results.json): a character device, not a regular file")
    pipe = fifo(tmp_path / "results.json")
    line = refusal(tmp_path, *plan, str(pipe), code=exit_code(ConfigError))
    assert line == (f"{pipe}: not a bench results file (offline-iaas bench's results.json): "
                    f"{FIFO}")
    documented("bench-results-not-regular", line, {tmp_path: "<ws>"},
               exit_code=exit_code(ConfigError))
