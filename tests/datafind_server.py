"""A real gwdatafind-server on loopback, serving a local frame tree (for tests).

``running_datafind_server(frame_dir)`` lists every ``*.gwf`` under ``frame_dir`` in an FFL
file, writes the server's TOML config beside it (in a temporary directory), starts
``flask --app 'gwdatafind_server:create_app()' run`` on 127.0.0.1 and a free port in its own
session, waits until it answers, yields its URL, and on exit (normal or not) stops it by PID:
SIGTERM, then SIGKILL to its process group after a timeout.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import requests

from offline_iaas.data.discovery import parse_frame_name

START_TIMEOUT_SECONDS = 60.0
STOP_TIMEOUT_SECONDS = 10.0


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _number(value: float) -> str:
    return f"{value:.6f}".rstrip("0").rstrip(".")


def _write_config(frame_dir: Path, work: Path) -> Path:
    frames = sorted(p.resolve() for p in Path(frame_dir).rglob("*.gwf") if p.is_file())
    if not frames:
        raise ValueError(f"no .gwf files under {frame_dir}")
    lists = work / "ffl"
    lists.mkdir()
    # FFL lines: PATH GPSSTART DURATION 0 0 (the server reads the span from the file name)
    lines = []
    for path in frames:
        frame = parse_frame_name(path)
        if frame is None:
            raise ValueError(f"{path} is not named <OBS>-<DESC>-<GPS>-<DUR>.gwf")
        lines.append(f"{path} {_number(frame.gps_start)} {_number(frame.duration)} 0 0\n")
    (lists / "frames.ffl").write_text("".join(lines))
    config = work / "gwdatafind-server.toml"
    config.write_text(
        "[[input.source]]\n"
        'type = "ffl"\n'
        f'path = "{lists}"\n'
        "interval = 60\n"
    )
    return config


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        try:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=STOP_TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # its session: anything it left behind
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def _wait_ready(proc: subprocess.Popen, url: str, log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(
                f"gwdatafind-server exited with {proc.returncode}: {log.read_text()[-2000:]}"
            )
        try:
            if requests.get(f"{url}/api/v1/gwf.json", timeout=2).ok:
                return
        except requests.RequestException:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"gwdatafind-server at {url} not ready after {START_TIMEOUT_SECONDS} s")


@contextmanager
def running_datafind_server(frame_dir: Path) -> Iterator[str]:
    """Serve the frames under ``frame_dir`` with gwdatafind-server; yields its URL.

    The frame types are the ``<DESC>`` fields of the file names (``H-H1_SYNTH-...gwf`` is
    observatory ``H``, frame type ``H1_SYNTH``).
    """
    with tempfile.TemporaryDirectory(prefix="gwdatafind-") as tmp:
        work = Path(tmp)
        config = _write_config(frame_dir, work)
        log = work / "server.log"
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        env = {**os.environ, "GWDATAFIND_SERVER_CONFIG": str(config), "FLASK_DEBUG": "0"}
        command = [
            sys.executable, "-m", "flask", "--app", "gwdatafind_server:create_app()",
            "run", "--host", "127.0.0.1", "--port", str(port), "--no-reload",
        ]
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                command,
                env=env,
                cwd=work,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        try:
            _wait_ready(proc, url, log)
            yield url
        finally:
            _stop(proc)
