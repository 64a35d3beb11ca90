"""``offline-iaas run-local``: run a run directory's DAG with local processes.

Works only from the written files: ``offline.dag`` and the submit files it names, read with
HTCondor's parser, the node's VARS expanded into ``executable``, ``arguments``, ``initialdir``,
``output``, ``error`` and ``environment``. SERVICE nodes start first and are stopped at the end;
JOB nodes run once their parents are done, throttled by ``MAXJOBS``, retried per ``RETRY``.
Every node runs in its own process group, so that stopping it stops its whole process tree.
"""

from __future__ import annotations

import fcntl
import json
import os
import secrets
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from types import FrameType
from typing import Any

from offline_iaas.errors import RunError
from offline_iaas.workflow.dag import MERGE_NODE, Dag, DagNode, parse_dag
from offline_iaas.workflow.submit import expand_macros, parse_submit, unexpanded_macros

STATE_FILE = "local-state.json"
LOCK_FILE = ".run-local.lock"
POLL_SECONDS = 0.05
_LOCAL_UNIVERSES = {"vanilla", "local", "scheduler"}
_TERMINAL = {"done", "complete", "failed", "not-run"}


# ---- submit values ------------------------------------------------------------------------
def split_arguments(value: str) -> list[str]:
    """Split an ``arguments`` value into argv words as condor_submit does.

    New syntax (the whole value in double quotes): words split on white space, single quotes
    group a word (``''`` inside them is a literal quote), ``""`` is a literal double quote.
    Old syntax (no surrounding double quotes): words split on white space, ``\\"`` is a quote.

    Raises
    ------
    ValueError
        On an unterminated single quote.
    """
    value = value.strip()
    if len(value) >= 2 and value[0] == '"' and value[-1] == '"':
        return _split_new_syntax(value[1:-1].replace('""', '"'))
    return [word.replace('\\"', '"') for word in value.split()]


def _split_new_syntax(text: str) -> list[str]:
    words: list[str] = []
    current: list[str] = []
    in_word = in_quotes = False
    i = 0
    while i < len(text):
        char = text[i]
        if in_quotes:
            if char == "'" and text[i + 1 : i + 2] == "'":
                current.append("'")
                i += 1
            elif char == "'":
                in_quotes = False
            else:
                current.append(char)
        elif char in " \t\r\n":
            if in_word:
                words.append("".join(current))
                current, in_word = [], False
        elif char == "'":
            in_quotes = in_word = True
        else:
            current.append(char)
            in_word = True
        i += 1
    if in_quotes:
        raise ValueError(f"unterminated single quote in {text!r}")
    if in_word:
        words.append("".join(current))
    return words


def split_environment(value: str) -> dict[str, str]:
    """Parse an ``environment`` value (new syntax ``"A=1 B='x y'"``, or old ``A=1;B=2``)."""
    value = value.strip()
    if len(value) >= 2 and value[0] == '"' and value[-1] == '"':
        words = _split_new_syntax(value[1:-1].replace('""', '"'))
    else:
        words = [w for w in value.split(";") if w.strip()]
    env = {}
    for word in words:
        name, sep, val = word.partition("=")
        if not sep or not name.strip():
            raise ValueError(f"environment entry {word!r} is not NAME=value")
        env[name.strip()] = val
    return env


@dataclass
class NodeCommand:
    """What the local executor runs for one node."""

    argv: list[str]
    cwd: Path
    stdout: Path
    stderr: Path
    environment: dict[str, str] = field(default_factory=dict)
    max_retries: int = 0
    """Job-level ``max_retries``: restarts of a SERVICE node that exits with an error."""


def node_command(run_dir: Path, node: DagNode, submit: dict[str, str], ordinal: int) -> NodeCommand:
    """Resolve a node's submit description into a command line, directory and files.

    Parameters
    ----------
    run_dir
        Directory of the DAG file: relative submit files and executables are taken from it.
    node
        The DAG node (its VARS are expanded into the submit values).
    submit
        The submit file's commands, as ``parse_submit`` returns them.
    ordinal
        Stands in for ``$(ClusterId)``.

    Raises
    ------
    RunError
        If a value uses an undefined macro, or the executable or initial directory is missing.
    """
    where = f"{node.submit} (node {node.name})"
    lower = {key.lower(): value for key, value in submit.items()}
    builtins = {
        "job": node.name,
        "cluster": str(ordinal),
        "clusterid": str(ordinal),
        "process": "0",
        "procid": "0",
    }
    # DAGMan prepends VARS by default: a macro the submit file defines itself wins.
    variables = {**builtins, **node.variables, **submit}

    def value(key: str, default: str | None = None) -> str | None:
        raw = lower.get(key)
        if raw is None:
            return default
        try:
            out = expand_macros(raw, variables)
        except ValueError as err:
            raise RunError(f"{where}: {key}: {err}") from None
        left = unexpanded_macros(out)
        if left:
            raise RunError(
                f"{where}: {key} uses {left[0]}, which neither the submit file nor the DAG's "
                "VARS define"
            )
        return out

    universe = (value("universe", "vanilla") or "vanilla").lower()
    if universe not in _LOCAL_UNIVERSES:
        raise RunError(f"{where}: universe {universe} cannot run on this machine")
    executable = value("executable")
    if not executable:
        raise RunError(f"{where}: no executable")
    exe = Path(executable)
    exe = exe if exe.is_absolute() else run_dir / exe
    if not exe.is_file() or not os.access(exe, os.X_OK):
        raise RunError(f"{where}: executable {exe} does not exist or is not executable")
    initialdir = Path(value("initialdir") or run_dir)
    initialdir = initialdir if initialdir.is_absolute() else run_dir / initialdir
    if not initialdir.is_dir():
        raise RunError(f"{where}: initialdir {initialdir} is not a directory")

    def in_initialdir(key: str) -> Path:
        path = Path(value(key) or os.devnull)
        return path if path.is_absolute() else initialdir / path

    try:
        args = split_arguments(value("arguments") or "")
        env = split_environment(value("environment") or "")
    except ValueError as err:
        raise RunError(f"{where}: {err}") from None
    retries_text = value("max_retries", "0") or "0"
    try:
        max_retries = int(retries_text)
    except ValueError:
        raise RunError(f"{where}: max_retries must be an integer, got {retries_text!r}") from None
    return NodeCommand(
        argv=[str(exe), *args],
        cwd=initialdir,
        stdout=in_initialdir("output"),
        stderr=in_initialdir("error"),
        environment=env,
        max_retries=max(0, max_retries),
    )


# ---- completion ---------------------------------------------------------------------------
def _json_complete(path: Path) -> bool:
    try:
        return json.loads(path.read_text()).get("complete") is True
    except (OSError, ValueError, AttributeError):
        return False


def node_complete(run_dir: Path, node: DagNode) -> bool:
    """Whether a JOB node's output is already there (it is then not run again).

    The merge node is complete when ``output/campaign.h5`` exists and ``output/campaign.json``
    says ``"complete": true``; any other JOB node when ``parts/<node>.json`` says so.
    """
    if node.kind != "JOB":
        return False
    if node.name == MERGE_NODE:
        output = run_dir / "output"
        return (output / "campaign.h5").exists() and _json_complete(output / "campaign.json")
    return _json_complete(run_dir / "parts" / f"{node.name}.json")


# ---- processes ----------------------------------------------------------------------------
def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes of a process group."""
    proc = Path("/proc")
    if not proc.is_dir():  # not Linux: ask the kernel whether the group exists at all
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return []
        return [pgid]
    members = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # Fields after the command name, which is in parentheses and may hold spaces.
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 2 and fields[0] != "Z" and int(fields[2]) == pgid:
            members.append(int(entry.name))
    return members


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"


def _now() -> str:
    return datetime.now().astimezone().isoformat(timespec="milliseconds")


@dataclass
class _Run:
    node: DagNode
    command: NodeCommand
    status: str = "pending"
    attempts: int = 0
    proc: subprocess.Popen[bytes] | None = None
    exit_code: int | None = None
    started: str | None = None
    ended: str | None = None
    clock: float = 0.0

    @property
    def is_service(self) -> bool:
        return self.node.kind == "SERVICE"


class _Signals:
    """SIGTERM/SIGINT handlers that raise, except while a process is being started.

    A signal that arrives while ``Popen`` runs would lose the new child's handle (a process
    nobody stops), so the exception is held until the child is recorded.
    """

    def __init__(self) -> None:
        self.hold = False
        self.pending: BaseException | None = None
        self._previous: dict[int, Any] = {}

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # signal handlers can only be set from the main thread
        for sig in (signal.SIGTERM, signal.SIGINT):
            self._previous[sig] = signal.signal(sig, self._handle)

    def restore(self) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, signal.SIG_DFL if previous is None else previous)
        self._previous.clear()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if signum == signal.SIGINT:
            exc: BaseException = KeyboardInterrupt()
        else:
            exc = RunError("run-local stopped by SIGTERM; every node it started was stopped")
        if self.hold:
            self.pending = self.pending or exc
            return
        raise exc

    @contextmanager
    def held(self) -> Iterator[None]:
        self.hold = True
        try:
            yield
        finally:
            self.hold = False
        if self.pending is not None:
            exc, self.pending = self.pending, None
            raise exc


class _Executor:
    def __init__(
        self,
        run_dir: Path,
        dag: Dag,
        runs: dict[str, _Run],
        log: Callable[[str], None],
        stop_timeout_seconds: float,
        signals: _Signals,
    ) -> None:
        self.run_dir, self.dag, self.runs, self.log = run_dir, dag, runs, log
        self.stop_timeout_seconds = stop_timeout_seconds
        self.signals = signals

    # -- bookkeeping
    def _rel(self, path: Path) -> str:
        try:
            return str(path.relative_to(self.run_dir))
        except ValueError:
            return str(path)

    def write_state(self) -> None:
        nodes = {
            name: {
                "kind": r.node.kind,
                "status": r.status,
                "attempts": r.attempts,
                "pid": r.proc.pid if r.proc is not None else None,
                "exit_code": r.exit_code,
                "started": r.started,
                "ended": r.ended,
            }
            for name, r in self.runs.items()
        }
        state = {"dag": str(self.run_dir / "offline.dag"), "updated": _now(), "nodes": nodes}
        path = self.run_dir / STATE_FILE
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
        try:
            tmp.write_text(json.dumps(state, indent=2) + "\n")
            os.replace(tmp, path)
        except OSError:
            tmp.unlink(missing_ok=True)  # the state file is informative; never fail the run on it

    def _jobs(self) -> list[_Run]:
        return [r for r in self.runs.values() if not r.is_service]

    # -- starting and reaping
    def _start(self, run: _Run) -> None:
        cmd = run.command
        for path in (cmd.stdout, cmd.stderr):
            path.parent.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, **cmd.environment}
        with self.signals.held():
            with open(cmd.stdout, "ab") as out, open(cmd.stderr, "ab") as err:
                try:
                    run.proc = subprocess.Popen(
                        cmd.argv,
                        cwd=cmd.cwd,
                        stdin=subprocess.DEVNULL,
                        stdout=out,
                        stderr=err,
                        env=env,
                        start_new_session=True,
                    )
                except OSError as error:
                    raise RunError(
                        f"{run.node.name}: cannot start {cmd.argv[0]}: {error}"
                    ) from None
            run.attempts += 1
            run.status = "running"
            run.exit_code, run.started, run.ended = None, _now(), None
            run.clock = time.monotonic()
        if run.is_service:
            total = cmd.max_retries + 1
            attempt = f" (attempt {run.attempts}/{total})" if run.attempts > 1 else ""
            self.log(f"{run.node.name}: started (service){attempt}")
        else:
            total = run.node.retries + 1
            self.log(f"{run.node.name}: started (attempt {run.attempts}/{total})")
        self.write_state()

    def _reaped(self, run: _Run, code: int) -> None:
        assert run.proc is not None
        # As HTCondor does when a job exits: nothing it left behind keeps running.
        if group_members(run.proc.pid):
            _signal_group(run.proc.pid, signal.SIGKILL)
        run.exit_code, run.ended = code, _now()

    def _ready(self, run: _Run) -> bool:
        if run.node.kind == "FINAL":
            others = [r for r in self._jobs() if r.node.kind != "FINAL"]
            return all(r.status in _TERMINAL for r in others)
        return all(self.runs[p].status in ("done", "complete") for p in run.node.parents)

    def _start_ready(self) -> None:
        running: dict[str, int] = {}
        for r in self._jobs():
            if r.status == "running" and r.node.category is not None:
                running[r.node.category] = running.get(r.node.category, 0) + 1
        for r in self._jobs():
            if r.status != "pending" or not self._ready(r):
                continue
            category = r.node.category
            if category is not None and category in self.dag.maxjobs:
                if running.get(category, 0) >= self.dag.maxjobs[category]:
                    continue
                running[category] = running.get(category, 0) + 1
            self._start(r)

    def _reap_jobs(self) -> None:
        for r in self._jobs():
            if r.status != "running" or r.proc is None:
                continue
            code = r.proc.poll()
            if code is None:
                continue
            self._reaped(r, code)
            name, elapsed = r.node.name, time.monotonic() - r.clock
            if code == 0:
                r.status = "done"
                self.log(f"{name}: done in {elapsed:.1f} s")
                self.write_state()
                continue
            why = f"{_describe_exit(code)} (see {self._rel(r.command.stderr)})"
            never = r.node.unless_exit is not None and code == r.node.unless_exit
            if r.attempts <= r.node.retries and not never:
                r.status = "pending"
                self.log(f"{name}: failed with {why}, retrying")
            else:
                r.status = "failed"
                self.log(f"{name}: failed with {why}")
                for below in self.dag.descendants(name):
                    if self.runs[below].status == "pending":
                        self.runs[below].status = "not-run"
                        self.log(f"{below}: not run ({name} failed)")
            self.write_state()

    def _poll_services(self) -> None:
        jobs_left = any(r.status in ("pending", "running") for r in self._jobs())
        for r in self.runs.values():
            if not r.is_service or r.status != "running" or r.proc is None:
                continue
            code = r.proc.poll()
            if code is None:
                continue
            self._reaped(r, code)
            why = f"{_describe_exit(code)} (see {self._rel(r.command.stderr)})"
            if jobs_left and code != 0 and r.attempts <= r.command.max_retries:
                self.log(f"{r.node.name}: exited with {why} while nodes still run, restarting")
                self._start(r)
                continue
            r.status = "exited"
            if jobs_left:
                self.log(
                    f"{r.node.name}: exited with {why} while nodes still run; "
                    "the nodes that use it will time out"
                )
            self.write_state()

    # -- the run
    def run(self) -> None:
        for r in self.runs.values():
            if r.is_service:
                self._start(r)
        while True:
            self._poll_services()
            self._reap_jobs()
            self._start_ready()
            jobs = self._jobs()
            if not any(r.status == "running" for r in jobs):
                stuck = [r for r in jobs if r.status == "pending"]
                if not stuck:
                    return
                if not any(self._ready(r) for r in stuck):  # cannot happen in an acyclic DAG
                    for r in stuck:
                        r.status = "not-run"
                    return
            time.sleep(POLL_SECONDS)

    def stop_all(self) -> None:
        """Stop every node still running: SIGTERM to its group, then SIGKILL after the timeout."""
        live = []
        for r in self.runs.values():
            if r.status != "running" or r.proc is None:
                continue
            code = r.proc.poll()
            if code is None:
                live.append(r)
            else:  # exited since the last poll (the run was cut short): record how
                self._reaped(r, code)
                r.status = "exited" if r.is_service else ("done" if code == 0 else "failed")
        for r in live:
            assert r.proc is not None
            self.log(f"{r.node.name}: stopping")
            _signal_group(r.proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + self.stop_timeout_seconds
        waiting = list(live)
        while waiting and time.monotonic() < deadline:
            for r in list(waiting):
                assert r.proc is not None
                if r.proc.poll() is not None and not group_members(r.proc.pid):
                    waiting.remove(r)
            if waiting:
                time.sleep(POLL_SECONDS)
        for r in waiting:
            assert r.proc is not None
            _signal_group(r.proc.pid, signal.SIGKILL)
            r.proc.wait()
            timeout = self.stop_timeout_seconds
            self.log(f"{r.node.name}: killed (still running {timeout:g} s after SIGTERM)")
        for r in live:
            assert r.proc is not None
            code = r.proc.wait()
            r.exit_code, r.ended = code, _now()
            r.status = "stopped"
            if r not in waiting:
                self.log(f"{r.node.name}: stopped")
        for r in self.runs.values():  # services that exited earlier may have left their group
            if r.proc is not None and group_members(r.proc.pid):
                _signal_group(r.proc.pid, signal.SIGKILL)
        self.write_state()

    def failure(self) -> RunError | None:
        failed = [r for r in self._jobs() if r.status == "failed"]
        if not failed:
            return None
        parts = []
        for r in failed:
            why = _describe_exit(r.exit_code) if r.exit_code is not None else "stopped"
            tries = f"{r.attempts} attempt{'s' if r.attempts != 1 else ''}"
            files = f"{self._rel(r.command.stderr)}, {self._rel(r.command.stdout)}"
            parts.append(f"{r.node.name} ({why} after {tries}; see {files})")
        not_run = [r.node.name for r in self._jobs() if r.status == "not-run"]
        message = f"{self.run_dir}: {len(failed)} node{'s' if len(failed) != 1 else ''} failed: "
        message += "; ".join(parts)
        if not_run:
            message += f"; not run: {', '.join(not_run)}"
        return RunError(message)


@contextmanager
def _locked(run_dir: Path) -> Iterator[None]:
    """Hold the run directory's lock, so that two executors never run the same nodes."""
    with open(run_dir / LOCK_FILE, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RunError(f"another run-local is already running on {run_dir}") from None
        yield


def run_local(
    run_dir: Path,
    *,
    log: Callable[[str], None] = print,
    stop_timeout_seconds: float = 30.0,
) -> None:
    """Run the DAG of a run directory on this machine.

    Parameters
    ----------
    run_dir
        Directory written by ``make-dag`` (or any directory with an ``offline.dag`` whose
        submit files sit beside it).
    log
        Receives one plain line per event (node started, done, failed, retried, stopped).
    stop_timeout_seconds
        How long a stopped node may take to exit after SIGTERM before its group is killed.

    Raises
    ------
    RunError
        If the DAG or a submit file is invalid (before anything starts), if a node failed all
        its attempts (after every other runnable node has run, naming the failed nodes and
        their log files), or on SIGTERM. Every process started is stopped in all cases.
    """
    run_dir = Path(run_dir).absolute()
    dag_path = run_dir / "offline.dag"
    try:
        text = dag_path.read_text()
    except FileNotFoundError:
        raise RunError(
            f"{run_dir} holds no offline.dag (write it with offline-iaas make-dag)"
        ) from None
    except OSError as err:
        raise RunError(f"{dag_path}: cannot read: {err}") from None
    dag = parse_dag(text, str(dag_path))

    submits: dict[str, dict[str, str]] = {}
    runs: dict[str, _Run] = {}
    for ordinal, node in enumerate(dag.nodes.values(), start=1):
        if node.submit not in submits:
            submit_path = Path(node.submit)
            submit_path = submit_path if submit_path.is_absolute() else run_dir / submit_path
            submits[node.submit] = parse_submit(submit_path)
        command = node_command(run_dir, node, submits[node.submit], ordinal)
        runs[node.name] = _Run(node=node, command=command)

    jobs = [r for r in runs.values() if r.node.kind != "SERVICE"]
    for r in jobs:
        if node_complete(run_dir, r.node):
            r.status = "complete"
    if all(r.status == "complete" for r in jobs):
        log(f"nothing to do: every node of {run_dir} is complete")
        return
    for r in jobs:
        if r.status == "complete":
            log(f"{r.node.name}: complete, not run again")

    with _locked(run_dir):
        signals = _Signals()
        executor = _Executor(run_dir, dag, runs, log, stop_timeout_seconds, signals)
        began = time.monotonic()
        executor.write_state()
        signals.install()
        try:
            executor.run()
        finally:
            # Signals during the stop are held, so they cannot cut it short.
            signals.hold = True
            try:
                executor.stop_all()
            finally:
                signals.restore()
        if signals.pending is not None:
            raise signals.pending
        error = executor.failure()
        if error is not None:
            raise error
        done = sum(1 for r in jobs if r.status == "done")
        elapsed = time.monotonic() - began
        log(f"run-local: {done} node{'s' if done != 1 else ''} done in {elapsed:.1f} s")
