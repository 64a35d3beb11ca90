"""``offline-iaas reference``: the exported graphs run in one process, one stream per stretch.

This is the in-process reference the campaign must equal (split-invariance; the oracle that
checks the result from its definition is ``tests/oracle.py``), and the "direct" mode for users
without a server: the same stateful code the server runs (``repository/backend/stateful.py``)
and the same ONNX graphs (the versions Triton serves), chained as the mode's ensemble
(``repository/pipeline.py``), fed with the requests one client streaming each whole stretch
would send, and post-processed by the same ``CampaignWriter`` as the merge.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np

from offline_iaas.atomic import write_text_atomic
from offline_iaas.client.requests import piece_samples, request_inputs, request_updates
from offline_iaas.config import CampaignConfig
from offline_iaas.data.discovery import discover_frames
from offline_iaas.data.preflight import preflight
from offline_iaas.errors import RunError
from offline_iaas.merge.foreground import (
    foreground_columns,
    foreground_rows,
)
from offline_iaas.merge.output import CampaignWriter
from offline_iaas.network_streaming import served_as
from offline_iaas.records import Piece
from offline_iaas.repository.pipeline import PSD_UPDATE, mode_stream
from offline_iaas.repository.served import check_repository, model_record, network_sessions
from offline_iaas.search.foreground import injection_times, stretch_foreground
from offline_iaas.search.onthefly import OnTheFly, on_the_fly
from offline_iaas.stretches import make_stretches, request_sizes, stretch_piece
from offline_iaas.summary_physics import physics_type, section


def run_reference(
    config: CampaignConfig, out_path: Path,
    timings: dict[str, float] | None = None,
) -> tuple[Path, float]:
    """Process every stretch in-process; return the output path and the wall time. The
    physics numbers (the merge's summary) go beside the output, ``<out>.json``.

    ``timings`` (if given) receives ``streaming_seconds`` (reading and streaming the stretches,
    without discovery, checks and post-processing) and ``data_seconds`` (the output's span).
    """
    started = time.monotonic()
    manifest = check_repository(config)
    config = served_as(config, bool(manifest.streamed))  # what export chose for auto
    sessions = network_sessions(config)
    frames = discover_frames(config.data)
    stride = config.stride_samples
    warmup = config.stretch_warmup_windows  # each stretch streamed from its start
    # the same stretches make-dag plans: holes in the data end streams
    span = preflight(config, frames, allow_holes_in_science=True, allow_bad_files=True)
    stretches = make_stretches(config.geometry, span.stretches)
    try:
        writer = CampaignWriter(out_path, config, stretches, training=dict(manifest.training),
                                model=model_record(config.model.repository, manifest),
                                bad_files=span.bad_files)
    except OSError as err:  # a directory that cannot be created or written
        why = os.strerror(err.errno) if err.errno else str(err)
        raise RunError(f"cannot write the reference output {out_path}: {why}") from None
    streaming_started = time.monotonic()
    inject, injected = on_the_fly(config), injection_times(config.search)
    foreground = [np.zeros(0, foreground_columns(config.outputs))]
    try:
        for stretch in stretches:
            windows = stretch.windows(config.geometry)
            whole = stretch_piece(config.geometry, stretch, 0, warmup, windows, sequence_id=1)
            sizes = request_sizes(windows, config.model.batch_size)
            updates = request_updates(
                piece_samples(config, frames, whole), [n * stride for n in sizes]
            )
            runner = mode_stream(config, sessions)
            window = 0
            for size, update in zip(sizes, updates, strict=True):
                for name, values in runner.update(update).items():
                    rows = config.outputs.rows(name, values)[max(0, warmup - window) :]
                    writer.write(name, stretch.index, max(0, window - warmup), rows)
                window += size
            foreground += [_foreground_piece(config, sessions, frames, piece, inject)
                           for piece in stretch_foreground(config.geometry, config.search,
                                                           stretch, injected)]
        if inject is not None:
            writer.foreground = np.concatenate(foreground)
        if timings is not None:
            timings["streaming_seconds"] = time.monotonic() - streaming_started
            timings["data_seconds"] = sum(
                (s.windows(config.geometry) - warmup) * config.stride_seconds for s in stretches)
        summary = writer.commit({"producer": "reference"}, frames)
        # its physics numbers beside it, as the merge's are in output/campaign.json (and
        # of the same type: a section that would not read back there fails here)
        section(physics_type(config.model.mode), summary)
        write_text_atomic(out_path.with_suffix(".json"), json.dumps(summary, indent=2))
    except BaseException:
        writer.discard()
        raise
    return out_path, time.monotonic() - started


def _foreground_piece(config: CampaignConfig, sessions: dict, frames: list, piece: Piece,
                      inject: OnTheFly | None) -> np.ndarray:
    """One foreground piece streamed from a zero state, its kept rows with their times."""
    sizes = request_sizes(piece.windows, config.model.batch_size)
    requests = request_inputs(config, frames, piece, 0, sizes, inject)
    runner = mode_stream(config, sessions)
    names = config.outputs.statistics
    rows = [runner.update(inputs["update"], inputs.get(PSD_UPDATE)) for inputs in requests]
    return foreground_rows(config.geometry, config.outputs, piece, {n: np.concatenate([
        config.outputs.rows(n, r[n]) for r in rows]) for n in names})
