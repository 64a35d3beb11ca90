"""``offline-iaas client``: stream one client share to its server, surviving failures.

A share is one or more pieces (one per analysable stretch it touches). For each piece the
client reads its samples from frames read by read, cuts them into requests of
``batch_size * stride`` new samples per channel (the last one shorter), and sends them on one
gRPC bidirectional stream under the piece's sticky sequence ID: START on the first request, END
on the last, at most ``in_flight`` requests outstanding. Responses are placed by request index,
never by arrival order, and saved as checkpoints (``client/part.py``) as they complete.

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
import time
from dataclasses import dataclass, field

import numpy as np

from offline_iaas import hooks
from offline_iaas.binding import check_job_specs, read_bound_run
from offline_iaas.client.balance import claim, start_server
from offline_iaas.client.part import Holes, PartWriter
from offline_iaas.client.requests import foreground_capture, request_inputs
from offline_iaas.client.transport import RequestStream, connect, is_live
from offline_iaas.completeness import Hashes, part_problem
from offline_iaas.config import CampaignConfig
from offline_iaas.data.discovery import FrameFile, discover_frames
from offline_iaas.data.frames import DECIMATION_HALF, ForegroundCapture
from offline_iaas.data.gwf_reader import BadFrameFile
from offline_iaas.data.segments import without_bad_files
from offline_iaas.errors import ServerError
from offline_iaas.gps import gps_span_text
from offline_iaas.job_specs import read_client_job
from offline_iaas.logs import NO_PROGRESS, NullProgress
from offline_iaas.records import BadFile, ClientRun, ClientShare, Piece
from offline_iaas.rendezvous.access import auth_headers, read_token
from offline_iaas.rendezvous.addresses import ServerAddress, report_unhealthy
from offline_iaas.resources import peak_rss_mb
from offline_iaas.rundir import RunDir
from offline_iaas.search.foreground import injection_times, share_foreground
from offline_iaas.search.onthefly import OnTheFly, on_the_fly
from offline_iaas.serve.stalled_stub import says_not_healthy
from offline_iaas.stretches import Stretch, request_sizes, sub_pieces

logger = logging.getLogger(__name__)


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
            self.writer.write_checkpoint(self.number, self.buffer_start, joined)
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


@dataclass(frozen=True)
class _Stream:
    """One stream of a share: a piece, or with gaps a part of one (``sub_pieces``)."""

    number: int
    """The piece's number in the share (its rows in the part)."""
    piece: Piece
    """What is streamed (the piece, or a part of it)."""
    row: int
    """The part row of the stream's first window."""
    inject: OnTheFly | None = None
    """A foreground stream: the injections added (``search/onthefly.py``)."""


def share_streams(config: CampaignConfig, share: ClientShare,
                  bad: list[tuple[float, float]], foreground: tuple[Piece, ...] = (),
                  inject: OnTheFly | None = None) -> tuple[list[_Stream], Holes]:
    """The streams of a share with the bad frame files' spans as gaps (none: one per
    piece), then its ``foreground`` pieces (numbered after the pieces, ``inject`` added), and
    per piece the part rows no stream produces."""
    streams: list[_Stream] = []
    holes: Holes = []
    for number, piece in enumerate(share.pieces):
        whole = Stretch(piece.stretch, piece.stretch_gps_start, piece.stretch_gps_end)
        parts = without_bad_files(config, [whole], bad) if bad else [whole]
        gaps, covered = [], 0
        for sub in sub_pieces(config.geometry, piece, parts):
            row = sub.first_window - piece.first_window
            streams.append(_Stream(number, sub, row))
            if row > covered:
                gaps.append((covered, row))
            covered = row + sub.windows
        if covered < piece.windows:
            gaps.append((covered, piece.windows))
        holes.append(gaps)
    for number, piece in enumerate(foreground, start=len(share.pieces)):
        streams.append(_Stream(number, piece, 0, inject))
        holes.append([])
    return streams, holes


def _stream_once(
    client, address: ServerAddress, config: CampaignConfig, share: ClientShare,
    frames: list[FrameFile], writer: PartWriter, headers: dict[str, str],
    run: RunDir, progress: NullProgress = NO_PROGRESS,
    times: StreamRecord | None = None, inject: OnTheFly | None = None,
    capture: ForegroundCapture | None = None,
) -> None:
    """Stream every unfinished piece on one connection; ServerError when the stream fails.

    ``progress`` counts data seconds (re-primed warm-up windows included); ``times`` records
    the first request and the last response. A bad frame file met raises ``BadFrameFile``.
    """
    times = StreamRecord() if times is None else times
    warmup = config.warmup_windows
    outputs = config.outputs.names
    streams, holes = share_streams(config, share, _bad_spans(writer), writer.foreground,
                                   inject)
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
            index, {name: config.outputs.rows(name, result.as_numpy(name)[0]) for name in outputs}
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
                requests = request_inputs(config, frames, piece, first_row, sizes, item.inject,
                                          capture)
                for index in stream.send_piece(requests, len(sizes), str(key),
                                               piece.sequence_id):
                    if times.first_request_unix is None:
                        times.first_request_unix = time.time()
                    if index == 0 and item.number > len(share.pieces):
                        hooks.reached(run, share.node, "between-foreground")
                    if stream.sent == total_requests // 2:
                        # mid-stream means the sequence is open on the server: the requests
                        # sent may still wait in gRPC's queue until a response has come back
                        while not stream.received:
                            stream.take()
                        hooks.reached(run, share.node, "mid-stream")
            stream.drain()
    finally:  # what was sent counts even when the stream broke
        times.tensor_bytes_sent += stream.tensor_bytes_sent


def stream_share(
    config: CampaignConfig,
    share: ClientShare,
    frames: list[FrameFile],
    writer: PartWriter,
    run: RunDir,
    progress: NullProgress = NO_PROGRESS,
    times: StreamRecord | None = None,
    inject: OnTheFly | None = None,
) -> int:
    """Stream the share's unfinished pieces, reconnecting on failure; return reconnections.

    A reconnection prefers the server streamed to last (``connect``: after
    ``client.failover_seconds`` any live one). ``times`` records the first request, the last
    response and the servers. With ``inject`` the background's reads cut the foreground
    pieces' samples (``foreground_capture``), so they are read from the frames once."""
    times = StreamRecord() if times is None else times
    headers = auth_headers(run)
    capture = foreground_capture(config, writer.foreground, inject)
    reconnects = 0
    server = share.server
    untrusted = None  # the server epoch whose model Triton called not healthy
    if config.layout.rebalance and not any(writer.progress()):
        server = start_server(run, share.node, server,
                              lambda name: is_live(run, name, config, headers),
                              Hashes.of(config))
    while True:
        client, address = connect(run, config, server, headers, share.node,
                                  share.index % config.layout.clients_per_server, untrusted)
        server = address.node
        if not times.servers or times.servers[-1] != server:
            times.servers.append(server)
            claim(run, share.node, server)
        try:
            _stream_once(
                client, address, config, share, frames, writer, headers, run, progress, times,
                inject, capture,
            )
            return reconnects
        except BadFrameFile as err:
            if config.data.on_bad_file != "gap":
                raise
            _note_bad_file(config, share, writer, err)
        except ServerError as err:
            if reconnects >= config.client.max_reconnects:
                raise ServerError(
                    f"{share.node}: {err} (after {reconnects} reconnections; the part's "
                    "checkpoints are kept for the retry)"
                ) from None
            reconnects += 1
            if says_not_healthy(str(err)):
                # Triton 2.51 may pair that server's later answers with the wrong requests
                # (serve/stalled_stub.py): have serve end that epoch, and wait for its
                # restart (or another server)
                untrusted = address
                try:
                    report_unhealthy(run, address, share.node)
                except OSError as report_err:
                    logger.warning(f"{share.node}: could not tell {address.node} so: "
                                   f"{report_err}")
            logger.warning(
                f"{share.node}: {err}; reconnecting, resuming from the last checkpoint"
            )
        finally:
            client.close()


def run_client(
    run: RunDir, node: str, progress: NullProgress = NO_PROGRESS,
) -> None:
    """Run client node ``node`` of the campaign in ``run``; ``progress`` counts data s."""
    config, info = read_bound_run(run)  # make-dag's plan, before anything streams
    check_job_specs(run, info, [node])
    share = read_client_job(run, node)
    if part_problem(run, node, Hashes.of(config), share) is None:
        logger.info(f"{node}: part already complete, nothing to do")
        return
    read_token(run)  # RunError before anything is read or written when the run lost it
    hooks.reached(run, node, "start")
    frames = discover_frames(config.data)
    outputs = config.outputs.names
    foreground = tuple(share_foreground(config.geometry, config.search, share,
                                        injection_times(config.search)))
    writer = PartWriter(run, share, outputs, config.stream_hash(),
                        {name: config.outputs.row_shape(name) for name in outputs}, foreground)
    if writer.discarded is not None:
        logger.warning(f"{node}: {writer.discarded}")
    for path, why in writer.discard_damaged_checkpoints():
        logger.warning(f"{node}: checkpoint {path} is damaged ({why}): removed, its rows are "
                       "streamed again")
    resumed = sum(writer.progress())
    logger.info(
        f"{node}: streaming {len(share.pieces)} piece(s), {share.streamed_seconds:.0f} s "
        f"of data, to {share.server}"
        + (f", and {len(foreground)} foreground piece(s) with injections" if foreground else "")
        + (f", resuming after {resumed} checkpointed windows" if resumed else "")
    )
    started = time.monotonic()
    times = StreamRecord()
    reconnects = stream_share(config, share, frames, writer, run, progress, times,
                              on_the_fly(config))
    elapsed = time.monotonic() - started
    writer.commit(
        ClientRun(wall_seconds=elapsed, peak_rss_mb=peak_rss_mb(), reconnects=reconnects,
                  first_request_unix=times.first_request_unix,
                  last_response_unix=times.last_response_unix,
                  tensor_bytes_sent=times.tensor_bytes_sent, servers=tuple(times.servers)),
        share_streams(config, share, _bad_spans(writer), foreground)[1],
    )
    seconds = share.streamed_seconds
    logger.info(
        f"{node}: {seconds:.0f} s of data in {elapsed:.1f} s ({seconds / elapsed:.1f} s/s), "
        f"{reconnects} reconnection(s), peak RSS {peak_rss_mb():.0f} MiB, on "
        + " then ".join(times.servers)
    )


def _bad_spans(writer: PartWriter) -> list[tuple[float, float]]:
    return [b.span for b in writer.bad_files()]


def _note_bad_file(config: CampaignConfig, share: ClientShare, writer: PartWriter,
                   err: BadFrameFile) -> None:
    """``data.on_bad_file = "gap"``: record the file, and drop the checkpointed rows of the
    pieces streaming up to it from a few windows before it (their reads near its start were
    not cut at the new gap's edge), so that the streams restart around the gap."""
    margin = 2 * (config.warmup_windows + 1) + math.ceil(DECIMATION_HALF / config.stride_samples)
    drop_from = {}
    for number, piece in enumerate(share.pieces):
        if not piece.stretch_gps_start <= err.gps_start < piece.stretch_gps_end:
            continue
        edge = math.floor((err.gps_start - piece.stretch_gps_start) / config.stride_seconds)
        if piece.first_window < edge:
            drop_from[number] = max(0, edge - margin - piece.first_window)
    writer.add_bad_file(BadFile(str(err.path), err.gps_start, err.gps_end, str(err)), drop_from)
    logger.warning(f"{share.node}: {err}; its span GPS "
                   f"{gps_span_text(err.gps_start, err.gps_end)} becomes a gap "
                   "(data.on_bad_file = \"gap\"); streaming around it")
