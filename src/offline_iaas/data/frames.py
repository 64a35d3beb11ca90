"""Frame files: discovery, checks and reading at the model sample rate.

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
    any chunking gives bit-identical values to one read of the whole span. The first and last
    ``DECIMATION_HALF`` samples of the span see the truncated filter (edge effect).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import numpy as np
from scipy import signal

from offline_iaas.config import CampaignConfig
from offline_iaas.errors import DataError

DECIMATION_HALF = 32
"""Half-length of the decimation filter, in model samples."""
DECIMATION_CUTOFF = 0.9
"""Cut-off of the decimation filter as a fraction of the model Nyquist frequency."""
DECIMATION_BETA = 8.6
"""Kaiser window parameter of the decimation filter."""
CACHE_SUFFIXES = (".lcf", ".cache")
FFL_SUFFIXES = (".ffl",)
_GPS_TOLERANCE = 1e-6
"""Seconds below which two GPS times are considered equal (coverage checks)."""
_NAME = re.compile(
    r"(?P<obs>[^-]+)-(?P<desc>.+)-(?P<gps>\d+(?:\.\d*)?)-(?P<dur>\d+(?:\.\d*)?)\.gwf"
)


@dataclass(frozen=True)
class FrameFile:
    """One GWF file and the GPS interval its name (or cache entry) says it covers."""

    observatory: str
    description: str
    gps_start: float
    duration: float
    path: Path

    @property
    def gps_end(self) -> float:
        """GPS end of the file (exclusive)."""
        return self.gps_start + self.duration

    def holds(self, channel: str) -> bool:
        """Whether the file's observatory letters include the channel's (``H1:X`` -> ``H``)."""
        return _observatory(channel) in self.observatory


def _observatory(channel: str) -> str:
    return channel[:1]


def _fmt(gps: float) -> str:
    """A GPS time for messages: integers without decimals."""
    if abs(gps - round(gps)) < 1e-9:
        return str(int(round(gps)))
    return f"{gps:.6f}".rstrip("0")


def _range(a: float, b: float) -> str:
    return f"[{_fmt(a)}, {_fmt(b)})"


# ---- discovery -------------------------------------------------------------------------------


def parse_frame_name(path: Path) -> FrameFile | None:
    """``FrameFile`` from a name ``<OBS>-<DESC>-<GPS>-<DUR>.gwf``, or None if it does not fit."""
    match = _NAME.fullmatch(path.name)
    if match is None:
        return None
    return FrameFile(match["obs"], match["desc"], float(match["gps"]), float(match["dur"]), path)


def find_frames(source: Path | str) -> list[FrameFile]:
    """The frame files of a directory (recursive), a LAL cache, an FFL file or one ``.gwf``.

    Parameters
    ----------
    source
        A directory searched for ``*.gwf``; a LAL cache (``.lcf``/``.cache``, lines
        ``OBS DESC GPS DUR URL``); an FFL file (``.ffl``, lines ``PATH GPS DUR 0 0``); or a
        single ``.gwf`` file.

    Returns
    -------
    list of FrameFile
        Sorted by (observatory, gps_start).

    Raises
    ------
    DataError
        If the source does not exist, lists no frame files, has a malformed line, or names a
        frame file that does not exist.
    """
    source = Path(source)
    if not source.exists():
        raise DataError(f"frame source {source} does not exist")
    if source.is_dir():
        frames = []
        for path in sorted(source.rglob("*.gwf")):
            if path.name.startswith(".") or not path.is_file():
                continue
            frame = parse_frame_name(path.resolve())
            if frame is None:
                raise DataError(
                    f"frame file {path} is not named <OBS>-<DESC>-<GPSSTART>-<DURATION>.gwf"
                )
            frames.append(frame)
        if not frames:
            raise DataError(f"no .gwf frame files under {source}")
    elif source.suffix in CACHE_SUFFIXES:
        frames = _read_lal_cache(source)
    elif source.suffix in FFL_SUFFIXES:
        frames = _read_ffl(source)
    elif source.suffix == ".gwf":
        frame = parse_frame_name(source.resolve())
        if frame is None:
            raise DataError(
                f"frame file {source} is not named <OBS>-<DESC>-<GPSSTART>-<DURATION>.gwf"
            )
        frames = [frame]
    else:
        raise DataError(
            f"frame source {source} is neither a directory nor a .lcf/.cache/.ffl/.gwf file"
        )
    unique = {f.path: f for f in frames}
    return sorted(unique.values(), key=lambda f: (f.observatory, f.gps_start, str(f.path)))


def _read_lines(source: Path) -> list[tuple[int, list[str]]]:
    try:
        text = source.read_text()
    except (OSError, UnicodeDecodeError) as err:
        raise DataError(f"cannot read frame cache {source}: {err}") from None
    out = []
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if line and not line.startswith("#"):
            out.append((number, line.split()))
    if not out:
        raise DataError(f"frame cache {source} lists no frame files")
    return out


def _local_path(entry: str, source: Path, number: int) -> Path:
    if "://" in entry:
        url = urlparse(entry)
        if url.scheme != "file" or url.netloc not in ("", "localhost"):
            raise DataError(f"{source}, line {number}: {entry!r} is not a local file:// URL")
        path = Path(unquote(url.path))
    else:
        path = Path(entry)
    if not path.is_absolute():
        path = source.parent / path
    path = path.resolve()
    if not path.is_file():
        raise DataError(f"{source}, line {number}: frame file {path} does not exist")
    return path


def _number(text: str, source: Path, number: int, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise DataError(f"{source}, line {number}: {what} {text!r} is not a number") from None
    if not math.isfinite(value) or (what == "duration" and value <= 0):
        raise DataError(f"{source}, line {number}: invalid {what} {text!r}")
    return value


def _read_lal_cache(source: Path) -> list[FrameFile]:
    frames = []
    for number, fields in _read_lines(source):
        if len(fields) != 5:
            raise DataError(
                f"{source}, line {number}: malformed LAL cache line (expected "
                f"'OBS DESC GPSSTART DURATION URL', got {len(fields)} fields)"
            )
        obs, desc, gps, dur, url = fields
        frames.append(
            FrameFile(
                obs,
                desc,
                _number(gps, source, number, "GPS start"),
                _number(dur, source, number, "duration"),
                _local_path(url, source, number),
            )
        )
    return frames


def _read_ffl(source: Path) -> list[FrameFile]:
    frames = []
    for number, fields in _read_lines(source):
        if len(fields) not in (3, 5):
            raise DataError(
                f"{source}, line {number}: malformed FFL line (expected "
                f"'PATH GPSSTART DURATION 0 0', got {len(fields)} fields)"
            )
        path = _local_path(fields[0], source, number)
        named = parse_frame_name(path)
        if named is None:
            raise DataError(
                f"{source}, line {number}: frame file {path} is not named "
                "<OBS>-<DESC>-<GPSSTART>-<DURATION>.gwf (needed for its observatory)"
            )
        frames.append(
            FrameFile(
                named.observatory,
                named.description,
                _number(fields[1], source, number, "GPS start"),
                _number(fields[2], source, number, "duration"),
                path,
            )
        )
    return frames


# ---- checks ----------------------------------------------------------------------------------


def _overlapping(
    frames: Sequence[FrameFile], channel: str, gps_start: float, gps_end: float
) -> list[FrameFile]:
    return sorted(
        (
            f
            for f in frames
            if f.holds(channel)
            and f.gps_end > gps_start + _GPS_TOLERANCE
            and f.gps_start < gps_end - _GPS_TOLERANCE
        ),
        key=lambda f: (f.gps_start, f.gps_end),
    )


def _gaps(files: list[FrameFile], gps_start: float, gps_end: float) -> list[str]:
    """Descriptions of the parts of ``[gps_start, gps_end)`` that ``files`` do not cover."""
    gaps = []
    covered = gps_start
    previous: FrameFile | None = None
    for f in files:
        if f.gps_start > covered + _GPS_TOLERANCE:
            where = (
                f"between {previous.path.name} and {f.path.name}"
                if previous
                else (f"before {f.path.name}")
            )
            gaps.append(f"{_range(covered, f.gps_start)} ({where})")
        if f.gps_end > covered:
            covered, previous = f.gps_end, f
    if covered < gps_end - _GPS_TOLERANCE:
        where = f"after {previous.path.name}" if previous else "no file"
        gaps.append(f"{_range(covered, gps_end)} ({where})")
    return gaps


def _channel_names(path: Path) -> tuple[str, ...]:
    """Channel names in a GWF file's table of contents (cached while the file is unchanged)."""
    stat = path.stat()
    return _channel_names_cached(str(path), stat.st_mtime_ns, stat.st_size)


@lru_cache(maxsize=4096)
def _channel_names_cached(path: str, mtime_ns: int, size: int) -> tuple[str, ...]:
    from gwpy.io.gwf import get_channel_names

    return tuple(get_channel_names(path))


def _channel_rate(path: Path, channel: str) -> float:
    import lalframe

    frfile = lalframe.FrameUFrFileOpen(str(path), "r")
    chan = lalframe.FrameUFrChanRead(frfile, channel, 0)
    return 1.0 / lalframe.FrameUFrChanVectorQueryDx(chan, 0)


def _listing(names: Sequence[str], limit: int = 20) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f", ... ({len(names)} in all)" if len(names) > limit else "")


def _rate_factor(rate: float, sample_rate: float) -> int | None:
    """``rate / sample_rate`` if it is a whole number >= 1, else None."""
    ratio = rate / sample_rate
    factor = int(round(ratio))
    if factor < 1 or abs(ratio - factor) > 1e-9 * max(1.0, ratio):
        return None
    return factor


def check_channels(
    frames: Sequence[FrameFile],
    channels: Sequence[str],
    gps_start: float,
    gps_end: float,
    sample_rate: float,
) -> None:
    """Check that the frames hold every channel over ``[gps_start, gps_end)``.

    For each channel, the files of its observatory must cover the interval without holes,
    every one of them must list the channel, and its sample rate must be a whole multiple of
    ``sample_rate``.

    Raises
    ------
    DataError
        One error listing every problem found, each naming the channel, file or GPS range.
    """
    problems: list[str] = []
    for channel in channels:
        files = _overlapping(frames, channel, gps_start, gps_end)
        if not files:
            problems.append(
                f"channel {channel}: no frame files of observatory {_observatory(channel)!r} "
                f"overlap {_range(gps_start, gps_end)}"
            )
            continue
        for gap in _gaps(files, gps_start, gps_end):
            problems.append(f"channel {channel}: no frame data for {gap}")
        missing: list[FrameFile] = []
        listed_in: FrameFile | None = None
        for f in files:
            try:
                names = _channel_names(f.path)
            except Exception as err:
                problems.append(f"cannot read frame file {f.path}: {err}")
                continue
            if channel in names:
                listed_in = listed_in or f
            else:
                missing.append(f)
        if missing:
            first = missing[0]
            there = _listing(_channel_names(first.path))
            more = f" and {len(missing) - 1} more file(s)" if len(missing) > 1 else ""
            problems.append(
                f"channel {channel} not found in {first.path}{more} covering "
                f"{_range(max(gps_start, first.gps_start), min(gps_end, missing[-1].gps_end))} "
                f"(channels there: {there})"
            )
        if listed_in is not None:
            try:
                rate = _channel_rate(listed_in.path, channel)
            except Exception as err:
                problems.append(f"cannot read channel {channel} in {listed_in.path}: {err}")
                continue
            if _rate_factor(rate, sample_rate) is None:
                problems.append(
                    f"channel {channel} in {listed_in.path} has sample rate {rate:g} Hz, not "
                    f"a whole multiple of the model sample rate {sample_rate:g} Hz"
                )
    if problems:
        raise DataError(
            f"{len(problems)} problem(s) with the frame data for {_range(gps_start, gps_end)}: "
            + "; ".join(problems)
        )


def check_campaign_data(config: CampaignConfig) -> None:
    """Check the campaign's frames hold its channels over the whole span."""
    data = config.data
    check_channels(
        find_frames(data.frames),
        data.channels,
        data.start,
        data.start + data.duration,
        data.sample_rate,
    )


# ---- reading ---------------------------------------------------------------------------------


@lru_cache(maxsize=16)
def decimation_filter(factor: int) -> np.ndarray:
    """The FIR filter (input-rate taps, unit DC gain) used to decimate by ``factor``."""
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
) -> np.ndarray:
    """Read ``[gps_start, gps_end)`` of ``channels`` at ``sample_rate`` (see module docstring).

    Parameters
    ----------
    frames
        The frame files (``find_frames``); only those overlapping the range are read.
    channels
        Channel names; row order of the result.
    gps_start, gps_end
        The range to read, on the model sample grid of ``span``.
    sample_rate
        Model sample rate (Hz); every channel's rate must be a whole multiple of it.
    span
        ``(span_start, span_end)`` that defines the sample grid and the resampling edges;
        default ``(gps_start, gps_end)``.

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
            f"range {_range(gps_start, gps_end)} is not inside the span "
            f"{_range(span_start, span_end)}"
        )
    out = np.empty((len(channels), k1 - k0), dtype=np.float32)
    if k1 == k0:
        return out
    read_a = max(0, k0 - DECIMATION_HALF)
    read_b = min(n_span, k1 + DECIMATION_HALF)
    t_a = span_start + read_a / sample_rate
    t_b = span_start + read_b / sample_rate
    groups: dict[str, list[int]] = {}
    for row, channel in enumerate(channels):
        groups.setdefault(_observatory(channel), []).append(row)
    for rows in groups.values():
        names = [channels[r] for r in rows]
        series, paths = _read_group(frames, names, t_a, t_b)
        for row, name in zip(rows, names, strict=True):
            out[row] = _resample(series[name], name, paths, k0, k1, n_span, span_start, sample_rate)
    return out


def _read_group(
    frames: Sequence[FrameFile], names: list[str], t_a: float, t_b: float
) -> tuple[dict[str, Any], list[Path]]:
    """Read ``names`` (one observatory) over ``[t_a, t_b)`` from the files that overlap it."""
    from gwpy.timeseries import TimeSeriesDict

    files = _overlapping(frames, names[0], t_a, t_b)
    what = f"channel(s) {', '.join(names)} for {_range(t_a, t_b)}"
    if not files:
        raise DataError(f"no frame files hold {what}")
    gaps = _gaps(files, t_a, t_b)
    if gaps:
        raise DataError(f"missing frame data for {what}: {'; '.join(gaps)}")
    for f in files:
        try:
            listed = _channel_names(f.path)
        except Exception as err:
            raise DataError(f"cannot read frame file {f.path} ({what}): {err}") from None
        for name in names:
            if name not in listed:
                raise DataError(
                    f"channel {name} not found in {f.path} (needed for {_range(t_a, t_b)}; "
                    f"channels there: {_listing(listed)})"
                )
    # LALFrame returns the samples at or after `start`; widening both bounds a little makes
    # the read robust to round-off in float GPS times (the result is sliced by index anyway,
    # and the files were chosen so that nothing outside [t_a, t_b) is available).
    eps = _GPS_TOLERANCE
    try:
        data = TimeSeriesDict.read(
            [str(f.path) for f in files], names, start=t_a - eps, end=t_b + eps, format="gwf"
        )
    except Exception as err:  # any reader failure, reported with the files and range
        paths = ", ".join(str(f.path) for f in files)
        raise DataError(f"cannot read {what} from {paths}: {err}") from None
    return {name: data[name] for name in names}, [f.path for f in files]


def _resample(
    ts: object,
    name: str,
    paths: list[Path],
    k0: int,
    k1: int,
    n_span: int,
    span_start: float,
    sample_rate: float,
) -> np.ndarray:
    """Model-rate samples ``[k0, k1)`` of one channel from its read (margin-padded) series."""
    rate = float(ts.sample_rate.value)  # type: ignore[attr-defined]
    where = f"channel {name} in {paths[0]}"
    if len(paths) > 1:
        where += f" (and {len(paths) - 1} more file(s))"
    factor = _rate_factor(rate, sample_rate)
    if factor is None:
        raise DataError(
            f"{where} has sample rate {rate:g} Hz, not a whole multiple of the model sample "
            f"rate {sample_rate:g} Hz"
        )
    t0 = float(ts.t0.value)  # type: ignore[attr-defined]
    position = (t0 - span_start) * rate
    first = int(round(position))
    if abs(position - first) > 1e-2:
        raise DataError(f"{where}: samples are not aligned with the span start {span_start}")
    values = np.asarray(ts.value, dtype=np.float64)  # type: ignore[attr-defined]
    if factor == 1:
        a, b = k0, k1
    else:
        half = DECIMATION_HALF * factor
        a = max(0, k0 * factor - half)
        b = min(n_span * factor, (k1 - 1) * factor + half + 1)
    if a - first < 0 or b - first > len(values):
        raise DataError(
            f"{where}: data for {_range(span_start + a / rate, span_start + b / rate)} "
            f"incomplete (got {_range(t0, t0 + len(values) / rate)})"
        )
    segment = values[a - first : b - first]
    if factor == 1:
        return segment.astype(np.float32)
    filtered = signal.upfirdn(decimation_filter(factor), segment, up=1, down=factor)
    offset = k0 + DECIMATION_HALF - a // factor
    return filtered[offset : offset + (k1 - k0)].astype(np.float32)


def iter_chunks(
    frames: Sequence[FrameFile],
    channels: Sequence[str],
    gps_start: float,
    gps_end: float,
    sample_rate: float,
    chunk_seconds: float,
    span: tuple[float, float] | None = None,
) -> Iterator[np.ndarray]:
    """``read_span`` of ``[gps_start, gps_end)`` in consecutive chunks of ``chunk_seconds``.

    Chunk boundaries are on the model sample grid (``floor(chunk_seconds * sample_rate)``
    samples each, the last one shorter); the concatenation of the chunks equals ``read_span``
    over the whole range, bit for bit. Each chunk reads only the files it needs.

    Yields
    ------
    numpy.ndarray
        float32 ``[len(channels), n_i]``.
    """
    span_start, span_end = span if span is not None else (gps_start, gps_end)
    k0 = _grid_index(gps_start, span_start, sample_rate, "gps_start")
    k1 = _grid_index(gps_end, span_start, sample_rate, "gps_end")
    step = max(1, int(math.floor(chunk_seconds * sample_rate + 1e-9)))
    for k in range(k0, k1, step):
        end = min(k + step, k1)
        yield read_span(
            frames,
            channels,
            span_start + k / sample_rate,
            span_start + end / sample_rate,
            sample_rate,
            (span_start, span_end),
        )
