"""A path to an endless file where a small text file goes (``/dev/zero`` as the campaign config,
or as a bench's results): one line naming it and exit code 2, instead of reading it into memory
until a ``MemoryError``. The control: the same commands with a real file."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import pytest

from offline_iaas.bounded_read import MAX_TEXT_BYTES, TooLarge, read_text
from offline_iaas.cli import main
from tests.error_catalogue import cli_error, documented

ENDLESS = Path("/dev/zero")


def test_a_config_that_never_ends_is_one_line(capsys) -> None:
    code = main(["check", str(ENDLESS)])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err and "MemoryError" not in err
    documented("config-file-endless", cli_error(err), {}, exit_code=code)
    assert cli_error(err) == "/dev/zero: cannot read the config file: larger than 64 MiB"


def test_bench_results_that_never_end_are_one_line(capsys) -> None:
    config = resources.files("offline_iaas.campaigns").joinpath("o3-month-deepclean.toml")
    code = main(["plan", str(config), "--target-hours", "24", "--from-bench", str(ENDLESS)])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err and "MemoryError" not in err
    documented("bench-results-endless", cli_error(err), {}, exit_code=code)
    assert cli_error(err) == ("/dev/zero: not a bench results file (offline-iaas bench's "
                              "results.json): larger than 64 MiB")


def test_a_file_at_the_bound_is_read_and_one_byte_more_is_not(tmp_path: Path) -> None:
    at = tmp_path / "at.txt"
    at.write_bytes(b"x" * MAX_TEXT_BYTES)
    assert len(read_text(at)) == MAX_TEXT_BYTES
    at.write_bytes(b"x" * (MAX_TEXT_BYTES + 1))
    with pytest.raises(TooLarge, match="larger than 64 MiB"):
        read_text(at)
