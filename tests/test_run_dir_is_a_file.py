"""A file named where a run directory goes (``offline-iaas status campaign.toml``) is "not a
run directory", the line ``report`` gives, not "…/campaign.toml/offline.dag: cannot read:
[Errno 20] Not a directory"; the file is left as it was."""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from offline_iaas.cli import main
from offline_iaas.errors import file_in_the_way, os_error_text
from tests.error_catalogue import cli_error, documented

COMMANDS = (["status", "{run}"], ["status", "--json", "{run}"], ["report", "{run}"],
            ["run-local", "{run}"], ["merge", "--run-dir", "{run}"])


def test_a_file_given_as_the_run_directory_is_not_a_run_directory(
        small_config_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = small_config_file.read_bytes()
    said = {}
    for command in COMMANDS:
        code = main([a.format(run=small_config_file) for a in command])
        [line] = capsys.readouterr().err.strip().splitlines()
        said[" ".join(command[:-1])] = (code, cli_error(line))
    assert small_config_file.read_bytes() == before
    assert len(set(said.values())) == 1, said  # status's, run-local's, merge's: report's line
    code, message = said["status"]
    documented("run-directory-is-a-file", message, {small_config_file: "<ws>/campaign.toml"},
               exit_code=code)


def test_a_file_where_a_command_makes_a_directory_is_named_as_that(
        small_campaign_dir: Callable[..., Path], capsys: pytest.CaptureFixture[str]) -> None:
    """``RUN/logs`` (run-local's) or ``RUN/report`` (report's) replaced by a file: the file
    is named as one where a directory goes (was ``File exists: <path>``), exit 6, the file
    kept; a file above the directory wanted is named with the path it blocks."""
    root = small_campaign_dir()
    run = root / "run"
    assert main(["make-dag", str(root / "campaign.toml"), "--out", str(run)]) == 0
    capsys.readouterr()
    said = []
    for command, directory in ((["run-local"], run / "logs"), (["report"], run / "report")):
        shutil.rmtree(directory, ignore_errors=True)
        directory.write_text("a file\n")
        code = main([*command, str(run)])
        said.append((code, cli_error(capsys.readouterr().err.strip().splitlines()[-1])))
        assert directory.read_text() == "a file\n"
    assert said[1] == (6, f"{run / 'report'} is a file, not a directory")
    documented("directory-is-a-file", said[0][1], {run: "<run>"}, exit_code=said[0][0])
    blocked = OSError(errno.ENOTDIR, "Not a directory", str(run / "report" / "index.html"))
    assert os_error_text(blocked) == (f"{run / 'report'} is a file, not a directory "
                                      f"(on the way to {run / 'report' / 'index.html'})")
    (run / "report").unlink()  # control: nothing in the way, the OS's words
    assert os_error_text(blocked) == f"Not a directory: {run / 'report' / 'index.html'}"
    assert os_error_text(FileExistsError(errno.EEXIST, "File exists", str(run))) == (
        f"File exists: {run}")  # a directory that is there is not "a file"
    link = FileExistsError(errno.EEXIST, "File exists", str(run / "run.json"), None,
                           str(run / "token"))
    assert os_error_text(link) == f"File exists: {run / 'run.json'} -> {run / 'token'}"  # os.link


def test_a_symbolic_link_loop_given_as_an_output_directory_is_named_as_that(
        small_campaign_dir: Callable[..., Path], capsys: pytest.CaptureFixture[str]) -> None:
    """``--out`` a link to itself: synth raised pathlib's RuntimeError (a traceback), make-dag
    and train-demo said ``File exists``; the link is left as it is."""
    root = small_campaign_dir(export=False)
    config, loop = root / "campaign.toml", root / "loop"
    loop.symlink_to(loop.name)
    for command in (["synth", str(config), "--out", str(loop)],
                    ["make-dag", str(config), "--out", str(loop), "--no-check"]):
        code = main(command)
        [line] = capsys.readouterr().err.strip().splitlines()
        assert (code, cli_error(line)) == (6, f"{loop} is a symbolic link that leads nowhere (a "
                                              "loop, or its target is missing), not a directory")
        assert loop.is_symlink() and os.readlink(loop) == loop.name
    documented("output-directory-link-loop", cli_error(line), {loop: "<ws>/loop"}, exit_code=6)
    loop.unlink()  # control: a link to a directory is one
    (root / "out").mkdir()
    loop.symlink_to("out")
    assert file_in_the_way(FileExistsError(errno.EEXIST, "File exists", str(loop))) is None
