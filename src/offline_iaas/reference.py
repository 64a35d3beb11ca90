"""``offline-iaas reference``: the exported graphs run in one process, one stream per stretch.

This is the oracle the campaign must equal, and the "direct" mode for users without a server:
the same snapshotter code the server runs (``repository/backend/snapshotter.py``) and the same
ONNX graph (the classifier version Triton serves), fed with the requests one client streaming
each whole stretch would send.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from offline_iaas.client.stream import OUTPUT, piece_samples, request_updates
from offline_iaas.config import CampaignConfig
from offline_iaas.data.frames import discover_frames, preflight
from offline_iaas.errors import RunError
from offline_iaas.merge.output import CampaignWriter
from offline_iaas.repository.backend.snapshotter import SnapshotState
from offline_iaas.repository.export import (
    check_repository,
    classifier_onnx_path,
    onnx_session,
    run_network,
)
from offline_iaas.workflow.plan import Piece, make_stretches, request_sizes, stride_seconds


def run_reference(config: CampaignConfig, out_path: Path) -> tuple[Path, float]:
    """Process every stretch in-process; return the output path and the wall time."""
    started = time.monotonic()
    check_repository(config)
    session = onnx_session(classifier_onnx_path(config.model.repository))
    frames = discover_frames(config)
    stride = config.stride_samples
    warmup = config.warmup_windows
    # the same stretches make-dag plans: holes in the data end streams
    span = preflight(config, frames, allow_holes_in_science=True)
    stretches = make_stretches(config, span.stretches)
    try:
        writer = CampaignWriter(out_path, config, stretches)
    except OSError as err:  # a directory that cannot be created or written
        why = os.strerror(err.errno) if err.errno else str(err)
        raise RunError(f"cannot write the reference output {out_path}: {why}") from None
    try:
        for stretch in stretches:
            windows = stretch.windows(config)
            whole = Piece(
                stretch=stretch.index,
                sequence_id=1,
                first_window=0,
                output_start=warmup,
                output_stop=windows,
                gps_start=stretch.gps_start,
                gps_end=stretch.gps_start + windows * stride_seconds(config),
                stretch_gps_start=stretch.gps_start,
                stretch_gps_end=stretch.gps_end,
            )
            sizes = request_sizes(windows, config.model.batch_size)
            updates = request_updates(
                piece_samples(config, frames, whole), [n * stride for n in sizes]
            )
            state = SnapshotState(len(config.data.channels), config.kernel_samples, stride)
            window = 0
            for size, update in zip(sizes, updates, strict=True):
                values = run_network(session, state.update(update))
                keep = values[max(0, warmup - window) :]
                writer.write(OUTPUT, stretch.index, max(0, window - warmup), keep)
                window += size
        writer.commit({"producer": "reference"})
    except BaseException:
        writer.discard()
        raise
    return out_path, time.monotonic() - started
