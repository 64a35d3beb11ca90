"""``offline-iaas status RUN | head -1``: a stdout whose reader has gone ends the command
quietly (exit 0, nothing on stderr), not "error: Broken pipe" with exit 6."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from offline_iaas.cli import main
from offline_iaas.closed_stdout import reader_gone

ENV = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}


def test_a_closed_stdout_pipe_ends_status_quietly(small_campaign_dir) -> None:
    ws = small_campaign_dir()
    run = ws / "run"
    assert main(["make-dag", str(ws / "campaign.toml"), "--out", str(run)]) == 0
    command = [sys.executable, "-m", "offline_iaas.cli", "status", str(run)]
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader gone before the first line: every write is EPIPE
    closed = subprocess.run(command, stdout=write_end, stderr=subprocess.PIPE, text=True,
                            env=ENV, timeout=120)
    os.close(write_end)
    assert (closed.returncode, closed.stderr) == (0, "")
    # as `| head -1` does: the first line read, then the pipe closed
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, env=ENV) as process:
        assert process.stdout is not None and process.stdout.readline()
        process.stdout.close()
        assert process.wait(timeout=120) == 0
        assert process.stderr is not None and process.stderr.read() == ""
    # the control: a socket's broken pipe is still an error (only stdout's reader is looked at)
    assert not reader_gone(BrokenPipeError())
