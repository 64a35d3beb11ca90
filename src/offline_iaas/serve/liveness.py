"""``serve``'s watch on a tritonserver that runs but no longer answers: deadlocked, or stopped.

A crashed tritonserver ends its process, and ``serve`` sees it at once. A hung one keeps its
process and its port: clients time out, reconnect, and wait for a server that never answers
again. So ``serve`` asks tritonserver's liveness endpoint (gRPC, unrestricted by the run's
token) every ``PROBE_SECONDS``, in a thread of its own, and ends the node as on a crash once
no probe was answered for ``server.unresponsive_seconds``: run-local and DAGMan then restart
it, as they restart a server that died.
"""

from __future__ import annotations

import threading
import time

PROBE_SECONDS = 5.0
"""How often the liveness endpoint is asked."""
PROBE_TIMEOUT_SECONDS = 5.0
"""How long one probe waits for its answer."""


class LivenessWatch:
    """Asks the tritonserver at ``url`` whether it is live, every ``PROBE_SECONDS``, until
    ``close``; ``silent_seconds`` says how long since it last answered (or since the watch
    began)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.answered = time.monotonic()
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._probe, name="liveness", daemon=True)
        self._thread.start()

    def _probe(self) -> None:
        import tritonclient.grpc as grpcclient

        client = grpcclient.InferenceServerClient(self.url)
        try:
            while not self._closed.wait(PROBE_SECONDS):
                try:
                    if client.is_server_live(client_timeout=PROBE_TIMEOUT_SECONDS):
                        self.answered = time.monotonic()
                except Exception:  # no answer in time, or the connection refused: silent
                    pass
        finally:
            client.close()

    def silent_seconds(self) -> float:
        """Seconds since tritonserver last answered a probe."""
        return time.monotonic() - self.answered

    def close(self) -> None:
        """Stop probing (waits for a probe in flight: at most ``PROBE_TIMEOUT_SECONDS``)."""
        self._closed.set()
        self._thread.join()
