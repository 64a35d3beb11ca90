"""Frame files: discovery, checks and reading at the model sample rate.

Discovery
    From a directory tree of ``.gwf`` files, a LAL cache, an FFL file (``find_frames``) or a
    gwdatafind server (``datafind_frames``); ``discover_frames`` picks by the config.
Checks
    ``preflight`` lists every problem of the campaign's frames at once (missing or unreadable
    files, missing channels, unusable rates, unexplained holes) and returns the analysable
    span (``offline_iaas.data.segments``).

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
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import numpy as np
from scipy import signal

from offline_iaas.config import CampaignConfig
from offline_iaas.data.segments import AnalysableSpan
from offline_iaas.errors import DataError

DECIMATION_HALF = 32
"""Half-length of the decimation filter, in model samples."""
DECIMATION_CUTOFF = 0.9
"""Cut-off of the decimation filter as a fraction of the model Nyquist frequency."""
DECIMATION_BETA = 8.6
"""Kaiser window parameter of the decimation filter."""
CACHE_SUFFIXES = (".lcf", ".cache")
FFL_SUFFIXES = (".ffl",)
DATAFIND_TIMEOUT_SECONDS = 30.0
"""Timeout of each request to a datafind server."""
PROBE_SECONDS = 1.0
"""Data read from each frame file by ``preflight`` to prove it is readable."""
PROBE_TIMEOUT_SECONDS = 120.0
PROBE_TIMEOUT_SECONDS_PER_FILE = 10.0
"""A probe worker is killed after ``PROBE_TIMEOUT_SECONDS + this * files`` seconds."""
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
        If the source does not exist, lists no frame files or has a malformed line. (Listed
        files that do not exist are reported by ``preflight``.)
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
    return path.resolve()  # whether it exists is checked by ``preflight``, with the rest


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


# ---- datafind --------------------------------------------------------------------------------


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def datafind_frames(
    server_url: str,
    frametypes: Sequence[str],
    gps_start: float,
    gps_end: float,
    timeout_seconds: float = DATAFIND_TIMEOUT_SECONDS,
) -> list[FrameFile]:
    """The frame files a gwdatafind server lists for ``frametypes`` over a GPS range.

    For each frame type the observatory asked for is its first letter (``H1_HOFT_C00`` ->
    ``H``); ``gwdatafind.find_urls`` is asked for ``[floor(gps_start), ceil(gps_end))``
    (gaps are ignored here: ``preflight`` reports them). Only ``file://`` URLs of files named
    ``<OBS>-<DESC>-<GPS>-<DUR>.gwf`` are accepted; whether the files exist is checked by
    ``preflight``.

    Raises
    ------
    DataError
        Naming the server URL when it cannot be reached or answers with an error, and the
        frame type and GPS range when it lists no files (with the types it knows).
    """
    import gwdatafind
    import requests

    lo, hi = math.floor(gps_start), math.ceil(gps_end)
    frames: list[FrameFile] = []
    for frametype in frametypes:
        observatory = frametype[:1]
        what = f"frame type {frametype} (observatory {observatory}) for {_range(lo, hi)}"
        try:
            with warnings.catch_warnings():
                # igwn-auth-utils warns that X.509 identities are deprecated on every call
                warnings.simplefilter("ignore", DeprecationWarning)
                urls = gwdatafind.find_urls(
                    observatory,
                    frametype,
                    lo,
                    hi,
                    host=server_url,
                    urltype="file",
                    on_gaps="ignore",
                    timeout=timeout_seconds,
                )
        except (requests.RequestException, OSError, ValueError, RuntimeError) as err:
            raise DataError(
                f"datafind server {server_url} failed to list {what}: {_first_line(err)}"
            ) from None
        if not urls:
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", DeprecationWarning)
                    known = gwdatafind.find_types(
                        observatory, host=server_url, timeout=timeout_seconds
                    )
                types = _listing(sorted(known)) or "none"
                hint = f"; frame types it has for {observatory}: {types}"
            except (requests.RequestException, OSError, ValueError, RuntimeError):
                hint = ""
            raise DataError(f"datafind server {server_url} lists no files of {what}{hint}")
        for url in urls:
            parsed = urlparse(url)
            if parsed.scheme != "file" or parsed.netloc not in ("", "localhost"):
                raise DataError(
                    f"datafind server {server_url} returned {url!r} for {what}: not a local "
                    "file:// URL"
                )
            path = Path(unquote(parsed.path))
            frame = parse_frame_name(path)
            if frame is None:
                raise DataError(
                    f"datafind server {server_url} returned {path} for {what}: not named "
                    "<OBS>-<DESC>-<GPSSTART>-<DURATION>.gwf"
                )
            frames.append(frame)
    unique = {f.path: f for f in frames}
    return sorted(unique.values(), key=lambda f: (f.observatory, f.gps_start, str(f.path)))


def discover_frames(config: CampaignConfig) -> list[FrameFile]:
    """The campaign's frame files: from ``data.frames`` or from ``data.datafind_server``.

    ``data.frames`` is a directory, LAL cache or FFL file (``find_frames``); otherwise the
    datafind server is asked for each of ``data.frametypes`` over the span
    (``datafind_frames``).
    """
    data = config.data
    if data.frames is not None:
        return find_frames(data.frames)
    return datafind_frames(
        data.datafind_server, data.frametypes, data.start, data.start + data.duration
    )


def frame_source(config: CampaignConfig) -> str:
    """Where the campaign's frames come from, for messages."""
    data = config.data
    if data.frames is not None:
        return str(data.frames)
    return f"datafind server {data.datafind_server} ({', '.join(data.frametypes)})"


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


@dataclass(frozen=True)
class _Probe:
    """What a probe of one frame file found: its channel names and rates, or an error."""

    names: tuple[str, ...] = ()
    rates: tuple[tuple[str, float], ...] = ()
    error: str = ""


_PROBES: dict[tuple, _Probe] = {}
"""Probe results by (path, mtime_ns, size, channels, start, seconds)."""


def _probe_one(path: str, wanted: Sequence[str], gps_start: float, seconds: float) -> dict:
    """Table of contents of ``path`` and the rates of ``wanted`` from a short read (worker)."""
    from gwpy.io.gwf import get_channel_names
    from gwpy.timeseries import TimeSeriesDict

    names = list(get_channel_names(path))
    present = [n for n in wanted if n in names]
    rates: dict[str, float] = {}
    if present:
        data = TimeSeriesDict.read(
            path, present, start=gps_start, end=gps_start + seconds, format="gwf"
        )
        for name in present:
            series = data[name]
            if len(series) == 0:
                raise ValueError(f"channel {name}: no samples at {_fmt(gps_start)}")
            finite = np.isfinite(series.value)
            if not finite.all():
                index = int(np.argmin(finite))
                gps = float(series.t0.value) + index / float(series.sample_rate.value)
                raise ValueError(
                    f"channel {name}: non-finite sample ({series.value[index]}) at GPS {_fmt(gps)}"
                )
            rates[name] = float(series.sample_rate.value)
    return {"names": names, "rates": rates}


def _probe_worker() -> None:
    """Worker process: probe each job of a JSON list on stdin, one JSON line per job out."""
    import json
    import sys

    for index, (path, wanted, gps_start, seconds) in enumerate(json.load(sys.stdin)):
        try:
            result = _probe_one(path, wanted, gps_start, seconds)
        except Exception as err:  # LALFrame raises RuntimeError/OSError, gwpy ValueError
            result = {"error": _first_line(err)}
        print(json.dumps({"index": index, **result}), flush=True)


def _run_probes(jobs: list[tuple[str, tuple[str, ...], float, float]]) -> list[_Probe]:
    """Probe frame files in worker processes (a corrupt GWF can crash LALFrame).

    Jobs run in order in one worker; if it dies or hangs on a file, that file gets an error
    and a new worker takes the rest.
    """
    import json
    import signal as signals
    import subprocess
    import sys

    results: list[_Probe | None] = [None] * len(jobs)
    first = 0
    while first < len(jobs):
        batch = jobs[first:]
        command = [
            sys.executable,
            "-c",
            "from offline_iaas.data.frames import _probe_worker; _probe_worker()",
        ]
        timeout = PROBE_TIMEOUT_SECONDS + PROBE_TIMEOUT_SECONDS_PER_FILE * len(batch)
        try:
            done = subprocess.run(
                command,
                input=json.dumps(batch),
                capture_output=True,
                text=True,
                timeout=timeout,
            )
            stdout, failure = done.stdout, ""
            if done.returncode < 0:
                failure = (
                    f"the frame reader crashed ({signals.Signals(-done.returncode).name}); "
                    "truncated or corrupt file?"
                )
            elif done.returncode != 0:
                failure = f"the frame reader failed (exit {done.returncode})"
        except subprocess.TimeoutExpired as err:  # run() has killed the worker
            out = err.stdout or ""
            stdout = out.decode() if isinstance(out, bytes) else out
            failure = f"the frame reader hung (killed after {timeout:g} s)"
        answered = 0
        for line in stdout.splitlines():
            try:
                item = json.loads(line)
            except ValueError:
                continue
            index = first + int(item["index"])
            results[index] = _Probe(
                tuple(item.get("names", ())),
                tuple(sorted(item.get("rates", {}).items())),
                item.get("error", ""),
            )
            answered = max(answered, int(item["index"]) + 1)
        if answered == len(batch):
            break
        results[first + answered] = _Probe(error=failure or "the frame reader stopped")
        first += answered + 1
    return [r if r is not None else _Probe(error="not probed") for r in results]


def _probe_files(
    jobs: Sequence[tuple[Path, tuple[str, ...], float, float]],
) -> list[_Probe]:
    """Probe results for ``(path, channels, gps_start, seconds)`` jobs (cached per file)."""
    keys = []
    for path, names, gps_start, seconds in jobs:
        stat = path.stat()
        keys.append((str(path), stat.st_mtime_ns, stat.st_size, names, gps_start, seconds))
    todo = [k for k in dict.fromkeys(keys) if k not in _PROBES]
    if todo:
        for key, probe in zip(todo, _run_probes([(k[0], k[3], k[4], k[5]) for k in todo]),
                              strict=True):
            _PROBES[key] = probe
    return [_PROBES[k] for k in keys]


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


def _more(count: int, what: str) -> str:
    return f" and {count} more {what}" if count else ""


def _hole_context(files: Sequence[FrameFile], a: float, b: float, observatory: str) -> str:
    before = [f for f in files if f.gps_end <= a + _GPS_TOLERANCE]
    after = [f for f in files if f.gps_start >= b - _GPS_TOLERANCE]
    prev = max(before, key=lambda f: f.gps_end, default=None)
    nxt = min(after, key=lambda f: f.gps_start, default=None)
    if prev and nxt:
        return f"between {prev.path.name} and {nxt.path.name}"
    if nxt:
        return f"before {nxt.path.name}, the first file"
    if prev:
        return f"after {prev.path.name}, the last file"
    return f"no frame files of observatory {observatory!r}"


def frame_problems(
    frames: Sequence[FrameFile],
    channels: Sequence[str],
    needed: Sequence[tuple[float, float]],
    sample_rate: float,
    science: bool = False,
    report_holes: bool = True,
) -> list[str]:
    """Every problem with the frames over the ``needed`` GPS intervals, one message each.

    Checked per observatory of ``channels``: holes in the coverage of its files inside
    ``needed``; for every file overlapping ``needed``: it exists, its table of contents and a
    read of ``PROBE_SECONDS`` of its data succeed (in a worker process, as a corrupt file can
    crash LALFrame), it lists every channel of that observatory, and each channel's rate is a
    whole multiple of ``sample_rate``. Missing channels and bad rates are reported once per
    channel, naming the first file and how many more; holes and bad files one by one.

    Parameters
    ----------
    science
        Whether ``needed`` came from science segments (only changes the wording of holes).
    report_holes
        Whether holes in the coverage are problems.
    """
    from offline_iaas.data.segments import coalesce, subtract

    needed = coalesce(needed)
    problems: list[str] = []
    groups: dict[str, list[str]] = {}
    for channel in channels:
        groups.setdefault(_observatory(channel), []).append(channel)
    jobs: list[tuple[FrameFile, tuple[str, ...]]] = []
    for observatory, names in groups.items():
        own = sorted((f for f in frames if observatory in f.observatory), key=lambda f: f.gps_start)
        holes = subtract(needed, [(f.gps_start, f.gps_end) for f in own]) if report_holes else []
        for a, b in holes:
            inside = ", inside the science segments" if science else ""
            problems.append(
                f"no frame data for observatory {observatory} ({', '.join(names)}) in "
                f"{_range(a, b)}{inside} ({_hole_context(own, a, b, observatory)})"
            )
        for f in own:
            if any(
                f.gps_end > a + _GPS_TOLERANCE and f.gps_start < b - _GPS_TOLERANCE
                for a, b in needed
            ):
                jobs.append((f, tuple(names)))
    readable: list[tuple[FrameFile, tuple[str, ...]]] = []
    for f, names in jobs:
        if f.path.is_file():
            readable.append((f, names))
        else:
            problems.append(f"frame file {f.path} {_range(f.gps_start, f.gps_end)} does not exist")
    probes = _probe_files(
        [(f.path, names, f.gps_start, min(f.duration, PROBE_SECONDS)) for f, names in readable]
    )
    missing: dict[str, list[FrameFile]] = {}
    listed: dict[str, tuple[str, ...]] = {}
    bad_rates: dict[str, list[tuple[FrameFile, float]]] = {}
    for (f, names), probe in zip(readable, probes, strict=True):
        if probe.error:
            # a bad sample is named as such; anything else the reader said makes it unreadable
            what = "" if probe.error.startswith("channel ") else "is unreadable: "
            problems.append(f"frame file {f.path} {_range(f.gps_start, f.gps_end)} {what}"
                            f"{probe.error}")
            continue
        rates = dict(probe.rates)
        for name in names:
            if name not in probe.names:
                missing.setdefault(name, []).append(f)
                listed.setdefault(name, probe.names)
            elif _rate_factor(rates[name], sample_rate) is None:
                bad_rates.setdefault(name, []).append((f, rates[name]))
    for name in channels:
        if name in missing:
            first, last = missing[name][0], missing[name][-1]
            problems.append(
                f"channel {name} not found in {first.path}"
                f"{_more(len(missing[name]) - 1, 'file(s)')} covering "
                f"{_range(first.gps_start, last.gps_end)} "
                f"(channels there: {_listing(listed[name])})"
            )
        if name in bad_rates:
            first, rate = bad_rates[name][0]
            problems.append(
                f"channel {name} in {first.path}{_more(len(bad_rates[name]) - 1, 'file(s)')} "
                f"has sample rate {rate:g} Hz, not a whole multiple of the model sample rate "
                f"{sample_rate:g} Hz"
            )
    return problems


def problem_report(problems: Sequence[str], gps_start: float, gps_end: float, source: str) -> str:
    """One message: a single problem on one line; several as a summary line, then
    ``  - <problem>`` per line."""
    where = f"the frame data for {_range(gps_start, gps_end)} (frames: {source})"
    if len(problems) == 1:
        return f"{where}: {problems[0]}"
    head = f"{len(problems)} problems with {where}:"
    return "\n".join([head] + [f"  - {p}" for p in problems])


def check_channels(
    frames: Sequence[FrameFile],
    channels: Sequence[str],
    gps_start: float,
    gps_end: float,
    sample_rate: float,
) -> None:
    """Check that the frames hold every channel over ``[gps_start, gps_end)``, without holes.

    Raises
    ------
    DataError
        One error listing every problem found (``frame_problems``).
    """
    problems = frame_problems(frames, channels, [(gps_start, gps_end)], sample_rate)
    if problems:
        source = f"{len(frames)} frame file(s)"
        raise DataError(problem_report(problems, gps_start, gps_end, source))


def preflight(
    config: CampaignConfig,
    frames: Sequence[FrameFile] | None = None,
    *,
    allow_holes_in_science: bool = False,
) -> AnalysableSpan:
    """Validate the campaign's data and return its analysable span.

    The frames are discovered (``discover_frames``, unless given) and the segment file read.
    The time that must hold data is the span intersected with the science segments (the whole
    span without a segment file); there, every hole in an observatory's frame coverage is a
    problem, as is every file that is missing, unreadable, lacks a channel or holds it at a
    rate that is not a whole multiple of the model rate (``frame_problems``). A hole outside
    the science segments is explained and only shows as dropped time. No analysable stretch
    at all is a problem too.

    Parameters
    ----------
    frames
        The frame files; default ``discover_frames(config)``.
    allow_holes_in_science
        With a segment file, accept holes inside its science segments too (they are dropped
        as ``no data for <obs>``). Without a segment file every hole is a problem regardless.

    Returns
    -------
    AnalysableSpan
        The stretches to analyse and the dropped time with reasons (``data.segments``).

    Raises
    ------
    DataError
        From discovery or the segment file; or one error listing every problem, each on its
        own line starting with ``"  - "`` and naming the file, channel or GPS range.
    """
    from offline_iaas.data.segments import (
        compute_stretches,
        frame_coverage,
        intersect,
        min_stretch_seconds,
        observatories,
        science_segments,
    )

    data = config.data
    span = (data.start, data.start + data.duration)
    frames = discover_frames(config) if frames is None else list(frames)
    science = science_segments(config)
    needed = intersect([span], science) if science is not None else [span]
    problems = frame_problems(
        frames,
        data.channels,
        needed,
        data.sample_rate,
        science=science is not None,
        report_holes=science is None or not allow_holes_in_science,
    )
    result = compute_stretches(
        span,
        frame_coverage(frames, observatories(data.channels)),
        science,
        data.start,
        config.stride_seconds,
        min_stretch_seconds(config),
    )
    if not result.stretches:
        reasons = "; ".join(f"{r}: {s:g} s" for r, s in result.dropped_by_reason().items())
        problems.append(f"no analysable time in {_range(*span)} ({reasons})")
    if problems:
        raise DataError(problem_report(problems, span[0], span[1], frame_source(config)))
    return result


def check_campaign_data(config: CampaignConfig, *, allow_holes_in_science: bool = False) -> None:
    """``preflight`` without its result (raises ``DataError`` on any problem)."""
    preflight(config, allow_holes_in_science=allow_holes_in_science)


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
        series, files = _read_group(frames, names, t_a, t_b)
        for row, name in zip(rows, names, strict=True):
            out[row] = _resample(series[name], name, files, k0, k1, n_span, span_start, sample_rate)
    return out


def _read_group(
    frames: Sequence[FrameFile], names: list[str], t_a: float, t_b: float
) -> tuple[dict[str, Any], list[FrameFile]]:
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
    return {name: data[name] for name in names}, files


def _resample(
    ts: object,
    name: str,
    files: list[FrameFile],
    k0: int,
    k1: int,
    n_span: int,
    span_start: float,
    sample_rate: float,
) -> np.ndarray:
    """Model-rate samples ``[k0, k1)`` of one channel from its read (margin-padded) series.

    Raises
    ------
    DataError
        For an unusable rate, misaligned or incomplete data, or a NaN/Inf sample among those
        used (naming the channel, its file and the GPS time of the first one).
    """
    paths = [f.path for f in files]
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
    finite = np.isfinite(segment)
    if not finite.all():
        index = int(np.argmin(finite))
        gps = span_start + (a + index) / rate
        holder = next((f.path for f in files if f.gps_start <= gps < f.gps_end), paths[0])
        raise DataError(
            f"channel {name} in {holder}: non-finite sample ({segment[index]}) at GPS "
            f"{_fmt(gps)}; the data there cannot be analysed (exclude it with data.segments)"
        )
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
