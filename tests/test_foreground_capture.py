"""The foreground of injections on the fly cut from the background's reads (``ForegroundCapture``
in ``data/frames.py``): a client reads each frame file once, and the foreground pieces it then
streams carry the samples a read of their own range gives, bit for bit."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from offline_iaas.client.requests import foreground_capture, request_inputs
from offline_iaas.config import load_config
from offline_iaas.data.discovery import discover_frames
from offline_iaas.data.frames import iter_reads, read_span
from offline_iaas.data.synth import INJECTION_SET, write_synthetic_dataset
from offline_iaas.errors import DataError
from offline_iaas.search.foreground import injection_times, stretch_foreground
from offline_iaas.search.onthefly import on_the_fly
from offline_iaas.stretches import request_sizes, whole_span
from tests.helpers import SMALL_CAMPAIGN


@pytest.fixture(scope="module")
def campaign(tmp_path_factory: pytest.TempPathFactory):
    """Clean frames at 4x the model rate, a set of 3 injections (synth's, baked elsewhere),
    ``search.inject``; the stretch and its foreground pieces (sequence IDs 1, 2, ...)."""
    root = tmp_path_factory.mktemp("capture")
    text = (SMALL_CAMPAIGN.replace("injections = 1", "injections = 3")
            .replace("frame_sample_rate = 256", "frame_sample_rate = 1024"))
    (root / "c.toml").write_text(text)
    write_synthetic_dataset(load_config(root / "c.toml", [f'data.frames="{root / "baked"}"']))
    clean = load_config(root / "c.toml", [f'data.frames="{root / "clean"}"',
                                          "synth.injections=0"])
    write_synthetic_dataset(clean)
    config = load_config(root / "c.toml", [
        f'data.frames="{root / "clean"}"', 'model.mode="bbhnet"',
        f'search.injections="{root / "baked" / INJECTION_SET}"', "search.inject=true"])
    [stretch] = whole_span(config)
    pieces = [replace(p, sequence_id=j + 1) for j, p in
              enumerate(stretch_foreground(config.geometry, config.search, stretch,
                                                     injection_times(config.search)))]
    assert len(pieces) >= 2
    return config, stretch, pieces


def _own_read(config, piece, gps_shift: float = 0.0) -> np.ndarray:
    """The piece's samples read from the frames on their own, with a fresh set of waveforms."""
    return read_span(discover_frames(config.data), config.stream_channels,
                     piece.gps_start + gps_shift, piece.gps_end + gps_shift,
                     config.data.sample_rate, (piece.stretch_gps_start, piece.stretch_gps_end),
                     on_the_fly(config))


def _background(config, stretch, capture, read_seconds: float) -> None:
    for _ in iter_reads(discover_frames(config.data), config.stream_channels, stretch.gps_start,
                        stretch.gps_end, config.data.sample_rate, read_seconds,
                        (stretch.gps_start, stretch.gps_end), None, capture):
        pass


def _streamed(config, frames, piece, capture) -> np.ndarray:
    """What a client sends for a foreground piece, requests joined."""
    sizes = request_sizes(piece.windows, config.model.batch_size)
    return np.concatenate([r["update"] for r in request_inputs(
        config, frames, piece, 0, sizes, on_the_fly(config), capture)], axis=1)


def test_the_foreground_cut_from_the_background_s_reads_needs_no_frame_and_is_bit_identical(
        campaign, tmp_path: Path) -> None:
    """Frames moved away after the background's reads: the foreground still streams, and equals
    a read of its own range; one model sample later does not."""
    config, stretch, pieces = campaign
    frames = discover_frames(config.data)
    expected = {p.sequence_id: _own_read(config, p) for p in pieces}
    late = _own_read(config, pieces[0], 1 / config.data.sample_rate)
    capture = foreground_capture(config, pieces, on_the_fly(config))
    _background(config, stretch, capture, read_seconds=64.0)
    moved = tmp_path / "moved"
    shutil.move(str(config.data.frames), moved)
    try:
        streamed = {p.sequence_id: _streamed(config, frames, p, capture) for p in pieces}
        for key, samples in streamed.items():
            assert samples.dtype == np.float32
            assert np.array_equal(samples, expected[key])
        assert not np.array_equal(streamed[pieces[0].sequence_id], late)
        with pytest.raises(DataError):  # taken once: a second time reads the (moved) frames
            _streamed(config, frames, pieces[0], capture)
    finally:
        shutil.move(str(moved), config.data.frames)


def test_a_foreground_piece_no_single_read_covers_is_read_from_the_frames(campaign) -> None:
    """Reads of 1 s: every piece (~2 s) straddles a read boundary, none is cut, and each is read
    again from the frames, equal to its own read."""
    config, stretch, pieces = campaign
    frames = discover_frames(config.data)
    capture = foreground_capture(config, pieces, on_the_fly(config))
    _background(config, stretch, capture, read_seconds=1.0)
    assert all(capture.take(p.sequence_id) is None for p in pieces)
    capture = foreground_capture(config, pieces, on_the_fly(config))
    _background(config, stretch, capture, read_seconds=1.0)
    for piece in pieces:
        assert np.array_equal(_streamed(config, frames, piece, capture), _own_read(config, piece))


def test_past_its_byte_budget_the_capture_leaves_the_rest_to_be_read_again(campaign) -> None:
    """A budget of one byte: the first piece cut fills it, the others are read from the
    frames, and every piece still equals its own read."""
    config, stretch, pieces = campaign
    frames = discover_frames(config.data)
    capture = foreground_capture(config, pieces, on_the_fly(config))
    capture.max_bytes = 1
    _background(config, stretch, capture, read_seconds=64.0)
    held = [p.sequence_id for p in pieces if p.sequence_id in capture._captured]
    assert held == [pieces[0].sequence_id]
    for piece in pieces:
        assert np.array_equal(_streamed(config, frames, piece, capture), _own_read(config, piece))
