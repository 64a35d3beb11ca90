"""``offline-iaas client``: stream one client segment to its server, surviving failures.

A segment is one or more pieces (one per analysable stretch it touches). For each piece the
client reads its samples from frames chunk by chunk, cuts them into requests of
``batch_size * stride`` new samples per channel (the last one shorter), and sends them on one
gRPC bidirectional stream under the piece's sticky sequence ID: START on the first request, END
on the last, at most ``in_flight`` requests outstanding. Responses are placed by request index,
never by arrival order, and saved as checkpoint chunks (``client/part.py``) as they complete.

When the stream fails — an error, no response within ``request_timeout_seconds``, the server
restarted (its state is lost) or evicted the idle sequence — the client drops the connection,
waits for a live server at the address its server node publishes (a stale address file of a
dead server is ignored), and re-primes each unfinished piece from its last checkpoint minus one
warm-up, with a new START. The re-primed windows are recomputed and discarded, so the output is
unchanged. After ``max_reconnects`` failures it exits non-zero, and the DAG's retry resumes from
the checkpoints.
"""

from __future__ import annotations

import logging
import math
import queue
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np

from offline_iaas import hooks
from offline_iaas.client.balance import claim, start_server
from offline_iaas.client.part import Holes, PartWriter, part_is_complete, peak_rss_mb
from offline_iaas.config import CampaignConfig, load_config
from offline_iaas.data.discovery import FrameFile, discover_frames
from offline_iaas.data.frames import DECIMATION_HALF, iter_chunks
from offline_iaas.data.gwf_reader import BadFrameFile
from offline_iaas.data.segments import without_bad_files
from offline_iaas.errors import ModelError, ServerError
from offline_iaas.jobspec import ClientSegment, Piece, read_client_job
from offline_iaas.logs import NO_PROGRESS, NullProgress
from offline_iaas.rendezvous.access import auth_headers
from offline_iaas.rendezvous.addresses import (
    ServerAddress,
    published_servers,
    read_address,
    read_refusal,
)
from offline_iaas.repository.pipeline import ensemble_outputs, output_rows, row_shape
from offline_iaas.rundir import RunDir
from offline_iaas.stretches import Stretch, request_sizes, sub_pieces

logger = logging.getLogger(__name__)

POLL_SECONDS = 0.5


def piece_samples(
    config: CampaignConfig, frames: list[FrameFile], piece: Piece, from_window: int = 0
) -> Iterator[np.ndarray]:
    """A piece's samples at the model rate from stream window ``from_window``, chunk by chunk."""
    return iter_chunks(
        frames,
        config.stream_channels,
        piece.gps_start + from_window * config.stride_seconds,
        piece.gps_end,
        config.data.sample_rate,
        config.client.chunk_seconds,
        (piece.stretch_gps_start, piece.stretch_gps_end),
    )


def request_updates(
    chunks: Iterator[np.ndarray], sizes_samples: list[int]
) -> Iterator[np.ndarray]:
    """Cut a stream of chunks into updates of the given lengths (samples per channel)."""
    pending: list[np.ndarray] = []
    held = 0
    for size in sizes_samples:
        while held < size:
            chunk = next(chunks)
            pending.append(chunk)
            held += chunk.shape[1]
        joined = pending[0] if len(pending) == 1 else np.concatenate(pending, axis=1)
        yield joined[:, :size]
        rest = joined[:, size:]
        pending, held = ([rest], rest.shape[1]) if rest.shape[1] else ([], 0)


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
    wanted = ensemble_outputs(config)
    if inputs.get("update", [None, None])[1] != channels or not set(wanted) <= outputs:
        raise ModelError(
            f"served model {config.model.name!r} takes {inputs} and gives {sorted(outputs)}, "
            f"the campaign sends 'update' with {channels} channels and reads {list(wanted)}"
        )


def _live_client(address: ServerAddress, config: CampaignConfig, headers: dict[str, str]):
    """A client of ``address`` if its server answers and serves the campaign's model, else
    None (ModelError if it serves another model)."""
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(address.grpc_url)
    try:
        if client.is_server_ready(
            headers=headers, client_timeout=config.client.connect_timeout_seconds
        ):
            check_model(client, config, headers)
            return client
    except ModelError:
        client.close()
        raise
    except Exception:  # not listening, not answering, refused: a dead or stale server
        pass
    client.close()
    return None


def _is_live(run: RunDir, server: str, config: CampaignConfig,
             headers: dict[str, str]) -> bool:
    address = read_address(run, server)
    client = None if address is None else _live_client(address, config, headers)
    if client is None:
        return False
    client.close()
    return True


def connect(
    run: RunDir, config: CampaignConfig, server: str, headers: dict[str, str],
    node: str = "", spread: int = 0,
) -> tuple[object, ServerAddress]:
    """A client of a live server of the campaign; waits for one (bounded).

    ``server`` is the preferred one (the client's own, or the one it failed over to). For
    ``client.failover_seconds`` only it is tried; after that, every server whose address is
    published, ``server`` first, the others starting with the ``spread``-th (the client's
    place among its server's clients, so that a lost server's clients are dealt round the
    others evenly). A server that refused to serve (``addresses.read_refusal``) is not waited
    for: ServerError with its reason unless another is live. ServerError once
    ``client.server_wait_seconds`` have passed with none.
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
            client = _live_client(address, config, headers)
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


@dataclass
class _PieceRows:
    """Places one piece's responses by request index and checkpoints contiguous rows."""

    number: int
    first_row: int
    """Stream row of the first request (re-priming starts before the checkpoint)."""
    keep_from: int
    """Rows before this are re-primed and discarded (already checkpointed)."""
    sizes: list[int]
    flush_rows: int
    writer: PartWriter
    pending: dict[int, dict[str, np.ndarray]] = field(default_factory=dict)
    next_request: int = 0
    buffer: list[dict[str, np.ndarray]] = field(default_factory=list)
    buffer_start: int = -1
    buffered: int = 0
    starts: list[int] = field(init=False)
    """Stream row of each request's first window."""

    def __post_init__(self) -> None:
        self.starts = [self.first_row + int(n) for n in np.cumsum([0, *self.sizes[:-1]])]

    def add(self, request: int, values: dict[str, np.ndarray]) -> None:
        self.pending[request] = values
        while self.next_request in self.pending:
            rows = self.pending.pop(self.next_request)
            start = self.starts[self.next_request]
            skip = max(0, self.keep_from - start)
            if skip < self.sizes[self.next_request]:
                if not self.buffer:
                    self.buffer_start = start + skip
                self.buffer.append({k: v[skip:] for k, v in rows.items()})
                self.buffered += self.sizes[self.next_request] - skip
            self.next_request += 1
            if self.buffered >= self.flush_rows or self.next_request == len(self.sizes):
                self.flush()

    def flush(self) -> None:
        if self.buffer:
            joined = {k: np.concatenate([b[k] for b in self.buffer]) for k in self.buffer[0]}
            self.writer.write_chunk(self.number, self.buffer_start, joined)
        self.buffer, self.buffered = [], 0

    @property
    def complete(self) -> bool:
        return self.next_request == len(self.sizes)


@dataclass
class StreamRecord:
    """What a client's streaming did, over reconnections: the Unix times of its first request
    and last response, the tensor bytes it sent, and the servers it streamed to."""

    first_request_unix: float | None = None
    last_response_unix: float | None = None
    tensor_bytes_sent: int = 0
    servers: list[str] = field(default_factory=list)
    """Every server it streamed to, in order (one entry per change)."""


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
             start: bool = False, end: bool = False) -> None:
        """Send tensor ``name`` = ``values`` (with its batch axis) as one request."""
        import tritonclient.grpc as grpcclient

        while self.sent - self.received >= self.in_flight:
            self.take()
        data = np.ascontiguousarray(values, np.float32)
        tensor = grpcclient.InferInput(name, list(data.shape), "FP32")
        tensor.set_data_from_numpy(data)
        try:
            self.client.async_stream_infer(
                self.model, [tensor], request_id=request_id, sequence_id=sequence_id,
                sequence_start=start, sequence_end=end, outputs=self.requested,
            )
        except grpcclient.InferenceServerException as err:  # the stream is gone
            raise ServerError(f"stream to {self.server} broke: {err}") from None
        self.sent += 1
        self.tensor_bytes_sent += data.nbytes

    def take(self) -> None:
        """Wait for one response and hand it on; ServerError on an error or a timeout."""
        try:
            result, error = self._responses.get(timeout=self.timeout_seconds)
        except queue.Empty:
            raise ServerError(
                f"no response from {self.server} within {self.timeout_seconds:.0f} s"
            ) from None
        if error is not None:
            raise ServerError(f"{self.server} answered with an error: {error}")
        self.received += 1
        self.on_response(result.get_response().id, result)

    def drain(self) -> None:
        """Take every outstanding response."""
        while self.received < self.sent:
            self.take()


@dataclass(frozen=True)
class _Stream:
    """One stream of a segment: a piece, or with gaps a part of one (``sub_pieces``)."""

    number: int
    """The piece's number in the segment (its rows in the part)."""
    piece: Piece
    """What is streamed (the piece, or a part of it)."""
    row: int
    """The part row of the stream's first window."""


def segment_streams(config: CampaignConfig, segment: ClientSegment,
                    bad: list[tuple[float, float]]) -> tuple[list[_Stream], Holes]:
    """The streams of a segment with the bad frame files' spans as gaps (none: one per
    piece), and per piece the part rows no stream produces."""
    streams: list[_Stream] = []
    holes: Holes = []
    for number, piece in enumerate(segment.pieces):
        whole = Stretch(piece.stretch, piece.stretch_gps_start, piece.stretch_gps_end)
        parts = without_bad_files(config, [whole], bad) if bad else [whole]
        gaps, covered = [], 0
        for sub in sub_pieces(config, piece, parts):
            row = sub.first_window - piece.first_window
            streams.append(_Stream(number, sub, row))
            if row > covered:
                gaps.append((covered, row))
            covered = row + sub.windows
        if covered < piece.windows:
            gaps.append((covered, piece.windows))
        holes.append(gaps)
    return streams, holes


def _stream_once(
    client, address: ServerAddress, config: CampaignConfig, segment: ClientSegment,
    frames: list[FrameFile], writer: PartWriter, headers: dict[str, str],
    run: RunDir, progress: NullProgress = NO_PROGRESS,
    times: StreamRecord | None = None,
) -> None:
    """Stream every unfinished piece on one connection; ServerError when the stream fails.

    ``progress`` counts data seconds (re-primed warm-up windows included); ``times`` records
    the first request and the last response. A bad frame file met raises ``BadFrameFile``.
    """
    times = StreamRecord() if times is None else times
    stride = config.stride_samples
    warmup = config.warmup_windows
    outputs = ensemble_outputs(config)
    streams, holes = segment_streams(config, segment, _bad_spans(writer))
    placed: dict[int, _PieceRows] = {}
    total_requests = sum(
        len(request_sizes(s.piece.windows, config.model.batch_size)) for s in streams
    )
    window_seconds = config.stride_seconds
    saved = writer.progress(holes)
    left = [min(s.piece.windows, max(0, saved[s.number] - s.row)) for s in streams]
    progress.start(
        sum(s.piece.windows for s in streams) * window_seconds,
        sum(s.piece.windows if done >= s.piece.windows else max(0, done - warmup)
            for s, done in zip(streams, left, strict=True)) * window_seconds,
    )

    def place(request_id: str, result) -> None:
        key, index = map(int, request_id.split(":"))
        placed[key].add(
            index, {name: output_rows(config, name, result.as_numpy(name)[0]) for name in outputs}
        )
        times.last_response_unix = time.time()
        progress.advance(placed[key].sizes[index] * window_seconds)

    stream = RequestStream(
        client, config.model.name, outputs, config.client.in_flight,
        config.client.request_timeout_seconds, headers, place,
        f"{address.node} at {address.grpc_url}",
    )
    try:
        with stream:
            for key, (item, done) in enumerate(zip(streams, left, strict=True)):
                piece = item.piece
                if done >= piece.windows:
                    continue
                first_row = max(0, done - warmup)
                sizes = request_sizes(piece.windows - first_row, config.model.batch_size)
                placed[key] = _PieceRows(
                    item.number, item.row + first_row, item.row + done, sizes,
                    config.client.checkpoint_requests * config.model.batch_size, writer,
                )
                updates = request_updates(
                    piece_samples(config, frames, piece, first_row), [n * stride for n in sizes]
                )
                for index, update in enumerate(updates):
                    if times.first_request_unix is None:
                        times.first_request_unix = time.time()
                    stream.send("update", update[None], f"{key}:{index}", piece.sequence_id,
                                start=index == 0, end=index == len(sizes) - 1)
                    if stream.sent == total_requests // 2:
                        hooks.reached(run, segment.node, "mid-stream")
            stream.drain()
    finally:  # what was sent counts even when the stream broke
        times.tensor_bytes_sent += stream.tensor_bytes_sent


def stream_segment(
    config: CampaignConfig,
    segment: ClientSegment,
    frames: list[FrameFile],
    writer: PartWriter,
    run: RunDir,
    progress: NullProgress = NO_PROGRESS,
    times: StreamRecord | None = None,
) -> int:
    """Stream the segment's unfinished pieces, reconnecting on failure; return reconnections.

    A reconnection prefers the server streamed to last (``connect``: after
    ``client.failover_seconds`` any live one). ``times`` records the first request, the last
    response and the servers."""
    times = StreamRecord() if times is None else times
    headers = auth_headers(run)
    reconnects = 0
    server = segment.server
    if config.layout.rebalance and not any(writer.progress()):
        server = start_server(run, segment.node, server,
                              lambda name: _is_live(run, name, config, headers))
    while True:
        client, address = connect(run, config, server, headers, segment.node,
                                  segment.index % config.layout.clients_per_server)
        server = address.node
        if not times.servers or times.servers[-1] != server:
            times.servers.append(server)
            claim(run, segment.node, server)
        try:
            _stream_once(
                client, address, config, segment, frames, writer, headers, run, progress, times,
            )
            return reconnects
        except BadFrameFile as err:
            if config.data.on_bad_file != "gap":
                raise
            _note_bad_file(config, segment, writer, err)
        except ServerError as err:
            if reconnects >= config.client.max_reconnects:
                raise ServerError(
                    f"{segment.node}: {err} (after {reconnects} reconnections; the part's "
                    "checkpoints are kept for the retry)"
                ) from None
            reconnects += 1
            logger.warning(
                f"{segment.node}: {err}; reconnecting, resuming from the last checkpoint"
            )
        finally:
            client.close()


def run_client(
    run: RunDir, node: str, progress: NullProgress = NO_PROGRESS,
) -> None:
    """Run client node ``node`` of the campaign in ``run``; ``progress`` counts data s."""
    config = load_config(run.config)
    segment = read_client_job(run, node)
    config_hash = config.config_hash()
    if part_is_complete(run, node, config_hash):
        logger.info(f"{node}: part already complete, nothing to do")
        return
    hooks.reached(run, node, "start")
    frames = discover_frames(config)
    outputs = ensemble_outputs(config)
    writer = PartWriter(run, segment, outputs, config_hash,
                        {name: row_shape(config, name) for name in outputs})
    resumed = sum(writer.progress())
    logger.info(
        f"{node}: streaming {len(segment.pieces)} piece(s), {segment.streamed_seconds:.0f} s "
        f"of data, to {segment.server}"
        + (f", resuming after {resumed} checkpointed windows" if resumed else "")
    )
    started = time.monotonic()
    times = StreamRecord()
    reconnects = stream_segment(config, segment, frames, writer, run, progress, times)
    elapsed = time.monotonic() - started
    writer.commit(
        {"wall_seconds": elapsed, "peak_rss_mb": peak_rss_mb(), "reconnects": reconnects,
         "first_request_unix": times.first_request_unix,
         "last_response_unix": times.last_response_unix,
         "tensor_bytes_sent": times.tensor_bytes_sent,
         "servers": times.servers},
        segment_streams(config, segment, _bad_spans(writer))[1],
    )
    seconds = segment.streamed_seconds
    logger.info(
        f"{node}: {seconds:.0f} s of data in {elapsed:.1f} s ({seconds / elapsed:.1f} s/s), "
        f"{reconnects} reconnection(s), peak RSS {peak_rss_mb():.0f} MiB, on "
        + " then ".join(times.servers)
    )


def _bad_spans(writer: PartWriter) -> list[tuple[float, float]]:
    return [(float(b["gps_start"]), float(b["gps_end"])) for b in writer.bad_files()]


def _note_bad_file(config: CampaignConfig, segment: ClientSegment, writer: PartWriter,
                   err: BadFrameFile) -> None:
    """``data.on_bad_file = "gap"``: record the file, and drop the checkpointed rows of the
    pieces streaming up to it from a few windows before it (their reads near its start were
    not cut at the new gap's edge), so that the streams restart around the gap."""
    margin = 2 * (config.warmup_windows + 1) + math.ceil(DECIMATION_HALF / config.stride_samples)
    drop_from = {}
    for number, piece in enumerate(segment.pieces):
        if not piece.stretch_gps_start <= err.gps_start < piece.stretch_gps_end:
            continue
        edge = math.floor((err.gps_start - piece.stretch_gps_start) / config.stride_seconds)
        if piece.first_window < edge:
            drop_from[number] = max(0, edge - margin - piece.first_window)
    writer.add_bad_file({"path": str(err.path), "gps_start": err.gps_start,
                         "gps_end": err.gps_end, "error": str(err)}, drop_from)
    logger.warning(f"{segment.node}: {err}; its span GPS {err.gps_start:.3f}-{err.gps_end:.3f} "
                   "becomes a gap (data.on_bad_file = \"gap\"); streaming around it")
