"""Fault injection for tests: a node fails on purpose where ``RUN/faults.json`` says.

The test hook of ``offline_iaas.hooks`` (``tests/conftest.py`` sets
``OFFLINE_IAAS_TEST_HOOK`` to this file's ``inject``), called where a node reaches a point.

``faults.json`` maps a node to the faults it suffers, e.g.::

    {"client1": [{"point": "mid-stream", "action": "exit", "times": 1}]}

``point`` names a place in the node's code (``start``, ``mid-stream``, ``mid-write``),
``action`` is ``exit`` (exit code 1 with a message), ``sigkill`` (the process kills itself),
``pause`` (sleep ``seconds``), ``barrier`` (wait, up to ``seconds``, until ``count`` nodes
have reached the point, then ``hold`` seconds more: they are all there at once), ``enospc``
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
            while len(list(arrived.iterdir())) < int(fault["count"]):
                if time.monotonic() > deadline:
                    print(f"{node}: barrier at {point}: only "
                          f"{len(list(arrived.iterdir()))} of {fault['count']} came",
                          file=sys.stderr, flush=True)
                    sys.exit(1)
                time.sleep(0.2)
            time.sleep(float(fault.get("hold", 0)))
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


HELD = {"point": "mid-stream", "action": "barrier", "count": 2, "seconds": 120}
"""A client's fault: it waits mid-stream, its sequence open, until the test calls ``release``
(a timed pause can end before the test acts on a loaded machine: the client then finishes
untouched)."""


def release(run_dir: Path, point: str = "mid-stream") -> None:
    """Let the client held at ``point`` (``HELD``) go on: the test is the barrier's second
    arrival."""
    arrived = run_dir / "barrier" / point
    arrived.mkdir(parents=True, exist_ok=True)
    (arrived / "test").touch()
