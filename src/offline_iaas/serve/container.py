"""Triton in an Apptainer/Singularity container (``server.runtime = "apptainer"``).

The server image (``server.image``: a SIF file, a sandbox directory such as an unpacked CVMFS
image, or a ``docker://`` URI) is started once per server node as a named **instance** through
spython: ``--nv`` when the server has GPUs, the model repository bound read-only at
``/models``. Each Triton start is then ``<runtime> exec --cleanenv instance://<name>
tritonserver ...``, a process of our own, so that ``serve`` can watch it, read its log and
signal it; ports are chosen per start (the node retries on "address in use"). Stopping the node
stops Triton, then the instance.

``CUDA_VISIBLE_DEVICES`` is passed explicitly: from the slot's ``_CONDOR_AssignedGPUs``
(``CUDA0,CUDA1`` becomes ``0,1``; ``GPU-<uuid>`` names are kept, CUDA accepts them), else the
node's own ``CUDA_VISIBLE_DEVICES``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from offline_iaas.errors import ServerError
from offline_iaas.serve.tritonserver import Ports, TritonInstall, server_command, start_server

REPOSITORY_MOUNT = "/models"
"""Where the model repository appears inside the container."""
RUNTIMES: tuple[str, ...] = ("apptainer", "singularity")


def assigned_gpus(environ: Mapping[str, str]) -> str | None:
    """``CUDA_VISIBLE_DEVICES`` for the GPUs HTCondor assigned to this slot, if any."""
    assigned = environ.get("_CONDOR_AssignedGPUs", "").strip()
    if assigned:
        names = [name.strip() for name in assigned.split(",") if name.strip()]
        out = [name[4:] if name.startswith("CUDA") and name[4:].isdigit() else name
               for name in names]
        return ",".join(out)
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    return visible if visible else None


def locate_runtime(runtime: str) -> Path:
    """The ``apptainer`` or ``singularity`` executable on PATH."""
    if runtime not in RUNTIMES:
        raise ServerError(f"unknown container runtime {runtime!r} (known: {', '.join(RUNTIMES)})")
    found = shutil.which(runtime)
    if not found:
        raise ServerError(
            f"server.runtime = {runtime!r} but no {runtime} executable is on PATH of "
            f"{os.uname().nodename}; install Apptainer, or use runtime = \"native\""
        )
    return Path(found)


def _spython_instance_class(executable: Path) -> Any:
    """spython's Instance class, calling ``executable`` instead of ``singularity``."""
    from spython.main import Client

    base = Client.instance  # the Instance class, with its instance commands attached

    class RuntimeInstance(base):  # type: ignore[misc, valid-type]
        def _init_command(self, action: Any, flags: Any = None) -> list[str]:
            cmd = base._init_command(self, action, flags)
            cmd[0] = str(executable)
            return cmd

    return RuntimeInstance


@dataclass
class ContainerLauncher:
    """Starts tritonserver inside one container instance of ``image``."""

    runtime: str
    image: str
    repository: Path
    name: str
    """Instance name (unique per node and process)."""
    gpus: int = 0
    token: str | None = None
    """The run's access token (``rendezvous/access.py``); None serves without restriction."""
    environ: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    _executable: Path | None = None
    _instance: Any = None

    @property
    def started(self) -> bool:
        return self._instance is not None

    def instance_options(self) -> list[str]:
        """Options of ``instance start``: GPUs and the repository bind mount."""
        options = ["--nv"] if self.gpus else []
        return [*options, "--bind", f"{self.repository}:{REPOSITORY_MOUNT}:ro"]

    def exec_argv(self, triton: list[str]) -> list[str]:
        """The command that runs ``triton`` (a tritonserver command line) in the instance."""
        assert self._executable is not None
        env = []
        devices = assigned_gpus(self.environ) if self.gpus else None
        if devices:
            env = ["--env", f"CUDA_VISIBLE_DEVICES={devices}"]
        return [str(self._executable), "exec", "--cleanenv", *env, f"instance://{self.name}",
                *triton]

    def start_instance(self) -> None:
        """Start the named instance (spython); ServerError if it is not running after."""
        self._executable = locate_runtime(self.runtime)
        if not self.repository.is_dir():
            raise ServerError(f"model repository {self.repository} is not a directory")
        instance_class = _spython_instance_class(self._executable)
        instance = instance_class(self.image, start=False, name=self.name, quiet=True)
        instance.start(options=self.instance_options(), quiet=True)
        listed = instance._list(self.name, quiet=True, return_json=True)
        if not listed:
            raise ServerError(
                f"{self.runtime} instance start of {self.image} as {self.name} failed "
                "(see this node's error log for the runtime's message)"
            )
        self._instance = instance

    def start(self, ports: Ports, bind: str, exit_timeout: float, log: Path) -> subprocess.Popen:
        """Start tritonserver on ``ports`` in the instance (started first if needed)."""
        if self._instance is None:
            self.start_instance()
        install = TritonInstall(Path("tritonserver"), None, {})
        triton = server_command(
            install, Path(REPOSITORY_MOUNT), ports, bind, exit_timeout, token=self.token
        )
        return start_server(self.exec_argv(triton), TritonInstall(Path(), None, {}), log)

    def close(self) -> None:
        """Stop the instance (if it was started)."""
        if self._instance is not None:
            self._instance.stop(timeout=10, quiet=True)
            self._instance = None
