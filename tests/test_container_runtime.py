"""The container runtime of ``serve`` (spython + an apptainer shim that records its calls).

The whole campaign through the shim, with real tritonservers, is in test_resubmission.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from offline_iaas.errors import ServerError
from offline_iaas.rundir import RunDir
from offline_iaas.serve.container import (
    REPOSITORY_MOUNT,
    ContainerLauncher,
    assigned_gpus,
    locate_runtime,
)
from tests.apptainer_shim import install_shim
from tests.helpers import captured_log


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({}, None),
        ({"CUDA_VISIBLE_DEVICES": "2"}, "2"),
        ({"_CONDOR_AssignedGPUs": "CUDA1", "CUDA_VISIBLE_DEVICES": "0"}, "1"),
        ({"_CONDOR_AssignedGPUs": "CUDA0,CUDA3"}, "0,3"),
        ({"_CONDOR_AssignedGPUs": "GPU-3a2b1c0d"}, "GPU-3a2b1c0d"),
        ({"_CONDOR_AssignedGPUs": " GPU-aa, GPU-bb "}, "GPU-aa,GPU-bb"),
    ],
)
def test_assigned_gpus(environ: dict[str, str], expected: str | None) -> None:
    assert assigned_gpus(environ) == expected


@pytest.fixture
def shim(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The shim on PATH as apptainer and singularity; returns its call log."""
    bin_dir = tmp_path / "bin"
    install_shim(bin_dir, "apptainer")
    install_shim(bin_dir, "singularity")
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("APPTAINER_SHIM_DIR", str(tmp_path / "shim"))
    return tmp_path / "shim" / "calls.jsonl"


def calls(log: Path) -> list[list[str]]:
    out = []
    for line in log.read_text().splitlines():
        argv = json.loads(line)["argv"]
        if argv != ["--version"]:  # spython's check_install
            out.append([word for word in argv if word != "--quiet"])
    return out


@pytest.mark.parametrize("runtime", ["apptainer", "singularity"])
def test_instance_lifecycle_through_spython(shim: Path, tmp_path: Path, runtime: str) -> None:
    image = tmp_path / "tritonserver.sif"
    image.write_bytes(b"SIF")
    repo = tmp_path / "model-repository"
    repo.mkdir()
    launcher = ContainerLauncher(
        runtime=runtime, image=str(image), repository=repo, name="offline-iaas-server0-1",
        gpus=1, environ={"_CONDOR_AssignedGPUs": "CUDA1"},
    )
    launcher.start_instance()
    assert launcher.started
    start = calls(shim)[0]
    assert start == ["instance", "start", "--nv", "--bind", f"{repo}:{REPOSITORY_MOUNT}:ro",
                     str(image), "offline-iaas-server0-1"]
    argv = launcher.exec_argv(["tritonserver", f"--model-repository={REPOSITORY_MOUNT}"])
    assert Path(argv[0]).name == runtime
    assert argv[1:] == ["exec", "--cleanenv", "--env", "CUDA_VISIBLE_DEVICES=1",
                        "instance://offline-iaas-server0-1", "tritonserver",
                        "--model-repository=/models"]
    launcher.close()
    assert calls(shim)[-1] == ["instance", "stop", "-t", "10", "offline-iaas-server0-1"]
    assert not launcher.started
    assert not list((tmp_path / "shim" / "instances").iterdir())


def test_cpu_server_gets_no_gpu_options(shim: Path, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    launcher = ContainerLauncher("apptainer", "docker://nvcr.io/nvidia/tritonserver:24.08-py3",
                                 repo, "x", gpus=0, environ={"CUDA_VISIBLE_DEVICES": "0"})
    assert "--nv" not in launcher.instance_options()
    launcher.start_instance()
    assert "--env" not in launcher.exec_argv(["tritonserver"])
    launcher.close()


def test_failed_instance_start_is_a_server_error(shim: Path, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    launcher = ContainerLauncher("apptainer", str(tmp_path / "missing.sif"), repo, "x")
    with pytest.raises(ServerError, match="instance start of .*missing.sif as x failed"):
        launcher.start_instance()
    assert not launcher.started
    launcher.close()  # nothing to stop
    assert calls(shim)[-1][:2] == ["instance", "list"]


def test_missing_runtime_is_a_server_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ServerError, match="no apptainer executable is on PATH"):
        locate_runtime("apptainer")
    with pytest.raises(ServerError, match="unknown container runtime"):
        locate_runtime("docker")


class FakeLauncher:
    """Launches stand-ins for tritonserver: the first finds its port taken, and exits at once
    or (``first_lingers``, as tritonserver shutting down after a failed endpoint) not."""

    def __init__(self, first_lingers: bool = False) -> None:
        self.ports: list[int] = []
        self.procs: list[subprocess.Popen] = []
        self.closed = False
        self.first_lingers = first_lingers

    def start(self, ports, bind: str, exit_timeout: float, log: Path) -> subprocess.Popen:
        self.ports.append(ports.grpc)
        log.parent.mkdir(parents=True, exist_ok=True)
        taken = "print('E0101 main.cc] failed to start HTTP service: Address already in use')"
        listening = "print('listening'); import time; time.sleep(60)"
        code = ((taken + "; import time; time.sleep(60)" if self.first_lingers else taken)
                if len(self.ports) == 1 else listening)
        with open(log, "ab") as out:
            self.procs.append(subprocess.Popen([sys.executable, "-u", "-c", code], stdout=out,
                                               stderr=subprocess.STDOUT))
        return self.procs[-1]

    def close(self) -> None:
        self.closed = True


@pytest.mark.parametrize("first_lingers", [False, True])
def test_serve_retries_on_address_in_use_and_stops_on_sigterm(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, first_lingers: bool
) -> None:
    from offline_iaas.config import config_from_dict
    from offline_iaas.serve import node as serve_node
    from offline_iaas.serve import startup_checks

    config = config_from_dict(
        {"data": {"frames": "f", "channels": ["H1:X"], "start": 0, "duration": 16,
                  "sample_rate": 64}, "model": {"repository": "repo"}},
        tmp_path / "c.toml",
    )
    launcher = FakeLauncher(first_lingers)
    monkeypatch.setattr(serve_node, "load_config", lambda path: config)
    manifest = SimpleNamespace(flavor="cpu", served="fused", models=("offline-iaas",))
    monkeypatch.setattr(startup_checks, "check_repository",
                        lambda config, load_graphs=True: manifest)
    monkeypatch.setattr(startup_checks, "check_models_present", lambda repository, models: None)
    monkeypatch.setattr(serve_node, "make_launcher",
                        lambda server, repository, node, token=None: launcher)

    def ready(proc, url, models, timeout, stop, log, offset) -> bool:
        """Ready once the stand-in says it listens; not once it logged a taken port or
        exited (waited for, however slowly its interpreter starts)."""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            said = log.read_text()[offset:]
            if "already in use" in said:
                return False
            if "listening" in said:
                return proc.poll() is None
            if proc.poll() is not None:
                return False
            time.sleep(0.02)
        return False

    monkeypatch.setattr(serve_node, "wait_until_ready", ready)
    run = tmp_path / "run"
    run.mkdir()
    (run / "offline.dag").touch()  # a run directory, of a DAG written by hand

    returned = threading.Event()

    def stop_when_published() -> None:
        deadline = time.monotonic() + 20
        while not (run / "servers" / "server0.json").exists() and time.monotonic() < deadline:
            if returned.wait(0.05):
                return  # serve failed before publishing: never signal another test
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=stop_when_published, daemon=True).start()
    try:
        with captured_log() as lines:
            serve_node.serve(RunDir(run), "server0")
    finally:
        returned.set()
    assert len(launcher.ports) == 2 and launcher.ports[0] != launcher.ports[1]
    # the failed start was stopped before the retry, not left running beside it
    assert launcher.procs[0].returncode is not None
    assert "server0: port taken, retrying with other ports" in lines
    assert any(f"ready at 127.0.0.1:{launcher.ports[1]} (epoch 1" in line for line in lines)
    # the stand-in has no SIGTERM handler: it dies by the stop's SIGTERM, which is no crash
    assert lines[-2:] == ["server0: stopping", "server0: tritonserver exited with signal SIGTERM"]
    assert launcher.closed and not (run / "servers" / "server0.json").exists()
