"""Fault injection for tests: a node fails on purpose where ``RUN/faults.json`` says.

The test hook of ``offline_iaas.hooks`` (``tests/conftest.py`` sets
``OFFLINE_IAAS_TEST_HOOK`` to this file's ``inject``), called where a node reaches a point.

``faults.json`` maps a node to the faults it suffers, e.g.::

    {"client1": [{"point": "mid-stream", "action": "exit", "times": 1}]}

``point`` names a place in the node's code (``start``, ``mid-stream``, ``mid-write``),
``action`` is ``exit`` (exit code 1 with a message), ``sigkill`` (the process kills itself),
``pause`` (sleep ``seconds``), ``barrier`` (wait, up to ``seconds``, until ``count`` nodes
have reached the point, then ``hold`` seconds more: they are all there at once), ``wait``
(wait, up to ``seconds``, until the test writes the file ``path``, relative to the run
directory: ``go``), ``enospc``
(raise the ``OSError`` a full disk gives a write to ``path``, relative to the run directory)
``fill`` (fill the run directory's filesystem, a test's small tmpfs, with the file
``path``: the node's next write fails for real) or ``truncate`` (cut the newest file matching
the glob ``path`` to ``bytes`` bytes, its mtime kept; then the node goes on to its next
fault), and ``times`` how many attempts suffer it.
Attempts already hit are counted in ``RUN/faults-state.json``. Without ``faults.json``
nothing happens.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import sys
import time
from pathlib import Path

from offline_iaas.atomic import write_text_atomic


def inject(run_dir: Path, node: str, point: str) -> None:
    """Suffer the fault planned for ``node`` at ``point``, if any is left."""
    plan_path = run_dir / "faults.json"
    if not plan_path.exists():
        return
    faults = json.loads(plan_path.read_text()).get(node, [])
    state_path = run_dir / "faults-state.json"
    state = json.loads(state_path.read_text()) if state_path.exists() else {}
    for number, fault in enumerate(faults):
        if fault["point"] != point:
            continue
        key = f"{node}:{number}"
        if state.get(key, 0) >= fault.get("times", 1):
            continue
        state[key] = state.get(key, 0) + 1
        write_text_atomic(state_path, json.dumps(state))
        action = fault.get("action", "exit")
        print(f"{node}: injected fault '{action}' at {point}", flush=True)
        if action == "sigkill":
            os.kill(os.getpid(), signal.SIGKILL)
        elif action == "pause":
            time.sleep(float(fault.get("seconds", 5)))
        elif action == "barrier":
            arrived = run_dir / "barrier" / point
            arrived.mkdir(parents=True, exist_ok=True)
            (arrived / node).touch()
            deadline = time.monotonic() + float(fault.get("seconds", 300))
            while _arrivals(arrived) < int(fault["count"]):
                if time.monotonic() > deadline:
                    print(f"{node}: barrier at {point}: only {_arrivals(arrived)} of "
                          f"{fault['count']} came", file=sys.stderr, flush=True)
                    sys.exit(1)
                time.sleep(0.2)
            time.sleep(float(fault.get("hold", 0)))
        elif action == "wait":
            deadline = time.monotonic() + float(fault.get("seconds", 300))
            while not (run_dir / fault["path"]).exists():
                if time.monotonic() > deadline:
                    print(f"{node}: {fault['path']} not written at {point}", file=sys.stderr,
                          flush=True)
                    sys.exit(1)
                time.sleep(0.2)
        elif action == "enospc":
            path = run_dir / fault.get("path", "")
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        elif action == "fill":
            fill(run_dir / fault.get("path", "filler"))
        elif action == "truncate":
            truncate_newest(run_dir, fault["path"], int(fault.get("bytes", 0)))
        else:
            print(f"{node}: injected failure at {point}", file=sys.stderr, flush=True)
            sys.exit(1)


def truncate_newest(run_dir: Path, pattern: str, size: int) -> None:
    """Cut the newest file matching ``pattern`` (a glob relative to the run directory) to
    ``size`` bytes, its modification time kept: what a power loss leaves of a file renamed
    into place before its bytes reached the disk."""
    path = max(run_dir.glob(pattern), key=lambda p: p.stat().st_mtime_ns)
    times = path.stat()
    os.truncate(path, size)
    os.utime(path, ns=(times.st_atime_ns, times.st_mtime_ns))
    print(f"truncated {path} to {size} bytes", flush=True)


def fill(path: Path) -> None:
    """Write ``path`` until its filesystem has no byte left."""
    with open(path, "ab", buffering=0) as f:
        for block in (1 << 20, 1 << 12, 1):
            try:
                while True:
                    f.write(b"\0" * block)
            except OSError as err:
                if err.errno != errno.ENOSPC:
                    raise


def _arrivals(arrived: Path) -> int:
    """Nodes (and the test) at a barrier; none once the run directory was moved (a test that
    moves it: the node waits on, until it is stopped)."""
    try:
        return len(list(arrived.iterdir()))
    except FileNotFoundError:
        return 0


HELD = {"point": "mid-stream", "action": "barrier", "count": 2, "seconds": 120}
"""A client's fault: it waits mid-stream, its sequence open, until the test calls ``release``
(a timed pause can end before the test acts on a loaded machine: the client then finishes
untouched)."""


def until_published(clients: int) -> dict[str, list[dict]]:
    """Faults holding ``client0`` .. ``client<clients - 1>`` at their start until the test
    calls ``go_when_published`` (a client's server deadlines then measure the fault, not how
    slowly the servers start on a loaded machine)."""
    hold = {"point": "start", "action": "wait", "path": "go", "seconds": 600}
    return {f"client{i}": [hold] for i in range(clients)}


def go_when_published(run_dir: Path, servers: list[str], seconds: float = 300) -> None:
    """Let the clients held by ``until_published`` go once every server of ``servers`` has
    published its address."""
    deadline = time.monotonic() + seconds
    while not all((run_dir / "servers" / f"{s}.json").exists() for s in servers):
        if time.monotonic() > deadline:
            raise AssertionError(f"{servers} not all published within {seconds} s")
        time.sleep(0.2)
    (run_dir / "go").touch()


def release(run_dir: Path, point: str = "mid-stream") -> None:
    """Let the client held at ``point`` (``HELD``) go on: the test is the barrier's second
    arrival."""
    arrived = run_dir / "barrier" / point
    arrived.mkdir(parents=True, exist_ok=True)
    (arrived / "test").touch()
