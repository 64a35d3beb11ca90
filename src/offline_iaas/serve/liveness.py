"""``serve``'s watch on a tritonserver that runs but answers nothing: stopped, or hung so that
even its health endpoint is silent.

A crashed tritonserver ends its process, and ``serve`` sees it at once. A stopped or wedged one
keeps its process and its port: clients time out, reconnect, and wait for a server that never
answers again. So ``serve`` asks tritonserver's liveness endpoint (gRPC's health service, open
without the run's token) every ``PROBE_SECONDS``, in a thread of its own, and ends the node as
on a crash once nothing was answered for ``server.unresponsive_seconds`` (``hung``): run-local
and DAGMan then restart it, as they restart a server that died. A stalled inference behind a
live health service is the clients' deadlines' business (``client.request_timeout_seconds``).
"""

from __future__ import annotations

import logging
import threading
import time

logger = logging.getLogger(__name__)

PROBE_SECONDS = 5.0
"""How often the liveness endpoint is asked."""
PROBE_TIMEOUT_SECONDS = 5.0
"""How long one probe waits for its answer."""
FAILED_PROBES = 2
"""Probes in a row unanswered before a server can be called hung: a serve process that was
itself paused (a suspended job) probed nothing meanwhile, and its server is not judged by the
time alone."""


class LivenessWatch:
    """Asks the tritonserver at ``url`` whether it is live, at once and then every
    ``probe_seconds``, until ``close``."""

    def __init__(self, url: str, probe_seconds: float = PROBE_SECONDS) -> None:
        self.url = url
        self.probe_seconds = probe_seconds
        self.answered = time.monotonic()
        """When tritonserver last answered (or the watch began)."""
        self.failed_probes = 0
        """Probes unanswered since that answer."""
        self.broken: str | None = None
        """Why the watch itself stopped (then it calls nothing hung)."""
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._probe, name="liveness", daemon=True)
        self._thread.start()

    def _probe(self) -> None:
        try:
            import tritonclient.grpc as grpcclient

            client = grpcclient.InferenceServerClient(self.url)
            try:
                while True:
                    try:
                        live = client.is_server_live(client_timeout=PROBE_TIMEOUT_SECONDS)
                    except Exception:  # no answer in time, or the connection refused
                        live = False
                    if live:
                        self.answered, self.failed_probes = time.monotonic(), 0
                    else:
                        self.failed_probes += 1
                    if self._closed.wait(self.probe_seconds):
                        return
            finally:
                client.close()
        except Exception as err:  # never a false alarm from the watch's own failure
            self.broken = f"{type(err).__name__}: {err}"
            logger.warning(f"the liveness watch on {self.url} stopped ({self.broken}): a hung "
                           "tritonserver is not noticed")

    def silent_seconds(self) -> float:
        """Seconds since tritonserver last answered a probe."""
        return time.monotonic() - self.answered

    def hung(self, unresponsive_seconds: float) -> bool:
        """Whether tritonserver answered nothing for ``unresponsive_seconds``, with at least
        ``FAILED_PROBES`` probes in a row unanswered."""
        return (self.broken is None and self.failed_probes >= FAILED_PROBES
                and self.silent_seconds() > unresponsive_seconds)

    def close(self) -> None:
        """Stop probing (waits for a probe in flight: at most ``PROBE_TIMEOUT_SECONDS``)."""
        self._closed.set()
        self._thread.join()
