"""run-local's guardian: a small process that stops run-local's nodes if run-local dies
without stopping them (SIGKILL, the out-of-memory killer).

Each node already gets SIGTERM when run-local dies (``lifetime.die_with_parent``), but a node
that dies of it leaves its own children running; the guardian stops whole process groups as
run-local's own stop does: SIGTERM (and SIGCONT), then SIGKILL after the stop timeout (the
loop of ``lifetime.stop_or_kill``, written out again: the guardian runs as ``python -I -c``
and imports nothing of the package). It runs
in its own session (a closed terminal's SIGHUP does not reach it) and learns the groups
through a pipe from run-local: ``+PGID`` when a node starts, ``-PGID`` when run-local reaped
it, ``done`` when run-local ends normally. An end of file without ``done`` means run-local
died.
"""

from __future__ import annotations

import os
import subprocess
import sys

# Run with ``python -I -c``: only the standard library, nothing of the package imported.
_GUARDIAN = r"""
import os, signal, sys, time

grace = float(sys.argv[1])
groups = set()
for line in sys.stdin:
    word = line.strip()
    if word == "done":
        sys.exit(0)
    if word[:1] == "+":
        groups.add(int(word[1:]))
    elif word[:1] == "-":
        groups.discard(int(word[1:]))


def signal_groups(signum):
    for pgid in list(groups):
        try:
            os.killpg(pgid, signum)
        except (ProcessLookupError, PermissionError):
            groups.discard(pgid)


signal_groups(signal.SIGTERM)
signal_groups(signal.SIGCONT)
deadline = time.monotonic() + grace
while groups and time.monotonic() < deadline:
    time.sleep(0.1)
    signal_groups(0)
signal_groups(signal.SIGKILL)
"""


class Guardian:
    """The guardian process of one run-local, and the pipe to it."""

    def __init__(self, grace_seconds: float) -> None:
        read_fd, self._write_fd = os.pipe()  # neither end is inherited by the nodes
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-I", "-c", _GUARDIAN, f"{grace_seconds:g}"],
                stdin=read_fd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        finally:
            os.close(read_fd)

    def _say(self, word: str) -> None:
        try:
            os.write(self._write_fd, f"{word}\n".encode())
        except OSError:  # the guardian is gone (killed): the nodes still die with run-local
            pass

    def started(self, pgid: int) -> None:
        """A node's process group to stop should run-local die."""
        self._say(f"+{pgid}")

    def ended(self, pgid: int) -> None:
        """A group run-local has reaped (its PGID may be reused from now on)."""
        self._say(f"-{pgid}")

    def close(self) -> None:
        """run-local stopped every node itself: the guardian exits doing nothing."""
        self._say("done")
        os.close(self._write_fd)
        self.proc.wait()
