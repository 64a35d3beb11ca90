"""Runs of small hand-written DAGs whose every node is one python script (``NODE_SCRIPT``), for
the local executor's tests: ``Run`` and its fixture ``make_run``, which stops by PID whatever a
test left running."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import pytest

from offline_iaas.rundir import RunDir
from offline_iaas.workflow.local import run_local
from tests.helpers import captured_log

# One script plays every node; what it does is chosen by its second argument.
NODE_SCRIPT = r"""
import json, os, signal, subprocess, sys, time

name, mode, events, sleep = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])


def mark(what, value=None):
    path = os.path.join(events, f"{name}.{what}")
    with open(path + ".tmp", "w") as f:
        f.write(repr(time.time() if value is None else value))
    os.replace(path + ".tmp", path)


def count():
    path = os.path.join(events, f"{name}.count")
    n = int(open(path).read()) + 1 if os.path.exists(path) else 1
    open(path, "w").write(str(n))
    return n


if mode in ("service", "stubborn", "crash-once"):
    n = count()
    if mode == "crash-once" and n == 1:
        sys.exit(1)
    # A grandchild in the service's process group: it must be stopped with the service.
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    mark(f"pids{n}", [os.getpid(), child.pid])
    if mode == "stubborn":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    else:
        def stop(signum, frame):
            mark("sigterm")
            sys.exit(0)
        signal.signal(signal.SIGTERM, stop)
    mark("start")
    while True:
        time.sleep(0.05)

mark("start")
print(f"{name} running", flush=True)
if mode in ("needs-server", "sigterm-parent"):
    deadline = time.time() + 20
    while not os.path.exists(os.path.join(events, "server0.start")):
        if time.time() > deadline:
            sys.exit(4)
        time.sleep(0.02)
if mode == "flaky" and count() == 1:
    print("first attempt fails", file=sys.stderr)
    sys.exit(1)
if mode.startswith("fail"):  # fail-after-b: once b has started (no race with its start)
    while mode == "fail-after-b" and not os.path.exists(os.path.join(events, "b.start")):
        time.sleep(0.02)
    count()
    print("always fails", file=sys.stderr)
    sys.exit(3)
if mode == "sigterm-parent":
    os.kill(os.getppid(), signal.SIGTERM)
time.sleep(sleep)
mark("end")
"""

SUBMIT = """# test node
universe   = vanilla
executable = {python}
arguments  = "{script} $(node) $(mode) {events} $(sleep:0)"
initialdir = {run}
log        = logs/$(node).log
output     = logs/$(node).out
error      = logs/$(node).err
max_retries = $(restarts:0)
queue
"""


def alive(pid: int) -> bool:
    """Whether a process exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] != "Z"


class Run:
    """A run directory with a hand-written DAG whose nodes are NODE_SCRIPT."""

    def __init__(self, root: Path, dag: str) -> None:
        self.dir = root / "run"
        self.events = root / "events"
        self.dir.mkdir()
        self.events.mkdir()
        script = root / "node.py"
        script.write_text(NODE_SCRIPT)
        submit = SUBMIT.format(
            python=sys.executable, script=script, events=self.events, run=self.dir
        )
        (self.dir / "node.sub").write_text(submit)
        (self.dir / "offline.dag").write_text(dag)
        self.lines: list[str] = []

    def __call__(self, **kwargs: float) -> None:
        with captured_log(self.lines):
            run_local(RunDir(self.dir), **kwargs)

    def time(self, name: str, what: str) -> float:
        return float((self.events / f"{name}.{what}").read_text())

    def has(self, name: str, what: str) -> bool:
        return (self.events / f"{name}.{what}").exists()

    def pids(self) -> list[int]:
        found = []
        for path in self.events.glob("*.pids[0-9]"):
            found += json.loads(path.read_text())
        if (self.dir / "local-state.json").exists():
            found += [n["pid"] for n in self.state().values() if n["pid"]]
        return found

    def state(self) -> dict:
        return json.loads((self.dir / "local-state.json").read_text())["nodes"]

    def index(self, text: str) -> int:
        return next(i for i, line in enumerate(self.lines) if text in line)


@pytest.fixture
def make_run(tmp_path: Path):
    runs: list[Run] = []

    class Maker:
        """``make_run(dag)``; ``make_run.again(...)`` makes another in a fresh directory."""

        def __call__(self, dag: str, root: Path | None = None) -> Run:
            run = Run(root or tmp_path, dag)
            runs.append(run)
            return run

        def again(self, dag: str | None, build=None, *args: str) -> Run:
            root = tmp_path / f"again{len(runs)}"
            root.mkdir()
            if build is not None:
                return build(lambda text: self(text, root), *args)
            return self(dag, root)

    yield Maker()
    # Whatever a failing test left behind is stopped here, by PID.
    for run in runs:
        for pid in run.pids():
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
