"""``report`` and ``status`` of a run whose files are no regular files (a bad-input hunt): a
monitor CSV or a tritonserver log that is a FIFO (whose ``open`` waits for a writer for ever)
or a link to ``/dev/zero`` (which never ends) is not opened; the report names a monitor CSV it
cannot read on its page and draws the rest. Each command runs in a subprocess with a timeout:
before, it hung."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from offline_iaas.cli import main
from tests.error_catalogue import cli_error
from tests.test_report import write_monitor
from tests.test_report_damaged_run import finished_run


@pytest.fixture
def run_dir(small_campaign_dir, tmp_path: Path) -> Path:
    """A finished small run (``finished_run``) with a good monitor CSV."""
    run = finished_run(small_campaign_dir, tmp_path)
    (run / "monitor").mkdir(exist_ok=True)
    write_monitor(run / "monitor" / "server0.csv", 1000.0)
    return run


def command(*args: str) -> subprocess.CompletedProcess[str]:
    """The command line in a child process, killed after 120 s (a hang fails the test)."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1] / "src")}
    return subprocess.run([sys.executable, "-m", "offline_iaas.cli", *args],
                          capture_output=True, text=True, timeout=120, env=env)


def special(path: Path, kind: str) -> None:
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")


@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_report_names_a_monitor_csv_that_is_no_regular_file_and_draws_the_rest(
        run_dir: Path, kind: str) -> None:
    bad = run_dir / "monitor" / "server9.csv"
    bad.write_text((run_dir / "monitor" / "server0.csv").read_text())
    assert main(["report", str(run_dir)]) == 0  # control: two good CSVs, both drawn (here:
    page = (run_dir / "report" / "index.html").read_text()  # regular files, nothing waits)
    assert "server throughput" in page and "cannot read the monitor CSV" not in page
    bad.unlink()
    special(bad, kind)  # before: report hung in open() or read()
    done = command("report", str(run_dir))
    assert done.returncode == 0, done.stderr
    page = (run_dir / "report" / "index.html").read_text()
    what = "a FIFO (named pipe)" if kind == "fifo" else "a character device"
    assert f"{bad}: cannot read the monitor CSV: {what}, not a regular file" in page
    assert "server throughput" in page  # server0's CSV still drawn


@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_status_and_report_skip_a_tritonserver_log_that_is_no_regular_file(
        run_dir: Path, kind: str) -> None:
    log = run_dir / "logs" / "server0-tritonserver.log"
    log.write_text("I1207 server started\n")
    assert main(["status", str(run_dir)]) == 0  # control: a regular log (in this process)
    log.unlink()
    special(log, kind)  # before: status and report hung reading it for crash lines
    done = command("status", str(run_dir))
    assert done.returncode == 0, cli_error(done.stderr)
    assert command("report", str(run_dir)).returncode == 0
