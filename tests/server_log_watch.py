"""The suite's watch over the servers its tests start (``tests/conftest.py`` runs it after every
test): fatal signals in tritonserver's logs and server nodes that exited on their own, with the
crashes Triton brings about itself told apart; and a crashed run directory for its own tests."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

from offline_iaas.errors import RunError


def client_output(run_dir: Path) -> str:
    """What the run's clients wrote to their ``logs/client*.out``, one after another."""
    return "".join(path.read_text(errors="replace")
                   for path in sorted((run_dir / "logs").glob("client*.out")))


def crashed_run(tmp_path: Path, log: str, clients: str) -> Path:
    """A run directory whose server0 wrote ``log`` and exited on its own once (run-local
    restarted it), and whose client0 printed ``clients``: what the suite's watch reads."""
    run_dir = tmp_path / "run"
    (run_dir / "logs").mkdir(parents=True)
    (run_dir / "logs" / "server0-tritonserver.log").write_text(log)
    (run_dir / "logs" / "client0.out").write_text(clients)
    history = [{"attempt": 1, "status": "exited", "exit_code": 5},
               {"attempt": 2, "status": "stopped", "exit_code": 0}]
    nodes = {"server0": {"kind": "SERVICE", "status": "stopped", "attempts": 2,
                         "exit_code": 0, "history": history}}
    (run_dir / "local-state.json").write_text(json.dumps({"nodes": nodes}))
    return run_dir


STALLED_STUB = ("Triton's python backend declared a stalled stub not healthy and a crash "
                "followed (serve/stalled_stub.py)")
CORE_CRASH = "tritonserver crashed in Triton's own core library (serve/core_crash.py)"
STARTUP_ABORT = ("tritonserver aborted on an exception of Triton's own while loading the models "
                 "(serve/core_crash.py)")


def upstream_crashes(log: Path, clients: str) -> dict[int, tuple[int, str]]:
    """The lines of a server node's tritonserver ``log`` (read whole) of crashes Triton brought
    about itself, with ``serve``'s lines ending an epoch for a stalled stub: line number →
    (server epoch, cause). ``clients``: what the run's clients printed."""
    from offline_iaas.serve.core_crash import core_crashes, startup_aborts
    from offline_iaas.serve.stalled_stub import stalled_stub_crashes, told_not_healthy

    node = log.name.removesuffix("-tritonserver.log")
    text = log.read_text(errors="replace")
    stalled = stalled_stub_crashes(text, told_not_healthy(clients, node))
    return ({number: (epoch, CORE_CRASH) for number, epoch in core_crashes(text).items()}
            | {number: (key, STARTUP_ABORT) for number, key in startup_aborts(text).items()}
            | {number: (epoch, STALLED_STUB) for number, epoch in stalled.items()})


class ServerLogWatch:
    """What the servers started under ``root`` (the session's temporary directories) reported
    since the last look: fatal signals in tritonserver's logs (``serve/crashes.py``: Triton's
    ``Signal (N) received.`` other than a stop's, a stub's ``Fatal Python error``, ``serve``'s
    own line) and server nodes that run-local saw exit on their own (it restarts them), so
    that no crash hides behind a restart. ``tests/conftest.py`` looks after every test.

    Two kinds of crash that Triton brings about itself are told apart instead of failing the
    test, with the server node's exit that followed: the ones its python backend causes after
    declaring a stalled but live stub "not healthy" (``serve/stalled_stub.py``; a loaded
    machine stalls now and then), recognised by what the clients were answered and by where
    the first crash happened, or by ``serve`` ending such an epoch on a client's report; and
    tritonserver's crashes in Triton's own core library (``serve/core_crash.py``), recognised
    by its backtrace, or its aborts on an uncaught exception while it loads the models. They
    are kept in ``upstream``, each naming its cause, for the caller to show."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.offsets: dict[Path, int] = {}
        """Per log, the bytes and (``lines_read``) the lines already read."""
        self.lines_read: dict[Path, int] = {}
        self.exits_seen: set[tuple[Path, str, object, object]] = set()
        self.states_read: dict[Path, tuple[int, int, int]] = {}
        self.listings: dict[Path, tuple[int, bool, list[Path], list[Path]]] = {}
        """Per directory: its mtime, whether that was recent, subdirectories, files wanted."""
        self.upstream: list[str] = []
        """Crashes Triton brought about itself (their cause, then the line), not yet shown."""
        self.upstream_exits: dict[tuple[Path, str], int] = {}
        """Per run directory and node: how many of its exits such crashes account for."""
        self.upstream_epochs: dict[tuple[Path, str], set[int]] = {}
        """Per run directory and node: its server epochs (counted from 1) with such crashes."""

    def _files(self) -> Iterator[Path]:
        """The server logs and run-local states under the root. A directory is listed again
        only when its mtime moved (an entry was added or removed) or was recent at the last
        look (mtimes are coarse), so that a look costs a stat per directory."""
        stack = [self.root]
        while stack:
            directory = stack.pop()
            try:
                mtime = directory.stat().st_mtime_ns
            except OSError:
                continue
            cached = self.listings.get(directory)
            if cached is None or cached[0] != mtime or cached[1]:
                try:
                    entries = list(os.scandir(directory))
                except OSError:
                    continue
                recent = time.time_ns() - mtime < 2_000_000_000
                subdirectories = [Path(e.path) for e in entries if e.is_dir(follow_symlinks=False)]
                wanted = [Path(e.path) for e in entries if e.is_file(follow_symlinks=False) and (
                    e.name.endswith("tritonserver.log") or e.name == "local-state.json")]
                cached = self.listings[directory] = (mtime, recent, subdirectories, wanted)
            stack += cached[2]
            yield from cached[3]

    def _fatal(self, log: Path) -> list[str]:
        from offline_iaas.serve.crashes import SERVE_PREFIX, fatal_lines
        from offline_iaas.serve.stalled_stub import ended_epoch_lines

        start = self.offsets.get(log, 0)
        try:
            with open(log, "rb") as f:
                f.seek(start)
                new = f.read()
        except OSError:
            return []
        complete = new[: new.rfind(b"\n") + 1]  # a line still being written: next time
        if not complete:
            return []
        first_line = self.lines_read.get(log, 0) + 1
        self.offsets[log] = start + len(complete)
        text = complete.decode(errors="replace")
        lines = text.splitlines()
        self.lines_read[log] = first_line - 1 + len(lines)
        found = []
        events = {fatal.line_number: f"{fatal.process} died by {fatal.signal}:\n    "
                  + "\n    ".join(lines[fatal.line_number - first_line:][:12])
                  for fatal in fatal_lines(text, first_line)}
        events |= {number: "serve " + lines[number - first_line].removeprefix(SERVE_PREFIX)
                   for number in ended_epoch_lines(text, first_line)}
        upstream = self._upstream_lines(log) if events else {}
        for number, what in sorted(events.items()):
            if number in upstream:
                self.upstream.append(f"{upstream[number]}: {log} line {number}: {what}")
            else:
                found.append(f"{log} line {number}: {what}")
        return found

    def _upstream_lines(self, log: Path) -> dict[int, str]:
        """The fatal lines of ``log`` (read whole) of crashes Triton brought about itself, and
        ``serve``'s lines ending an epoch for a stalled stub: line number → the cause; each
        epoch of them accounts for one exit of the server node."""
        run_dir, node = log.parent.parent, log.name.removesuffix("-tritonserver.log")
        counted = upstream_crashes(log, client_output(run_dir))
        epochs = {epoch for epoch, _ in counted.values()}
        seen = self.upstream_epochs.setdefault((run_dir, node), set())
        self.upstream_exits[(run_dir, node)] = (
            self.upstream_exits.get((run_dir, node), 0) + len(epochs - seen))
        seen |= epochs
        return {number: cause for number, (_, cause) in counted.items()}

    def _exits(self, state_path: Path) -> list[str]:
        from offline_iaas import records
        from offline_iaas.local_state import LocalState
        from offline_iaas.serve.crashes import service_exits

        try:
            found_stat = state_path.stat()
        except OSError:
            return []
        # the file as written: a rewrite within the clock's tick changes its inode or size
        written = (found_stat.st_mtime_ns, found_stat.st_size, found_stat.st_ino)
        if self.states_read.get(state_path) == written:
            return []
        self.states_read[state_path] = written
        found = []
        try:
            state = records.read_optional(LocalState, state_path)
        except RunError:  # a test damaged it on purpose (its own refusal is that test's)
            return []
        for node, attempts in service_exits(state).items():
            for attempt in attempts:
                key = (state_path, node, attempt.attempt, attempt.started)
                if key in self.exits_seen:
                    continue
                self.exits_seen.add(key)
                if self.upstream_exits.get((state_path.parent, node), 0) > 0:
                    self.upstream_exits[(state_path.parent, node)] -= 1
                    continue  # what a crash Triton brought about itself made serve do
                found.append(f"{state_path}: server node {node} exited on its own (attempt "
                             f"{attempt.attempt}, exit code {attempt.exit_code})"
                             "; run-local restarts such a node")
        return found

    def problems(self, exits_expected: bool, crashes_expected: bool) -> list[str]:
        """What went wrong since the last call (everything is read once, whether expected or
        not): fatal lines unless ``crashes_expected``, server exits unless
        ``exits_expected``. Crashes told apart as Triton's own are kept in ``upstream`` only
        when crashes were not expected."""
        crashes, exits = [], []
        upstream_before = len(self.upstream)
        paths = sorted(self._files(), key=lambda path: path.name == "local-state.json")
        for path in paths:  # the logs first: their crashes may account for a node's exit
            if path.name == "local-state.json":
                exits += self._exits(path)
            else:
                crashes += self._fatal(path)
        if crashes_expected:  # a test's own kill can look like Triton's; it is not one
            del self.upstream[upstream_before:]
        return ([] if crashes_expected else crashes) + ([] if exits_expected else exits)
