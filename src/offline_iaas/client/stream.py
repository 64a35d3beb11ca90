"""``offline-iaas client``: stream one client segment to its server.

The client reads its segment from frames chunk by chunk, cuts it into requests of
``batch_size * stride`` new samples per channel (the last one shorter), and sends them on one
gRPC bidirectional stream under its sticky sequence ID: START on the first request, END on the
last, at most ``in_flight`` requests outstanding. Responses are placed by request index, never by
arrival order.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from offline_iaas import faults
from offline_iaas.client.part import part_is_complete, write_part
from offline_iaas.config import CampaignConfig, load_config
from offline_iaas.data.frames import find_frames, iter_chunks
from offline_iaas.errors import ModelError, RunError, ServerError
from offline_iaas.serve.rendezvous import ServerAddress, wait_for_address
from offline_iaas.workflow.plan import ClientSegment, request_sizes

OUTPUT = "statistic"


def load_job(run_dir: Path, node: str) -> ClientSegment:
    path = run_dir / "jobs" / f"{node}.json"
    try:
        return ClientSegment.from_dict(json.loads(path.read_text()))
    except FileNotFoundError:
        raise RunError(f"{path}: no job spec for node {node}") from None


def segment_samples(
    config: CampaignConfig, segment: ClientSegment
) -> Iterator[np.ndarray]:
    """The segment's samples at the model rate, chunk by chunk ([channels, n] float32)."""
    span = (config.data.start, config.data.start + config.data.duration)
    return iter_chunks(
        find_frames(config.data.frames),
        config.data.channels,
        segment.gps_start,
        segment.gps_end,
        config.data.sample_rate,
        config.client.chunk_seconds,
        span,
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
    updates: Iterator[np.ndarray],
    log: Callable[[str], None] = print,
) -> np.ndarray:
    """Send the segment's updates on one sequence; return the statistic of every window."""
    import tritonclient.grpc as grpcclient

    sizes = request_sizes(segment.windows, config.model.batch_size)
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    statistic = np.empty(segment.windows, dtype=np.float32)
    received = 0
    errors: list[str] = []
    slots = threading.Semaphore(config.client.in_flight)
    lock = threading.Lock()

    def on_response(result=None, error=None) -> None:
        nonlocal received
        with lock:
            if error is not None:
                errors.append(str(error))
            else:
                index = int(result.get_response().id)
                values = result.as_numpy(OUTPUT)[0]
                statistic[offsets[index] : offsets[index + 1]] = values
                received += 1
        slots.release()

    def acquire() -> None:
        if not slots.acquire(timeout=config.client.request_timeout_seconds):
            raise ServerError(
                f"{segment.node}: no response from {address.node} at {address.grpc_url} "
                f"within {config.client.request_timeout_seconds:.0f} s"
            )
        if errors:
            raise ServerError(f"{segment.node}: {address.node} answered with an error: {errors[0]}")

    client = grpcclient.InferenceServerClient(address.grpc_url)
    try:
        check_model(client, config)
        client.start_stream(callback=on_response)
        stride = config.stride_samples
        started = time.monotonic()
        last_report = started
        data_seconds = segment.gps_end - segment.gps_start
        for index, update in enumerate(request_updates(updates, [n * stride for n in sizes])):
            acquire()
            tensor = grpcclient.InferInput("update", [1, *update.shape], "FP32")
            tensor.set_data_from_numpy(np.ascontiguousarray(update[None]))
            client.async_stream_infer(
                config.model.name,
                [tensor],
                request_id=str(index),
                sequence_id=segment.sequence_id,
                sequence_start=index == 0,
                sequence_end=index == len(sizes) - 1,
                outputs=[grpcclient.InferRequestedOutput(OUTPUT)],
            )
            now = time.monotonic()
            if now - last_report > 10:
                done = data_seconds * (index + 1) / len(sizes)
                log(
                    f"{segment.node}: {done:.0f}/{data_seconds:.0f} s of data sent "
                    f"({done / (now - started):.1f} s/s)"
                )
                last_report = now
        for _ in range(config.client.in_flight):
            acquire()
    finally:
        client.stop_stream()
        client.close()
    if received != len(sizes):
        raise ServerError(f"{segment.node}: {received} of {len(sizes)} responses received")
    return statistic


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
    address = wait_for_address(run_dir, segment.server, config.client.server_wait_seconds)
    log(
        f"{node}: streaming GPS {segment.gps_start}-{segment.gps_end} to {segment.server} at "
        f"{address.grpc_url} as sequence {segment.sequence_id}"
    )
    started = time.monotonic()
    statistic = stream_segment(config, segment, address, segment_samples(config, segment), log)
    write_part(run_dir, segment, {OUTPUT: statistic}, config_hash)
    elapsed = time.monotonic() - started
    seconds = segment.gps_end - segment.gps_start
    log(f"{node}: {seconds:.0f} s of data in {elapsed:.1f} s ({seconds / elapsed:.1f} s/s)")
