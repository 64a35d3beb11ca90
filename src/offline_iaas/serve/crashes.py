"""Crashes of server nodes, read back from the run directory: which node, which process,
which signal, and where its stack trace is.

Three writers leave the evidence, all in ``logs/<node>-tritonserver.log`` (tritonserver's own
stdout and stderr, which its python-backend stubs share):

* Triton prints ``Signal (N) received.`` for every signal it handles. A normal stop prints it
  with N = 15 (SIGTERM; once per SIGTERM, so twice when run-local signals the node's group
  and ``serve`` signals tritonserver), and N = 2 for SIGINT; any other N is a fatal signal, and
  Triton's backtrace follows the line. Except in a stop's forced exit: a stop that finds
  sequences still open waits ``--exit-timeout-secs``, says "Exit timeout expired. Exiting
  immediately." and exits under the requests it dropped, where gRPC can abort (``ASSERTION
  FAILED: grpc_cq_begin_op``, then ``Signal (6)``; CI at ``b19b80e``): that signal ends the
  stop that was asked for, and the process would have exited anyway; it is no crash.
* A python-backend stub of the project's models prints ``Fatal Python error: <what>`` and
  its threads' stacks on a fatal signal (every model enables ``faulthandler``); Triton itself
  says nothing of a stub that dies while the model is unloaded.
* ``serve`` appends ``offline-iaas serve: tritonserver (pid N) died by signal SIGX`` when
  tritonserver ends by a signal it was not sent by ``serve`` (a crash, or the kernel's
  out-of-memory killer, which Triton cannot print), and ``offline-iaas serve: python-backend
  stub <instance> (pid N) died by signal SIGX while serving`` when a stub dies under a serving
  tritonserver (``serve/stub_watch.py``: Triton 2.51 does not notice), and ``offline-iaas
  serve: tritonserver (pid N) answered no liveness check for S s: ended as hung`` when it
  stops a tritonserver that answers nothing (``serve/liveness.py``).

run-local's ``local-state.json`` adds the server nodes that exited on their own (the serve
process itself killed, or failing) and how often each was restarted.
"""

from __future__ import annotations

import re
import signal
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from offline_iaas.bounded_read import NotRegularFile, open_to_append, refuse_unless_regular
from offline_iaas.local_state import Attempt, LocalState
from offline_iaas.rundir import RunDir

STOP_SIGNALS = frozenset({signal.SIGTERM, signal.SIGINT})
"""Signals Triton reports on a normal stop (``Signal (15) received.``)."""

SERVE_PREFIX = "offline-iaas serve: "
"""How ``serve``'s own lines in tritonserver's log begin."""

_TRITON_SIGNAL = re.compile(r"^Signal \((\d+)\) received\.")
_STUB_FATAL = re.compile(r"^Fatal Python error: (.+?)\s*$")
_SERVE_DIED = re.compile(
    "^" + re.escape(SERVE_PREFIX) + r"tritonserver (?:\(pid \d+\) )?died by signal (SIG\w+)")
_SERVE_STUB_DIED = re.compile(
    "^" + re.escape(SERVE_PREFIX) + r"python-backend stub .* died by signal (SIG\w+)")
_SERVE_HUNG = re.compile(
    "^" + re.escape(SERVE_PREFIX) + r"tritonserver (?:\(pid \d+\) )?answered no liveness check")
_GRPC_STARTED = re.compile(r'Started GRPCInferenceService at ([^"\s]+)')
_FORCED_EXIT = "Exit timeout expired. Exiting immediately."
"""Triton's words when a stop gives up waiting for open sequences and exits at once."""
_BACKTRACE_FRAME = re.compile(r"^\s*(\d+)# ")
_STUB_THREAD = ("Thread 0x", "Current thread ")
_FAULTHANDLER_SIGNALS = {  # faulthandler's names of the fatal signals it handles
    "Segmentation fault": "SIGSEGV", "Aborted": "SIGABRT", "Bus error": "SIGBUS",
    "Floating point exception": "SIGFPE", "Illegal instruction": "SIGILL",
}


@dataclass(frozen=True)
class FatalLine:
    """A line of a server log that reports a process dying by a signal."""

    process: str
    """``tritonserver`` or ``python-backend stub``."""
    signal: str
    """``SIGSEGV``, ...; the stub's own words where they name no signal; ``hung`` for a
    tritonserver ``serve`` ended because it answered nothing."""
    line_number: int
    """1-based, in the log it was read from."""
    text: str


def signal_name(number: int) -> str:
    """``SIGSEGV`` for 11; ``signal 99`` for a number that names no signal."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def fatal_lines(text: str, first_line: int = 1) -> list[FatalLine]:
    """The lines of a tritonserver log (``text``, whose first line is number ``first_line``)
    that report a fatal signal; a normal stop's ``Signal (15) received.`` is not one.

    ``serve``'s line that tritonserver (or a python-backend stub) died by a signal is dropped
    when Triton's (the stub's) own line for the same signal came before it since the server's
    last start and no other line of ``serve``'s has told of that death (one crash, two
    witnesses). Each of ``serve``'s lines witnesses one own line: two aborts of two starts,
    each told by ``serve`` alone, are two crashes."""
    found: list[FatalLine] = []
    forced_exit = False  # between a stop's forced exit and the next server's start
    untold: Counter[tuple[str, str]] = Counter()  # own lines serve's line may still witness

    def died(process: str, sig: str, number: int, line: str) -> None:
        if untold[(process, sig)]:
            untold[(process, sig)] -= 1
        else:
            found.append(FatalLine(process, sig, number, line))

    def own(process: str, sig: str, number: int, line: str) -> None:
        found.append(FatalLine(process, sig, number, line))
        untold[(process, sig)] += 1

    for number, line in enumerate(text.splitlines(), start=first_line):
        line = line.strip()
        if _FORCED_EXIT in line:
            forced_exit = True
        elif _GRPC_STARTED.search(line):
            forced_exit = False
            untold.clear()
        elif match := _TRITON_SIGNAL.match(line):
            code = int(match.group(1))
            if code not in STOP_SIGNALS and not forced_exit:
                own("tritonserver", signal_name(code), number, line)
        elif match := _STUB_FATAL.match(line):
            what = match.group(1)
            own("python-backend stub", _FAULTHANDLER_SIGNALS.get(what, what), number, line)
        elif match := _SERVE_DIED.match(line):
            died("tritonserver", match.group(1), number, line)
        elif match := _SERVE_STUB_DIED.match(line):
            died("python-backend stub", match.group(1), number, line)
        elif _SERVE_HUNG.match(line):
            found.append(FatalLine("tritonserver", "hung", number, line))
    return found


def server_epochs(lines: list[str]) -> list[tuple[int, str | None]]:
    """Per line of a whole tritonserver log (``lines``): the server epoch it is in (the
    how-manieth start of tritonserver in the log, from 1; 0 before the first) and the gRPC
    address that epoch serves at (``Started GRPCInferenceService at <address>``)."""
    epochs: list[tuple[int, str | None]] = []
    epoch, address = 0, None
    for line in lines:
        if match := _GRPC_STARTED.search(line):
            epoch, address = epoch + 1, match.group(1)
        epochs.append((epoch, address))
    return epochs


def served_epochs_fatal_lines(log_text: str) -> dict[int, tuple[str, list[FatalLine]]]:
    """The fatal lines of a whole tritonserver log (``log_text``) by the server epoch they are
    in (``server_epochs``), for the epochs that served: epoch → (its gRPC address, its fatal
    lines in order). Fatal lines before the first start (epoch 0) are left out."""
    epoch_of_line = server_epochs(log_text.splitlines())
    found: dict[int, tuple[str, list[FatalLine]]] = {}
    for fatal in fatal_lines(log_text):
        epoch, address = epoch_of_line[fatal.line_number - 1]
        if address is not None:
            found.setdefault(epoch, (address, []))[1].append(fatal)
    return found


def backtrace_frames(lines: list[str], fatal: FatalLine) -> list[str]:
    """The frames of Triton's backtrace after tritonserver's ``Signal (N) received.``
    (``fatal``, in the whole log ``lines``), read past whatever else was written in between at
    the same moment (a stub's dump, ``serve``'s lines, a stop's ``Signal (15) received.``), up
    to the next frame numbered 0 (another trace) or the server's next start."""
    frames: list[str] = []
    for line in lines[fatal.line_number:fatal.line_number + 120]:
        if _GRPC_STARTED.search(line):
            break
        if match := _BACKTRACE_FRAME.match(line):
            if match.group(1) == "0" and frames:
                break
            frames.append(line.strip())
    return frames


def first_crash(lines: list[str], fatals: list[FatalLine]) -> list[FatalLine]:
    """The first crash among ``fatals`` (the fatal lines of one server epoch, in order, in the
    whole log ``lines``): the first of them and any other that begins before its trace does
    (tritonserver and a stub dying at once write their traces into each other)."""
    first = fatals[0]
    trace_begins = first.line_number + 1
    for index in range(first.line_number, min(len(lines), first.line_number + 60)):
        if first.process == "tritonserver" and _BACKTRACE_FRAME.match(lines[index]) or \
                first.process != "tritonserver" and lines[index].startswith(_STUB_THREAD):
            trace_begins = index + 1
            break
    return [fatal for fatal in fatals if fatal.line_number < trace_begins]


def append_serve_line(log: Path, line: str) -> str:
    """Append ``serve``'s ``line`` to tritonserver's ``log`` (after whatever Triton and its
    stubs printed there; nothing if the log cannot be written) and return its words without
    the prefix."""
    try:
        with open_to_append(log) as out:
            out.write((line + "\n").encode())
    except (OSError, NotRegularFile):  # a FIFO whose reader is gone: not waited on
        pass
    return line.removeprefix(SERVE_PREFIX)


@dataclass(frozen=True)
class ServerCrash:
    """A process of a server node that died by a signal, or a node that exited on its own."""

    node: str
    process: str
    """``tritonserver``, ``python-backend stub`` or ``server node`` (``serve`` itself)."""
    how: str
    """``SIGSEGV`` (a signal), or run-local's words for a node's exit (``exit code 1``)."""
    where: str
    """The log holding the trace, relative to the run directory, with its line."""

    def describe(self) -> str:
        died = f"died by {self.how}" if self.how.startswith("SIG") else self.how  # hung
        return f"{self.node}: {self.process} {died} (see {self.where})"


def service_exits(state: LocalState | None) -> dict[str, list[Attempt]]:
    """Per SERVICE node of run-local's state (``local-state.json``), its attempts that ended
    on their own (``exited``: not stopped by run-local)."""
    services = state.services() if state is not None else {}
    exits = {name: [h for h in node.history if h.status == "exited"]
             for name, node in services.items()}
    return {name: ended for name, ended in exits.items() if ended}


def service_restarts(state: LocalState | None) -> dict[str, int]:
    """Per SERVICE node of run-local's state, how often run-local started it again."""
    services = state.services() if state is not None else {}
    return {name: node.attempts - 1 for name, node in services.items() if node.attempts > 1}


def exit_words(code: Any) -> str:
    """A process's exit status in words: ``signal SIGSEGV`` (negative, as ``Popen`` has it),
    ``exit code 1``."""
    if isinstance(code, int) and code < 0:
        return f"signal {signal_name(-code)}"
    return f"exit code {code}"


def hung_line(pid: int, silent_seconds: float) -> str:
    """``serve``'s line in tritonserver's log when it ends a tritonserver that answered no
    liveness check for ``silent_seconds`` (``serve/liveness.py``)."""
    return (f"{SERVE_PREFIX}tritonserver (pid {pid}) answered no liveness check for "
            f"{silent_seconds:.0f} s: ended as hung")


def died_line(pid: int, code: int, when: str) -> str:
    """``serve``'s line in tritonserver's log for its death by signal ``-code``."""
    return f"{SERVE_PREFIX}tritonserver (pid {pid}) died by signal {signal_name(-code)} {when}"


def server_crashes(run: RunDir, servers: list[str], state: LocalState | None
                   ) -> list[ServerCrash]:
    """Every crash of the server nodes ``servers`` the run directory records: fatal lines of
    their tritonserver logs, then the nodes that exited on their own under run-local
    (``state``: its ``local-state.json``, read already; None: none)."""
    crashes = []
    for node in servers:
        log = run.tritonserver_log(node)
        try:
            refuse_unless_regular(log)  # a FIFO's open would wait for a writer for ever
            text = log.read_text(errors="replace")
        except (OSError, NotRegularFile):  # none there, or no log serve wrote: no crash line
            continue
        where = log.relative_to(run.path) if log.is_relative_to(run.path) else log
        crashes += [ServerCrash(node, fatal.process, fatal.signal,
                                f"{where} line {fatal.line_number}")
                    for fatal in fatal_lines(text)]
    for node, attempts in service_exits(state).items():
        if node not in servers:
            continue
        for attempt in attempts:
            code = attempt.exit_code
            how = signal_name(-code) if code is not None and code < 0 else \
                f"exited with {exit_words(code)}"
            crashes.append(ServerCrash(node, "server node", how,
                                       f"{run.node_log(node, 'err').relative_to(run.path)}, "
                                       f"attempt {attempt.attempt}"))
    return crashes


def crash_lines(run: RunDir, servers: list[str], state: LocalState | None) -> list[str]:
    """What ``status`` and the report say of the server nodes' crashes and restarts: a line
    per crash, then a line per server node run-local restarted; none on a clean run
    (``state``: run-local's ``local-state.json`` as its caller read it, None: none)."""
    lines = [crash.describe() for crash in server_crashes(run, servers, state)]
    restarts = service_restarts(state)
    lines += [f"{node}: restarted {count} time{'s' if count != 1 else ''} by run-local"
              for node, count in restarts.items() if node in servers]
    return lines
