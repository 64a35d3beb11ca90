"""The gRPC side of a client: finding a live server of the campaign and streaming requests to
it on one bidirectional stream.

``connect`` waits (bounded) for a live server, its own first and after
``client.failover_seconds`` any published one, and checks that it serves the campaign's model;
``RequestStream`` keeps at most ``in_flight`` requests outstanding on one stream and hands each
response on. The campaign's client node and the bench's clients (``bench/service.py``) stream
through it.
"""

from __future__ import annotations

import logging
import queue
import time
from collections.abc import Callable, Iterable, Iterator

import numpy as np

from offline_iaas.config import CampaignConfig
from offline_iaas.errors import ModelError, ServerError
from offline_iaas.rendezvous.addresses import (
    ServerAddress,
    published_servers,
    read_address,
    read_refusal,
)
from offline_iaas.rundir import RunDir

logger = logging.getLogger(__name__)

POLL_SECONDS = 0.5


def check_model(client, config: CampaignConfig, headers: dict[str, str]) -> None:
    """The served ensemble must take this campaign's channels and give its outputs."""
    try:
        meta = client.get_model_metadata(
            config.model.name,
            headers=headers,
            as_json=True,
            client_timeout=config.client.connect_timeout_seconds,
        )
    except Exception as err:
        if "restricted" in str(err).lower():
            raise ServerError(
                f"the server refused this client: the run's token (RUN/token) is missing or "
                f"wrong ({err})"
            ) from None
        raise ModelError(f"server has no model {config.model.name!r}: {err}") from None
    inputs = {i["name"]: [int(d) for d in i["shape"]] for i in meta["inputs"]}
    outputs = {o["name"] for o in meta["outputs"]}
    channels = len(config.stream_channels)
    wanted = config.outputs.names
    if inputs.get("update", [None, None])[1] != channels or not set(wanted) <= outputs:
        raise ModelError(
            f"served model {config.model.name!r} takes {inputs} and gives {sorted(outputs)}, "
            f"the campaign sends 'update' with {channels} channels and reads {list(wanted)}"
        )


def live_client(address: ServerAddress, config: CampaignConfig, headers: dict[str, str]):
    """A client of ``address`` if its server answers and serves the campaign's model, ready,
    else None (ModelError if it serves another model)."""
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(address.grpc_url)
    try:
        timeout = config.client.connect_timeout_seconds
        if client.is_server_ready(headers=headers, client_timeout=timeout) and \
                client.is_model_ready(config.model.name, headers=headers,
                                      client_timeout=timeout):
            check_model(client, config, headers)
            return client
    except ModelError:
        client.close()
        raise
    except Exception:  # not listening, not answering, refused: a dead or stale server
        pass
    client.close()
    return None


def is_live(run: RunDir, server: str, config: CampaignConfig,
             headers: dict[str, str]) -> bool:
    address = read_address(run, server)
    client = None if address is None else live_client(address, config, headers)
    if client is None:
        return False
    client.close()
    return True


def connect(
    run: RunDir, config: CampaignConfig, server: str, headers: dict[str, str],
    node: str = "", spread: int = 0, avoid: ServerAddress | None = None,
) -> tuple[object, ServerAddress]:
    """A client of a live server of the campaign; waits for one (bounded).

    ``server`` is the preferred one (the client's own, or the one it failed over to). For
    ``client.failover_seconds`` only it is tried; after that, every server whose address is
    published, ``server`` first, the others starting with the ``spread``-th (the client's
    place among its server's clients, so that a lost server's clients are dealt round the
    others evenly). A server that refused to serve (``addresses.read_refusal``) is not waited
    for: ServerError with its reason unless another is live. ServerError once
    ``client.server_wait_seconds`` have passed with none. ``avoid`` (a server epoch whose
    model Triton called not healthy) counts as not live: that epoch is left for the next.
    """
    started = time.monotonic()
    failover = config.client.failover_seconds
    stale: dict[str, ServerAddress] = {}
    while True:
        waited = time.monotonic() - started
        candidates = [server]
        refused = read_refusal(run, server)
        if refused or (failover > 0 and waited >= failover):
            others = [s for s in published_servers(run) if s != server]
            turn = spread % len(others) if others else 0
            candidates += others[turn:] + others[:turn]
        for name in candidates:
            address = read_address(run, name)
            if address is None:
                continue
            client = None if address == avoid else live_client(address, config, headers)
            if client is not None:
                if name != server:
                    logger.warning(f"{node}: {server} not live after {waited:.0f} s; "
                                   f"continuing on {name} at {address.grpc_url}")
                return client, address
            if stale.get(name) != address:
                logger.warning(f"{name} at {address.grpc_url} (epoch {address.epoch}) does not "
                               "answer")
                stale[name] = address
        if refused:
            raise ServerError(f"{server} refused to serve this campaign, and no other server "
                              f"is live: {refused}")
        if waited > config.client.server_wait_seconds:
            where = run.address(server)
            last = stale.get(server)
            raise ServerError(
                f"no live server {server} within {config.client.server_wait_seconds:.0f} s "
                f"(address file {where}: "
                + (f"{last.grpc_url}, epoch {last.epoch}, not answering)" if last else
                   "never written)")
                + (f", nor any other published server after {failover:.0f} s"
                   if 0 < failover <= config.client.server_wait_seconds else "")
            )
        time.sleep(POLL_SECONDS)


class RequestStream:
    """One gRPC bidirectional stream of inference requests, at most ``in_flight`` outstanding.

    The campaign's clients and the bench's clients send through it. ``send`` waits, while
    ``in_flight`` requests are unanswered, for the oldest response and hands it to
    ``on_response(request_id, result)`` (in the sender's thread); ``drain`` takes the rest.
    Leaving the ``with`` block closes the stream, cancelling what is still in flight (after
    a failure the server may never answer it).

    Parameters
    ----------
    client
        A ``tritonclient.grpc.InferenceServerClient``.
    model, outputs
        The served model and the outputs requested.
    in_flight, timeout_seconds
        Requests outstanding at most, and how long to wait for one response.
    headers
        gRPC headers (the run's token).
    on_response
        Called with each response's request ID and result.
    server
        Names the server in errors (``server-0 at 127.0.0.1:8001``).
    """

    def __init__(self, client, model: str, outputs: tuple[str, ...], in_flight: int,
                 timeout_seconds: float, headers: dict[str, str],
                 on_response: Callable[[str, object], None], server: str) -> None:
        import tritonclient.grpc as grpcclient

        self.client = client
        self.model = model
        self.requested = [grpcclient.InferRequestedOutput(name) for name in outputs]
        self.in_flight = in_flight
        self.timeout_seconds = timeout_seconds
        self.headers = headers
        self.on_response = on_response
        self.server = server
        self.sent = self.received = 0
        self.tensor_bytes_sent = 0
        """Bytes of the tensors sent (what a request carries, without gRPC's framing)."""
        self._responses: queue.Queue = queue.Queue()

    def __enter__(self) -> RequestStream:
        self.client.start_stream(
            callback=lambda result, error: self._responses.put((result, error)),
            headers=self.headers,
        )
        return self

    def __exit__(self, *exc) -> None:
        self.client.stop_stream(cancel_requests=self.received < self.sent)

    def send(self, name: str, values: np.ndarray, request_id: str, sequence_id: int = 0,
             start: bool = False, end: bool = False,
             more: dict[str, np.ndarray] | None = None) -> None:
        """Send tensor ``name`` = ``values`` (with its batch axis), and the tensors of
        ``more`` (name → values, likewise), as one request."""
        import tritonclient.grpc as grpcclient

        while self.sent - self.received >= self.in_flight:
            self.take()
        tensors, nbytes = [], 0
        for tensor_name, tensor_values in {name: values, **(more or {})}.items():
            data = np.ascontiguousarray(tensor_values, np.float32)
            tensor = grpcclient.InferInput(tensor_name, list(data.shape), "FP32")
            tensor.set_data_from_numpy(data)
            tensors.append(tensor)
            nbytes += data.nbytes
        try:
            self.client.async_stream_infer(
                self.model, tensors, request_id=request_id, sequence_id=sequence_id,
                sequence_start=start, sequence_end=end, outputs=self.requested,
            )
        except grpcclient.InferenceServerException as err:  # the stream is gone
            raise ServerError(f"stream to {self.server} broke: {err}") from None
        self.sent += 1
        self.tensor_bytes_sent += nbytes

    def send_piece(self, requests: Iterable[dict[str, np.ndarray]], count: int, key: str,
                   sequence_id: int) -> Iterator[int]:
        """Send a piece's ``count`` requests on its sequence, START with the first and END with
        the last, as request IDs ``key:index``; yield each index once it is sent.

        ``requests``: each request's input tensors without their batch axis
        (``requests.request_inputs``), ``update`` among them."""
        for index, inputs in enumerate(requests):
            tensors = {name: values[None] for name, values in inputs.items()}
            update = tensors.pop("update")
            self.send("update", update, f"{key}:{index}", sequence_id, start=index == 0,
                      end=index == count - 1, more=tensors)
            yield index

    def take(self) -> None:
        """Wait for one response and hand it on; ServerError on an error, a response
        without the requested outputs, or a timeout."""
        try:
            result, error = self._responses.get(timeout=self.timeout_seconds)
        except queue.Empty:
            raise ServerError(
                f"no response from {self.server} within {self.timeout_seconds:.0f} s"
            ) from None
        if error is not None:
            raise ServerError(f"{self.server} answered with an error: {error}")
        request_id = result.get_response().id
        missing = [o.name() for o in self.requested if result.as_numpy(o.name()) is None]
        if missing:  # Triton 2.51's answer on a stream to a model whose python stub died
            raise ServerError(f"{self.server} answered request {request_id} without its "
                              f"output {', '.join(map(repr, missing))}: the server failed")
        self.received += 1
        self.on_response(request_id, result)

    def drain(self) -> None:
        """Take every outstanding response."""
        while self.received < self.sent:
            self.take()
