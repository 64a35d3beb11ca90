"""``offline-iaas reference``: the exported graphs run in one process as one uninterrupted stream.

This is the oracle the campaign must equal, and the "direct" mode for users without a server:
the same snapshotter code the server runs (``repository/backend/snapshotter.py``) and the same
ONNX graph (the classifier version Triton serves), fed with the same requests a single client
streaming the whole span would send.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from offline_iaas.client.stream import OUTPUT, request_updates
from offline_iaas.config import CampaignConfig
from offline_iaas.data.frames import find_frames, iter_chunks
from offline_iaas.merge.output import write_output
from offline_iaas.repository.backend.snapshotter import SnapshotState
from offline_iaas.repository.export import (
    check_repository,
    classifier_onnx_path,
    onnx_session,
    run_network,
)
from offline_iaas.workflow.plan import request_sizes


def run_reference(config: CampaignConfig, out_path: Path) -> tuple[Path, float]:
    """Process the whole span in-process; return the output path and the wall time."""
    started = time.monotonic()
    check_repository(config)
    session = onnx_session(classifier_onnx_path(config.model.repository))
    stride = config.stride_samples
    span = (config.data.start, config.data.start + config.data.duration)
    windows = config.total_windows
    chunks = iter_chunks(
        find_frames(config.data.frames),
        config.data.channels,
        config.data.start,
        config.data.start + windows * stride / config.data.sample_rate,
        config.data.sample_rate,
        config.client.chunk_seconds,
        span,
    )
    sizes = request_sizes(windows, config.model.batch_size)
    state = SnapshotState(len(config.data.channels), config.kernel_samples, stride)
    statistic = np.empty(windows, dtype=np.float32)
    offset = 0
    updates = request_updates(chunks, [n * stride for n in sizes])
    for size, update in zip(sizes, updates, strict=True):
        statistic[offset : offset + size] = run_network(session, state.update(update))
        offset += size
    write_output(out_path, config, {OUTPUT: statistic}, {"producer": "reference"})
    return out_path, time.monotonic() - started
