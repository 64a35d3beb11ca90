"""Terminal output: --quiet / --verbose, and the client/merge progress (bar or plain lines)."""

from __future__ import annotations

import logging
import re
import subprocess
import sys
from io import StringIO
from pathlib import Path

import pytest

from offline_iaas.cli import build_parser
from offline_iaas.config import load_config
from offline_iaas.data.synth import write_synthetic_dataset
from offline_iaas.logs import QUIET, VERBOSE, CountProgress
from tests.helpers import package_level

CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")  # anything but \t and \n


def offline_iaas(*args: str | Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "offline_iaas.cli", *map(str, args)],
        capture_output=True, text=True, timeout=120,
    )


@pytest.fixture
def frames_config(small_config_file: Path) -> Path:
    write_synthetic_dataset(load_config(small_config_file))
    return small_config_file


def test_quiet_and_verbose_check(frames_config: Path) -> None:
    normal = offline_iaas("check", frames_config)
    assert normal.returncode == 0, normal.stderr
    lines = normal.stdout.splitlines()
    assert "check: OK" in lines and not any("check: frame " in line for line in lines)

    quiet = offline_iaas("-q", "check", frames_config)
    assert quiet.returncode == 0, quiet.stderr
    assert quiet.stdout == ""

    verbose = offline_iaas("check", frames_config, "--verbose")
    assert verbose.returncode == 0, verbose.stderr
    more = verbose.stdout.splitlines()
    frames = [line for line in more if line.startswith("check: frame ")]
    assert len(frames) == 8  # 64 s of 16 s files, two detectors
    assert [line for line in more if line not in frames] == lines


@pytest.mark.parametrize("before, after", [
    (["-q", "check", "c.toml"], ["check", "c.toml", "--quiet"]),
    (["-v", "check", "c.toml"], ["check", "c.toml", "--verbose"]),
])
def test_verbosity_reads_the_same_before_or_after_the_command(before, after) -> None:
    """The runs above give ``-q`` before the command and ``--verbose`` after it; the other
    places parse to the same flags (and the flags are not both off, the control)."""
    parse = build_parser().parse_args
    flags = [(parse(args).quiet, parse(args).verbose) for args in (before, after)]
    assert flags[0] == flags[1] and any(flags[0])


def test_quiet_still_prints_errors(small_config_file: Path, tmp_path: Path) -> None:
    result = offline_iaas("-q", "check", small_config_file)  # no frames written
    assert result.returncode != 0
    assert result.stdout == ""
    assert "offline-iaas check: error:" in result.stderr


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_plain_progress_lines_every_interval() -> None:
    stream, clock = StringIO(), FakeClock()
    with package_level() as log, CountProgress("client0", "data-s", stream, clock=clock,
                                               interval=10) as progress:
        assert not progress.interactive  # a StringIO is not a terminal
        log.info("client0: streaming 1 piece(s)")
        log.debug("client0: 3 requests sent (0.3/s)")  # not shown without -v
        progress.start(100.0, completed=20.0)
        clock.now += 5
        progress.advance(10.0)  # before the interval: no line
        clock.now += 5
        progress.advance(10.0)
        clock.now += 3
        progress.advance(10.0)
    lines = stream.getvalue().splitlines()
    assert lines == [
        "client0: streaming 1 piece(s)",
        "client0: 40/100 data-s (40%), 2.0 data-s/s, ETA 0:00:30",
    ]
    assert not CONTROL.search(stream.getvalue())


def test_plain_progress_quiet_and_verbose() -> None:
    quiet, verbose, clock = StringIO(), StringIO(), FakeClock()
    for stream, verbosity in ((quiet, QUIET), (verbose, VERBOSE)):
        level = {QUIET: logging.WARNING, VERBOSE: logging.DEBUG}[verbosity]
        with package_level(level) as log, CountProgress(
            "merge", "windows", stream, verbosity=verbosity, clock=clock, interval=0
        ) as progress:
            log.info("merge: info")
            log.warning("warning: something odd")
            log.debug("merge: detail")
            progress.start(8)
            progress.note("part 1/2 (client0)")
            clock.now += 1
            progress.advance(4)
    assert quiet.getvalue().splitlines() == ["warning: something odd"]
    lines = verbose.getvalue().splitlines()
    assert lines[:3] == ["merge: info", "warning: something odd", "merge: detail"]
    assert lines[-1] == "merge: 4/8 windows (50%), 4.0 windows/s, ETA 0:00:01; part 1/2 (client0)"
    assert not CONTROL.search(verbose.getvalue())


def test_terminal_renders_a_bar(monkeypatch) -> None:
    from rich.console import Console

    stream = StringIO()
    console = Console(force_terminal=True, file=stream, width=120)
    monkeypatch.setattr("rich.console.Console", lambda file=None, **kw: console)
    clock = FakeClock()
    with package_level() as log, CountProgress("client0", "data-s", stream, interactive=True,
                                               clock=clock) as progress:
        log.info("client0: streaming")
        progress.start(100.0)
        clock.now += 10
        progress.advance(50.0)
    out = stream.getvalue()
    assert "\x1b[" in out  # a live display draws with escape sequences
    assert "client0: streaming" in out
    assert "50/100 data-s (50%), 5.0 data-s/s, ETA 0:00:10" in out
    assert "━" in out  # the bar

