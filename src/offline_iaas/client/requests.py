"""What a client sends: a piece's samples at the model rate and the window updates cut from
them.

A request of a piece carries ``n * stride`` new samples per channel (``n`` = the batch size, the
last request of a piece fewer) and yields ``n`` windows; the server-side snapshotter keeps the
rest of each window (with the rolling whitening a foreground's requests carry the clean strain
too, ``request_inputs``). The campaign's client node and the in-process reference
(``merge/reference.py``) build their requests here, so both send the same samples.

A client's foreground pieces stream data its background pieces read first: with a
``ForegroundCapture`` (``foreground_capture``) the background's reads cut the foreground's
samples as they go (``data/frames.py``), and a foreground piece reads the frames again only
where no background read covered it.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from offline_iaas.config import CampaignConfig
from offline_iaas.data.discovery import FrameFile
from offline_iaas.data.frames import ForegroundCapture, iter_reads
from offline_iaas.records import Piece
from offline_iaas.repository.pipeline import PSD_UPDATE, takes_psd_update
from offline_iaas.search.onthefly import OnTheFly


def piece_samples(
    config: CampaignConfig, frames: list[FrameFile], piece: Piece, from_window: int = 0,
    inject: OnTheFly | None = None, capture: ForegroundCapture | None = None,
) -> Iterator[np.ndarray]:
    """A piece's samples at the model rate from stream window ``from_window``, read by read
    (``inject``: with the injections added, a foreground piece; ``capture``: the foreground
    ranges its reads cut as they go)."""
    return iter_reads(
        frames,
        config.stream_channels,
        piece.gps_start + from_window * config.stride_seconds,
        piece.gps_end,
        config.data.sample_rate,
        config.client.read_seconds,
        (piece.stretch_gps_start, piece.stretch_gps_end),
        inject,
        capture,
    )


def request_inputs(
    config: CampaignConfig, frames: list[FrameFile], piece: Piece, from_window: int,
    sizes_windows: list[int], inject: OnTheFly | None = None,
    capture: ForegroundCapture | None = None,
) -> Iterator[dict[str, np.ndarray]]:
    """Each request's input tensors (no batch axis) of a piece from stream window
    ``from_window``, request ``j`` carrying ``sizes_windows[j]`` windows' strides
    (``stretches.request_sizes``): ``update``, with the injections added for a foreground piece
    (``inject``), and for a foreground under the rolling whitening also ``psd_update``, the
    clean strain at the same times, whose PSD whitens the injected one (``pipeline``).

    ``capture``: a background piece's reads cut the foreground's samples into it; a
    foreground piece takes its samples from it when a background read covered them."""
    sizes_samples = [n * config.stride_samples for n in sizes_windows]
    rolling = inject is not None and takes_psd_update(config)
    captured = capture.take(piece.sequence_id) if inject is not None and capture else None
    if captured is not None:
        first = from_window * config.stride_samples
        injected, clean_samples = captured
        updates = request_updates(iter([injected[:, first:]]), sizes_samples)
        clean = (request_updates(iter([clean_samples[:, first:]]), sizes_samples)
                 if rolling else None)
    else:
        updates = request_updates(
            piece_samples(config, frames, piece, from_window, inject,
                          capture if inject is None else None), sizes_samples)
        clean = (request_updates(piece_samples(config, frames, piece, from_window),
                                 sizes_samples) if rolling else None)
    if clean is None:
        return ({"update": update} for update in updates)
    return ({"update": update, PSD_UPDATE: psd}
            for update, psd in zip(updates, clean, strict=True))


def foreground_capture(config: CampaignConfig, foreground: tuple[Piece, ...] | list[Piece],
                       inject: OnTheFly | None) -> ForegroundCapture | None:
    """A capture of a share's ``foreground`` pieces (whole, keyed by sequence ID) for its
    background's reads; None without injections on the fly."""
    if inject is None or not foreground:
        return None
    capture = ForegroundCapture(config.data.sample_rate)
    clean = takes_psd_update(config)
    for piece in foreground:
        capture.want(piece.sequence_id, piece.gps_start, piece.gps_end,
                     (piece.stretch_gps_start, piece.stretch_gps_end), inject, clean)
    return capture


def request_updates(
    reads: Iterator[np.ndarray], sizes_samples: list[int]
) -> Iterator[np.ndarray]:
    """Cut a stream of reads into updates of the given lengths (samples per channel)."""
    pending: list[np.ndarray] = []
    held = 0
    for size in sizes_samples:
        while held < size:
            read = next(reads)
            pending.append(read)
            held += read.shape[1]
        joined = pending[0] if len(pending) == 1 else np.concatenate(pending, axis=1)
        yield joined[:, :size]
        rest = joined[:, size:]
        pending, held = ([rest], rest.shape[1]) if rest.shape[1] else ([], 0)
