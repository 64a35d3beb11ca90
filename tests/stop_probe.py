"""``python tests/stop_probe.py RUN [STOP_FILE]``: run-local on RUN, watched as
``tests/test_server_stop.py`` needs it; prints one JSON object.

This process is a child subreaper (``PR_SET_CHILD_SUBREAPER``), so that a process orphaned by
the stop (a python-backend stub whose tritonserver exited before it) is reaped here, with its
exit status, instead of by init; and core dumps are on (``RLIMIT_CORE`` unlimited, inherited
by every node, tritonserver and its stubs). With STOP_FILE it sends run-local SIGTERM (as
DAGMan's removal or a user would) once that file exists. It reports run-local's exit code and
every orphan's name and how it ended, after the last of them has exited.
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

PR_SET_CHILD_SUBREAPER = 36
ORPHANS_SECONDS = 120.0
"""How long the orphans may take to exit after run-local (a stub notices its server's death
within about 10 s)."""


def _enable_cores() -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))


def _how(status: int) -> dict[str, object]:
    if os.WIFSIGNALED(status):
        return {"signal": signal.Signals(os.WTERMSIG(status)).name}
    return {"exit_code": os.WEXITSTATUS(status)}


def main(run_dir: Path, stop_file: Path | None) -> dict[str, object]:
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")
    _enable_cores()
    run_local = subprocess.Popen(
        [sys.executable, "-m", "offline_iaas.cli", "run-local", str(run_dir)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if stop_file is not None:
        while not stop_file.exists() and run_local.poll() is None:
            time.sleep(0.1)
        run_local.send_signal(signal.SIGTERM)
    output, _ = run_local.communicate()
    orphans = []
    deadline = time.monotonic() + ORPHANS_SECONDS
    while time.monotonic() < deadline:
        try:
            peek = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            break  # no child left
        if peek is None:
            time.sleep(0.1)
            continue
        try:
            name = Path(f"/proc/{peek.si_pid}/comm").read_text().strip()
        except OSError:
            name = "?"
        _, status = os.waitpid(peek.si_pid, 0)
        orphans.append({"pid": peek.si_pid, "name": name, **_how(status)})
    return {"run_local": run_local.returncode, "output": output, "orphans": orphans,
            "orphans_left": time.monotonic() >= deadline}


if __name__ == "__main__":
    stop = Path(sys.argv[2]) if len(sys.argv) > 2 else None
    print(json.dumps(main(Path(sys.argv[1]), stop)))
