"""run-local's executor: the DAG's nodes started, reaped, retried, aborted and stopped.

``run-local`` (``workflow/local.py``) prepares the nodes and holds the lock; the ``Executor``
runs them as DAGMan would: SERVICE nodes first (only once a job uses them), JOB nodes once
their parents are done, throttled by ``MAXJOBS``, after their PRE script, retried per
``RETRY``; ``ABORT-DAG-ON`` removes every running job; the FINAL node last. Each node runs in
its own process group, dies with run-local, and its state goes to ``local-state.json``.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from offline_iaas.atomic import write_text_atomic
from offline_iaas.bounded_read import open_to_append_or
from offline_iaas.errors import RunError, no_space
from offline_iaas.lifetime import die_with_parent, start_ticks, stop_or_kill
from offline_iaas.local_state import local_state_text
from offline_iaas.rendezvous.job_ads import FAKE_ENV
from offline_iaas.rundir import RunDir
from offline_iaas.workflow.completion import reopen_damaged_parents
from offline_iaas.workflow.dag import Dag
from offline_iaas.workflow.emulation import node_command, stage_in, stage_out
from offline_iaas.workflow.failures import ErrorPipe, node_error, run_failure
from offline_iaas.workflow.guardian import Guardian
from offline_iaas.workflow.processes import (
    NodeRun,
    RunPlace,
    Signals,
    describe_exit,
    group_members,
    needs_servers,
    now,
    signal_group,
    terminate_group,
)

logger = logging.getLogger(__name__)

POLL_SECONDS = 0.05
_TERMINAL = {"done", "complete", "failed", "not-run", "removed"}
_BUSY = ("running", "prerun", "deferred")


class Executor:
    """run-local's DAGMan: starts the nodes of ``dag`` as their parents finish, reaps,
    retries and aborts them, keeps ``local-state.json``, and stops every one at the end."""

    def __init__(
        self,
        run: RunDir,
        dag: Dag,
        runs: dict[str, NodeRun],
        submits: dict[str, dict[str, str]],
        stop_timeout_seconds: float,
        signals: Signals,
        on_state: Callable[[dict[str, tuple[str, str]]], None] | None = None,
    ) -> None:
        self.dag, self.runs = dag, runs
        self.paths = run
        self.on_state = on_state
        self.submits = submits
        # run-local stands in for the schedd too: job ads (the rendezvous without a shared
        # filesystem, rendezvous/job_ads.py) are kept in a file unless the caller chose one.
        self.base_env = {} if FAKE_ENV in os.environ else {FAKE_ENV: str(run.job_ads)}
        self.stop_timeout_seconds = stop_timeout_seconds
        self.signals = signals
        self.aborted: tuple[str, int] | None = None
        """(node, exit code) of an ABORT-DAG-ON match."""
        self.pipes: dict[int, ErrorPipe] = {}
        """Each running process's error pipe, by PID (``workflow/failures.py``)."""
        self.errors: dict[str, str] = {}
        """Each node's last error line (its command's ``error:`` message)."""
        self.place, self.ticks = RunPlace(run), {os.getpid(): start_ticks(os.getpid())}
        self.guardian = Guardian(stop_timeout_seconds)  # stops the nodes if run-local is killed
        self.state_unwritten = False
        """The last write of local-state.json failed (said once, until one succeeds)."""

    # -- bookkeeping
    def _rel(self, path: Path) -> str:
        try:
            return str(path.relative_to(self.paths.path))
        except ValueError:
            return str(path)

    def write_state(self) -> None:
        nodes = {name: r.record(self.ticks) for name, r in self.runs.items()}
        if self.on_state is not None:
            try:
                self.on_state({name: (r.node.kind, r.status) for name, r in self.runs.items()})
            except OSError:  # a closed terminal must not stop the executor
                pass
        state = {
            "dag": str(self.paths.dag),
            "updated": now(),
            "executor": {"pid": os.getpid(), "pid_start": self.ticks[os.getpid()]},
            "aborted": list(self.aborted) if self.aborted else None,
            "nodes": nodes,
        }
        try:
            if self.place.here():  # never where the run directory was moved from
                write_text_atomic(self.paths.local_state, local_state_text(state))
            self.state_unwritten = False
        except OSError as err:  # the state file is informative; never fail the run on it
            if not self.state_unwritten:
                logger.warning(f"run-local: cannot write {self.paths.local_state} "
                               f"({os.strerror(err.errno) if err.errno else err}): status "
                               "shows the run as last written until it can")
            self.state_unwritten = True

    def _jobs(self) -> list[NodeRun]:
        return [r for r in self.runs.values() if not r.is_service]

    def dag_status(self) -> int:
        """DAGMan's ``$DAG_STATUS``: 0 fine, 2 nodes failed, 3 aborted."""
        if self.aborted is not None:
            return 3
        return 2 if any(r.status == "failed" for r in self._jobs()) else 0

    # -- starting and reaping
    def _popen(self, run: NodeRun, argv: list[str], cwd: Path, out: Path, err: Path,
               env: dict[str, str]) -> subprocess.Popen[bytes]:
        self.place.check()  # nothing is started, no log directory made, at a moved run's path
        for path in (out, err):
            path.parent.mkdir(parents=True, exist_ok=True)
        with _log(run, out) as stdout, _log(run, err) as stderr:
            pipe = ErrorPipe()
            try:
                proc = subprocess.Popen(
                    argv,
                    cwd=cwd,
                    stdin=subprocess.DEVNULL,
                    stdout=stdout,
                    stderr=stderr,
                    env={**os.environ, **self.base_env, **env, **pipe.env()},
                    start_new_session=True,
                    pass_fds=(pipe.write_fd,),
                    preexec_fn=die_with_parent(signal.SIGTERM),
                )
            except OSError as error:
                pipe.close()
                raise RunError(f"{run.node.name}: cannot start {argv[0]}: {error}") from None
        pipe.started()
        self.pipes[proc.pid], self.ticks[proc.pid] = pipe, start_ticks(proc.pid)
        self.guardian.started(proc.pid)
        return proc

    def _error(self, run: NodeRun, proc: subprocess.Popen[bytes], log: Path,
               failed: bool = True) -> str:
        """The error line of a process that exited (``": <line>"``, or '' without one, or
        when it did not fail); its pipe is closed."""
        pipe = self.pipes.pop(proc.pid, None)
        if not failed:
            if pipe is not None:
                pipe.close()
            return ""
        line = node_error(pipe, log)
        self.errors[run.node.name] = line
        return f": {line}" if line else ""

    def _begin_attempt(self, run: NodeRun) -> None:
        """Start a node attempt: its PRE script if it has one, else its job."""
        run.attempts += 1
        run.exit_code, run.started, run.ended = None, now(), None
        run.clock, run.deferrals = time.monotonic(), 0
        if run.node.pre is not None:
            self._start_pre(run)
        else:
            self._start(run)

    def _start_pre(self, run: NodeRun) -> None:
        pre = run.node.pre
        assert pre is not None
        macros = {
            "$JOB": run.node.name,
            "$RETRY": str(run.attempts - 1),
            "$MAX_RETRIES": str(run.node.retries),
            "$DAG_STATUS": str(self.dag_status()),
            "$FAILED_COUNT": str(sum(r.status == "failed" for r in self._jobs())),
        }
        argv = pre.argv(macros)
        exe = Path(argv[0])
        argv[0] = str(self.paths.resolve(exe))
        log_path = self.paths.node_log(run.node.name, "pre.log")
        with self.signals.held():
            run.pre_proc = self._popen(run, argv, self.paths.path, log_path, log_path, {})
            run.status = "prerun"
        self.write_state()

    def _start(self, run: NodeRun) -> None:
        cmd = run.command
        if run.node.kind == "FINAL":  # DAGMan defines these for the FINAL node's submit file
            extra = {
                "DAG_STATUS": str(self.dag_status()),
                "FAILED_COUNT": str(sum(r.status == "failed" for r in self._jobs())),
            }
            submit = self.submits[run.node.submit]
            cmd = run.command = node_command(self.paths, run.node, submit, run.ordinal, extra)
        cwd = cmd.cwd
        if cmd.transfer is not None:
            attempt = run.attempts + 1 if run.is_service else run.attempts
            sandbox = self.paths.sandbox(run.node.name, attempt)
            shutil.rmtree(sandbox, ignore_errors=True)
            try:
                stage_in(cmd.transfer, cmd.cwd, sandbox)
            except (RunError, OSError) as err:
                err = no_space(err, fallback=sandbox) or err
                shutil.rmtree(sandbox, ignore_errors=True)
                if run.is_service:
                    run.status = "exited"
                    logger.warning(f"{run.node.name}: not started: {err}")
                    self.write_state()
                else:
                    self._attempt_failed(run, None, f"{err}")
                return
            run.sandbox, run.sandbox_before = sandbox, {p.name for p in sandbox.iterdir()}
            cwd = sandbox
        with self.signals.held():
            env = dict(cmd.environment)
            if run.sandbox is not None:
                env["_CONDOR_SCRATCH_DIR"] = str(run.sandbox)
            run.proc = self._popen(run, cmd.argv, cwd, cmd.stdout, cmd.stderr, env)
            if run.is_service:
                run.attempts += 1
                run.started, run.ended, run.exit_code = now(), None, None
                run.clock = time.monotonic()
            run.status = "running"
        if run.is_service:
            total = cmd.max_retries + 1
            attempt = f" (attempt {run.attempts}/{total})" if run.attempts > 1 else ""
            logger.info(f"{run.node.name}: started (service){attempt}")
        else:
            total = run.node.retries + 1
            logger.info(f"{run.node.name}: started (attempt {run.attempts}/{total})")
        self.write_state()

    def _reaped(self, run: NodeRun, code: int) -> str | None:
        """Record a job's exit; returns why its outputs could not be transferred, if so."""
        assert run.proc is not None
        # As HTCondor does when a job exits: nothing it left behind keeps running.
        if group_members(run.proc.pid):
            signal_group(run.proc.pid, signal.SIGKILL)
        self.guardian.ended(run.proc.pid)
        run.exit_code, run.ended = code, now()
        problem = None
        transfer, sandbox = run.command.transfer, run.sandbox
        if transfer is not None and sandbox is not None and self.place.here():
            if not transfer.on_success_only or code == transfer.success_exit_code:
                try:
                    stage_out(transfer, sandbox, run.command.cwd, run.sandbox_before)
                except (RunError, OSError) as err:
                    problem = str(no_space(err, fallback=run.command.cwd) or err)
            shutil.rmtree(sandbox, ignore_errors=True)
            run.sandbox = None
        return problem

    def _ready(self, run: NodeRun) -> bool:
        if run.node.kind == "FINAL":
            others = [r for r in self._jobs() if r.node.kind != "FINAL"]
            return all(r.status in _TERMINAL for r in others)
        return all(self.runs[p].status in ("done", "complete") for p in run.node.parents)

    def _start_ready(self) -> None:
        if self.aborted is not None:  # only the FINAL node still runs
            for r in self._jobs():
                if r.node.kind == "FINAL" and r.status == "pending" and self._ready(r):
                    self._begin_attempt(r)
            return
        busy: dict[str, int] = {}
        for r in self._jobs():
            if r.status in _BUSY and r.node.category is not None:
                busy[r.node.category] = busy.get(r.node.category, 0) + 1
        now = time.monotonic()
        for r in self._jobs():
            if r.status == "deferred" and now >= r.defer_until:
                self._start_pre(r)
                continue
            if r.status != "pending" or not self._ready(r):
                continue
            category = r.node.category
            if category is not None and category in self.dag.maxjobs:
                if busy.get(category, 0) >= self.dag.maxjobs[category]:
                    continue
                busy[category] = busy.get(category, 0) + 1
            self._begin_attempt(r)

    def _attempt_failed(self, run: NodeRun, code: int | None, why: str) -> None:
        """One attempt of a JOB node failed (its PRE script, its job, or its transfer)."""
        name = run.node.name
        abort = code is not None and code == run.node.abort_exit
        never = code is not None and code == run.node.unless_exit
        run.ended = now()
        run.close_attempt("failed", code)
        if abort:
            run.status = "failed"
            self.aborted = (name, code)  # type: ignore[assignment]
            logger.warning(f"{name}: failed with {why}; ABORT-DAG-ON {code}: aborting the DAG")
            self._abort()
        elif run.attempts <= run.node.retries and not never:
            run.status = "pending"
            logger.warning(f"{name}: failed with {why}, retrying")
            if reopen_damaged_parents(self.paths, self.dag, self.runs, name):  # checksums
                self._start_services()  # a client to rerun needs the servers merges did not
        else:
            run.status = "failed"
            logger.warning(f"{name}: failed with {why}")
            for below in self.dag.descendants(name):
                if self.runs[below].status == "pending":
                    self.runs[below].status = "not-run"
                    logger.warning(f"{below}: not run ({name} failed)")
        self.write_state()

    def _abort(self) -> None:
        """ABORT-DAG-ON: remove every running job, never start the pending ones."""
        for r in self._jobs():
            if r.node.kind == "FINAL":
                continue
            if r.status in ("pending", "deferred"):
                r.status = "not-run"
            elif r.status in _BUSY:
                for proc in (r.proc, r.pre_proc):
                    if proc is not None and proc.poll() is None:
                        terminate_group(proc.pid)
                r.status = "removing"

    def _reap_jobs(self) -> None:
        for r in self._jobs():
            if r.status == "removing":
                if all(p is None or p.poll() is not None for p in (r.proc, r.pre_proc)):
                    for p in (r.proc, r.pre_proc):
                        if p is not None and group_members(p.pid):
                            signal_group(p.pid, signal.SIGKILL)
                    if r.sandbox is not None:
                        shutil.rmtree(r.sandbox, ignore_errors=True)
                        r.sandbox = None
                    r.status, r.ended = "removed", now()
                    r.close_attempt("removed")
                    logger.warning(f"{r.node.name}: removed (DAG aborted)")
                    self.write_state()
                continue
            if r.status == "prerun" and r.pre_proc is not None:
                proc = r.pre_proc
                code = proc.poll()
                if code is None:
                    continue
                r.pre_proc = None
                self.guardian.ended(proc.pid)
                pre = r.node.pre
                assert pre is not None
                if code == 0:
                    self._start(r)
                elif pre.defer_status is not None and code == pre.defer_status:
                    if r.status != "deferred" and r.deferrals == 0:
                        logger.info(
                            f"{r.node.name}: PRE script deferred (exit code {code}); running it "
                            f"again every {pre.defer_seconds} s"
                        )
                    r.deferrals += 1
                    r.status, r.defer_until = "deferred", time.monotonic() + pre.defer_seconds
                    self.write_state()
                else:
                    log_path = self.paths.node_log(r.node.name, "pre.log")
                    line = self._error(r, proc, log_path)
                    self._attempt_failed(r, code, f"PRE script {describe_exit(code)} (see "
                                                  f"{self._rel(log_path)}){line}")
                continue
            if r.status != "running" or r.proc is None:
                continue
            code = r.proc.poll()
            if code is None:
                continue
            problem = self._reaped(r, code)
            name, elapsed = r.node.name, time.monotonic() - r.clock
            line = self._error(r, r.proc, r.command.stderr, failed=code != 0)
            if code == 0 and problem is None:
                r.status = "done"
                r.close_attempt("done")
                logger.info(f"{name}: done in {elapsed:.1f} s")
                self.write_state()
                continue
            why = f"{describe_exit(code)} (see {self._rel(r.command.stderr)}){line}"
            if problem is not None:
                why = problem if code == 0 else f"{why}; {problem}"
            self._attempt_failed(r, code if problem is None else None, why)

    def _poll_services(self) -> None:
        jobs_left = any(r.status not in _TERMINAL for r in self._jobs())
        for r in self.runs.values():
            if not r.is_service or r.status != "running" or r.proc is None:
                continue
            code = r.proc.poll()
            if code is None:
                continue
            self._reaped(r, code)
            r.close_attempt("exited")
            line = self._error(r, r.proc, r.command.stderr, failed=code != 0)
            why = f"{describe_exit(code)} (see {self._rel(r.command.stderr)}){line}"
            if jobs_left and code != 0 and r.attempts <= r.command.max_retries:
                logger.warning(
                    f"{r.node.name}: exited with {why} while nodes still run, restarting"
                )
                self._start(r)
                continue
            r.status = "exited"
            if jobs_left:
                logger.warning(
                    f"{r.node.name}: exited with {why} while nodes still run; "
                    "the nodes that use it will time out"
                )
            self.write_state()

    def _start_services(self) -> None:  # the servers not started yet, once a job uses them
        for r in (r for r in self.runs.values() if r.is_service and needs_servers(self._jobs())):
            if r.status in ("pending", "not-run"):
                self._start(r)

    # -- the run
    def run(self) -> None:
        services = [r for r in self.runs.values() if r.is_service]
        if services and not needs_servers(self._jobs()):
            for r in services:
                r.status = "not-run"
            names = ", ".join(r.node.name for r in services)
            logger.info(f"{names}: not started (only merges remain to run)")
        self._start_services()
        while True:
            self.place.check()
            self._poll_services()
            self._reap_jobs()
            self._start_ready()
            jobs = self._jobs()
            if not any(r.status in _BUSY or r.status == "removing" for r in jobs):
                waiting = [r for r in jobs if r.status in ("pending", "deferred")]
                if not waiting:
                    return
                if not any(r.status == "deferred" or self._ready(r) for r in waiting):
                    for r in waiting:  # cannot happen in an acyclic DAG
                        r.status = "not-run"
                    return
            time.sleep(POLL_SECONDS)

    def stop_all(self) -> None:
        """Stop every node still running: SIGTERM to its group, then SIGKILL after the timeout."""
        live: list[tuple[NodeRun, subprocess.Popen[bytes]]] = []
        for r in self.runs.values():
            for proc in (r.proc, r.pre_proc):
                if proc is None or r.status not in (*_BUSY, "removing"):
                    continue
                code = proc.poll()
                if code is None:
                    live.append((r, proc))
                elif proc is r.proc:  # exited since the last poll (the run was cut short)
                    self._reaped(r, code)
                    r.status = "exited" if r.is_service else ("done" if code == 0 else "failed")
                    r.close_attempt(r.status)
        for r, _ in live:
            logger.info(f"{r.node.name}: stopping")
        waiting = stop_or_kill(live, lambda item, signum: signal_group(item[1].pid, signum),
                               lambda item: item[1].poll() is not None
                               and not group_members(item[1].pid),
                               self.stop_timeout_seconds, POLL_SECONDS)
        for r, proc in waiting:
            proc.wait()
            timeout = self.stop_timeout_seconds
            logger.warning(f"{r.node.name}: killed (still running {timeout:g} s after SIGTERM)")
        for r, proc in live:
            code = proc.wait()
            if proc is r.proc:
                r.exit_code = code
            r.ended = now()
            r.status = "stopped"
            r.close_attempt("stopped")
            if (r, proc) not in waiting:
                logger.info(f"{r.node.name}: stopped")
            if r.sandbox is not None:
                shutil.rmtree(r.sandbox, ignore_errors=True)
                r.sandbox = None
        for r in self.runs.values():  # services that exited earlier may have left their group
            for proc in (r.proc, r.pre_proc):
                if proc is not None and group_members(proc.pid):
                    signal_group(proc.pid, signal.SIGKILL)
        for pipe in self.pipes.values():
            pipe.close()
        self.pipes.clear()
        self.guardian.close()
        try:
            self.paths.scratch.rmdir()  # only if every node's scratch was cleaned
        except OSError:
            pass
        self.write_state()

    def failure(self) -> RunError | None:
        failed = [r for r in self._jobs() if r.status == "failed"]
        if not failed and self.aborted is None:
            return None
        not_run = [r.node.name for r in self._jobs() if r.status in ("not-run", "removed")]
        return run_failure(self.paths, failed, self.errors, not_run, self.aborted)


def _log(run: NodeRun, path: Path) -> BinaryIO:
    """A node's output or error log (its submit file's ``output``/``error``) opened to append
    to: a FIFO with no reader there would stop run-local for ever in ``open``; it, a
    directory, a block device or a socket is refused naming the node and the file
    (``/dev/null`` is written to)."""
    return open_to_append_or(path, lambda text: RunError(f"{run.node.name}: its log {text}"))
