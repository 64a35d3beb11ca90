"""``offline-iaas client``: stream one client segment to its server.

A segment is one or more pieces (one per analysable stretch it touches). For each piece the
client reads its samples from frames chunk by chunk, cuts them into requests of
``batch_size * stride`` new samples per channel (the last one shorter), and sends them on the
gRPC bidirectional stream under the piece's sticky sequence ID: START on the first request, END
on the last, at most ``in_flight`` requests outstanding. Responses are placed by request index,
never by arrival order, and written to the part file as they arrive, so memory does not grow
with the segment's length.
"""

from __future__ import annotations

import json
import queue
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from offline_iaas import faults
from offline_iaas.client.part import PartWriter, part_is_complete, peak_rss_mb
from offline_iaas.config import CampaignConfig, load_config
from offline_iaas.data.frames import FrameFile, discover_frames, iter_chunks
from offline_iaas.errors import ModelError, RunError, ServerError
from offline_iaas.merge.output import OUTPUTS
from offline_iaas.serve.rendezvous import ServerAddress, wait_for_address
from offline_iaas.workflow.plan import ClientSegment, Piece, request_sizes

OUTPUT = OUTPUTS[0]


def load_job(run_dir: Path, node: str) -> ClientSegment:
    path = run_dir / "jobs" / f"{node}.json"
    try:
        return ClientSegment.from_dict(json.loads(path.read_text()))
    except FileNotFoundError:
        raise RunError(f"{path}: no job spec for node {node}") from None


def piece_samples(
    config: CampaignConfig, frames: list[FrameFile], piece: Piece
) -> Iterator[np.ndarray]:
    """A piece's samples at the model rate, chunk by chunk ([channels, n] float32)."""
    return iter_chunks(
        frames,
        config.data.channels,
        piece.gps_start,
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


def check_model(client, config: CampaignConfig) -> None:
    """The served ensemble must take this campaign's channels and give its output."""
    try:
        meta = client.get_model_metadata(config.model.name, as_json=True)
    except Exception as err:
        raise ModelError(f"server has no model {config.model.name!r}: {err}") from None
    inputs = {i["name"]: [int(d) for d in i["shape"]] for i in meta["inputs"]}
    outputs = {o["name"] for o in meta["outputs"]}
    channels = len(config.data.channels)
    if inputs.get("update", [None, None])[1] != channels or OUTPUT not in outputs:
        raise ModelError(
            f"served model {config.model.name!r} takes {inputs} and gives {sorted(outputs)}, "
            f"the campaign sends 'update' with {channels} channels and reads {OUTPUT!r}"
        )


def stream_segment(
    config: CampaignConfig,
    segment: ClientSegment,
    address: ServerAddress,
    frames: list[FrameFile],
    writer: PartWriter,
    log: Callable[[str], None] = print,
    run_dir: Path | None = None,
) -> None:
    """Stream every piece of the segment on one gRPC stream, writing responses to ``writer``."""
    import tritonclient.grpc as grpcclient

    stride = config.stride_samples
    plans = [request_sizes(p.windows, config.model.batch_size) for p in segment.pieces]
    offsets = [np.concatenate([[0], np.cumsum(sizes)]) for sizes in plans]
    total_requests = sum(len(sizes) for sizes in plans)
    responses: queue.Queue = queue.Queue()
    sent = received = 0

    def on_response(result=None, error=None) -> None:
        responses.put((result, error))

    def take_response() -> None:
        nonlocal received
        try:
            result, error = responses.get(timeout=config.client.request_timeout_seconds)
        except queue.Empty:
            raise ServerError(
                f"{segment.node}: no response from {address.node} at {address.grpc_url} "
                f"within {config.client.request_timeout_seconds:.0f} s"
            ) from None
        if error is not None:
            raise ServerError(f"{segment.node}: {address.node} answered with an error: {error}")
        piece, index = map(int, result.get_response().id.split(":"))
        writer.write(OUTPUT, piece, int(offsets[piece][index]), result.as_numpy(OUTPUT)[0])
        received += 1

    client = grpcclient.InferenceServerClient(address.grpc_url)
    started = last_report = time.monotonic()
    streamed_seconds = segment.streamed_seconds
    try:
        check_model(client, config)
        client.start_stream(callback=on_response)
        for number, (piece, sizes) in enumerate(zip(segment.pieces, plans, strict=True)):
            updates = request_updates(
                piece_samples(config, frames, piece), [n * stride for n in sizes]
            )
            for index, update in enumerate(updates):
                while sent - received >= config.client.in_flight:
                    take_response()
                tensor = grpcclient.InferInput("update", [1, *update.shape], "FP32")
                tensor.set_data_from_numpy(np.ascontiguousarray(update[None]))
                client.async_stream_infer(
                    config.model.name,
                    [tensor],
                    request_id=f"{number}:{index}",
                    sequence_id=piece.sequence_id,
                    sequence_start=index == 0,
                    sequence_end=index == len(sizes) - 1,
                    outputs=[grpcclient.InferRequestedOutput(OUTPUT)],
                )
                sent += 1
                if run_dir is not None and sent == total_requests // 2:
                    faults.inject(run_dir, segment.node, "mid-stream")
                now = time.monotonic()
                if now - last_report > 10:
                    done = streamed_seconds * sent / total_requests
                    log(
                        f"{segment.node}: {done:.0f}/{streamed_seconds:.0f} s of data sent "
                        f"({done / (now - started):.1f} s/s)"
                    )
                    last_report = now
        while received < sent:
            take_response()
    finally:
        client.stop_stream()
        client.close()


def run_client(run_dir: Path, node: str, log: Callable[[str], None] = print) -> None:
    """Run client node ``node`` of the campaign in ``run_dir``."""
    run_dir = run_dir.resolve()
    config = load_config(run_dir / "campaign.toml")
    segment = load_job(run_dir, node)
    config_hash = config.config_hash()
    if part_is_complete(run_dir, node, config_hash):
        log(f"{node}: part already complete, nothing to do")
        return
    faults.inject(run_dir, node, "start")
    frames = discover_frames(config)
    address = wait_for_address(run_dir, segment.server, config.client.server_wait_seconds)
    log(
        f"{node}: streaming {len(segment.pieces)} piece(s), {segment.streamed_seconds:.0f} s "
        f"of data, to {segment.server} at {address.grpc_url}"
    )
    started = time.monotonic()
    writer = PartWriter(run_dir, segment, OUTPUTS, config_hash)
    try:
        stream_segment(config, segment, address, frames, writer, log, run_dir)
        elapsed = time.monotonic() - started
        writer.commit({"wall_seconds": elapsed, "peak_rss_mb": peak_rss_mb()})
    except BaseException:
        writer.discard()
        raise
    seconds = segment.streamed_seconds
    log(
        f"{node}: {seconds:.0f} s of data in {elapsed:.1f} s ({seconds / elapsed:.1f} s/s), "
        f"peak RSS {peak_rss_mb():.0f} MiB"
    )
