"""Reading frames at the model sample rate (``read_span``, ``iter_reads``).

Sample grid
    A read covers ``[gps_start, gps_end)`` of a *span* ``(span_start, span_end)``: model sample
    ``k`` is at ``span_start + k / sample_rate``, and ``gps_start`` / ``gps_end`` must lie on
    that grid. The frames' own samples must be aligned with ``span_start``.

Resampling
    A channel stored at the model rate is passed through (float64 -> float32). A channel at
    ``q = frame rate / model rate`` (integer > 1) is decimated by one fixed FIR filter: a
    Kaiser-windowed sinc (``firwin``, beta 8.6, ~90 dB stop band) of ``2 * DECIMATION_HALF * q
    + 1`` taps (half-length ``DECIMATION_HALF`` model samples), cut off (-6 dB) at
    ``0.9 * model Nyquist``, zero phase. Output sample ``k`` is the filter centred on input
    sample ``k * q`` of the span::

        y[k] = sum_j h[k q - j + c] x[j],   j over the input samples inside the span only

    so output ``k`` corresponds to the same instant as input ``k q``. Inputs outside the span
    are never read (the sum is truncated there, as if they were zero), so each ``y[k]`` is a
    fixed function of the span's samples. A read of ``[t0, t1)`` reads the input with a margin
    of ``DECIMATION_HALF`` model samples on both sides, clipped to the span, and evaluates the
    sum with ``scipy.signal.upfirdn`` (direct form, same summation order for every output), so
    any cut into reads gives bit-identical values to one read of the whole span. The first and last
    ``DECIMATION_HALF`` samples of the span see the truncated filter (edge effect).

Foreground capture
    With injections on the fly a client streams a foreground piece over data its background
    has already read. A ``ForegroundCapture`` given to the background's reads cuts each wanted
    foreground range out of the frame-rate read that covers it (its margins included), adds
    the injections and resamples it there, so the foreground reads no frame file again; by the
    sum above the samples are those a read of that range alone gives, bit for bit. A range no
    single read covers (across a read boundary), one whose read the background never made
    (a resumed client), or one past the capture's byte budget (``CAPTURE_MAX_BYTES``), is read
    from the frames as before.
"""


from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import lru_cache, partial
from typing import TYPE_CHECKING

import numpy as np

from offline_iaas.data.discovery import FrameFile, coverage_holes, path_problem, rate_factor
from offline_iaas.data.frame_types import (
    FileGroup,
    file_groups,
    overlap_problems,
    unreadable_problem,
)
from offline_iaas.data.gwf_reader import PROBE_TIMEOUT_SECONDS, FileRead, Series, reader
from offline_iaas.errors import DataError
from offline_iaas.gps import gps_range_text, gps_text

if TYPE_CHECKING:
    from offline_iaas.search.onthefly import OnTheFly

DECIMATION_HALF = 32
"""Half-length of the decimation filter, in model samples."""
DECIMATION_CUTOFF = 0.9
"""Cut-off of the decimation filter as a fraction of the model Nyquist frequency."""
DECIMATION_BETA = 8.6
"""Kaiser window parameter of the decimation filter."""
CAPTURE_MAX_BYTES = 256 << 20
"""A ``ForegroundCapture`` holds at most this many bytes of foreground samples (a share's
foreground waits for its background: ~53 kB per injection for 2 strain channels at 2048 Hz
and 13 windows of 512 samples, so ~5,000 injections)."""


# ---- reading ---------------------------------------------------------------------------------


@lru_cache(maxsize=16)
def decimation_filter(factor: int) -> np.ndarray:
    """The FIR filter (input-rate taps, unit DC gain) used to decimate by ``factor``."""
    from scipy import signal  # here, not above: a client that decimates nothing skips 0.6 CPU-s

    taps = signal.firwin(
        2 * DECIMATION_HALF * factor + 1,
        DECIMATION_CUTOFF / factor,
        window=("kaiser", DECIMATION_BETA),
    )
    taps.setflags(write=False)
    return taps


def _grid_index(gps: float, span_start: float, sample_rate: float, what: str) -> int:
    position = (gps - span_start) * sample_rate
    index = int(round(position))
    if abs(position - index) > 1e-3:
        raise ValueError(
            f"{what} {gps} is not on the model sample grid (span start {span_start}, "
            f"{sample_rate} Hz)"
        )
    return index


def read_span(
    frames: Sequence[FrameFile],
    channels: Sequence[str],
    gps_start: float,
    gps_end: float,
    sample_rate: float,
    span: tuple[float, float] | None = None,
    inject: OnTheFly | None = None,
    capture: ForegroundCapture | None = None,
) -> np.ndarray:
    """Read ``[gps_start, gps_end)`` of ``channels`` at ``sample_rate`` (see module docstring).

    Parameters
    ----------
    frames
        The frame files (``find_frames``); only those overlapping the range are read (and,
        once per list, the tables of contents of the first files of each frame type of an
        observatory with several: ``frame_types.file_groups``). The same list object is
        expected read after read, unchanged (its groups are kept for it).
    channels
        Channel names; row order of the result.
    gps_start, gps_end
        The range to read, on the model sample grid of ``span``.
    sample_rate
        Model sample rate (Hz); every channel's rate must be a whole multiple of it.
    span
        ``(span_start, span_end)`` that defines the sample grid and the resampling edges;
        default ``(gps_start, gps_end)``.
    inject
        Injections on the fly (``search/onthefly.py``): added to the strain at the frame rate,
        before resampling.
    capture
        Foreground ranges to cut from this read (module docstring).

    Returns
    -------
    numpy.ndarray
        float32, shape ``[len(channels), round((gps_end - gps_start) * sample_rate)]``.

    Raises
    ------
    DataError
        If data are missing, a channel is absent or at an unusable rate, or a file is unreadable.
    """
    span_start, span_end = span if span is not None else (gps_start, gps_end)
    n_span = _grid_index(span_end, span_start, sample_rate, "span end")
    k0 = _grid_index(gps_start, span_start, sample_rate, "gps_start")
    k1 = _grid_index(gps_end, span_start, sample_rate, "gps_end")
    if not 0 <= k0 <= k1 <= n_span:
        raise ValueError(
            f"range {gps_range_text(gps_start, gps_end)} is not inside the span "
            f"{gps_range_text(span_start, span_end)}"
        )
    out = np.empty((len(channels), k1 - k0), dtype=np.float32)
    if k1 == k0:
        return out
    read_a = max(0, k0 - DECIMATION_HALF)
    read_b = min(n_span, k1 + DECIMATION_HALF)
    t_a = span_start + read_a / sample_rate
    t_b = span_start + read_b / sample_rate
    cut = [] if capture is None else capture.covered((span_start, span_end), n_span,
                                                     read_a, read_b)
    groups = _groups(frames, channels)
    for group in groups:  # a frame type that cannot be read, where this read needs files
        if group.unreadable and group.within(t_a, t_b).files:
            raise DataError(unreadable_problem(group))
    for group in (g.within(t_a, t_b) for g in groups if g.channels):
        rows = [row for row, channel in enumerate(channels) if channel in group.channels]
        names = [channels[r] for r in rows]
        series, files = _read_group(group, names, t_a, t_b)
        for row, name in zip(rows, names, strict=True):
            out[row] = _resample(series[name], name, files, k0, k1, n_span, span_start,
                                 sample_rate, inject)
            for wanted in cut:  # the same read, the wanted range: resample(inject)
                wanted.fill(row, len(channels), partial(
                    _resample, series[name], name, files, wanted.k0, wanted.k1, n_span,
                    span_start, sample_rate))
    if capture is not None:
        capture.done(cut)
    return out


@dataclass
class _Wanted:
    """One foreground range being cut (``ForegroundCapture``): model samples ``[k0, k1)`` of
    ``span``."""

    key: Hashable
    span: tuple[float, float]
    k0: int
    k1: int
    inject: OnTheFly
    clean: bool
    injected: np.ndarray | None = None
    clean_samples: np.ndarray | None = None

    def fill(self, row: int, rows: int, resample: Callable[[OnTheFly | None], np.ndarray]
             ) -> None:
        """Row ``row`` of ``rows``: ``resample(inject)`` (and, ``clean``, ``resample(None)``)."""
        self.injected = _with_row(self.injected, row, rows, resample(self.inject))
        if self.clean:
            self.clean_samples = _with_row(self.clean_samples, row, rows, resample(None))


def _with_row(samples: np.ndarray | None, row: int, rows: int, values: np.ndarray
              ) -> np.ndarray:
    """``samples`` (float32 ``[rows, len(values)]``, made when None) with row ``row`` set."""
    if samples is None:
        samples = np.empty((rows, len(values)), np.float32)
    samples[row] = values
    return samples


@dataclass
class ForegroundCapture:
    """The foreground ranges a client streams again, cut from its background's reads (module
    docstring): ``want`` them, pass the capture to the background's ``read_span`` /
    ``iter_reads``, then ``take`` each (None: read it from the frames)."""

    sample_rate: float
    """The model rate (Hz) the ranges are on."""
    max_bytes: int = CAPTURE_MAX_BYTES
    """Held at most; past it, the rest are read from the frames again."""
    _held_bytes: int = 0
    _wanted: dict[Hashable, _Wanted] = field(default_factory=dict)
    _captured: dict[Hashable, tuple[np.ndarray, np.ndarray | None]] = field(
        default_factory=dict)

    def want(self, key: Hashable, gps_start: float, gps_end: float,
             span: tuple[float, float], inject: OnTheFly, clean: bool = False) -> None:
        """Cut ``[gps_start, gps_end)`` of ``span`` with ``inject`` added (and, ``clean``, also
        without it) from the first read that covers it."""
        k0 = _grid_index(gps_start, span[0], self.sample_rate, "gps_start")
        k1 = _grid_index(gps_end, span[0], self.sample_rate, "gps_end")
        if k0 < k1:
            self._wanted[key] = _Wanted(key, tuple(span), k0, k1, inject, clean)

    def take(self, key: Hashable) -> tuple[np.ndarray, np.ndarray | None] | None:
        """The range's ``(injected, clean or None)`` float32 ``[channels, samples]`` samples,
        once; None when no read covered it."""
        taken = self._captured.pop(key, None)
        if taken is not None:
            self._held_bytes -= sum(a.nbytes for a in taken if a is not None)
        return taken

    def covered(self, span: tuple[float, float], n_span: int, read_a: int, read_b: int
                ) -> list[_Wanted]:
        """The wanted ranges of ``span`` whose margin-padded samples lie in the read
        ``[read_a, read_b)`` (model samples of the span); those already behind it are let go
        (reads go forward; they are read from the frames when taken)."""
        if self._held_bytes >= self.max_bytes:
            self._wanted.clear()
            return []
        found = []
        for key, wanted in list(self._wanted.items()):
            if wanted.span != span:
                continue
            a, b = max(0, wanted.k0 - DECIMATION_HALF), min(n_span, wanted.k1 + DECIMATION_HALF)
            if read_a <= a and b <= read_b:
                found.append(wanted)
            elif a < read_a:
                del self._wanted[key]
        return found

    def done(self, cut: list[_Wanted]) -> None:
        """The ranges ``cut`` by a read that completed: ready to ``take``."""
        for wanted in cut:
            del self._wanted[wanted.key]
            if self._held_bytes < self.max_bytes:
                self._captured[wanted.key] = (wanted.injected, wanted.clean_samples)
                self._held_bytes += sum(a.nbytes for a in self._captured[wanted.key]
                                        if a is not None)


_GROUPED: list[tuple[Sequence[FrameFile], tuple[str, ...], list[FileGroup]]] = []
"""The last few frame lists read and their channels' groups (``_groups``)."""


def _groups(frames: Sequence[FrameFile], channels: Sequence[str]) -> list[FileGroup]:
    """``file_groups`` of ``channels`` in ``frames``, kept for the next reads of the same list
    (by identity: a client, the merge and the injections' draw read one list read by read,
    and the list is held here so that its identity is not reused)."""
    names = tuple(channels)
    for known, asked, groups in _GROUPED:
        if known is frames and asked == names:
            return groups
    groups = file_groups(frames, names, listed_channels)
    _GROUPED[:] = [(frames, names, groups), *_GROUPED[:3]]
    return groups


_LISTED: dict[tuple, tuple[str, ...]] = {}
"""Which channels a frame file lists, by the file (path, mtime, size) and the channels asked;
a file that could not be read is asked again next time (a hung filesystem recovers)."""


def listed_channels(f: FrameFile, channels: Sequence[str]) -> tuple[str, ...] | None:
    """Which of ``channels`` a frame file's table of contents lists (``frame_types.Listed``:
    how ``check`` and every reader judge a frame type), read in the frame reader process;
    None if it cannot be read (or LALFrame cannot take its path)."""
    if path_problem(f) is not None:
        return None
    try:
        stat = f.path.stat()
    except OSError:
        return None
    key = (str(f.path), stat.st_mtime_ns, stat.st_size, tuple(channels))
    if key not in _LISTED:
        found = reader().probe(str(f.path), channels, f.gps_start, None,
                               (f.gps_start, f.gps_end), PROBE_TIMEOUT_SECONDS)
        if "error" in found:
            return None
        _LISTED[key] = tuple(found["names"])
    return _LISTED[key]


def _read_group(
    group: FileGroup, names: list[str], t_a: float, t_b: float
) -> tuple[dict[str, Series], list[FrameFile]]:
    """Read ``names`` (of ``group``) over ``[t_a, t_b)`` from the group's files, which overlap
    it, in the frame reader process (``gwf_reader``: a crash on a bad file is a
    ``BadFrameFile``). A file among them whose path LALFrame cannot open is refused as
    ``preflight`` does."""
    files = list(group.files)
    odd = next(filter(None, map(path_problem, files)), None)
    if odd is not None:
        raise DataError(odd)
    what = f"channel(s) {', '.join(names)} for {gps_range_text(t_a, t_b)}"
    if not files:
        raise DataError(f"no frame files hold {what}")
    holes = coverage_holes(files, [(t_a, t_b)], group.observatory)
    if holes:
        gaps = [f"{gps_range_text(a, b)} ({where})" for a, b, where in holes]
        raise DataError(f"missing frame data for {what}: {'; '.join(gaps)}")
    items = [FileRead(str(f.path), f.gps_start, f.gps_end, max(t_a, f.gps_start),
                      min(t_b, f.gps_end)) for f in files]
    series = reader().read(items, names)  # first: a file that lies is a BadFrameFile
    overlaps = overlap_problems([group], [(t_a, t_b)])  # joined end to end: they would mix
    if overlaps:
        raise DataError(overlaps[0])
    return series, files


def _resample(
    ts: Series,
    name: str,
    files: list[FrameFile],
    k0: int,
    k1: int,
    n_span: int,
    span_start: float,
    sample_rate: float,
    inject: OnTheFly | None = None,
) -> np.ndarray:
    """Model-rate samples ``[k0, k1)`` of one channel from its read (margin-padded) series.

    Raises
    ------
    DataError
        For an unusable rate, misaligned or incomplete data, or a NaN/Inf sample among those
        used (naming the channel, its file and the GPS time of the first one).
    """
    paths = [f.path for f in files]
    t0, rate, values = ts
    where = f"channel {name} in {paths[0]}"
    if len(paths) > 1:
        where += f" (and {len(paths) - 1} more file(s))"
    factor = rate_factor(rate, sample_rate)
    if factor is None:
        raise DataError(
            f"{where} has sample rate {rate:g} Hz, not a whole multiple of the model sample "
            f"rate {sample_rate:g} Hz"
        )
    position = (t0 - span_start) * rate
    first = int(round(position))
    if abs(position - first) > 1e-2:
        raise DataError(f"{where}: samples are not aligned with the span start {span_start}")
    if factor == 1:
        a, b = k0, k1
    else:
        half = DECIMATION_HALF * factor
        a = max(0, k0 * factor - half)
        b = min(n_span * factor, (k1 - 1) * factor + half + 1)
    if a - first < 0 or b - first > len(values):
        raise DataError(
            f"{where}: data for {gps_range_text(span_start + a / rate, span_start + b / rate)} "
            f"incomplete (got {gps_range_text(t0, t0 + len(values) / rate)})"
        )
    samples = values[a - first : b - first]
    if inject is not None:
        samples = inject.add(name, span_start + a / rate, rate, samples)
    finite = np.isfinite(samples)
    if not finite.all():
        index = int(np.argmin(finite))
        gps = span_start + (a + index) / rate
        holder = next((f.path for f in files if f.gps_start <= gps < f.gps_end), paths[0])
        raise DataError(
            f"channel {name} in {holder}: non-finite sample ({samples[index]}) at GPS "
            f"{gps_text(gps)}; the data there cannot be analysed (exclude it with data.segments)"
        )
    if factor == 1:
        return samples.astype(np.float32)
    from scipy import signal

    filtered = signal.upfirdn(decimation_filter(factor), samples, up=1, down=factor)
    offset = k0 + DECIMATION_HALF - a // factor
    return filtered[offset : offset + (k1 - k0)].astype(np.float32)


def iter_reads(
    frames: Sequence[FrameFile],
    channels: Sequence[str],
    gps_start: float,
    gps_end: float,
    sample_rate: float,
    read_seconds: float,
    span: tuple[float, float] | None = None,
    inject: OnTheFly | None = None,
    capture: ForegroundCapture | None = None,
) -> Iterator[np.ndarray]:
    """``read_span`` of ``[gps_start, gps_end)`` in consecutive reads of ``read_seconds``.

    Read boundaries are on the model sample grid (``floor(read_seconds * sample_rate)``
    samples each, the last one shorter); the concatenation of the reads equals ``read_span``
    over the whole range, bit for bit. Each read opens only the files it needs.

    Yields
    ------
    numpy.ndarray
        float32 ``[len(channels), n_i]``.
    """
    span_start, span_end = span if span is not None else (gps_start, gps_end)
    k0 = _grid_index(gps_start, span_start, sample_rate, "gps_start")
    k1 = _grid_index(gps_end, span_start, sample_rate, "gps_end")
    step = max(1, int(math.floor(read_seconds * sample_rate + 1e-9)))
    for k in range(k0, k1, step):
        end = min(k + step, k1)
        yield read_span(
            frames,
            channels,
            span_start + k / sample_rate,
            span_start + end / sample_rate,
            sample_rate,
            (span_start, span_end),
            inject,
            capture,
        )
