"""run-local's terminal output: plain lines without control characters when not on a terminal,
a live count of nodes on one; and the attempt history it keeps in ``local-state.json``."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest

from offline_iaas.config import load_config
from offline_iaas.data.synth import write_synthetic_dataset
from offline_iaas.repository.export import export_repository
from offline_iaas.rundir import RunDir
from offline_iaas.workflow.local import run_local
from offline_iaas.workflow.make_dag import make_dag
from offline_iaas.workflow.progress import RunProgress, count_states
from tests.helpers import SMALL_CAMPAIGN, package_level, processes_mentioning

CONTROL = [chr(c) for c in range(32) if chr(c) != "\n"] + ["\x7f"]
"""Characters no line of a batch job's log may hold (escape sequences, carriage returns)."""


def _stop_group(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@pytest.mark.slow
def test_run_local_prints_plain_lines_when_not_a_terminal(tmp_path: Path) -> None:
    (tmp_path / "campaign.toml").write_text(SMALL_CAMPAIGN)
    config = load_config(tmp_path / "campaign.toml", ["data.duration=16"])
    write_synthetic_dataset(config)
    export_repository(config)
    run_dir = tmp_path / "run"
    make_dag(config, RunDir(run_dir))
    command = [str(Path(sys.executable).parent / "offline-iaas"), "run-local", str(run_dir)]
    # a terminal type that supports colour: still no escape codes, since stdout is a pipe
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "120"}
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, env=env, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=240)
    finally:
        _stop_group(proc)
    assert processes_mentioning(str(run_dir)) == []
    text = out.decode()
    assert proc.returncode == 0, err.decode()
    assert [c for c in CONTROL if c in text + err.decode()] == []
    lines = text.splitlines()
    assert "server0: started (service)" in lines
    assert "client0: started (attempt 1/3)" in lines
    for node in ("client0", "client1", "shard0", "merge", "final"):
        assert any(line.startswith(f"{node}: done in ") for line in lines), node
    assert lines[-1].startswith("run-local: 5 nodes done in ")  # the FINAL node too
    # every attempt is in the state file, the servers' too
    nodes = json.loads((run_dir / "local-state.json").read_text())["nodes"]
    assert [h["status"] for h in nodes["client0"]["history"]] == ["done"]
    assert [h["status"] for h in nodes["server0"]["history"]] == ["stopped"]


FLAKY = """
import pathlib, sys
count = pathlib.Path(sys.argv[1])
n = int(count.read_text()) + 1 if count.exists() else 1
count.write_text(str(n))
sys.exit(1 if n == 1 else 0)
"""


def test_local_state_keeps_every_attempt_of_a_retried_node(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (tmp_path / "flaky.py").write_text(FLAKY)
    (run_dir / "flaky.sub").write_text(
        f"executable = {sys.executable}\narguments = \"{tmp_path / 'flaky.py'} "
        f"{tmp_path / 'count'}\"\ninitialdir = {run_dir}\noutput = logs/a.out\n"
        "error = logs/a.err\nqueue\n"
    )
    (run_dir / "offline.dag").write_text("JOB a flaky.sub\nRETRY a 2\n")
    states: list[dict[str, tuple[str, str]]] = []
    run_local(RunDir(run_dir), on_state=states.append)
    history = json.loads((run_dir / "local-state.json").read_text())["nodes"]["a"]["history"]
    assert [(h["attempt"], h["status"], h["exit_code"]) for h in history] == [
        (1, "failed", 1), (2, "done", 0)]
    times = [datetime.fromisoformat(h[k]) for h in history for k in ("started", "ended")]
    assert times == sorted(times)
    assert [s["a"] for s in states][-1] == ("JOB", "done")
    assert ("JOB", "running") in [s["a"] for s in states]


def test_states_are_counted_per_job_and_services_apart() -> None:
    states = {"server0": ("SERVICE", "running"), "server1": ("SERVICE", "exited"),
              "client0": ("JOB", "done"), "client1": ("JOB", "complete"),
              "client2": ("JOB", "prerun"), "client3": ("JOB", "failed"),
              "merge": ("JOB", "not-run"), "final": ("FINAL", "pending")}
    assert count_states(states) == {"total": 6, "done": 2, "running": 1, "failed": 1,
                                    "not run": 1, "waiting": 1, "services": 1}


def test_plain_lines_when_the_stream_is_not_a_terminal() -> None:
    stream = io.StringIO()
    with package_level() as log, RunProgress(stream) as progress:
        assert not progress.interactive
        log.info("client0: started (attempt 1/3)")
        progress.update({"client0": ("JOB", "running")})
        log.info("client0: done in 1.0 s")
    assert stream.getvalue() == "client0: started (attempt 1/3)\nclient0: done in 1.0 s\n"


def test_live_display_counts_the_jobs() -> None:
    stream = io.StringIO()
    with package_level() as log, RunProgress(stream, interactive=True) as progress:
        log.info("client0: done in 1.0 s")
        progress.update({"server0": ("SERVICE", "running"), "client0": ("JOB", "done"),
                         "client1": ("JOB", "running"), "merge": ("JOB", "pending")})
    text = stream.getvalue()
    assert "client0: done in 1.0 s" in text
    assert "1/3" in text and "1 running, 0 failed, 0 not run, 1 waiting; servers up: 1" in text
