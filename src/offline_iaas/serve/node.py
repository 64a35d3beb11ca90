"""``offline-iaas serve``: one server node of the DAG.

Starts tritonserver on free ports (retrying when a port is taken meanwhile) — natively, or in
an Apptainer/Singularity instance of ``server.image`` (``serve/container.py``) — waits until
the server and every model are ready, publishes its address, then waits. On SIGTERM or SIGINT
(DAGMan removing the service, run-local ending) it withdraws the address and stops tritonserver
(and its container instance) within ``exit_timeout_seconds`` plus a short grace.

The address goes to ``servers/<node>.json`` in the run directory (``rendezvous="file"``), or,
where workers share no filesystem, into the server's own job ad (``rendezvous="jobad"``, see
``rendezvous/job_ads.py``), whence each client's PRE script copies it into the run directory.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import threading
import time
import zlib
from pathlib import Path
from typing import Protocol

from offline_iaas import hooks, job_specs, records
from offline_iaas.atomic import remove_stale_temporaries, replace_directory, temporary_sibling
from offline_iaas.binding import check_run_directory, is_make_dag_run, read_bound_run
from offline_iaas.bounded_read import NotRegularFile, read_bytes
from offline_iaas.config import CampaignConfig, load_config
from offline_iaas.config_sections import ServerConfig
from offline_iaas.errors import ConfigError, ModelError, ServerError
from offline_iaas.lifetime import stop_or_kill
from offline_iaas.rendezvous import addresses as address_files
from offline_iaas.rendezvous.access import auth_headers, read_token
from offline_iaas.rendezvous.job_ads import (
    ADDRESS_ATTRIBUTE,
    REFUSAL_ATTRIBUTE,
    JobAds,
    job_ads,
)
from offline_iaas.rundir import RunDir
from offline_iaas.serve.container import ContainerLauncher
from offline_iaas.serve.crashes import (
    STOP_SIGNALS,
    append_serve_line,
    died_line,
    exit_words,
    hung_line,
)
from offline_iaas.serve.liveness import LivenessWatch
from offline_iaas.serve.monitor import ServerMonitor, open_monitor
from offline_iaas.serve.readiness import wait_until_ready
from offline_iaas.serve.stalled_stub import note_ended_epoch
from offline_iaas.serve.startup_checks import Checking, run_checks, served_models
from offline_iaas.serve.stub_watch import (
    Stub,
    dead_stub,
    find_stubs,
    note_stub_death,
    wait_stubs_gone,
)
from offline_iaas.serve.tritonserver import (
    Ports,
    TritonInstall,
    free_ports,
    locate_tritonserver,
    server_command,
    start_server,
)

logger = logging.getLogger(__name__)

PORT_ATTEMPTS = 5
RENDEZVOUS: tuple[str, ...] = ("file", "jobad")


class Launcher(Protocol):
    """Starts tritonserver processes for a node: natively or in a container."""

    def start(self, ports: Ports, bind: str, exit_timeout: float, log: Path) -> subprocess.Popen:
        """Start tritonserver on ``ports``, its output appended to ``log``."""

    def close(self) -> None:
        """Release what the launcher holds (a container instance)."""


@dataclasses.dataclass
class NativeLauncher:
    """The tritonserver on PATH, else the embedded one (``tritonserver.locate_tritonserver``)."""

    repository: Path
    install: TritonInstall | None = None
    token: str | None = None
    """The run's access token (``rendezvous/access.py``); None serves without restriction."""

    def start(self, ports: Ports, bind: str, exit_timeout: float, log: Path) -> subprocess.Popen:
        if self.install is None:
            self.install = locate_tritonserver()
        cmd = server_command(
            self.install, self.repository, ports, bind, exit_timeout, token=self.token
        )
        return start_server(cmd, self.install, log)

    def close(self) -> None:
        pass


def make_launcher(server: ServerConfig, repository: Path, node: str, token: str | None = None
                  ) -> Launcher:
    """The launcher of ``server.runtime`` serving ``repository``, restricting access to
    ``token`` if given."""
    if server.runtime == "native":
        return NativeLauncher(repository, token=token)
    return ContainerLauncher(
        runtime=server.runtime,
        image=server.image,
        repository=repository,
        name=f"offline-iaas-{node}-{os.getpid()}",
        gpus=server.gpus,
        token=token,
    )


def unpack_repository(run: RunDir, source: Path) -> Path:
    """The model repository at ``source``: a directory, or a tarball unpacked into the run
    directory (into a temporary sibling of ``RUN/model-repository`` first, which replaces it
    once whole; one a killed server left is removed first). ModelError naming the tarball
    where it is not a whole tar archive holding ``model-repository/``, or holds a member a
    repository does not (a link out of it; the repository there is left as it was)."""
    source = run.resolve(source)
    if source.is_dir():
        return source
    if not source.is_file():
        raise ModelError(f"model repository {source} does not exist")
    target = run.model_repository
    remove_stale_temporaries(target)
    scratch = temporary_sibling(target, "unpacking")
    try:
        with tarfile.open(source) as tar:
            if hasattr(tarfile, "data_filter"):  # Python >= 3.11.4: no links or paths out
                tar.extractall(scratch, filter="data")
            else:
                tar.extractall(scratch)
        unpacked = scratch / target.name
        if not unpacked.is_dir():
            raise ModelError(f"{source} does not hold a model-repository/ directory")
        replace_directory(unpacked, target)
    except _FILTER_ERRORS as err:
        raise ModelError(f"{source}: holds a member no model repository holds ({err}); copy "
                         "make-dag's model-repository.tar.gz again") from None
    except (tarfile.TarError, EOFError, zlib.error) as err:
        raise ModelError(f"{source}: not a whole tar archive of a model repository ({err}); "
                         "copy make-dag's model-repository.tar.gz again") from None
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return target


_FILTER_ERRORS = (getattr(tarfile, "FilterError", ()),)
"""``extractall(filter="data")``'s refusal of a member (a link or path out of the archive's
directory, a device file): a ``TarError`` that says what the archive holds, not that it is cut
short."""


def published_host(bind: str) -> str:
    """The address clients use: the bind address, or this host's name for a wildcard bind."""
    return socket.getfqdn() if bind in ("0.0.0.0", "") else bind


STUBS_EXIT_SECONDS = 3.0
"""How long a stopped tritonserver stays unreaped while its python-backend stubs leave."""


def stop_process(proc: subprocess.Popen, grace_seconds: float,
                 stubs: list[Stub] | None = None) -> bool:
    """SIGTERM (and SIGCONT, for a stopped process), then SIGKILL after ``grace_seconds``
    (``lifetime.stop_or_kill``); True when it took the SIGKILL.

    The exited process is reaped only once its python-backend ``stubs`` are gone (at most
    ``STUBS_EXIT_SECONDS``): Triton 2.51 exits without unloading its models when a sequence is
    still open at its exit timeout, and a stub whose server is an unreaped zombie ends cleanly
    (``repository/backend/server_watch.py``) instead of by python_backend's own teardown,
    which can die by SIGSEGV.
    """
    # os.kill, not proc.send_signal: Popen's send_signal reaps a process that has exited
    killed = bool(stop_or_kill([] if _exited_unreaped(proc, 0.0) else [proc],
                               lambda p, signum: os.kill(p.pid, signum),
                               lambda p: _exited_unreaped(p, 0.0), grace_seconds))
    if killed:
        _exited_unreaped(proc, None)
    wait_stubs_gone(stubs or [], STUBS_EXIT_SECONDS)
    proc.wait()
    return killed


def _exited_unreaped(proc: subprocess.Popen, seconds: float | None) -> bool:
    """Whether ``proc`` exits within ``seconds`` (None: however long it takes), leaving it
    unreaped (a zombie); True too when it was reaped already."""
    deadline = None if seconds is None else time.monotonic() + seconds
    while True:
        if proc.returncode is not None:
            return True
        try:
            if os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                return True
        except ChildProcessError:  # reaped elsewhere
            return True
        if deadline is not None and time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


def note_exit(proc: subprocess.Popen, log: Path, node: str, when: str) -> str:
    """How tritonserver ended (``exit code 0``, ``signal SIGSEGV``), logged ``when`` (``while
    serving``, ``while stopping``, ...); a death by a signal other than the stop's own SIGTERM
    is also appended to its log, after whatever trace Triton printed there
    (``serve/crashes.py`` reads it back)."""
    code = proc.returncode
    words = exit_words(code)
    stopped = when == "while stopping" and code is not None and -code in STOP_SIGNALS
    if code is not None and code < 0 and not stopped:
        append_serve_line(log, died_line(proc.pid, code, when))
        logger.warning(f"{node}: tritonserver died by {words} {when} (see {log})")
    else:
        logger.info(f"{node}: tritonserver exited with {words}")
    return words


def _log_text(path: Path) -> str | None:
    """The log ``path`` read back (undecodable bytes replaced), None where it cannot be: not
    there, or no regular file (a FIFO: not waited on)."""
    try:
        return read_bytes(path, limit_bytes=None).decode(errors="replace")
    except (OSError, NotRegularFile):
        return None


def _log_tail(path: Path, lines: int = 5) -> str:
    """The last ``lines`` lines of the log ``path``, joined by `` | `` ("" where none)."""
    return " | ".join((_log_text(path) or "").strip().splitlines()[-lines:])


def _checked_repository(run: RunDir, config: CampaignConfig, repository: Path | None
                        ) -> tuple[CampaignConfig, list[str]]:
    """The campaign with the repository this server serves, and the models it must have
    ready, once serve's checks pass (``startup_checks``: the repository fits, is the model
    run.json records, is of a flavor this server can run, has every model); ConfigError when
    the run is not make-dag's plan."""
    info = read_bound_run(run)[1] if is_make_dag_run(run) else None
    if repository is not None:
        model = dataclasses.replace(config.model, repository=unpack_repository(run, repository))
        config = dataclasses.replace(config, model=model)
    checking = run_checks(Checking("serve", config,
                                   pinned=info.model if info is not None else None))
    return config, served_models(checking)


@dataclasses.dataclass
class _Start:
    """One start of a server node: what serve's steps share, and what its shutdown undoes."""

    run: RunDir
    node: str
    config: CampaignConfig
    ads: JobAds | None
    run_id: str
    launcher: Launcher
    stop: threading.Event
    proc: subprocess.Popen | None = None
    stubs: list[Stub] = dataclasses.field(default_factory=list)
    epoch: int = 0
    """The published address's epoch (``_publish_address``: 1 or more); 0 before."""
    monitor: ServerMonitor | None = None
    liveness: LivenessWatch | None = None

    @property
    def log(self) -> Path:
        """tritonserver's log (``RunDir.tritonserver_log``)."""
        return self.run.tritonserver_log(self.node)

    @property
    def published(self) -> bool:
        """Whether this start published its address (and has it to withdraw)."""
        return self.epoch > 0

    @property
    def stop_grace_seconds(self) -> float:
        """How long a stop waits for tritonserver: Triton's own exit timeout first."""
        return self.config.server.exit_timeout_seconds + 10


def serve(
    run: RunDir,
    node: str,
    *,
    repository: Path | None = None,
    rendezvous: str = "file",
) -> None:
    """Run server node ``node`` of the campaign in ``run`` until SIGTERM.

    Parameters
    ----------
    run
        The run directory (or, without a shared filesystem, the job's scratch directory holding
        the config and the run's record, ``RunDir``).
    node
        The server node's name.
    repository
        Model repository to serve instead of ``model.repository``: a directory, or a tarball
        (``model-repository.tar.gz``) unpacked into the run directory.
    rendezvous
        ``file``: publish ``servers/<node>.json``; ``jobad``: publish in the job ad (chirp).
    """
    if rendezvous not in RENDEZVOUS:
        raise ServerError(f"unknown rendezvous {rendezvous!r} (known: {', '.join(RENDEZVOUS)})")
    check_run_directory(run)
    job_specs.check_server_node(run, node)  # before a file is named after it
    token = read_token(run)  # a run's server is never open to anyone: refused without it
    config = load_config(run.config)
    ads = job_ads() if rendezvous == "jobad" else None
    info = records.read_or_none(records.RunInfo, run.run_info)
    run_id = info.run_id if info is not None else ""  # run.json missing or damaged: ''
    config, models = _repository_or_refusal(run, node, config, repository, ads, run_id)
    bind = config.server.bind or "127.0.0.1"  # make-dag writes the profile's; a bare config
    _withdraw_stale_address(run, node, ads, run_id)
    launcher = make_launcher(config.server, config.model.repository, node, token)
    start = _Start(run, node, config, ads, run_id, launcher, threading.Event())
    previous = {
        sig: signal.signal(sig, lambda *_: start.stop.set())
        for sig in (signal.SIGTERM, signal.SIGINT)
    }
    try:  # the monitor's CSV first: where it is refused, no tritonserver is started
        start.monitor = open_monitor(auth_headers(run), run.monitor_csv(node),
                                     config.server.monitor_seconds)
        ready = _start_until_ready(start, bind, models)
        if ready is None:  # stopped while starting
            return
        _serve_until_stopped(start, bind, *ready)
    finally:
        try:
            _withdraw_address(start)
        finally:
            _stop_server(start)
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def _withdraw_stale_address(run: RunDir, node: str, ads: JobAds | None, run_id: str) -> None:
    """Withdraw an address an earlier start of this node left (in the job ad, or the file)."""
    if ads is not None:  # an address left by an earlier start of this job is stale now
        ads.set_own(run_id, node, ADDRESS_ATTRIBUTE, None)
    else:  # likewise a file left by a server of this node that was killed
        hooks.reached(run, node, "start")
        run.address(node).unlink(missing_ok=True)


def _start_until_ready(start: _Start, bind: str, models: list[str]) -> tuple[Ports, str] | None:
    """Start tritonserver on free ports (others where one was taken meanwhile) until it and
    ``models`` are ready: its ports and gRPC url; None when stopped first; else ServerError."""
    server = start.config.server
    for attempt in range(1, PORT_ATTEMPTS + 1):
        ports = Ports(*free_ports(bind))
        where = "" if server.runtime == "native" else f" in {server.image}"
        logger.info(
            f"{start.node}: starting tritonserver{where} (grpc {ports.grpc}, attempt {attempt})"
        )
        offset = start.log.stat().st_size if start.log.exists() else 0
        proc = start.proc = start.launcher.start(ports, bind, server.exit_timeout_seconds,
                                                 start.log)
        url = f"{_client_host(bind)}:{ports.grpc}"
        if wait_until_ready(proc, url, models, server.ready_timeout_seconds, start.stop,
                            start.log, offset):
            return ports, url
        if start.stop.is_set():
            return None
        if proc.poll() is None:  # an endpoint failed to bind: it is on its way out
            stop_process(proc, start.stop_grace_seconds)
        tail = _log_tail(start.log)
        if "already in use" not in tail.lower():
            how = note_exit(proc, start.log, start.node, "before it was ready")
            raise ServerError(f"tritonserver ended with {how} before it was ready (see "
                              f"{start.log}): {tail}")
        logger.warning(f"{start.node}: port taken, retrying with other ports")
    raise ServerError(f"no free ports found for {start.node} after {PORT_ATTEMPTS} attempts")


def _serve_until_stopped(start: _Start, bind: str, ports: Ports, url: str) -> None:
    """Publish the ready server's address, start polling its monitor, and watch it (tritonserver,
    its stubs, the clients' reports) until a stop; ServerError when one fails."""
    run, node, proc = start.run, start.node, start.proc
    assert proc is not None
    start.epoch = _publish_address(run, node, start.ads, start.run_id, bind, ports)
    if start.monitor is not None:
        start.monitor.start(url)
    start.stubs = find_stubs(proc.pid)
    unresponsive = start.config.server.unresponsive_seconds
    start.liveness = LivenessWatch(url) if unresponsive > 0 else None
    while not start.stop.wait(0.5):
        _check_serving(proc, start.log, node, start.liveness, unresponsive)
        if not start.stop.is_set():  # a stop's signal reaches the stubs too
            check_stubs_alive(start.stubs, start.log, node)
        if start.ads is None:  # the clients' reports come through the shared run directory
            check_not_called_unhealthy(run, node, start.epoch, start.log)
    logger.info(f"{node}: stopping")


def _withdraw_address(start: _Start) -> None:
    """Withdraw the address this start published (none: nothing to do)."""
    if start.published and start.ads is None:
        address_files.remove_address(start.run, start.node, start.epoch)
    elif start.published and start.ads is not None:
        start.ads.set_own(start.run_id, start.node, ADDRESS_ATTRIBUTE, None)


def _stop_server(start: _Start) -> None:
    """Stop the liveness watch, the monitor, tritonserver (killed after ``stop_grace_seconds``)
    and its launcher; without a shared filesystem, copy its log to stdout."""
    if start.liveness is not None:
        start.liveness.close()
    if start.monitor is not None:
        start.monitor.stop()
    proc, grace = start.proc, start.stop_grace_seconds
    if proc is not None and proc.returncode is None:
        if stop_process(proc, grace, start.stubs):
            logger.warning(f"{start.node}: tritonserver killed (still running {grace:g} s "
                           "after SIGTERM)")
        else:
            note_exit(proc, start.log, start.node, "while stopping")
    start.launcher.close()
    if start.ads is not None:
        _echo_log(start.log)


def _repository_or_refusal(run: RunDir, node: str, config: CampaignConfig,
                           repository: Path | None, ads: JobAds | None, run_id: str
                           ) -> tuple[CampaignConfig, list[str]]:
    """``_checked_repository``'s config and models; a refusal's reason is published where
    the clients waiting for this server read its address (and one left by an earlier start
    withdrawn when the repository passes)."""
    try:
        checked = _checked_repository(run, config, repository)
    except (ConfigError, ModelError, ServerError) as err:
        reason = " ".join(str(err).split())
        if ads is not None:
            ads.set_own(run_id, node, REFUSAL_ATTRIBUTE, reason)
        else:
            address_files.publish_refusal(run, node, reason)
        raise
    if ads is not None:
        ads.set_own(run_id, node, REFUSAL_ATTRIBUTE, None)
    else:
        run.refusal(node).unlink(missing_ok=True)
    return checked


def _publish_address(run: RunDir, node: str, ads: JobAds | None, run_id: str, bind: str,
                     ports: Ports) -> int:
    """Publish the ready server's address (``servers/<node>.json``, or the job ad with
    ``ads``) under its epoch, and return the epoch."""
    if ads is None:
        epoch = address_files.next_epoch(run, node)
    else:  # one epoch per start of the job, as the access point sees it
        starts = ads.get_own(run_id, node, "NumJobStarts")
        epoch = starts if isinstance(starts, int) and starts > 0 else 1
    address = address_files.ServerAddress(
        node=node,
        host=published_host(bind),
        grpc_port=ports.grpc,
        http_port=ports.http,
        metrics_port=ports.metrics,
        epoch=epoch,
        pid=os.getpid(),
    )
    if ads is None:
        address_files.publish_address(run, address)
    else:
        ads.set_own(run_id, node, ADDRESS_ATTRIBUTE, address_files.address_text(address))
    logger.info(f"{node}: ready at {address.grpc_url} (epoch {epoch}, via "
                f"{rendezvous_name(ads)})")
    return epoch


def _check_serving(proc: subprocess.Popen, log: Path, node: str,
                   liveness: LivenessWatch | None, unresponsive_seconds: float) -> None:
    """ServerError if tritonserver ended, or answers nothing (``liveness.hung``)."""
    if proc.poll() is not None:
        # an exit Triton chose has its reason at the log's end; a death by a signal its
        # trace, or nothing (SIGKILL: the tail would be start-up lines)
        tail = _log_tail(log) if proc.returncode >= 0 else ""
        how = note_exit(proc, log, node, "while serving")
        raise ServerError(f"tritonserver ended with {how} while serving (see {log})"
                          f"{f': {tail}' if tail else ''}")
    if liveness is not None and liveness.hung(unresponsive_seconds):
        words = append_serve_line(log, hung_line(proc.pid, liveness.silent_seconds()))
        raise ServerError(f"{words} (server.unresponsive_seconds = {unresponsive_seconds:g}; "
                          f"see {log})")


def check_stubs_alive(stubs: list[Stub], log: Path, node: str) -> None:
    """ServerError if one of tritonserver's python-backend ``stubs`` died: Triton 2.51 keeps
    serving the dead model (``serve/stub_watch.py``), so the node ends as on a crash and is
    restarted (run-local, or the server job's retries) with a fresh tritonserver."""
    death = dead_stub(stubs)
    if death is not None:
        words = note_stub_death(death, log, node)
        raise ServerError(f"{words} (tritonserver keeps its model loaded but cannot run it; "
                          f"see {log})")


def check_not_called_unhealthy(run: RunDir, node: str, epoch: int, log: Path) -> None:
    """ServerError if a client reported that Triton called this epoch's model not healthy:
    the stub may live on, its shared memory with tritonserver no longer agreed on
    (``serve/stalled_stub.py``), and the clients told so wait for a fresh server epoch, so
    the node ends as on a crash and is restarted."""
    report = address_files.read_unhealthy(run, node)
    if report is not None and report.epoch == epoch:
        words = note_ended_epoch(report.client, epoch, log, node)
        raise ServerError(f"{words} (a python-backend stub called not healthy may pair later "
                          f"answers with the wrong requests; see {log})")


def rendezvous_name(ads: object) -> str:
    return "its job ad" if ads is not None else "servers/<node>.json"


def _client_host(bind: str) -> str:
    """Where this node itself reaches the server for the readiness check."""
    return "127.0.0.1" if bind in ("0.0.0.0", "") else bind  # IPv4: config_section_rules


def _echo_log(path: Path) -> None:
    """Copy tritonserver's log to stdout: without a shared filesystem nothing else keeps it."""
    text = _log_text(path)
    if text is None:
        return
    sys.stdout.write(f"---- {path.name} ----\n{text}")
    sys.stdout.flush()
