"""The bad-input catalogue's shared parts (tests/test_bad_input.py and
test_bad_input_run_directories.py): the workspace each case copies (``base``), helpers that
break it, ``Case`` and ``check_case``, which runs a case through the real command line and
checks what it must."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from offline_iaas.client.part import PartWriter
from offline_iaas.config import load_config
from offline_iaas.job_specs import read_client_job
from offline_iaas.rundir import RunDir
from offline_iaas.workflow.make_dag import make_dag
from tests.helpers import file_hashes, processes_mentioning


@pytest.fixture(scope="module")
def base(small_campaign_dir) -> Path:
    """The small campaign, its frames and its model repository (copied by each case)."""
    return small_campaign_dir()


def run_dir(ws: Path, *overrides: str, name: str = "run") -> Path:
    """make-dag of the workspace's campaign (in-process) into ``ws/name``."""
    make_dag(load_config(ws / "campaign.toml", list(overrides)), RunDir(ws / name))
    return ws / name


def fake_parts(run: Path) -> None:
    """Complete, checksummed parts for every client (made-up statistics, no server)."""
    config = load_config(run / "campaign.toml")
    for node in json.loads((run / "run.json").read_text())["clients"]:
        segment = read_client_job(RunDir(run), node)
        writer = PartWriter(RunDir(run), segment, ("statistic",), config.stream_hash())
        for number, piece in enumerate(segment.pieces):
            rows = np.arange(piece.windows, dtype=np.float32) + 1000 * segment.index
            writer.write_checkpoint(number, 0, {"statistic": rows})
        writer.commit()


def set_sample(path: Path, channel: str, gps: float, value: float) -> None:
    """Rewrite a GWF file with one sample of ``channel`` replaced."""
    from gwpy.io.gwf import get_channel_names
    from gwpy.timeseries import TimeSeriesDict

    data = TimeSeriesDict.read(path, get_channel_names(str(path)), format="gwf")
    series = data[channel]
    series.value[int(round((gps - series.t0.value) * series.sample_rate.value))] = value
    data.write(path, format="gwf")


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def write_bytes(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


@dataclass(frozen=True)
class Case:
    """One bad input: how to make it, the command, and what the error must say."""

    id: str
    code: int
    setup: Callable[[Path], list[str]]
    """Breaks the workspace; returns the command's arguments (``{ws}`` is not expanded)."""
    names: Callable[[Path], list[str]]
    """Fragments the message must contain (the offending file, key, channel ...)."""
    lines: int = 1
    """Lines on stderr."""
    placeholders: Callable[[Path], dict[str, str]] = lambda ws: {}
    """What of this run the catalogue shows as a placeholder, besides the workspace ``<ws>``."""
    set_aside: tuple[str, ...] = ()
    """Files (relative to the workspace) the command sets aside as ``<name>.damaged``, their
    bytes kept (``completeness.set_aside``: a checksum that fails)."""


def check_case(case: Case, base: Path, tmp_path: Path,
               document: Callable[[str, dict[str | Path, str], int], None]) -> None:
    """Run ``case`` on a copy of ``base`` and check its exit code, its message (its lines, no
    traceback; ``document(message, placeholders, exit code)``: the test's call of
    ``error_catalogue.documented``, which tests/test_errors_doc.py looks for in the test's
    module), that nothing of the workspace changed or was lost, and that no process of it is
    left."""
    ws = tmp_path / "ws"
    shutil.copytree(base, ws)
    args = case.setup(ws)
    before = file_hashes(ws)
    result = subprocess.run(
        [sys.executable, "-m", "offline_iaas.cli", *args],
        capture_output=True, text=True, timeout=300,
    )
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == case.code, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == case.lines, result.stderr
    prefix = f"offline-iaas {args[0]}: error: "
    assert lines[0].startswith(prefix), lines[0]
    for fragment in case.names(ws):
        assert fragment in result.stderr, f"{fragment!r} not in {result.stderr!r}"
    document(result.stderr.strip().removeprefix(prefix),
             {ws: "<ws>", **case.placeholders(ws)}, result.returncode)
    after = file_hashes(ws)
    for path in case.set_aside:  # moved, not lost
        assert after.get(f"{path}.damaged") == before[path] and path not in after, path
        after[path] = after.pop(f"{path}.damaged")
    changed = sorted(p for p in before if after.get(p) != before[p])
    assert changed == [], f"changed or deleted: {changed}"
    leftovers = sorted(p for p in set(after) - set(before) if p.endswith(".tmp"))
    assert leftovers == [], f"temporary files left: {leftovers}"
    assert processes_mentioning(str(ws)) == []
