"""Ends a python-backend stub at once when its tritonserver exits without unloading the model.

Copied verbatim into the model repository beside each python model's ``model.py``, which
calls ``start_stub`` (or ``leave_with_server``) from ``initialize``.

Triton 2.51 exits without unloading its models when its exit timeout
(``server.exit_timeout_seconds``) passes with a sequence still open: its sequence batcher
counts an open sequence as an in-flight inference, so a client killed or paused mid-stream
keeps one open. The stub's own watchdog (python_backend ``pb_stub.cc``, "Non-graceful
termination detected") then frees the stub's shared memory from a second thread while the main
thread still waits on it; now and then the stub dies by SIGSEGV, which reads as a crash in the
server's log. That watchdog asks ``kill(pid, 0)``, which a zombie passes, and ``serve`` reaps
tritonserver only once its stubs are gone (``serve/node.stop_process``). This thread sees the
exit first (the server a zombie, or the stub handed to a new parent) and ends the stub with
exit status 0, leaving one line in the server's log.

It runs in the stub's Python, where the package may not be installed, so it imports only the
standard library and repeats the little it needs of ``serve/stub_watch.py`` (the stub's name,
reading ``/proc/<pid>/stat``).
"""

from __future__ import annotations

import faulthandler
import json
import os
import sys
import threading
import time

POLL_SECONDS = 0.1
"""How often the thread looks (python_backend's own watchdog looks every 0.3 s)."""
STUB_NAME = "triton_python_backend_stub"


def _server_pid() -> int | None:
    """The tritonserver that started this process, as a python-backend stub's command line
    names it (``triton_python_backend_stub <model.py> <shm> <size> <growth> <server pid>
    ...``); None when this process is not a stub (a model loaded in-process, by a test)."""
    try:
        with open("/proc/self/cmdline", "rb") as cmdline:
            argv = cmdline.read().split(b"\0")
        if os.path.basename(argv[0].decode(errors="replace")) != STUB_NAME:
            return None
        return int(argv[5])
    except (OSError, IndexError, ValueError):
        return None


def _server_ended(server_pid: int, parent_pid: int) -> bool:
    """Whether the stub's tritonserver has exited: the stub has a new parent, or the server
    is a zombie or gone."""
    if os.getppid() != parent_pid:
        return True
    try:
        with open(f"/proc/{server_pid}/stat") as stat:
            fields = stat.read()
    except OSError:
        return True
    return fields[fields.rfind(")") + 2:].split()[0] in ("Z", "X")


def leave_with_server(model: str) -> threading.Thread | None:
    """Start the daemon thread that ends this stub (exit code 0) once the tritonserver that
    started it has exited; None, and no thread, outside a stub (or without ``/proc``)."""
    parent_pid = os.getppid()
    server_pid = _server_pid()
    if server_pid is None:
        return None

    def watch() -> None:
        while not _server_ended(server_pid, parent_pid):
            time.sleep(POLL_SECONDS)
        sys.stderr.write(
            f"offline-iaas model {model}: tritonserver (pid {server_pid}) exited without "
            "unloading it (a sequence still open at its exit timeout, or it was killed); its "
            f"python-backend stub (pid {os.getpid()}) exits\n"
        )
        sys.stderr.flush()
        os._exit(0)  # no teardown: the stub's own is what crashes

    thread = threading.Thread(target=watch, name="leave-with-server", daemon=True)
    thread.start()
    return thread


def start_stub(args: dict) -> tuple[dict, dict[str, str]]:
    """What a python-backend model's ``initialize`` does first: a fatal signal prints the
    stub's stacks to the server log, the stub leaves with its server (``leave_with_server``);
    return the model's config and its string parameters."""
    faulthandler.enable()
    leave_with_server(args.get("model_name", ""))
    config = json.loads(args["model_config"])
    return config, {k: v["string_value"] for k, v in config.get("parameters", {}).items()}
