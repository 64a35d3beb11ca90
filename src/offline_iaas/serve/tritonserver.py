"""Finding and launching the native ``tritonserver`` binary.

Two installations are understood:

* a ``tritonserver`` on PATH (a Triton container or a site install), with its own backends;
* the binary bundled in the ``nvidia-pytriton`` wheel (the ``embedded`` extra). It carries only
  the python backend and cannot run from the wheel as installed: it is copied once into a
  writable cache with the python-backend stub for this Python put in ``backends/python``,
  and needs ``LD_LIBRARY_PATH`` to the wheel's bundled libraries and this environment's
  ``bin`` first on ``PATH`` (so its stub uses this interpreter's packages).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from offline_iaas.bounded_read import open_to_append_or
from offline_iaas.errors import ServerError
from offline_iaas.lifetime import die_with_parent
from offline_iaas.rendezvous.access import restricted_flags


@dataclass(frozen=True)
class TritonInstall:
    """A runnable tritonserver: binary, backend directory, environment additions."""

    binary: Path
    backend_dir: Path | None
    env: dict[str, str]


@dataclass(frozen=True)
class Ports:
    http: int
    grpc: int
    metrics: int


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return Path(base) / "offline-iaas"


def locate_tritonserver() -> TritonInstall:
    """The tritonserver on PATH, else the one bundled in the nvidia-pytriton wheel."""
    on_path = shutil.which("tritonserver")
    if on_path:
        return TritonInstall(Path(on_path), None, {})
    try:
        import pytriton
    except ImportError:
        raise ServerError(
            "no tritonserver on PATH and the embedded one is not installed: "
            "pip install 'offline-iaas[embedded]' (needs glibc >= 2.35), or use a Triton container"
        ) from None
    wheel_dir = Path(pytriton.__file__).parent
    bundled = wheel_dir / "tritonserver"
    py = f"{sys.version_info.major}.{sys.version_info.minor}"
    stub = bundled / "python_backend_stubs" / py / "triton_python_backend_stub"
    if not stub.exists():
        raise ServerError(f"the embedded tritonserver has no python backend stub for Python {py}")
    version = getattr(pytriton, "__version__", "unknown")
    target = cache_dir() / f"tritonserver-pytriton-{version}-py{py}"
    if not (target / "backends" / "python" / "triton_python_backend_stub").exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
            staged = Path(tmp) / "tritonserver"
            shutil.copytree(bundled, staged)
            shutil.copy2(stub, staged / "backends" / "python" / "triton_python_backend_stub")
            try:
                os.replace(staged, target)
            except OSError:
                if not (target / "bin" / "tritonserver").exists():  # not a concurrent copier
                    raise
    libs = wheel_dir.parent / "nvidia_pytriton.libs"
    env = {
        "LD_LIBRARY_PATH": os.pathsep.join(
            p for p in (str(libs), os.environ.get("LD_LIBRARY_PATH", "")) if p
        ),
        "PATH": os.pathsep.join((str(Path(sys.executable).parent), os.environ.get("PATH", ""))),
    }
    return TritonInstall(target / "bin" / "tritonserver", target / "backends", env)


def free_ports(host: str, count: int = 3) -> list[int]:
    """Ports free on ``host`` right now (a race remains; the caller retries on conflict).

    Raises
    ------
    ServerError
        When ``host`` cannot be bound (not an address of this machine) or no port is left.
    """
    sockets, ports = [], []
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        for _ in range(count):
            s = socket.socket(family, socket.SOCK_STREAM)
            sockets.append(s)
            s.bind((host, 0))
            ports.append(s.getsockname()[1])
    except OSError as err:
        raise ServerError(
            f"cannot get a free port on {host!r} (server.bind): {err.strerror or err}"
        ) from None
    finally:
        for s in sockets:
            s.close()
    return ports


def server_command(
    install: TritonInstall,
    repository: Path,
    ports: Ports,
    bind: str,
    exit_timeout_seconds: float,
    token: str | None = None,
) -> list[str]:
    """The tritonserver command line: fixed models (control mode none), chosen ports.

    With a ``token``, every protocol but health needs it (``access.restricted_flags``).
    """
    cmd = [
        str(install.binary),
        f"--model-repository={repository}",
        "--model-control-mode=none",
        f"--http-port={ports.http}",
        f"--grpc-port={ports.grpc}",
        f"--metrics-port={ports.metrics}",
        f"--http-address={bind}",
        f"--grpc-address={bind}",
        f"--metrics-address={bind}",
        f"--exit-timeout-secs={max(1, int(exit_timeout_seconds))}",
        "--log-verbose=0",
    ]
    if install.backend_dir is not None:
        cmd.append(f"--backend-directory={install.backend_dir}")
    return cmd + restricted_flags(token)


def start_server(cmd: list[str], install: TritonInstall, log_path: Path) -> subprocess.Popen:
    """Start tritonserver in our process group, its output appended to ``log_path`` (a FIFO
    with no reader there, a directory, a block device or a socket: ``ServerError`` naming it,
    nothing started; a FIFO whose reader leaves later: its lines are lost, it serves on)."""
    env = {**os.environ, **install.env}
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open_to_append_or(log_path, ServerError) as log:
        return subprocess.Popen(
            cmd,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            # a node killed (SIGKILL) leaves no tritonserver behind; its stubs follow it
            preexec_fn=die_with_parent(signal.SIGKILL),
            # SIGPIPE and SIGXFSZ left ignored, as Python has them: a log FIFO's reader
            # leaving (or a log past ``ulimit -f``) fails tritonserver's line, not the server
            # (it ignores SIGPIPE itself only once its gRPC endpoint is up; its stubs both)
            restore_signals=False,
        )
