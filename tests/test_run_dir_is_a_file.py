"""A file named where a run directory goes (``offline-iaas status campaign.toml``) is "not a
run directory", the line ``report`` gives, not "…/campaign.toml/offline.dag: cannot read:
[Errno 20] Not a directory"; the file is left as it was."""

from __future__ import annotations

from pathlib import Path

import pytest

from offline_iaas.cli import main
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
