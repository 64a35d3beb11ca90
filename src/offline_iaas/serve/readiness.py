"""Whether a started tritonserver is ready to be published: the server and every model ready
on gRPC, and every endpoint bound, as this start's lines in its log say (``serve/node.py``
starts it and waits here; ``bench/server.py`` likewise)."""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path

from offline_iaas.bounded_read import NotRegularFile, refuse_unless_regular
from offline_iaas.errors import ServerError

ENDPOINTS_STARTED = "Started Metrics Service"
"""What tritonserver logs as it starts its last endpoint (grpc, then http, then metrics). Its
grpc endpoint answers ready before the others are bound: one whose http or metrics port
another process took in the meantime (``free_ports`` finds ports free only a moment before)
logs ``ENDPOINT_FAILED`` and exits, after answering ready (Triton 2.51: 41 ms after http's
line, 5 ms after this one; ``tests/test_server_ports.py``)."""
ENDPOINT_FAILED = "failed to start"
ENDPOINTS_SETTLE_SECONDS = 0.5
"""How long after ``ENDPOINTS_STARTED`` a start must stay up, without ``ENDPOINT_FAILED``."""
ENDPOINTS_GRACE_SECONDS = 10.0
"""How long a server ready on grpc may go without ``ENDPOINTS_STARTED`` in its log before it
counts as ready anyway (a tritonserver that words its log otherwise)."""


def wait_until_ready(
    proc: subprocess.Popen, url: str, models: list[str], timeout_seconds: float,
    stop: threading.Event, log: Path, log_offset: int = 0,
) -> bool:
    """True once the server and ``models`` are ready and every endpoint is bound (its log
    past ``log_offset``, where this start's output begins, says the last one started and
    none failed, ``ENDPOINTS_SETTLE_SECONDS`` on); False if the process exited first, or if
    an endpoint failed (the process then exits on its own, and may not have yet)."""
    import tritonclient.grpc as grpcclient

    deadline = time.monotonic() + timeout_seconds
    client = grpcclient.InferenceServerClient(url)
    ready_since: float | None = None
    try:
        while time.monotonic() < deadline and not stop.is_set():
            if proc.poll() is not None:
                return False
            try:
                if ready_since is None and client.is_server_ready() and all(
                        client.is_model_ready(m) for m in models):
                    ready_since = time.monotonic()
            except Exception:  # not listening yet
                pass
            if ready_since is not None and (
                    _logged_since(log, log_offset, ENDPOINTS_STARTED)
                    or time.monotonic() - ready_since > ENDPOINTS_GRACE_SECONDS):
                stop.wait(ENDPOINTS_SETTLE_SECONDS)
                return (proc.poll() is None and not stop.is_set()
                        and not _logged_since(log, log_offset, ENDPOINT_FAILED))
            time.sleep(0.25 if ready_since is None else 0.05)
    finally:
        client.close()
    if stop.is_set():
        return False
    raise ServerError(f"tritonserver at {url} not ready within {timeout_seconds:.0f} s")


def _logged_since(path: Path, offset: int, text: str) -> bool:
    """Whether ``text`` stands in the log ``path`` past byte ``offset``."""
    try:
        refuse_unless_regular(path)  # a FIFO's open would wait for a writer
        with open(path, "rb") as log:
            log.seek(offset)
            return text.encode() in log.read()
    except (OSError, NotRegularFile):
        return False
